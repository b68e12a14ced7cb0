// The runtime a job, `cloudtune recommend` and the replay construct: the agreement on/off across
// ranks, targets and the rate objective when there is none, deadlines and budgets counted on the
// whole run, a job whose machines the catalog does not know, and what the live path spends.
#include "plugin/runtime/runtime.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "estimator/core/error.h"
#include "estimator/core/trace.h"
#include "plugin/runtime/history.h"
#include "plugin/runtime/state.h"
#include "plugin/runtime/tuner.h"
#include "tests/runtime/test_util.h"

namespace cloudtune::runtime {
namespace {

using ::cloudtune::runtime::testing::WaitFor;

const std::string kProfile =
    std::string(CLOUDTUNE_SOURCE_DIR) + "/tests/data/g4dn_cifar10_profile.csv";

class MemoryStore : public KeyValueStore {
 public:
  void Set(const std::string& k, const std::string& v) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_[k] = v;
  }
  std::string Get(const std::string& k) override {
    std::lock_guard<std::mutex> l(mu_);
    return kv_[k];
  }
  void Delete(const std::string& k) override {
    std::lock_guard<std::mutex> l(mu_);
    kv_.erase(k);
  }
  long long Add(const std::string& k, long long d) override {
    std::lock_guard<std::mutex> l(mu_);
    long long v = kv_.count(k) ? std::stoll(kv_[k]) : 0;
    v += d;
    kv_[k] = std::to_string(v);
    return v;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};

// Each rank of `oks` runs the agreement in its own thread; returns what each learned.
std::vector<int> AgreeAll(MemoryStore& store, const std::vector<int>& oks, double timeout,
                          int world) {
  std::vector<int> out(oks.size(), -1);
  std::vector<std::thread> ts;
  for (size_t r = 0; r < oks.size(); ++r)
    ts.emplace_back([&, r] {
      std::string why;
      out[r] = AgreeAcrossRanks(store, "job/0/", world, oks[r] != 0, timeout, &why) ? 1 : 0;
    });
  for (auto& t : ts) t.join();
  return out;
}

TEST(Agree, OnOnlyWhenEveryRankCanBe) {
  MemoryStore a, b;
  EXPECT_EQ(AgreeAll(a, {1, 1, 1, 1}, 5, 4), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_EQ(AgreeAll(b, {1, 1, 0, 1}, 5, 4), (std::vector<int>{0, 0, 0, 0}));
}

TEST(Agree, AMissingRankTurnsEverybodyOffAfterTheTimeout) {
  MemoryStore s;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(AgreeAll(s, {1, 1, 1}, 0.3, 4), (std::vector<int>{0, 0, 0}));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  // The late rank learns "off" too.
  std::string why;
  EXPECT_FALSE(AgreeAcrossRanks(s, "job/0/", 4, true, 0.3, &why));
  EXPECT_FALSE(why.empty());
}

TEST(Target, ConvertsToProgressAtTheBaseBatch) {
  Target t;
  EXPECT_FALSE(t.set());
  EXPECT_EQ(t.Progress(128), 0);
  EXPECT_EQ(t.ToString(), "none");
  t.steps = 500;
  EXPECT_EQ(t.Progress(128), 500);
  t = Target{};
  t.samples = 1280;
  EXPECT_EQ(t.Progress(128), 10);
  t = Target{};
  t.epochs = 2;
  EXPECT_EQ(t.Progress(128), 0);  // needs the dataset size
  t.dataset_size = 60000;
  EXPECT_DOUBLE_EQ(t.Progress(120), 1000);
  t.progress = 7;  // the first one set wins
  EXPECT_EQ(t.Progress(120), 7);
}

core::Snapshot Job() {
  core::Snapshot s;
  s.profile = estimator::ReadTraces({kProfile});
  s.noise = {0.02, 0.6, 128, false};
  s.noise_valid = true;
  s.current = s.profile.back().key;  // 2 x 4 T4 at 64
  s.gpus_per_node = 4;
  return s;
}

TEST(RateObjective, WithNoTargetTheSearchRanksByCostPerProgress) {
  FitAndSearchOptions o;
  o.instance_type = "g4dn.12xlarge";
  const TunerResult r = FitAndSearch(Job(), {"timer", 1}, o);
  const auto& j = r.recommendation;
  EXPECT_EQ(j["target"], "none");
  EXPECT_TRUE(j["target_progress"].is_null());
  ASSERT_TRUE(j.contains("rate"));
  EXPECT_GT(j["rate"]["horizon_progress"].get<double>(), 0);
  for (const char* k : {"current", "proposed"}) {
    EXPECT_GT(j[k]["usd_per_progress"].get<double>(), 0) << k;
    EXPECT_GT(j[k]["progress_per_hour"].get<double>(), 0) << k;
  }
  // The proposal is no dearer per unit of progress than staying (switch cost included).
  EXPECT_LE(j["proposed"]["usd_per_progress"].get<double>(),
            j["current"]["usd_per_progress"].get<double>() * (1 + 1e-9));
  // The same job with a target gets the target's numbers, no rates.
  o.target.progress = 20000;
  const TunerResult t = FitAndSearch(Job(), {"timer", 1}, o);
  EXPECT_EQ(t.recommendation["target_progress"], 20000.0);
  EXPECT_FALSE(t.recommendation.contains("rate"));
}

TEST(SpentSoFar, DeadlineAndBudgetHoldForTheWholeRun) {
  FitAndSearchOptions o;
  o.instance_type = "g4dn.12xlarge";
  o.target.progress = 20000;
  o.recommend.objective.deadline_h = 1.5;
  o.recommend.objective.budget_usd = 100;
  core::Snapshot s = Job();
  s.elapsed_seconds = 3600;  // one hour gone
  s.cost_usd = 40;
  const search::RecommendRequest req = BuildRecommendRequest(s, o);
  EXPECT_NEAR(req.options.objective.deadline_h, 0.5, 1e-12);
  EXPECT_NEAR(req.options.objective.budget_usd, 60, 1e-12);
  EXPECT_NEAR(req.options.spent, 40, 1e-12);
  s.elapsed_seconds = 2 * 3600;  // already past the deadline: nothing can meet it
  const TunerResult r = FitAndSearch(s, {"timer", 1}, o);
  EXPECT_FALSE(r.recommendation["proposed"]["feasible"].get<bool>());
}

// A job on machines the catalog does not know ("local"): costs in GPU-hours, advice about batch
// and workers on those machines. Every cost it prints says so: no dollar sign in the reason or
// the log line, and the record's "cost_unit" is "gpu_hours".
TEST(Runtime, UnknownMachinesStillGetBatchAndWorkerAdvice) {
  RuntimeSetup rs;
  rs.world_size = 2;
  rs.num_nodes = 1;
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  EXPECT_FALSE(rt.prices_known());
  core::Snapshot s;
  for (auto m : estimator::ReadTraces({kProfile})) {
    if (m.key.num_nodes != 1) continue;
    m.key.instance_type = "local";
    m.key.num_replicas = 2;
    s.profile.push_back(m);
  }
  s.noise = {0.02, 0.6, 64, false};
  s.current = s.profile.front().key;
  const TunerResult r = rt.Decide(s, "timer");
  EXPECT_EQ(r.decision.proposed.config.type, "local");
  EXPECT_TRUE(r.recommendation.contains("prices"));
  EXPECT_EQ(r.recommendation["target"], "none");
  EXPECT_EQ(r.recommendation["cost_unit"], "gpu_hours");
  const std::string reason = r.recommendation["reason"].get<std::string>();
  EXPECT_EQ(reason.find('$'), std::string::npos) << reason;
  EXPECT_EQ(r.log_line.find('$'), std::string::npos) << r.log_line;
  EXPECT_NE(r.log_line.find(" GPU-h"), std::string::npos) << r.log_line;
}

// The first line a runtime set up as `rs` logs when it starts ("" = none).
std::string StartLineOf(RuntimeSetup rs) {
  std::vector<std::string> lines;
  std::mutex mu;
  rs.log = [&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(l);
  };
  Runtime rt(rs);
  rt.Start();
  rt.Stop();
  return lines.empty() ? std::string() : lines.front();
}

TEST(Runtime, StartLineSaysWhatIsKnownAndWhatUnlocksMore) {
  RuntimeSetup rs;
  rs.world_size = 1;
  rs.detect_instance = true;
  rs.options.metadata_url = "off";
  const std::string l = StartLineOf(rs);
  EXPECT_NE(l.find("instance local (prices unknown"), std::string::npos) << l;
  EXPECT_NE(l.find("CLOUDTUNE_INSTANCE_TYPE"), std::string::npos) << l;
  EXPECT_NE(l.find("CLOUDTUNE_TARGET_EPOCHS"), std::string::npos) << l;
  EXPECT_NE(l.find("cost per unit of progress"), std::string::npos) << l;
}

// CLOUDTUNE_CLOUDS and CLOUDTUNE_GPUS: the search proposes only the types on those clouds with
// those GPUs, wherever the job runs; a name no catalog type has turns the tuner off, naming it.
// The proposal, the best predicted and the alternatives of one decision on Job() on g4dn.12xlarge
// with a target, under the options `set` changes.
std::vector<search::Config> Proposals(const std::function<void(Options*)>& set) {
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.target_progress = 20000;
  set(&rs.options);
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  const TunerResult r = rt.Decide(Job(), "timer");
  std::vector<search::Config> out = {r.decision.proposed.config, r.decision.best.config};
  for (const search::Evaluation& e : r.decision.alternatives) out.push_back(e.config);
  return out;
}

TEST(Runtime, ProposesOnlyTheCloudsAndGpusAllowed) {
  auto decide = [](const std::string& clouds, const std::string& gpus) {
    const search::Catalog& catalog = search::DefaultCatalog();
    std::vector<search::InstanceType> types;
    for (const search::Config& c : Proposals([&](Options* o) {
           o->clouds = clouds;
           o->gpus = gpus;
         }))
      types.push_back(catalog.types[catalog.Find(c.type)]);
    return types;
  };
  // Unrestricted, the search looks beyond one cloud and one GPU model.
  const auto all = decide("", "");
  EXPECT_TRUE(std::any_of(all.begin(), all.end(), [](const search::InstanceType& t) {
    return t.cloud != "gcp" || (t.gpu_model != "T4" && t.gpu_model != "L4");
  }));
  const auto some = decide("GCP", "t4, L4");
  ASSERT_GT(some.size(), 2u);
  for (const search::InstanceType& t : some) {
    EXPECT_EQ(t.cloud, "gcp") << t.name;
    EXPECT_TRUE(t.gpu_model == "T4" || t.gpu_model == "L4") << t.name << " " << t.gpu_model;
  }
  try {
    decide("aws,oracle", "");
    ADD_FAILURE() << "an unknown cloud was searched";
  } catch (const cloudtune::InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("CLOUDTUNE_CLOUDS='aws,oracle'"), std::string::npos) << m;
    EXPECT_NE(m.find("cloud 'oracle'"), std::string::npos) << m;
    EXPECT_NE(m.find("aws, azure, gcp"), std::string::npos) << m;
  }
  EXPECT_THROW(decide("", "H300"), cloudtune::InputError);
  EXPECT_THROW(decide("azure", "H200"), cloudtune::InputError);  // each exists, not together
}

// CLOUDTUNE_MAX_NODES and CLOUDTUNE_MAX_GPUS: a quota no proposal exceeds; the defaults are the
// search's own.
TEST(Runtime, ProposalsStayWithinTheQuota) {
  EXPECT_EQ(Options{}.max_nodes, search::SpaceOptions{}.max_nodes);
  EXPECT_EQ(Options{}.max_gpus, search::SpaceOptions{}.max_gpus);
  auto configs = [](int max_nodes, int max_gpus) {
    return Proposals([&](Options* o) {
      o->max_nodes = max_nodes;
      o->max_gpus = max_gpus;
      o->objective = "time";  // the fastest: as many GPUs as help
    });
  };
  auto largest = [](const std::vector<search::Config>& cs, bool gpus) {
    int m = 0;
    for (const search::Config& c : cs) m = std::max(m, gpus ? c.nodes * c.gpus_per_node : c.nodes);
    return m;
  };
  // Unrestricted, this job's search goes beyond 2 nodes and 4 GPUs (so the quota is what binds).
  const auto all = configs(16, 64);
  EXPECT_GT(largest(all, false), 2);
  EXPECT_GT(largest(all, true), 4);
  EXPECT_LE(largest(configs(2, 64), false), 2);
  EXPECT_LE(largest(configs(16, 4), true), 4);
}

// The start line says what the search may propose, or why it cannot search at all.
TEST(Runtime, StartLineSaysWhatTheSearchMayProposeOrWhyItCannot) {
  auto first_line = [](const std::string& clouds) {
    RuntimeSetup rs;
    rs.options.instance_type = "g4dn.12xlarge";
    rs.options.clouds = clouds;
    return StartLineOf(rs);
  };
  const std::string aws = first_line("aws");
  EXPECT_NE(aws.find("instance g4dn.12xlarge (on-demand"), std::string::npos) << aws;
  EXPECT_NE(aws.find("instance type(s) on aws"), std::string::npos) << aws;
  const std::string bad = first_line("oracle");
  EXPECT_NE(bad.find("cannot search: CLOUDTUNE_CLOUDS='oracle'"), std::string::npos) << bad;
}

// The live path: the first recommendation comes at the first snapshot with data, and the job's
// spending is counted from the price of what it runs.
TEST(Runtime, LiveFirstRecommendationAndSpending) {
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.refit_seconds = 3600;  // no timer: the first snapshots trigger the refit
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  rt.Start();
  core::Snapshot s = Job();
  s.step = 100;
  s.elapsed_seconds = 0;
  rt.Observe(s);
  s.step = 200;
  s.elapsed_seconds = 1800;  // half an hour on 2 x g4dn.12xlarge on demand
  rt.Observe(s);
  ASSERT_TRUE(WaitFor([&] { return rt.Latest() != nullptr; }, 30));
  const auto snap = rt.LatestSnapshot();
  ASSERT_TRUE(snap);
  const int i = rt.catalog().Find("g4dn.12xlarge");
  ASSERT_GE(i, 0);
  EXPECT_NEAR(snap->cost_usd, 0.5 * 2 * rt.catalog().types[i].ondemand_per_hour, 1e-6);
  EXPECT_EQ((*rt.Latest())["target"], "none");
  EXPECT_EQ((*rt.Latest())["cost_unit"], "usd");  // a catalog type: priced in dollars
  rt.Stop();
}

// The in-process batch a live job reads: nothing before the first recommendation; a batch on the
// hardware it runs once one was decided on its configuration; nothing from a recommendation
// decided on another configuration (a batch it ran before), so a stale decision is never acted on.
TEST(Runtime, InProcessBatchOnlyFromARecommendationOnTheRunningConfiguration) {
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.refit_seconds = 3600;
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  core::Snapshot s = Job();
  std::string why;
  EXPECT_FALSE(rt.InProcessBatch(s.current, &why));
  EXPECT_EQ(why, "no recommendation yet");
  rt.Start();
  s.step = 100;
  rt.Observe(s);
  ASSERT_TRUE(WaitFor([&] { return rt.Latest() != nullptr; }, 30));
  const auto take = rt.InProcessBatch(s.current, &why);
  ASSERT_TRUE(take) << why;
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(take->type, "g4dn.12xlarge");
  EXPECT_EQ(take->nodes, s.current.num_nodes);
  EXPECT_EQ(take->replicas(), s.current.num_replicas);
  EXPECT_EQ(take->purchase, core::Purchase::kOnDemand);
  core::ConfigKey other = s.current;
  other.local_bsz *= 2;
  EXPECT_FALSE(rt.InProcessBatch(other, &why));
  EXPECT_EQ(why, "no recommendation for this configuration yet");
  rt.Stop();
}

// Runs a live runtime with `rs` (its log replaced) until its first recommendation (false if none
// comes within 20 s); `started` runs after Start; *lines gets what it logged.
// Starts a runtime, offers one snapshot of Job() and waits for the first recommendation. When
// `logged_first` is set, the snapshot is offered only after a line containing it was logged.
bool FirstRecommendation(RuntimeSetup rs, const std::function<void(Runtime&)>& started,
                         std::vector<std::string>* lines, const std::string& logged_first = "") {
  auto mu = std::make_shared<std::mutex>();
  rs.log = [mu, lines](const std::string& l) {
    std::lock_guard<std::mutex> g(*mu);
    lines->push_back(l);
  };
  Runtime rt(rs);
  rt.Start();
  if (started) started(rt);
  if (!logged_first.empty()) {
    const bool logged = WaitFor(
        [&] {
          std::lock_guard<std::mutex> g(*mu);
          for (const auto& l : *lines)
            if (l.find(logged_first) != std::string::npos) return true;
          return false;
        },
        120);
    if (!logged) {
      rt.Stop();
      return false;
    }
  }
  core::Snapshot s = Job();
  s.step = 100;
  rt.Observe(s);
  const bool got = WaitFor([&] { return rt.Latest() != nullptr; }, 120);
  rt.Stop();
  return got;
}

bool Said(const std::vector<std::string>& lines, const std::string& what) {
  for (const auto& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

// A warm start from an earlier job of the model that ran on a machine the catalog does not know
// ("local": a try-out on a workstation) leaves those measurements out, says so, and the job still
// gets its recommendations (before, every refit failed on the unknown type).
TEST(Runtime, WarmStartLeavesOutTypesTheCatalogDoesNotKnow) {
  const std::string db =
      ::testing::TempDir() + "/runtime_test_warm_" + std::to_string(::getpid()) + ".sqlite";
  std::remove(db.c_str());
  const ModelSignature sig = MakeSignature({{8, 4}, {8}});
  {
    std::string error;
    auto h = History::Open(db, {}, &error);
    ASSERT_TRUE(h) << error;
    HistoryJob j;
    j.job_id = "try-out";
    j.signature = sig.ToString();
    j.instance_type = "local";
    core::Measurement m = Job().profile.front();
    m.key.instance_type = "local";
    j.configurations = {m};
    j.last_noise = Job().noise;
    ASSERT_GT(h->Record(j, &error), 0) << error;
  }
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.refit_seconds = 3600;
  rs.options.history = db;
  std::vector<std::string> lines;
  ASSERT_TRUE(FirstRecommendation(
      rs, [&](Runtime& rt) { rt.SetModelSignature(sig); }, &lines));
  EXPECT_TRUE(Said(lines,
                   "): 0 configuration(s) and 0 noise record(s) it measured (its "
                   "configurations on local, not in the catalog, are left out)"));
  std::remove(db.c_str());
}

// The same for a saved state written on such a machine and restored on a catalog type. The
// restored refit finds nothing usable; the job's first snapshot after it still gets a
// recommendation at once, not a timer period (here an hour) later.
TEST(Runtime, RestoredStateLeavesOutTypesTheCatalogDoesNotKnow) {
  const std::string path =
      ::testing::TempDir() + "/runtime_test_state_" + std::to_string(::getpid()) + ".json";
  core::Snapshot old = Job();
  for (auto& m : old.profile) m.key.instance_type = "local";
  std::string error;
  ASSERT_TRUE(SaveState(path, MakeSavedState(old, nullptr, ""), &error)) << error;
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.refit_seconds = 3600;
  rs.options.state = path;
  std::vector<std::string> lines;
  ASSERT_TRUE(
      FirstRecommendation(rs, nullptr, &lines, "waiting for data before the first recommendation"))
      << ::testing::PrintToString(lines);
  EXPECT_TRUE(
      Said(lines, "saved state: its configurations on local, not in the catalog, are left out"));
  std::remove(path.c_str());
}

// Spot priced with what the job has met: revocations it saw raise the rate the search uses (a
// shorter checkpoint interval, a dearer spot run); the live path counts its spot node-hours.
TEST(SpotExposure, RevocationsTheJobSawMakeSpotDearerAndCheckpointsMoreFrequent) {
  FitAndSearchOptions o;
  o.instance_type = "g4dn.12xlarge";
  o.target.progress = 20000;
  core::Snapshot s = Job();
  s.purchase = core::Purchase::kSpot;
  const search::Recommendation calm = FitAndSearch(s, {"timer", 1}, o).decision;
  s.spot_exposure["g4dn.12xlarge"] = {10.0, 3};
  const search::Recommendation rough = FitAndSearch(s, {"timer", 1}, o).decision;
  ASSERT_TRUE(calm.has_current && rough.has_current);
  EXPECT_EQ(calm.current.config, rough.current.config);
  EXPECT_LT(rough.current.checkpoint_interval_s, calm.current.checkpoint_interval_s / 10);
  EXPECT_GT(rough.current.cost, calm.current.cost);
  EXPECT_GT(rough.current.revocations, 10 * calm.current.revocations);
  // Exposure on another type changes nothing here.
  s.spot_exposure = {{"p3.2xlarge", {10.0, 3}}};
  EXPECT_DOUBLE_EQ(FitAndSearch(s, {"timer", 1}, o).decision.current.cost, calm.current.cost);

  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.options.refit_seconds = 3600;
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  rt.Start();
  core::Snapshot live = Job();
  live.purchase = core::Purchase::kSpot;
  live.step = 100;
  rt.Observe(live);
  live.step = 200;
  live.elapsed_seconds = 1800;  // half an hour on 2 spot nodes
  rt.Observe(live);
  ASSERT_TRUE(WaitFor([&] { return rt.Latest() != nullptr; }, 30));
  const auto snap = rt.LatestSnapshot();
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->spot_exposure.count("g4dn.12xlarge"), 1u);
  EXPECT_NEAR(snap->spot_exposure.at("g4dn.12xlarge").node_hours, 1.0, 1e-9);
  EXPECT_EQ(snap->spot_exposure.at("g4dn.12xlarge").revocations, 0);
  rt.Stop();
}

TEST(Runtime, TargetFromTheTrainingLoop) {
  RuntimeSetup rs;
  rs.options.instance_type = "g4dn.12xlarge";
  rs.log = [](const std::string&) {};
  Runtime rt(rs);
  Target t;
  t.epochs = 3;
  t.dataset_size = 50000;
  rt.SetTarget(t);
  const TunerResult r = rt.Decide(Job(), "timer");
  EXPECT_EQ(r.recommendation["target"], "3 epochs");
  EXPECT_NEAR(r.recommendation["target_progress"].get<double>(), 3 * 50000 / 128.0, 1e-9);
}

}  // namespace
}  // namespace cloudtune::runtime
