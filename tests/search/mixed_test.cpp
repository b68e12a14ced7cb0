// Mixed clusters in the search, on an analytical workload: per-type compute a + beta_t * b, an
// all-reduce that grows with the replicas, and the steps of the plain theory.
#include "search/mixed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <string>

#include "estimator/core/error.h"
#include "search/recommend.h"

namespace cloudtune::search {
namespace {

const std::map<std::string, double> kBeta = {
    {"g4dn.12xlarge", 4e-3}, {"g5.12xlarge", 2e-3}, {"p3.8xlarge", 1.6e-3}};  // s per sample
constexpr double kAlpha = 0.02;

double Sync(int replicas, int nodes) {
  return replicas < 2 ? 0 : 0.01 + 0.001 * replicas + (nodes > 1 ? 0.02 : 0);
}

SearchProblem Problem(Goal goal) {
  SearchProblem p;
  p.catalog = &DefaultCatalog();
  p.predictor.step_time = [](const InstanceType& t, const Config& c) {
    const double tc = kAlpha + kBeta.at(t.name) * c.local_bsz;
    return Estimate{tc * (c.accum_steps + 1) + Sync(c.replicas(), c.nodes), 0.05};
  };
  p.predictor.steps = [](double b) {
    const double r = 2000.0 / 64, s = b / 64;
    return Estimate{2e5 * (r / s + 1) / (r + 1), 0.05};
  };
  p.remaining_progress = 2e5;
  p.objective.goal = goal;
  p.space.max_nodes = 16;
  p.space.max_gpus = 64;
  p.space.types = {"g4dn.12xlarge", "g5.12xlarge", "p3.8xlarge"};
  p.space.allow_anchor = false;
  return p;
}

// Balanced analytically: all parts finish at t = alpha + B / sum(r_i / beta_i).
MixedStep Balanced(const MixedConfig& c) {
  double inv = 0;
  for (const auto& part : c.parts) inv += part.replicas() / kBeta.at(part.type);
  const double t = kAlpha + c.global_batch / inv;
  MixedStep s;
  long long sum = 0;
  for (const auto& part : c.parts) {
    const int b = std::max(1, static_cast<int>(std::lround((t - kAlpha) / kBeta.at(part.type))));
    s.local_bsz.push_back(b);
    sum += static_cast<long long>(b) * part.replicas();
  }
  s.global_batch = sum;
  s.step = {t + Sync(c.replicas(), c.nodes()), 0.08};  // wider than one type's 0.05
  return s;
}

SearchResult Top(const SearchProblem& p) {
  SearchProblem q = p;
  q.keep_top = 24;
  return Search(q);
}

TEST(MixedSearch, OptionsAreValidatedAndNamed) {
  std::string err;
  EXPECT_TRUE(MixedSearchOptions{}.IsValid(&err)) << err;
  MixedSearchOptions o;
  o.max_types = 4;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "max_types must be 2 or 3");
  o = {};
  o.available_nodes["g5.12xlarge"] = -1;
  EXPECT_FALSE(o.IsValid(&err));
  EXPECT_EQ(err, "available_nodes[g5.12xlarge] must be >= 0");
  const SearchProblem p = Problem(Goal::kTime);
  EXPECT_THROW(SearchMixed(p, Top(p), Balanced, o), InputError);
}

TEST(MixedSearch, NothingToMixWhenThePreferredTypeHasItsNodes) {
  const SearchProblem p = Problem(Goal::kTime);
  const MixedSearchResult r = SearchMixed(p, Top(p), Balanced);
  EXPECT_FALSE(r.proposed);
  EXPECT_EQ(r.considered, 0u);
  EXPECT_EQ(r.reason, "the best single-type candidate has the nodes it needs");
}

TEST(MixedSearch, ShortCapacityIsFilledWithAnotherType) {
  const SearchProblem p = Problem(Goal::kTime);
  const SearchResult single = Top(p);
  ASSERT_FALSE(single.top.empty());
  const Config& want = single.top.front().config;
  ASSERT_GE(want.nodes, 4);
  // Capacity comes in fragments: a quarter of the nodes the best candidate wants, 6 of every
  // other type.
  MixedSearchOptions o;
  for (const auto& t : p.space.types) o.available_nodes[t] = 6;
  o.available_nodes[want.type] = want.nodes / 4;
  const MixedSearchResult r = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(r.best) << r.reason;
  ASSERT_TRUE(r.best_single);
  EXPECT_GT(r.considered, 0u);
  EXPECT_LE(r.best_single->config.nodes, o.available_nodes[r.best_single->config.type]);
  // It keeps every available node of the preferred type.
  EXPECT_EQ(r.best->config.parts[0].type, want.type);
  EXPECT_EQ(r.best->config.parts[0].nodes, want.nodes / 4);
  EXPECT_GE(r.best->config.parts.size(), 2u);
  EXPECT_TRUE(r.proposed) << r.reason << ": " << r.best->config.ToString() << " vs "
                          << r.best_single->config.ToString();
  EXPECT_LT(r.best->hours, r.best_single->hours)
      << r.best->config.ToString() << " step " << r.best->step_time_s << " steps " << r.best->steps
      << " vs " << r.best_single->config.ToString() << " step " << r.best_single->step_time_s
      << " steps " << r.best_single->steps;
  // Per-type local batches: the faster GPU gets the larger share.
  const auto& parts = r.best->config.parts;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (kBeta.at(parts[i].type) < kBeta.at(parts[0].type)) {
      EXPECT_GT(r.best->local_bsz[i], r.best->local_bsz[0]);
    }
  }
  // Priced per type and purchase.
  double price = 0;
  for (const auto& part : parts)
    price += HourlyPrice(DefaultCatalog().types[DefaultCatalog().Find(part.type)], part.nodes,
                         part.purchase);
  EXPECT_NEAR(r.best->price_per_hour, price, 1e-9);
}

// A single-type candidate found elsewhere (the baseline: what the capacity allows, on demand
// included) is the one to beat when it is better; a worse one changes nothing.
TEST(MixedSearch, ABetterBaselineIsTheSingleTypeToBeat) {
  const SearchProblem p = Problem(Goal::kTime);
  const SearchResult single = Top(p);
  const Config& want = single.top.front().config;
  MixedSearchOptions o;
  for (const auto& t : p.space.types) o.available_nodes[t] = 6;
  o.available_nodes[want.type] = want.nodes / 4;
  const MixedSearchResult plain = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(plain.best && plain.best_single && plain.proposed) << plain.reason;
  Evaluation worse = *plain.best_single;
  worse.hours *= 2;
  o.baseline = worse;
  EXPECT_EQ(SearchMixed(p, single, Balanced, o).best_single->hours, plain.best_single->hours);
  Evaluation better = *plain.best_single;
  better.hours = 0.5 * plain.best->hours;
  o.baseline = better;
  const MixedSearchResult r = SearchMixed(p, single, Balanced, o);
  EXPECT_EQ(r.best_single->hours, better.hours);
  EXPECT_FALSE(r.proposed) << r.reason;
}

// The cluster the job runs is evaluated without a switch and kept unless an alternative saves more
// than the hysteresis; it is not kept when the capacity no longer holds its parts.
TEST(MixedSearch, TheClusterTheJobRunsIsKeptWithinTheHysteresis) {
  SearchProblem p = Problem(Goal::kTime);
  const SearchResult single = Top(p);
  const Config running = single.top.front().config;
  p.current = &running;  // a switch costs p.cost.switch_s
  MixedSearchOptions o;
  for (const auto& t : p.space.types) o.available_nodes[t] = 6;
  o.available_nodes[running.type] = running.nodes / 4;
  const MixedSearchResult fresh = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(fresh.best && fresh.proposed) << fresh.reason;
  EXPECT_FALSE(fresh.keeps_current);
  // The job runs the best cluster with one node of its second part only: slower.
  MixedConfig slower = fresh.best->config;
  ASSERT_GE(slower.parts.size(), 2u);
  ASSERT_GE(slower.parts[1].nodes, 2) << slower.ToString();
  slower.parts[1].nodes = 1;
  o.current = slower;
  o.hysteresis = 0.9;  // the best saves less than 90% of its time: kept
  const MixedSearchResult kept = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(kept.best) << kept.reason;
  EXPECT_TRUE(kept.keeps_current) << kept.reason;
  EXPECT_EQ(kept.best->config.ToString().substr(0, 40), slower.ToString().substr(0, 40));
  EXPECT_EQ(kept.best->config.parts[1].nodes, slower.parts[1].nodes);
  EXPECT_NE(kept.reason.find("keeping the mixed cluster it runs"), std::string::npos)
      << kept.reason;
  // Staying costs no switch.
  const MixedStep step = Balanced(kept.best->config);
  const Estimate steps = p.predictor.steps(static_cast<double>(kept.best->config.global_batch));
  EXPECT_NEAR(EvaluateMixed(p, kept.best->config, step, steps).hours -
                  EvaluateMixed(p, kept.best->config, step, steps, true).hours,
              p.cost.switch_s / 3600, 1e-9);
  // Without hysteresis the faster cluster replaces it.
  o.hysteresis = 0;
  const MixedSearchResult moved = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(moved.best);
  EXPECT_FALSE(moved.keeps_current) << moved.reason;
  EXPECT_EQ(moved.best->config.parts[1].nodes, fresh.best->config.parts[1].nodes);
  // Capacity gone from under its first part: not an option.
  o.hysteresis = 0.9;
  o.available_nodes[slower.parts[0].type] = slower.parts[0].nodes - 1;
  EXPECT_FALSE(SearchMixed(p, single, Balanced, o).keeps_current);
  o.hysteresis = 1;
  EXPECT_FALSE(o.IsValid(nullptr));
}

// When nothing meets the deadline, the cluster the job runs stays while it is expected to miss it
// least: leaving it is a relaunch. Without it, no infeasible mixed cluster is proposed.
TEST(MixedSearch, NothingMeetsTheDeadlineTheClusterTheJobRunsStaysIfLeastLate) {
  SearchProblem p = Problem(Goal::kTime);
  const SearchResult unconstrained = Top(p);
  const Config running = unconstrained.top.front().config;
  p.current = &running;
  MixedSearchOptions o;
  for (const auto& t : p.space.types) o.available_nodes[t] = 6;
  o.available_nodes[running.type] = running.nodes / 4;
  const MixedSearchResult fresh = SearchMixed(p, unconstrained, Balanced, o);
  ASSERT_TRUE(fresh.best && fresh.proposed) << fresh.reason;
  p.objective.deadline_h = 0.5 * fresh.best->hours;  // out of reach
  const SearchResult single = Top(p);
  const MixedSearchResult none = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(none.best);
  EXPECT_FALSE(none.best->feasible);
  EXPECT_FALSE(none.proposed) << none.reason;
  o.current = fresh.best->config;
  o.hysteresis = 0.03;
  const MixedSearchResult stays = SearchMixed(p, single, Balanced, o);
  ASSERT_TRUE(stays.best && stays.best_single);
  EXPECT_FALSE(stays.best_single->feasible);
  EXPECT_TRUE(stays.keeps_current);
  EXPECT_TRUE(stays.proposed) << stays.reason;
  EXPECT_NE(stays.reason.find("expected to miss them least"), std::string::npos) << stays.reason;
}

// The job describes the mixed cluster it runs by its parts; the search reads them back.
TEST(MixedSearch, ItsPartsRoundTrip) {
  MixedEvaluation m;
  m.config.parts = {{"g4dn.12xlarge", 2, 4, Purchase::kSpot}, {"p3.8xlarge", 1, 4}};
  m.local_bsz = {32, 80};
  const std::vector<core::ClusterPart> parts = PartsOf(m);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].instance_type, "g4dn.12xlarge");
  EXPECT_EQ(parts[0].purchase, Purchase::kSpot);
  EXPECT_EQ(parts[1].local_bsz, 80);
  const MixedConfig back = MixedConfigOf(parts);
  MixedConfig want = m.config;
  want.global_batch = 2 * 4 * 32 + 4 * 80;
  EXPECT_EQ(back.ToString(), want.ToString());
  std::vector<core::ClusterPart> unknown = parts;
  unknown[1].local_bsz = 0;
  EXPECT_EQ(MixedConfigOf(unknown).global_batch, 0);
}

TEST(MixedSearch, NeverProposesAMixedClusterPredictedWorseThanTheBestSingleType) {
  for (Goal g : {Goal::kTime, Goal::kCost}) {
    const SearchProblem p = Problem(g);
    const SearchResult single = Top(p);
    for (int avail = 0; avail <= 16; ++avail)
      for (int types : {2, 3}) {
        MixedSearchOptions o;
        o.max_types = types;
        for (const auto& t : p.space.types) o.available_nodes[t] = avail;
        o.available_nodes[single.top.front().config.type] = avail / 2;
        const MixedSearchResult r = SearchMixed(p, single, Balanced, o);
        if (!r.proposed) continue;
        ASSERT_TRUE(r.best);
        if (r.best_single && r.best_single->feasible) {
          EXPECT_LT(r.best->Objective(g), r.best_single->Objective(g))
              << GoalName(g) << " avail " << avail << ": " << r.reason;
        }
        for (const auto& part : r.best->config.parts)
          EXPECT_LE(part.nodes, o.available_nodes[part.type]) << part.type;
      }
  }
}

}  // namespace
}  // namespace cloudtune::search

namespace cloudtune::search {
namespace {

// Recommend (the entry point a job's runtime calls) runs the mixed search only when the spot
// capacity the job knows of is given, and reports it in its record.
RecommendRequest MeasuredOnT4() {
  RecommendRequest req;
  for (int nodes : {1, 2, 4})
    for (int bsz : {32, 64, 128}) {
      core::Measurement m;
      m.key = {nodes, nodes * 4, bsz, 0, "g4dn.12xlarge"};
      const double sync = Sync(nodes * 4, nodes);
      m.step_time = kAlpha + kBeta.at("g4dn.12xlarge") * bsz + sync;
      m.sync_time = sync;
      m.rows = 20;
      req.profile.push_back(m);
    }
  req.noise = core::NoiseState{1.0, 2000.0 / 64, 64};
  Config cur;
  cur.type = "g4dn.12xlarge";
  cur.nodes = 4;
  cur.gpus_per_node = 4;
  cur.local_bsz = 64;
  cur.purchase = Purchase::kSpot;
  req.current = cur;
  req.options.target_progress = 2e5;
  req.options.space.max_nodes = 16;
  req.options.space.max_gpus = 64;
  req.options.space.types = {"g4dn.12xlarge", "g5.12xlarge", "p3.8xlarge"};
  return req;
}

TEST(Mixed, RecommendReportsTheMixedSearchWhenSpotCapacityIsShort) {
  RecommendRequest req = MeasuredOnT4();
  EXPECT_FALSE(Recommend(req).mixed.has_value());  // no capacity known: not searched
  // Cheapest within a deadline that needs many nodes, with spot capacity short of every type.
  req.options.objective.deadline_h = 1.5;
  req.options.space.allow_anchor = false;
  req.options.space.spot_nodes_available = {
      {"g4dn.12xlarge", 3}, {"g5.12xlarge", 3}, {"p3.8xlarge", 3}};
  const Recommendation r = Recommend(req);
  ASSERT_TRUE(r.mixed.has_value());
  EXPECT_GT(r.mixed->considered, 0u);
  ASSERT_TRUE(r.mixed->best.has_value()) << r.mixed->reason;
  const MixedEvaluation& best = *r.mixed->best;
  std::cout << "mixed: " << best.config.ToString() << " (" << r.mixed->considered
            << " clusters), proposed " << r.mixed->proposed << ": " << r.mixed->reason << "\n";
  long long samples = 0;
  for (size_t i = 0; i < best.config.parts.size(); ++i)
    samples += static_cast<long long>(best.config.parts[i].replicas()) * best.local_bsz.at(i);
  EXPECT_EQ(samples, best.config.global_batch);
  // It keeps the spot nodes of the preferred type that can be had (3) and fills up with the same
  // (measured) type on demand, which the spot capacity does not limit: cheaper than the best
  // single type within the capacity beyond its added uncertainty, it is proposed.
  ASSERT_TRUE(r.mixed->best_single.has_value());
  EXPECT_LT(best.cost, r.mixed->best_single->cost);
  ASSERT_EQ(best.config.parts.size(), 2u) << best.config.ToString();
  EXPECT_EQ(best.config.parts[0].type, "g4dn.12xlarge");
  EXPECT_EQ(best.config.parts[0].purchase, Purchase::kSpot);
  EXPECT_EQ(best.config.parts[0].nodes, 3);
  EXPECT_EQ(best.config.parts[1].type, "g4dn.12xlarge");
  EXPECT_EQ(best.config.parts[1].purchase, Purchase::kOnDemand);
  EXPECT_EQ(best.local_bsz[0], best.local_bsz[1]);  // one hardware: no balancing
  EXPECT_TRUE(r.mixed->proposed) << r.mixed->reason;
  EXPECT_NE(r.mixed->reason.find("added uncertainty"), std::string::npos) << r.mixed->reason;
  // The job on it reports its parts; asked again, the search weighs staying on it, no switch.
  EXPECT_TRUE(MixedPartsOf(Recommend(MeasuredOnT4())).empty());
  RecommendRequest on_it = req;
  on_it.current_mixed = MixedConfigOf(MixedPartsOf(r));
  on_it.relaunch_current = true;
  const Recommendation again = Recommend(on_it);
  ASSERT_TRUE(again.mixed && again.mixed->best);
  EXPECT_TRUE(again.mixed->keeps_current) << again.mixed->reason;
  EXPECT_TRUE(again.mixed->proposed) << again.mixed->reason;
  EXPECT_LT(again.mixed->best->hours, best.hours);  // the switch it no longer pays
  EXPECT_EQ(again.ToJson()["mixed"]["keeps_current"], true);
  {  // Spot only: no single type meets the deadline with 3 spot nodes; it fills up with another
     // type's spot nodes and proposes that, although the projection is uncertain.
    RecommendRequest spot_only = req;
    spot_only.options.space.allow_on_demand = false;
    const Recommendation s = Recommend(spot_only);
    ASSERT_TRUE(s.mixed && s.mixed->best && s.mixed->best_single);
    std::cout << "spot only: " << s.mixed->best->config.ToString() << ": " << s.mixed->reason
              << "\n";
    EXPECT_FALSE(s.mixed->best_single->feasible);
    EXPECT_TRUE(s.mixed->best->feasible);
    bool other_type = false;
    for (const MixedPart& part : s.mixed->best->config.parts) {
      other_type |= part.type != "g4dn.12xlarge";
      EXPECT_EQ(part.purchase, Purchase::kSpot);
      EXPECT_LE(part.nodes, 3);
    }
    EXPECT_TRUE(other_type) << s.mixed->best->config.ToString();
    EXPECT_TRUE(s.mixed->proposed);
    EXPECT_EQ(s.mixed->reason, "no single type with the nodes available meets the constraints");
  }
  const nlohmann::json j = r.ToJson();
  ASSERT_TRUE(j.contains("mixed"));
  EXPECT_EQ(j["mixed"]["proposed"], r.mixed->proposed);
  EXPECT_EQ(j["mixed"]["best"]["parts"].size(), best.config.parts.size());
  // Off by option; a bad value is named.
  req.options.mixed_max_types = 0;
  EXPECT_FALSE(Recommend(req).mixed.has_value());
  req.options.mixed_max_types = 4;
  std::string err;
  EXPECT_FALSE(req.options.IsValid(&err));
  EXPECT_EQ(err, "mixed_max_types must be 0 (off), 2 or 3");
}

}  // namespace
}  // namespace cloudtune::search
