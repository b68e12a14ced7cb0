#include "search/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "estimator/core/error.h"
#include "estimator/core/stats.h"

namespace cloudtune::search {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// Sort key: feasible candidates first by objective, then infeasible ones by how far they miss.
struct Rank {
  int infeasible;
  double value;
  bool operator<(const Rank& o) const {
    return infeasible != o.infeasible ? infeasible < o.infeasible : value < o.value;
  }
};

// Keeps the best `k` of the items offered (sorted by rank, ties in the order offered).
class BestK {
 public:
  explicit BestK(size_t k) : k_(k) { items_.reserve(k + 1); }
  void Offer(const Rank& rk, const Evaluation& e) {
    if (items_.size() == k_ && !(rk < items_.back().first)) return;
    auto pos = std::upper_bound(items_.begin(), items_.end(), rk,
                                [](const Rank& a, const auto& b) { return a < b.first; });
    items_.insert(pos, {rk, e});
    if (items_.size() > k_) items_.pop_back();
  }
  std::vector<Evaluation> Take() {
    std::vector<Evaluation> out;
    for (auto& [rk, e] : items_) out.push_back(std::move(e));
    return out;
  }

 private:
  size_t k_;
  std::vector<std::pair<Rank, Evaluation>> items_;
};

Rank RankOf(const Evaluation& e, const ObjectiveOptions& o) {
  if (e.feasible) return {0, e.Objective(o.goal)};
  return {1, o.ExpectedExcess(e.hours, e.cost, e.log_sigma)};
}

void CheckProblem(const SearchProblem& p) {
  std::string err;
  if (!p.catalog) throw InputError("search: no catalog");
  if (!p.predictor.step_time || !p.predictor.steps) throw InputError("search: no predictor");
  if (!p.space.IsValid(&err)) throw InputError("search space: " + err);
  if (!p.objective.IsValid(&err)) throw InputError("objective: " + err);
  if (!p.cost.IsValid(&err)) throw InputError("cost options: " + err);
}

// Calls fn(type, hardware/batch config) over the problem's candidates within the growth bound;
// with `only_type`, over that instance type's only.
template <typename Fn>
void ForEachProblemCandidate(const SearchProblem& p, Fn&& fn,
                             const std::string* only_type = nullptr) {
  long long bound = p.space.GrowthBound(p.current ? p.current->global_batch() : 0);
  if (p.candidates.empty()) {
    SpaceOptions space = p.space;
    if (only_type) space.types = {*only_type};
    if (bound > 0)
      space.max_global_batch =
          space.max_global_batch > 0 ? std::min(space.max_global_batch, bound) : bound;
    ForEachCandidate(*p.catalog, space, fn);
    return;
  }
  if (bound > 0) {  // never empty a list: its smallest batch stays
    long long smallest = std::numeric_limits<long long>::max();
    for (const Config& c : p.candidates) smallest = std::min(smallest, c.global_batch());
    bound = std::max(bound, smallest);
  }
  for (const Config& c : p.candidates) {
    if (only_type && c.type != *only_type) continue;
    int i = p.catalog->Find(c.type);
    if (i < 0) throw InputError("search: candidate type '" + c.type + "' is not in the catalog");
    if (bound > 0 && c.global_batch() > bound) continue;
    fn(p.catalog->types[i], c);
  }
}

// Calls fn(type, config with purchase, step, steps) for every candidate × allowed purchase.
template <typename Fn>
void ForEachEvaluated(const SearchProblem& p, Fn&& fn) {
  std::unordered_map<long long, Estimate> steps_cache;
  Purchase options[3];
  int n_options = 0;
  if (p.space.allow_on_demand) options[n_options++] = Purchase::kOnDemand;
  if (p.space.allow_spot) options[n_options++] = Purchase::kSpot;
  if (p.space.allow_anchor) options[n_options++] = Purchase::kAnchor;
  ForEachProblemCandidate(p, [&](const InstanceType& t, const Config& base) {
    Estimate step = p.predictor.step_time(t, base);
    if (!(step.value > 0) || !std::isfinite(step.value)) return;
    const long long b = base.global_batch();
    auto it = steps_cache.find(b);
    if (it == steps_cache.end())
      it = steps_cache.emplace(b, p.predictor.steps(static_cast<double>(b))).first;
    Config c = base;
    for (int k = 0; k < n_options; ++k) {
      c.purchase = options[k];
      if (c.purchase != Purchase::kOnDemand && !t.has_spot()) continue;
      if (c.purchase == Purchase::kAnchor && c.nodes < 2) continue;  // anchor needs workers
      if (c.purchase != Purchase::kOnDemand && !p.space.spot_nodes_available.empty() &&
          !(c.purchase == Purchase::kSpot && p.space.wait_for_spot)) {
        auto a = p.space.spot_nodes_available.find(t.name);
        if (a != p.space.spot_nodes_available.end() && SpotNodes(c.nodes, c.purchase) > a->second)
          continue;
      }
      fn(t, c, step, it->second);
    }
  });
}
}  // namespace

core::ConfigKey Config::Key() const {
  core::ConfigKey k;
  k.instance_type = type;
  k.num_nodes = nodes;
  k.num_replicas = replicas();
  k.local_bsz = local_bsz;
  k.accum_steps = accum_steps;
  return k;
}

std::string Config::ToString() const {
  std::ostringstream s;
  s << nodes << "x " << type << " (" << gpus_per_node << " GPU" << (gpus_per_node > 1 ? "s" : "")
    << "/node) " << PurchaseName(purchase) << ", batch " << local_bsz << "x" << replicas();
  if (accum_steps) s << "x" << (accum_steps + 1) << " accum";
  s << " = " << global_batch();
  return s.str();
}

long long SpaceOptions::GrowthBound(long long current_batch) const {
  if (!(max_batch_growth > 0) || !(observed_batch > 0)) return 0;
  const double b = max_batch_growth * observed_batch;
  const long long bound = b >= 9e18 ? std::numeric_limits<long long>::max()
                                    : static_cast<long long>(std::floor(b + 1e-9));
  return std::max(bound, current_batch);
}

bool SpaceOptions::IsValid(std::string* error) const {
  const char* bad = nullptr;
  if (max_nodes < 1)
    bad = "max_nodes must be >= 1";
  else if (max_gpus < 1)
    bad = "max_gpus must be >= 1";
  else if (min_local_bsz < 1)
    bad = "min_local_bsz must be >= 1";
  else if (max_local_bsz < min_local_bsz)
    bad = "max_local_bsz must be >= min_local_bsz";
  else if (!(local_bsz_factor > 1))
    bad = "local_bsz_factor must be > 1";
  else if (max_accum_steps < 0)
    bad = "max_accum_steps must be >= 0";
  else if (max_global_batch < 0)
    bad = "max_global_batch must be >= 0";
  else if (!(max_batch_growth == 0 || max_batch_growth >= 1) || !std::isfinite(max_batch_growth))
    bad = "max_batch_growth must be >= 1, or 0 (no bound)";
  else if (!(observed_batch >= 0) || !std::isfinite(observed_batch))
    bad = "observed_batch must be >= 0 (samples)";
  else if (!(memory_per_sample_gib >= 0))
    bad = "memory_per_sample_gib must be >= 0";
  else if (!allow_on_demand && !allow_spot && !allow_anchor)
    bad = "no purchase option allowed";
  if (bad && error) *error = bad;
  return bad == nullptr;
}

bool ObjectiveOptions::IsValid(std::string* error) const {
  const char* bad = nullptr;
  if (!(deadline_h >= 0) || !std::isfinite(deadline_h))
    bad = "deadline_h must be >= 0";
  else if (!(budget_usd >= 0) || !std::isfinite(budget_usd))
    bad = "budget_usd must be >= 0";
  else if (!(constraint_sigmas >= 0) || !std::isfinite(constraint_sigmas))
    bad = "constraint_sigmas must be >= 0";
  else if (!(uncorrectable_h >= 0) || !std::isfinite(uncorrectable_h))
    bad = "uncorrectable_h must be >= 0";
  else if (!(correction_h >= 0) || !std::isfinite(correction_h))
    bad = "correction_h must be >= 0";
  if (bad && error) *error = bad;
  return bad == nullptr;
}

namespace {
// The factor on a run's hours and cost that over-runs its uncorrectable share by the margin.
double MarginFactor(const ObjectiveOptions& o, double hours, double log_sigma) {
  const double share = hours > 0 ? std::min(1.0, o.uncorrectable_h / hours) : 0.0;
  return 1 + share * (std::exp(o.constraint_sigmas * std::max(0.0, log_sigma)) - 1);
}
}  // namespace

double ObjectiveOptions::DeadlineMiss(double hours, double log_sigma) const {
  return deadline_h > 0
             ? (hours * MarginFactor(*this, hours, log_sigma) + correction_h) / deadline_h
             : 0.0;
}

double ObjectiveOptions::BudgetMiss(double hours, double cost, double log_sigma) const {
  return budget_usd > 0 ? cost * MarginFactor(*this, hours, log_sigma) / budget_usd : 0.0;
}

double ObjectiveOptions::Miss(double hours, double cost, double log_sigma) const {
  return std::max(DeadlineMiss(hours, log_sigma), BudgetMiss(hours, cost, log_sigma));
}

namespace {
// E[(rho e^(sigma Z) - 1)+], Z standard normal: the expected excess of a log-normal ratio over 1.
double LogNormalExcess(double rho, double sigma) {
  if (!(rho > 0)) return 0;
  if (!std::isfinite(rho)) return rho;
  if (!(sigma > 1e-9)) return std::max(0.0, rho - 1);
  const double d = std::log(rho) / sigma;
  return std::max(
      0.0, rho * std::exp(0.5 * sigma * sigma) * core::NormalCdf(d + sigma) - core::NormalCdf(d));
}
}  // namespace

double ObjectiveOptions::ExpectedExcess(double hours, double cost, double log_sigma) const {
  const double sigma = std::max(0.0, log_sigma);
  return LogNormalExcess(DeadlineMiss(hours, sigma), sigma) +
         LogNormalExcess(BudgetMiss(hours, cost, sigma), sigma);
}

void ForEachCandidate(const Catalog& catalog, const SpaceOptions& space,
                      const std::function<void(const InstanceType&, const Config&)>& fn) {
  std::vector<int> bszs;
  for (double b = space.min_local_bsz; b <= space.max_local_bsz + 1e-9;
       b *= space.local_bsz_factor) {
    int v = static_cast<int>(std::lround(b));
    if (bszs.empty() || v != bszs.back()) bszs.push_back(v);
  }
  for (const InstanceType& t : catalog.types) {
    if (!space.types.empty() &&
        std::find(space.types.begin(), space.types.end(), t.name) == space.types.end())
      continue;
    std::vector<int> gpns;
    for (int g = 1; g < t.gpus; g *= 2) gpns.push_back(g);
    gpns.push_back(t.gpus);
    Config c;
    c.type = t.name;
    for (int n = 1; n <= space.max_nodes; ++n) {
      c.nodes = n;
      for (int g : gpns) {
        if (n * g > space.max_gpus) break;
        c.gpus_per_node = g;
        for (int b : bszs) {
          if (space.memory_per_sample_gib > 0 && t.gpu_memory_gib > 0 &&
              b * space.memory_per_sample_gib > t.gpu_memory_gib)
            break;
          c.local_bsz = b;
          for (int a = 0; a <= space.max_accum_steps; ++a) {
            c.accum_steps = a;
            if (space.max_global_batch > 0 && c.global_batch() > space.max_global_batch) break;
            fn(t, c);
          }
        }
      }
    }
  }
}

void ForEachCandidateOfType(const SearchProblem& p, const std::string& type,
                            const std::function<void(const Config&)>& fn) {
  ForEachProblemCandidate(
      p, [&](const InstanceType&, const Config& c) { fn(c); }, &type);
}

Evaluation Evaluate(const SearchProblem& p, const InstanceType& t, const Config& c,
                    const Estimate& step, const Estimate& steps) {
  Evaluation e;
  e.config = c;
  e.step_time_s = step.value;
  e.steps = steps.value;
  e.price_per_hour = HourlyPrice(t, c.nodes, c.purchase);
  if (!(step.value > 0) || !std::isfinite(step.value) || !(steps.value >= 0)) {
    e.hours = e.cost = kInf;
    e.feasible = false;
    return e;
  }
  e.throughput = static_cast<double>(c.global_batch()) / step.value;
  const double train_s = steps.value * step.value;
  e.goodput = train_s > 0 ? p.remaining_progress / train_s : 0;
  if (p.current && (p.relaunch_current || !(c == *p.current)))
    e.switch_s =
        !p.relaunch_current && c.SameHardware(*p.current) ? p.cost.batch_switch_s : p.cost.switch_s;
  const double rate = ClusterRevocationRate(t, c.nodes, c.purchase);
  const double ckpt =
      c.purchase == Purchase::kAnchor ? p.cost.anchor_checkpoint_s : p.cost.checkpoint_s;
  const bool on_notice = p.cost.SavesOnNotice(ckpt);
  constexpr double kNoBound = std::numeric_limits<double>::infinity();
  RunEstimate run = EstimateRun(train_s / 3600.0, e.price_per_hour, rate, ckpt, p.cost.restart_s,
                                kNoBound, on_notice);
  // One revocation loses up to an interval of work (none when the job saves on the notice).
  // Young/Daly minimises the expected loss; under a deadline the interval must also fit the slack
  // the candidate leaves, or a single revocation misses it. Charged to the candidate (more
  // checkpoints; never more often than every two checkpoint times). A candidate that leaves no
  // slack keeps Young/Daly: it misses anyway, and ranks by its expected lateness. (The same bound
  // on a budget's slack was measured and made the replay's budget runs worse: docs/results.md.)
  if (rate > 0 && p.objective.deadline_h > 0 && !on_notice) {
    const double slack_s = (p.objective.deadline_h - run.hours - e.switch_s / 3600.0) * 3600.0;
    if (slack_s > 0 && slack_s < run.checkpoint_interval_s)
      run = EstimateRun(train_s / 3600.0, e.price_per_hour, rate, ckpt, p.cost.restart_s,
                        std::max(slack_s, 2 * ckpt));
  }
  e.hours = run.hours + e.switch_s / 3600.0;
  e.cost = e.hours * e.price_per_hour;
  e.revocations = run.revocations;
  e.checkpoint_interval_s = run.checkpoint_interval_s;
  e.log_sigma = std::sqrt(step.log_sigma * step.log_sigma + steps.log_sigma * steps.log_sigma);
  e.feasible = p.objective.Miss(e.hours, e.cost, e.log_sigma) <= 1;
  return e;
}

Evaluation Evaluate(const SearchProblem& p, const Config& c) {
  CheckProblem(p);
  int i = p.catalog->Find(c.type);
  if (i < 0) throw InputError("configuration type '" + c.type + "' is not in the catalog");
  const InstanceType& t = p.catalog->types[i];
  return Evaluate(p, t, c, p.predictor.step_time(t, c),
                  p.predictor.steps(static_cast<double>(c.global_batch())));
}

namespace {
// See SearchResult::plan. r->top[0] misses a constraint.
void StepTowardAPlan(const SearchProblem& p, SearchResult* r) {
  const long long bound = p.space.GrowthBound(p.current ? p.current->global_batch() : 0);
  if (bound <= 0) return;
  SearchProblem all = p;
  all.space.max_batch_growth = 0;  // every batch: the plans
  Evaluation plan;
  bool found = false;
  ForEachEvaluated(all, [&](const InstanceType& t, const Config& c, const Estimate& step,
                            const Estimate& steps) {
    if (c.global_batch() <= bound) return;  // within the bound: already searched
    Evaluation e = Evaluate(all, t, c, step, steps);
    if (e.feasible && (!found || e.Objective(p.objective.goal) < plan.Objective(p.objective.goal)))
      plan = std::move(e), found = true;
  });
  if (!found) return;
  // The step: the plan's instances at the largest batch within the bound (the cheaper on the
  // objective between equal batches).
  Evaluation step;
  bool have_step = false;
  SearchProblem near = p;
  near.space.types = {plan.config.type};
  ForEachEvaluated(
      near, [&](const InstanceType& t, const Config& c, const Estimate& st, const Estimate& steps) {
        if (!c.SameHardware(plan.config) || c.global_batch() > plan.config.global_batch()) return;
        Evaluation e = Evaluate(near, t, c, st, steps);
        if (!std::isfinite(e.hours)) return;
        const bool better = !have_step || c.global_batch() > step.config.global_batch() ||
                            (c.global_batch() == step.config.global_batch() &&
                             e.Objective(p.objective.goal) < step.Objective(p.objective.goal));
        if (better) step = std::move(e), have_step = true;
      });
  if (!have_step) return;
  step.hours = plan.hours;
  step.cost = plan.cost;
  step.log_sigma = plan.log_sigma;
  step.feasible = true;
  auto same = std::find_if(r->top.begin(), r->top.end(),
                           [&](const Evaluation& e) { return e.config == step.config; });
  if (same != r->top.end()) r->top.erase(same);
  r->top.insert(r->top.begin(), std::move(step));
  if (r->top.size() > static_cast<size_t>(std::max(1, p.keep_top))) r->top.pop_back();
  r->has_plan = true;
  r->plan = std::move(plan);
}
}  // namespace

SearchResult Search(const SearchProblem& p) {
  CheckProblem(p);
  SearchResult r;
  const size_t k = std::max(1, p.keep_top);
  BestK top(k), promising(k), same(1), bridges(k), bridges_on_demand(k);
  const bool bridging = p.objective.goal == Goal::kCost && p.objective.deadline_h > 0;
  double best_excluded = kInf;
  ForEachEvaluated(
      p, [&](const InstanceType& t, const Config& c, const Estimate& step, const Estimate& steps) {
        ++r.evaluated;
        Evaluation e = Evaluate(p, t, c, step, steps);
        if (e.feasible) {
          ++r.feasible;
        } else if (std::isfinite(e.hours)) {
          if (p.objective.DeadlineMiss(e.hours, e.log_sigma) > 1) ++r.excluded_by_deadline;
          if (p.objective.BudgetMiss(e.hours, e.cost, e.log_sigma) > 1) ++r.excluded_by_budget;
          best_excluded = std::min(best_excluded, e.Objective(p.objective.goal));
          if (p.objective.Miss(e.hours, e.cost, e.log_sigma) * std::exp(-2 * e.log_sigma) <= 1)
            promising.Offer({0, e.Objective(p.objective.goal)}, e);
          if (bridging && p.objective.DeadlineMiss(e.hours, e.log_sigma) > 1 &&
              p.objective.BudgetMiss(e.hours, e.cost, e.log_sigma) <= 1) {
            bridges.Offer({0, e.cost}, e);
            if (e.config.purchase == Purchase::kOnDemand) bridges_on_demand.Offer({0, e.cost}, e);
          }
        }
        if (p.current && c.SameHardware(*p.current)) same.Offer(RankOf(e, p.objective), e);
        top.Offer(RankOf(e, p.objective), e);
      });
  r.top = top.Take();
  r.promising = promising.Take();
  r.deadline_bridges = bridges.Take();
  r.deadline_bridges_on_demand = bridges_on_demand.Take();
  if (auto s = same.Take(); !s.empty()) r.same_hardware = std::move(s[0]);
  if (!r.top.empty() && r.top[0].feasible && best_excluded < r.top[0].Objective(p.objective.goal))
    r.better_but_excluded = 1;  // at least one; the exact count is not tracked
  if (!r.top.empty() && !r.top[0].feasible) StepTowardAPlan(p, &r);
  return r;
}

std::vector<Evaluation> ParetoFront(const SearchProblem& p) {
  CheckProblem(p);
  std::vector<Evaluation> all;
  ForEachEvaluated(
      p, [&](const InstanceType& t, const Config& c, const Estimate& step, const Estimate& steps) {
        Evaluation e = Evaluate(p, t, c, step, steps);
        if (std::isfinite(e.hours)) all.push_back(std::move(e));
      });
  std::sort(all.begin(), all.end(), [](const Evaluation& a, const Evaluation& b) {
    return a.hours != b.hours ? a.hours < b.hours : a.cost < b.cost;
  });
  std::vector<Evaluation> front;
  double best_cost = kInf;
  for (auto& e : all)
    if (e.cost < best_cost) {
      best_cost = e.cost;
      front.push_back(std::move(e));
    }
  return front;
}

double InstanceTflops(const Catalog& c, const InstanceType& t) {
  const GpuSpec* g = c.Gpu(t.gpu_model);
  return g ? g->train_tflops * t.gpus : 0;
}

double Flopp(const Catalog& c, const InstanceType& t, Purchase p) {
  return InstanceTflops(c, t) / HourlyPrice(t, 1, p);
}

}  // namespace cloudtune::search
