// SearchMixed: clusters of several instance types around the single-type search's best.
#include "search/mixed.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "estimator/core/error.h"
#include "search/cost.h"

namespace cloudtune::search {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ranks like the single-type search: feasible first, then the objective; infeasible ones by how
// far they miss.
std::pair<int, double> RankOf(const MixedEvaluation& e, const ObjectiveOptions& o) {
  if (e.feasible) return {0, e.Objective(o.goal)};
  return {1, std::isfinite(e.hours) ? o.ExpectedExcess(e.hours, e.cost, e.log_sigma) : kInf};
}

}  // namespace

int MixedConfig::replicas() const {
  int r = 0;
  for (const auto& p : parts) r += p.replicas();
  return r;
}

int MixedConfig::nodes() const {
  int n = 0;
  for (const auto& p : parts) n += p.nodes;
  return n;
}

bool MixedConfig::OneHardware() const {
  for (const auto& p : parts)
    if (p.type != parts[0].type || p.gpus_per_node != parts[0].gpus_per_node) return false;
  return !parts.empty();
}

std::string MixedConfig::ToString() const {
  std::ostringstream s;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) s << " + ";
    s << parts[i].nodes << "x " << parts[i].type << " (" << parts[i].gpus_per_node << " GPU"
      << (parts[i].gpus_per_node == 1 ? "" : "s") << "/node) " << PurchaseName(parts[i].purchase);
  }
  s << ", batch " << global_batch;
  return s.str();
}

bool MixedSearchOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (max_types < 2 || max_types > 3) return fail("max_types must be 2 or 3");
  if (seeds < 2) return fail("seeds must be >= 2");
  if (!(hysteresis >= 0 && hysteresis < 1)) return fail("hysteresis must be in [0, 1)");
  for (const auto& [type, n] : available_nodes)
    if (n < 0) return fail("available_nodes[" + type + "] must be >= 0");
  for (const auto& [type, n] : spot_nodes_available)
    if (n < 0) return fail("spot_nodes_available[" + type + "] must be >= 0");
  return true;
}

std::vector<core::ClusterPart> PartsOf(const MixedEvaluation& m) {
  std::vector<core::ClusterPart> out;
  for (size_t i = 0; i < m.config.parts.size(); ++i) {
    const MixedPart& part = m.config.parts[i];
    out.push_back({part.type, part.nodes, part.gpus_per_node, part.purchase,
                   i < m.local_bsz.size() ? m.local_bsz[i] : 0});
  }
  return out;
}

MixedConfig MixedConfigOf(const std::vector<core::ClusterPart>& parts) {
  MixedConfig m;
  bool known = true;
  for (const core::ClusterPart& part : parts) {
    m.parts.push_back({part.instance_type, part.nodes, part.gpus_per_node, part.purchase});
    m.global_batch += static_cast<long long>(part.nodes) * part.gpus_per_node * part.local_bsz;
    known = known && part.local_bsz > 0;
  }
  if (!known) m.global_batch = 0;
  return m;
}

MixedEvaluation EvaluateMixed(const SearchProblem& p, const MixedConfig& c, const MixedStep& step,
                              const Estimate& steps, bool stay) {
  MixedEvaluation e;
  e.config = c;
  e.local_bsz = step.local_bsz;
  e.step_time_s = step.step.value;
  e.steps = steps.value;
  double rate = 0;
  for (const auto& part : c.parts) {
    const int i = p.catalog->Find(part.type);
    if (i < 0) throw InputError("mixed cluster: type '" + part.type + "' is not in the catalog");
    e.price_per_hour += HourlyPrice(p.catalog->types[i], part.nodes, part.purchase);
    rate += ClusterRevocationRate(p.catalog->types[i], part.nodes, part.purchase);
  }
  if (!(step.step.value > 0) || !std::isfinite(step.step.value) || !(steps.value >= 0)) {
    e.hours = e.cost = kInf;
    e.feasible = false;
    return e;
  }
  const double train_s = steps.value * step.step.value;
  const double switch_s = p.current && !stay ? p.cost.switch_s : 0;  // always other hardware
  const RunEstimate run = EstimateRun(train_s / 3600.0, e.price_per_hour, rate, p.cost.checkpoint_s,
                                      p.cost.restart_s, std::numeric_limits<double>::infinity(),
                                      p.cost.SavesOnNotice(p.cost.checkpoint_s));
  e.hours = run.hours + switch_s / 3600.0;
  e.cost = e.hours * e.price_per_hour;
  e.revocations = run.revocations;
  e.log_sigma = std::hypot(step.step.log_sigma, steps.log_sigma);
  e.feasible = p.objective.Miss(e.hours, e.cost, e.log_sigma) <= 1;
  return e;
}

namespace {
// Whether the best mixed cluster found is worth proposing, and why.
void Conclude(const ObjectiveOptions& o, double hysteresis, MixedSearchResult* out) {
  MixedSearchResult& r = *out;
  const Goal g = o.goal;
  if (!r.best) {
    r.reason = "no type of the top candidates is short of nodes";
    return;
  }
  if (!r.best->feasible) {
    // Nothing meets them: the cluster the job runs stays while no single type is expected to miss
    // them by less beyond the hysteresis (leaving it is a relaunch, and a relaunch near a deadline
    // is time the job does not have).
    if (r.keeps_current && r.best_single && !r.best_single->feasible &&
        (1 - hysteresis) * o.ExpectedExcess(r.best->hours, r.best->cost, r.best->log_sigma) <=
            o.ExpectedExcess(r.best_single->hours, r.best_single->cost, r.best_single->log_sigma)) {
      r.proposed = true;
      r.reason =
          "no mixed cluster or single type meets the constraints; keeping the mixed cluster it "
          "runs, expected to miss them least";
      return;
    }
    r.reason = "no mixed cluster meets the constraints";
    return;
  }
  if (!r.best_single || !r.best_single->feasible) {
    r.proposed = true;
    r.reason = "no single type with the nodes available meets the constraints";
    return;
  }
  // Beyond its added uncertainty: the mixed cluster's median, inflated by what it adds to the
  // single type's log-sigma, must still beat the single type's.
  const double added =
      std::sqrt(std::max(0.0, r.best->log_sigma * r.best->log_sigma -
                                  r.best_single->log_sigma * r.best_single->log_sigma));
  const double mixed_v = r.best->Objective(g) * std::exp(added);
  // The cluster the job runs is left for a single type only when that saves beyond the hysteresis.
  r.proposed = r.keeps_current ? (1 - hysteresis) * mixed_v <= r.best_single->Objective(g)
                               : mixed_v < r.best_single->Objective(g);
  std::ostringstream why;
  why << GoalName(g) << ": " << (r.keeps_current ? "keeping the mixed cluster it runs, " : "mixed ")
      << r.best->Objective(g) << " (x" << std::exp(added)
      << " for its added uncertainty) vs best single type with the nodes available "
      << r.best_single->Objective(g);
  if (r.keeps_current) why << " (hysteresis " << 100 * hysteresis << "%)";
  r.reason = why.str();
}

// Whether `a` replaces `stay`, the cluster the job runs: feasible over infeasible, else by more
// than `hysteresis` of its objective.
bool Replaces(const MixedEvaluation& a, const MixedEvaluation& stay, const ObjectiveOptions& o,
              double hysteresis) {
  if (a.feasible != stay.feasible) return a.feasible;
  if (!a.feasible)
    return o.ExpectedExcess(a.hours, a.cost, a.log_sigma) <
           (1 - hysteresis) * o.ExpectedExcess(stay.hours, stay.cost, stay.log_sigma);
  return a.Objective(o.goal) < (1 - hysteresis) * stay.Objective(o.goal);
}

// Nodes of `type` to be had at `purchase`: the nodes available whatever the purchase, and for
// spot (and an anchor's workers) the spot capacity too.
int Available(const SearchProblem& p, const MixedSearchOptions& o, const std::string& type,
              Purchase purchase) {
  auto it = o.available_nodes.find(type);
  int n = it == o.available_nodes.end() ? p.space.max_nodes : it->second;
  auto spot = o.spot_nodes_available.find(type);
  if (purchase != Purchase::kOnDemand && spot != o.spot_nodes_available.end())
    n = std::min(n, spot->second);
  return n;
}

// MixedSearchOptions::current: the cluster the job runs, evaluated without a switch, becomes the
// best mixed cluster unless the capacity no longer holds its parts or the best one found replaces
// it (Replaces).
void StayOnTheCurrent(const SearchProblem& p, const MixedStepFn& step,
                      const MixedSearchOptions& options, MixedSearchResult* r) {
  if (!options.current || options.current->parts.empty()) return;
  MixedConfig c = *options.current;
  for (const MixedPart& part : c.parts)
    if (p.catalog->Find(part.type) < 0 ||
        part.nodes > Available(p, options, part.type, part.purchase))
      return;
  const MixedStep s = step(c);
  if (!(s.step.value > 0)) return;
  c.global_batch = s.global_batch > 0 ? s.global_batch : c.global_batch;
  const MixedEvaluation stay =
      EvaluateMixed(p, c, s, p.predictor.steps(static_cast<double>(c.global_batch)), true);
  if (r->best && Replaces(*r->best, stay, p.objective, options.hysteresis)) return;
  r->best = stay;
  r->keeps_current = true;
  ++r->considered;
}

}  // namespace

MixedSearchResult SearchMixed(const SearchProblem& p, const SearchResult& single,
                              const MixedStepFn& step, const MixedSearchOptions& options) {
  std::string err;
  if (!options.IsValid(&err)) throw InputError("mixed search: " + err);
  if (!p.catalog || !p.predictor.steps || !step) throw InputError("mixed search: no predictor");
  MixedSearchResult r;
  auto available = [&](const std::string& type, Purchase purchase) {
    return Available(p, options, type, purchase);
  };
  auto fits = [&](const Config& c) {
    return (c.purchase == Purchase::kAnchor ? c.nodes - 1 : c.nodes) <=
           available(c.type, c.purchase);  // an anchor's on-demand node is not counted
  };
  for (const Evaluation& e : single.top)
    if (fits(e.config)) {
      r.best_single = e;
      break;
    }
  const Goal goal = p.objective.goal;
  const auto value = [goal](const Evaluation& e) {
    return e.feasible ? e.Objective(goal) : std::numeric_limits<double>::infinity();
  };
  if (options.baseline && (!r.best_single || value(*options.baseline) < value(*r.best_single)))
    r.best_single = options.baseline;
  if (single.top.empty()) {
    r.reason = "no single-type candidate to start from";
    return r;
  }
  if (r.best_single && r.best_single->config == single.top.front().config) {
    r.reason = "the best single-type candidate has the nodes it needs";
    return r;
  }
  // Seeds: the preferred (best) candidate's hardware, then for each other type of a short list
  // (the top list's types, then the space's types or the catalog's best TFLOPS per dollar) its
  // best single-type candidate within the nodes available. Batches: the top list's and theirs.
  struct Seed {
    std::string type;
    int gpus_per_node;
    Purchase purchase;
    int wants;  // nodes the single-type candidate asked for
  };
  std::vector<Seed> seeds;
  std::vector<long long> batches;
  auto add_batch = [&](long long b) {
    if (std::find(batches.begin(), batches.end(), b) == batches.end() && batches.size() < 6)
      batches.push_back(b);
  };
  const Config& front = single.top.front().config;
  seeds.push_back({front.type, front.gpus_per_node, front.purchase, front.nodes});
  // The preferred type itself on demand: the spot nodes to be had plus on-demand ones of the
  // same hardware (no balancing needed, the type's own measurements apply).
  if (front.purchase != Purchase::kOnDemand && p.space.allow_on_demand)
    seeds.push_back({front.type, front.gpus_per_node, Purchase::kOnDemand, front.nodes});
  for (const Evaluation& e : single.top) add_batch(e.config.global_batch());
  std::vector<std::string> shortlist;
  auto list = [&](const std::string& t) {
    if (std::find(shortlist.begin(), shortlist.end(), t) == shortlist.end()) shortlist.push_back(t);
  };
  for (const Evaluation& e : single.top) list(e.config.type);
  if (!p.space.types.empty()) {
    for (const auto& t : p.space.types) list(t);
  } else {
    std::vector<std::pair<double, std::string>> by_flopp;
    for (const InstanceType& t : p.catalog->types)
      by_flopp.emplace_back(
          -Flopp(*p.catalog, t,
                 p.space.allow_spot && t.has_spot() ? Purchase::kSpot : Purchase::kOnDemand),
          t.name);
    std::sort(by_flopp.begin(), by_flopp.end());
    for (const auto& [f, t] : by_flopp) list(t);
  }
  auto better_single = [&](const Evaluation& e) {
    const auto rank = [&](const Evaluation& x) {
      const MixedEvaluation m{{}, {}, 0, 0, 0, x.hours, x.cost, 0, 0, x.feasible};
      return RankOf(m, p.objective);
    };
    if (!r.best_single || rank(e) < rank(*r.best_single)) r.best_single = e;
  };
  for (const std::string& t : shortlist) {
    if (static_cast<int>(seeds.size()) >= options.seeds) break;
    SearchProblem q = p;
    q.space.types = {t};
    q.space.max_nodes = std::min(p.space.max_nodes, available(t, Purchase::kOnDemand));
    for (const auto& [type, n] : options.spot_nodes_available)
      q.space.spot_nodes_available[type] = n;
    q.candidates.clear();
    if (q.space.max_nodes < 1) continue;
    for (const Config& c : p.candidates)
      if (c.type == t && c.nodes <= q.space.max_nodes) q.candidates.push_back(c);
    if (!p.candidates.empty() && q.candidates.empty()) continue;
    q.keep_top = 1;
    const SearchResult best = Search(q);
    if (best.top.empty() || !std::isfinite(best.top[0].hours)) continue;
    better_single(best.top[0]);  // the best single type within the nodes available
    if (t == front.type) continue;
    const Config& c = best.top[0].config;
    seeds.push_back({t, c.gpus_per_node, c.purchase, c.nodes});
    add_batch(c.global_batch());
  }
  std::optional<std::pair<int, double>> best_rank;
  auto consider = [&](const MixedConfig& shape) {
    if (shape.nodes() > p.space.max_nodes || shape.replicas() > p.space.max_gpus) return;
    for (long long b : batches) {
      if (b < shape.replicas()) continue;
      MixedConfig c = shape;
      c.global_batch = b;
      const MixedStep s = step(c);
      c.global_batch = s.global_batch > 0 ? s.global_batch : b;
      ++r.considered;
      MixedEvaluation e =
          EvaluateMixed(p, c, s, p.predictor.steps(static_cast<double>(c.global_batch)));
      const auto rank = RankOf(e, p.objective);
      if (!best_rank || rank < *best_rank) {
        best_rank = rank;
        r.best = std::move(e);
      }
    }
  };
  // Nodes of a seed's type to be had at its purchase (the spot capacity limits spot nodes only).
  auto can_have = [&](const Seed& x) { return available(x.type, x.purchase); };
  auto same = [](const Seed& x, const Seed& y) {
    return x.type == y.type && x.purchase == y.purchase;
  };
  for (size_t a = 0; a < 1; ++a) {  // the preferred type keeps what it can get
    const int have = std::min(available(seeds[a].type, seeds[a].purchase), seeds[a].wants);
    if (have >= seeds[a].wants || have < 1) continue;  // not short, or none to keep
    const MixedPart keep{seeds[a].type, have, seeds[a].gpus_per_node, seeds[a].purchase};
    for (size_t b = 0; b < seeds.size(); ++b) {
      if (same(seeds[b], seeds[a])) continue;
      const int room = std::min(can_have(seeds[b]), p.space.max_nodes - have);
      for (int k = 1; k <= room; ++k) {
        const MixedPart fill{seeds[b].type, k, seeds[b].gpus_per_node, seeds[b].purchase};
        consider({{keep, fill}, 0});
        if (options.max_types < 3 || k != room) continue;
        // Three types: all of the second one's nodes, then a third.
        for (size_t c = 0; c < seeds.size(); ++c) {
          if (same(seeds[c], seeds[a]) || same(seeds[c], seeds[b])) continue;
          const int room3 = std::min(can_have(seeds[c]), p.space.max_nodes - have - k);
          for (int j = 1; j <= room3; ++j)
            consider(
                {{keep, fill, {seeds[c].type, j, seeds[c].gpus_per_node, seeds[c].purchase}}, 0});
        }
      }
    }
  }
  StayOnTheCurrent(p, step, options, &r);
  Conclude(p.objective, options.current ? options.hysteresis : 0, &r);
  return r;
}

}  // namespace cloudtune::search
