#include "estimator/throughput_types.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "estimator/core/error.h"

namespace cloudtune::estimator {
namespace {

// Ground truth of one instance type, written out independently of the implementation: the job
// is the same on every type (kappa = 1, the same overlap), the hardware scales its terms.
struct Truth {
  double alpha_c = 0.02, beta_c = 5e-4;                  // T_c = alpha_c + beta_c * b
  double alpha_l = 0.004, beta_l = 0.002;                // one machine
  double alpha_n = 0.05, beta_n = 0.02, delta_n = 0.03;  // network
  double gamma = 2.0, omega = 0.7;

  // The same job on hardware whose GPU is `compute` times faster, whose network is `network`
  // times faster and whose machines' all-reduce is `local` times faster; host overhead `host`x.
  Truth On(double compute, double network, double local, double host = 1.0) const {
    Truth t = *this;
    t.beta_c /= compute;
    t.alpha_c *= host;
    t.alpha_n /= network, t.beta_n /= network, t.delta_n /= network;
    t.alpha_l /= local, t.beta_l /= local;
    return t;
  }
  double Compute(int b) const { return alpha_c + beta_c * b; }
  double Step(const ConfigKey& k) const {
    const double tc = Compute(k.local_bsz);
    if (k.num_replicas < 2) return tc;
    double tn;
    if (k.num_nodes == 1) {
      tn = alpha_l + beta_l * (k.num_replicas - 2);
    } else {
      const double g = double(k.num_replicas) / k.num_nodes;
      tn =
          alpha_n + beta_n * std::log(k.num_replicas / 2.0) + delta_n * (g - 1) / (k.num_nodes - 1);
    }
    const double a = omega * tc;
    return tc + tn - std::pow(std::pow(a, -gamma) + std::pow(tn, -gamma), -1 / gamma);
  }
};

ConfigKey Key(const std::string& type, int nodes, int replicas, int bsz) {
  ConfigKey k;
  k.num_nodes = nodes;
  k.num_replicas = replicas;
  k.local_bsz = bsz;
  k.instance_type = type;
  return k;
}

// 1-8 machines of 1-4 GPUs, 5 batch sizes, ordered as a new type is measured: fewest replicas,
// then smallest batch.
std::vector<ConfigKey> Grid(const std::string& type) {
  std::vector<ConfigKey> keys;
  for (int r : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32})
    for (int nodes : {1, 2, 3, 4, 8})
      if (r % nodes == 0 && r / nodes <= 4 && (r >= 2 || nodes == 1))
        for (int b : {16, 32, 64, 128, 256}) keys.push_back(Key(type, nodes, r, b));
  return keys;
}

std::vector<Measurement> Measure(const Truth& t, const std::vector<ConfigKey>& keys, unsigned seed,
                                 double noise = 0.02) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, noise);
  std::vector<Measurement> out;
  for (const auto& k : keys) {
    Measurement m;
    m.key = k;
    m.step_time = t.Step(k) * std::exp(n(rng));
    m.sync_time = std::min(std::max(0.0, t.Step(k) - t.Compute(k.local_bsz)) * std::exp(n(rng)),
                           0.95 * m.step_time);
    m.rows = 1;
    out.push_back(m);
  }
  return out;
}

Hardware Hw(double tflops, double bw, double gbps) {
  Hardware h;
  h.gpu_tflops = tflops;
  h.memory_bandwidth_gbs = bw;
  h.network_gbps = gbps;
  return h;
}

// Fraction of keys whose truth lies within z predicted sigmas, and the mean relative error.
struct Score {
  double within = 0, mape = 0;
};
Score Evaluate(const CrossTypeThroughputModel& m, const Truth& t,
               const std::vector<ConfigKey>& keys, double z, const Hardware& hw = {}) {
  Score s;
  for (const auto& k : keys) {
    const StepPrediction p = hw.known() ? m.Predict(k, hw) : m.Predict(k);
    const double truth = t.Step(k);
    s.within += std::abs(std::log(truth / p.step_time)) <= z * p.log_sigma;
    s.mape += std::abs(p.step_time - truth) / truth;
  }
  s.within /= keys.size();
  s.mape /= keys.size();
  return s;
}

TEST(CrossTypeOptions, DefaultsAreValidAndBadValuesNamed) {
  std::string err = "untouched";
  EXPECT_TRUE(CrossTypeFitOptions{}.IsValid(&err));
  CrossTypeFitOptions o;
  o.network_sigma = 0;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "network_sigma must be > 0");
  o = {};
  o.fit.obs_sigma = -1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "obs_sigma must be > 0");
  EXPECT_THROW(FitCrossType(Measure(Truth{}, Grid("a"), 1), {}, o), InputError);
  EXPECT_THROW(FitCrossType({}), InputError);
}

TEST(CrossType, TwoFullyMeasuredTypesAreEachRecovered) {
  const Truth a, b = a.On(2.0, 3.0, 0.5, 1.3);
  auto data = Measure(a, Grid("a"), 1);
  const auto data_b = Measure(b, Grid("b"), 2);
  data.insert(data.end(), data_b.begin(), data_b.end());
  const auto m = FitCrossType(data);
  EXPECT_EQ(m.types(), (std::vector<std::string>{"a", "b"}));
  const ThroughputModel& mb = m.model("b");
  EXPECT_NEAR(mb.param(kBetaC) / b.beta_c, 1.0, 0.15);
  EXPECT_NEAR(mb.param(kAlphaN) / b.alpha_n, 1.0, 0.35);
  for (const auto& [type, truth] : {std::pair<std::string, Truth>{"a", a}, {"b", b}}) {
    const auto keys = Grid(type);
    EXPECT_LT(Evaluate(m, truth, keys, 2).mape, 0.04) << type;
    // Each row is answered for its own type: type b's keys are not type a's times.
    const auto p = m.Predict(Key(type, 4, 16, 64));
    EXPECT_NEAR(p.step_time / truth.Step(Key(type, 4, 16, 64)), 1.0, 0.06) << type;
  }
}

TEST(CrossType, ATypeSeenAtOneConfigurationPredictsItsOthersWithinItsUncertainty) {
  // Type b's GPU is 2x type a's by both TFLOPS and memory bandwidth, its network 2x by Gbps; its
  // host is 20% slower and its machines' all-reduce 1.5x slower (neither is in the catalog).
  const Truth a, b = a.On(2.0, 2.0, 1 / 1.5, 1.2);
  const std::map<std::string, Hardware> hw = {{"a", Hw(10, 400, 25)}, {"b", Hw(20, 800, 50)}};
  auto keys_b = Grid("b");
  auto data = Measure(a, Grid("a"), 3);
  data.push_back(Measure(b, {keys_b.front()}, 4).front());  // one machine, one GPU, b = 16
  const auto m = FitCrossType(data, hw);
  EXPECT_EQ(m.reference(), "a");
  keys_b.erase(keys_b.begin());
  const Score one = Evaluate(m, b, keys_b, 1), two = Evaluate(m, b, keys_b, 2);
  EXPECT_GE(one.within, 0.6);
  EXPECT_GE(two.within, 0.9);
  EXPECT_LT(two.mape, 0.15);
  // The prior came from the hardware ratios, not from type a's times: without the catalog the
  // same single configuration predicts type b's large batches worse.
  std::map<std::string, Hardware> none;
  const auto blind = FitCrossType(data, none);
  EXPECT_GT(Evaluate(blind, b, keys_b, 2).mape, two.mape);
  // What the data identified, per type: b's network rests on its prior.
  EXPECT_TRUE(m.model("a").identified(kAlphaN));
  EXPECT_FALSE(m.model("b").identified(kAlphaN));
  EXPECT_FALSE(m.model("b").identified(kAlphaL));
}

TEST(CrossType, UnmeasuredTypesAreProjectedWithWiderUncertainty) {
  const Truth a, c = a.On(2.0, 2.0, 1.0);
  const std::map<std::string, Hardware> hw = {{"a", Hw(10, 400, 25)}, {"c", Hw(20, 800, 50)}};
  const auto m = FitCrossType(Measure(a, Grid("a"), 5), hw);
  EXPECT_FALSE(m.Measured("c"));
  const ConfigKey on_a = Key("a", 1, 1, 256), on_c = Key("c", 1, 1, 256);
  const auto pa = m.Predict(on_a), pc = m.Predict(on_c);  // c's hardware was given to the fit
  // Large batch: compute-bound, so about 2x faster on c.
  EXPECT_NEAR(pc.step_time / c.Step(on_c), 1.0, 0.1);
  EXPECT_GT(pc.log_sigma, 2 * pa.log_sigma);
  const Score two = Evaluate(m, c, Grid("c"), 2);
  EXPECT_GE(two.within, 0.9);
  // A type with neither measurements nor catalog entry: a clear message naming it.
  try {
    m.Predict(Key("mystery-gpu", 1, 1, 32));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "instance type 'mystery-gpu' was not measured and has no catalog entry (GPU TFLOPS, "
              "memory bandwidth or network bandwidth): its throughput cannot be projected");
  }
  // ... but its hardware, when known, is enough.
  EXPECT_GT(m.Predict(Key("mystery-gpu", 1, 1, 32), Hw(5, 200, 10)).step_time,
            m.Predict(Key("a", 1, 1, 32)).step_time);
}

// The job all-reduces 100 MB a step. Type a's machines have 50 Gbit/s links, whose wire time for it
// is 8e8 / 50e9 = 0.016 s, yet its 2-machine all-reduce takes 0.2 s: 0.184 s of host time per step
// that the link does not explain. Type c (same GPU) has a 2.5 Gbit/s link: 0.32 s of wire time plus
// the same host time, 0.504 s; the line rates' ratio alone would say 20 x 0.2 = 4 s.
struct SlowLink {
  double bytes = 1e8, host = 0.2 - 8 * bytes / 50e9;
  Truth a = [] {
    Truth t;
    t.alpha_n = 0.2;
    return t;
  }();
  Truth c = a.On(1.0, 0.2 / (8 * bytes / 2.5e9 + host), 1.0);
  std::map<std::string, Hardware> hw = {{"a", Hw(10, 400, 50)}, {"c", Hw(10, 400, 2.5)}};
};

TEST(CrossType, TheGradientBytesCarryAReferenceBelowItsLineRateToASlowerLink) {
  const SlowLink link;
  const double bytes = link.bytes;
  const Truth &a = link.a, &c = link.c;
  const auto& hw = link.hw;
  std::vector<ConfigKey> over_network;
  for (const auto& k : Grid("c"))
    if (k.num_nodes >= 2) over_network.push_back(k);
  const auto data = Measure(a, Grid("a"), 11);
  CrossTypeFitOptions o;
  o.gradient_bytes = bytes;
  const auto m = FitCrossType(data, hw, o), blind = FitCrossType(data, hw);
  const Score with = Evaluate(m, c, over_network, 2), without = Evaluate(blind, c, over_network, 2);
  EXPECT_LT(with.mape, 0.15);
  EXPECT_GE(with.within, 0.9);
  EXPECT_GT(without.mape, 1.0);  // the line rates' ratio, 20x, applied to the measured 0.2 s
  // The bytes travel with the model.
  const auto back =
      CrossTypeThroughputModel::FromJson(nlohmann::json::parse(m.ToJson().dump()), "m");
  EXPECT_NEAR(back.Predict(Key("c", 4, 8, 64)).step_time / m.Predict(Key("c", 4, 8, 64)).step_time,
              1.0, 1e-9);
  // A reference whose all-reduce takes no longer than its wire time (at its line rate, or the
  // bytes overstated, e.g. compressed gradients) leaves no host time: the bytes change nothing,
  // the projection is the ratio of line rates, as without them.
  Truth fast = a;
  fast.alpha_n = 0.6 * 8 * bytes / 50e9;
  const auto data_fast = Measure(fast, Grid("a"), 12);
  const auto mf = FitCrossType(data_fast, hw, o), bf = FitCrossType(data_fast, hw);
  EXPECT_NEAR(mf.Predict(Key("c", 4, 8, 64)).step_time / bf.Predict(Key("c", 4, 8, 64)).step_time,
              1.0, 1e-9);
  o.gradient_bytes = -1;
  std::string err;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "gradient_bytes must be >= 0");
}

TEST(CrossType, TheHostTimeCarriedWidensTheNetworkPriorByItsShare) {
  // Type c is measured on one machine only, so its network rests on the prior. The host time
  // carried, 0.184 s, is 0.365 of c's projected 0.504 s; nothing says c's host is as slow, so that
  // share adds unknown_sigma (1.0) to network_sigma (0.5): hypot(0.5, 0.365) = 0.62. A reference
  // at its wire time carries no host time: 0.5.
  const SlowLink link;
  const double bytes = link.bytes, host = link.host;
  const Truth &a = link.a, &c = link.c;
  const auto& hw = link.hw;
  CrossTypeFitOptions o;
  o.gradient_bytes = bytes;
  auto network_sigma = [&](const Truth& ref, const CrossTypeFitOptions& opt) {
    auto data = Measure(ref, Grid("a"), 13);
    const auto one = Measure(c, {Key("c", 1, 4, 64)}, 14);
    data.insert(data.end(), one.begin(), one.end());
    const auto m = FitCrossType(data, hw, opt);
    EXPECT_FALSE(m.model("c").identified(kAlphaN));
    return m.ToJson()["types"]["c"]["prior"]["log_network_sigma"].get<double>();
  };
  EXPECT_NEAR(network_sigma(a, o), std::hypot(0.5, host / (8 * bytes / 2.5e9 + host)), 0.02);
  EXPECT_DOUBLE_EQ(network_sigma(a, CrossTypeFitOptions{}), 0.5);  // bytes unknown
  Truth fast = a;
  fast.alpha_n = 0.6 * 8 * bytes / 50e9;
  EXPECT_DOUBLE_EQ(network_sigma(fast, o), 0.5);
}

TEST(CrossType, DegenerateTypesFitAndFlagWhatIsNotIdentified) {
  const Truth a, b = a.On(1.5, 1.0, 1.0);
  auto data = Measure(a, Grid("a"), 6);
  // Type b: one row. Type n: one machine only (no network).
  data.push_back(Measure(b, {Key("b", 1, 1, 64)}, 7).front());
  std::vector<ConfigKey> one_node;
  for (const auto& k : Grid("n"))
    if (k.num_nodes == 1) one_node.push_back(k);
  const auto data_n = Measure(a, one_node, 8);
  data.insert(data.end(), data_n.begin(), data_n.end());
  const auto m = FitCrossType(data);
  EXPECT_EQ(m.types().size(), 3u);
  const auto& mb = m.model("b");
  EXPECT_EQ(mb.stats().configurations, 1);
  for (int i : {kKappa, kAlphaL, kBetaL, kAlphaN, kBetaN, kDeltaN, kGamma, kOmega})
    EXPECT_FALSE(mb.identified(i)) << ThroughputParamName(i);
  const auto& mn = m.model("n");
  EXPECT_TRUE(mn.identified(kBetaC));
  for (int i : {kAlphaN, kBetaN, kDeltaN}) EXPECT_FALSE(mn.identified(i)) << ThroughputParamName(i);
  // Still predicts type n over the network, near type a's network (its prior), never NaN.
  const auto p = m.Predict(Key("n", 4, 16, 64));
  EXPECT_TRUE(std::isfinite(p.step_time) && p.step_time > 0);
  EXPECT_NEAR(p.step_time / a.Step(Key("n", 4, 16, 64)), 1.0, 0.25);
}

TEST(CrossTypeJson, RoundTripKeepsPredictionsAndSaysWhatWasIdentified) {
  const Truth a, b = a.On(2.0, 1.0, 1.0);
  const std::map<std::string, Hardware> hw = {
      {"a", Hw(10, 400, 25)}, {"b", Hw(20, 800, 0)}, {"c", Hw(40, 1600, 100)}};
  auto data = Measure(a, Grid("a"), 9);
  const auto data_b = Measure(b, {Key("b", 1, 1, 16), Key("b", 1, 1, 32)}, 10);
  data.insert(data.end(), data_b.begin(), data_b.end());
  const auto m = FitCrossType(data, hw);
  const nlohmann::json j = m.ToJson();
  EXPECT_EQ(j["schema"], "cloudtune.throughput_types/1");
  EXPECT_EQ(j["reference"], "a");
  EXPECT_EQ(j["types"]["b"]["configurations"], 2);
  EXPECT_TRUE(j["types"]["b"].contains("prior"));
  EXPECT_FALSE(j["types"]["a"].contains("prior"));
  EXPECT_TRUE(j["unmeasured_hardware"].contains("c"));
  bool b_network_identified = true;
  for (const auto& p : j["types"]["b"]["model"]["parameters"])
    if (p["name"] == "alpha_n") b_network_identified = p["identified"].get<bool>();
  EXPECT_FALSE(b_network_identified);
  const auto back = CrossTypeThroughputModel::FromJson(nlohmann::json::parse(j.dump()), "m.json");
  for (const auto& k : {Key("a", 2, 8, 64), Key("b", 3, 12, 128), Key("c", 1, 4, 32)}) {
    const auto p = m.Predict(k), q = back.Predict(k);
    EXPECT_NEAR(q.step_time / p.step_time, 1.0, 1e-9) << k.instance_type;
    EXPECT_NEAR(q.log_sigma, p.log_sigma, 1e-9) << k.instance_type;
  }
  // A single-type model reads as one type named "".
  const auto single = CrossTypeThroughputModel::FromJson(m.model("a").ToJson(), "s.json");
  EXPECT_EQ(single.types(), std::vector<std::string>{""});
  EXPECT_NEAR(single.Predict(Key("", 2, 8, 64)).step_time, m.Predict(Key("a", 2, 8, 64)).step_time,
              1e-9);
  // Malformed: named by source and field.
  nlohmann::json bad = j;
  bad["reference"] = "zzz";
  try {
    CrossTypeThroughputModel::FromJson(bad, "m.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "m.json: reference: 'zzz' is not one of types");
  }
  bad = j;
  bad["types"]["b"]["hardware"]["gpu_tflops"] = "fast";
  try {
    CrossTypeThroughputModel::FromJson(bad, "m.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "m.json: types.b.hardware.gpu_tflops: expected a number >= 0");
  }
}

}  // namespace
}  // namespace cloudtune::estimator
