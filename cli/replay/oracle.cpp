#include "cli/replay/oracle.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "cli/replay/oracle_tables.h"
#include "estimator/core/error.h"
#include "search/cost.h"

namespace cloudtune::replay {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kChunkS = WindowModel::kChunkS;
}  // namespace

bool OracleOptions::IsValid(std::string* error) const {
  auto fail = [error](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (levels < 2 || levels > 100000) return fail("levels: must be in [2, 100000]");
  if (!(window_s >= 0) || !std::isfinite(window_s)) return fail("window_s: must be >= 0");
  if (!(horizon_h >= 0) || !std::isfinite(horizon_h)) return fail("horizon_h: must be >= 0");
  return true;
}

Oracle::~Oracle() = default;

size_t Oracle::configurations() const { return t_->configs.size(); }

namespace {

// One seed's optimum over the oracle's tables (Oracle::Solve).
class Solver {
 public:
  Solver(const Oracle::Tables& t, const Scenario& s, uint64_t seed, double horizon_h)
      : T(t), s(s), C(t.configs.size()), K(t.K) {
    horizon_s = horizon_h * 3600;
    H = static_cast<int>(std::ceil(horizon_s / T.W - 1e-9));
    time_goal = s.objective.goal == Goal::kTime;
    budget = s.objective.budget_usd > 0 && time_goal ? s.objective.budget_usd : kInf;
    may_idle = !s.spot.empty();  // idling helps only while waiting for spot capacity
    // Spot capacity per window (min over the window's minutes), per type with a trace.
    const double offset_s = static_cast<double>(seed) * s.spot_offset_s;
    for (const auto& [type, market] : s.spot)
      for (size_t z = 0; z < market.zones(); ++z) {
        std::vector<int>& a = avail_[{type, static_cast<int>(z)}];
        a.resize(H);
        for (int j = 0; j < H; ++j) {
          int lo = 1 << 20;
          for (double t = j * T.W; t < (j + 1) * T.W - 1e-9; t += kChunkS)
            lo = std::min(lo, market.zone(z).Available(t, 1 << 20, s.spot_reading, offset_s));
          a[j] = lo;
        }
      }
    avail_of_.resize(C, nullptr);
    for (size_t c = 0; c < C; ++c) {
      auto it = avail_.find({T.configs[c].type, T.zone[c]});
      if (T.spot_nodes[c] > 0 && it != avail_.end()) avail_of_[c] = &it->second;
    }
    // This seed's free launches (Tables::free_launch): fewer of the start's nodes only when the
    // market has fewer than the start's at time 0, as the cloudtune job is launched
    // (CloudtuneLaunch); with all of them to be had, the start itself.
    auto start_trace = s.spot.find(s.start.type);
    const int at_start = start_trace == s.spot.end()
                             ? 1 << 20
                             : start_trace->second.Available(0, 1 << 20, s.spot_reading, offset_s);
    free_launch_.resize(C);
    std::set<int> launch_groups;
    for (size_t c = 0; c < C; ++c) {
      free_launch_[c] =
          T.free_launch[c] && (T.configs[c].nodes >= s.start.nodes || at_start < s.start.nodes);
      if (free_launch_[c]) launch_groups.insert(T.group[c]);
    }
    launch_class_.resize(C);
    for (size_t c = 0; c < C; ++c)
      launch_class_[c] = free_launch_[c] ? 0 : launch_groups.count(T.group[c]) ? 1 : 2;
  }

  bool Allowed(size_t c, int j) const {
    return !avail_of_[c] || (*avail_of_[c])[j] >= T.spot_nodes[c];
  }

  // Sets row[k] (k in [lo, hi]) to infinity where row[k] >= row[k'] for some k' in (k, hi].
  static void DropDominated(double* row, int lo, int hi) {
    double least = kInf;
    for (int k = hi; k >= lo; --k) {
      if (row[k] >= least)
        row[k] = kInf;
      else
        least = row[k];
    }
  }

  // The recursion forward in time. With `next` (T.next_lo or T.next_hi), each window's progress is
  // rounded to a level. Without (null), each state carries the position (in levels) of the schedule
  // that reached it, a window's progress from it is interpolated between its level's and the next
  // level's (T.next_x), and each level keeps its cheapest state. `rec` keeps the parents for
  // Windows(). `known` is the cost of a schedule the recursion can do no worse than (its own
  // optimum is no higher): the cost goal prunes against it from the first window, where the best
  // finish found so far comes only near the end.
  void Forward(const std::vector<int>* next, double* best_cost, double* best_time, bool rec,
               double known = kInf) {
    const bool carry = next == nullptr;
    const std::vector<double>& from_level = T.from_level[carry ? 0 : next == T.next_lo ? 1 : 2];
    // V[c * K + k]: least cost to stand at level k at the window's start, having run c (index C:
    // idle) in the window before. With `carry`, X holds that state's position (N and NX: the next
    // window's).
    const size_t S = (C + 1) * K;
    std::vector<double> V(S, kInf), N(S, kInf), X(carry ? S : 0, 0.0), NX(carry ? S : 0, 0.0);
    // Per row of V (and N): the levels outside [lo, hi] hold no state (empty: lo > hi).
    std::vector<int> v_lo(C + 1, K), v_hi(C + 1, -1), n_lo(C + 1, K), n_hi(C + 1, -1);
    for (size_t c = 0; c < C; ++c)
      if (free_launch_[c]) V[c * K] = 0, v_lo[c] = v_hi[c] = 0;
    std::vector<double> any(K), grp;
    std::vector<int32_t> any_at(K), grp_at;
    std::vector<int> live;
    int groups = 0;
    for (int g : T.group) groups = std::max(groups, g + 1);
    grp.resize(static_cast<size_t>(groups) * K);
    grp_at.resize(grp.size());
    *best_cost = kInf;
    *best_time = kInf;
    if (rec) {
      scratch_.assign(S, -1);
      parent_.clear();
      fin_parent_ = fin_window_ = fin_config_ = -1;
    }
    // Progress never falls: no state above level `top` is reachable yet, and none is visited.
    int top = 0;
    for (int j = 0; j < H; ++j) {
      const double t0 = j * T.W;
      std::fill(any.begin(), any.begin() + top + 1, kInf);
      for (int g = 0; g < groups; ++g) {
        std::fill(grp.begin() + g * K, grp.begin() + g * K + top + 1, kInf);
        std::fill(grp_at.begin() + g * K, grp_at.begin() + g * K + top + 1, -1);
      }
      // A state no cheaper than one of the same configuration further on is dominated: every
      // schedule from it reaches no more progress at no less cost (the tables are monotone in the
      // level). Dropped, and the same within the group and overall minima below.
      for (size_t c = 0; c <= C; ++c) DropDominated(&V[c * K], v_lo[c], v_hi[c]);
      bool alive = false;
      for (size_t c = 0; c <= C; ++c)
        for (int k = v_lo[c]; k <= v_hi[c]; ++k) {
          const double v = V[c * K + k];
          if (v == kInf) continue;
          alive = true;
          const int32_t at = static_cast<int32_t>(c * K + k);
          if (v < any[k]) any[k] = v, any_at[k] = at;
          if (c < C && v < grp[T.group[c] * K + k]) {
            grp[T.group[c] * K + k] = v;
            grp_at[T.group[c] * K + k] = at;
          }
        }
      if (!alive) break;
      live.clear();  // the levels with a state, the only ones a window can start from
      for (int k = 0; k <= top; ++k)
        if (any[k] < kInf) live.push_back(k);
      DropDominated(any.data(), 0, top);
      for (int g = 0; g < groups; ++g) DropDominated(&grp[g * K], 0, top);
      for (size_t c = 0; c <= C; ++c) {  // N holds the window before last's
        if (n_lo[c] <= n_hi[c])
          std::fill(N.begin() + c * K + n_lo[c], N.begin() + c * K + n_hi[c] + 1, kInf);
        n_lo[c] = K, n_hi[c] = -1;
      }
      int next_top = top;
      std::vector<int32_t>* P = rec ? &scratch_ : nullptr;
      if (may_idle) n_lo[C] = 0, n_hi[C] = top;
      for (int k = 0; k <= top && may_idle; ++k) {  // idle: free, no progress
        N[C * K + k] =
            T.prune && Hopeless(any[k], from_level[k], std::min(*best_cost, known)) ? kInf : any[k];
        if (N[C * K + k] == kInf) continue;
        if (carry) NX[C * K + k] = X[any_at[k]];
        if (P) (*P)[C * K + k] = any_at[k];
      }
      for (size_t c = 0; c < C; ++c) {
        if (!Allowed(c, j)) continue;
        const double price = T.price[c];
        const double window_cost = T.W / 3600 * price;
        for (const int k : live) {
          // A job that has waited for capacity since time 0 (idle, nothing paid) has not run:
          // it launches as from the start configuration, which costs nothing for the start itself
          // (as the simulator launches a job that has not run yet).
          const bool unlaunched = k == 0 && j > 0 && V[C * K] == 0;
          const double base[4] = {V[c * K + k], grp[T.group[c] * K + k], any[k],
                                  unlaunched ? 0.0 : kInf};
          for (int i = 0; i < 4; ++i) {
            const double b = base[i];
            if (b == kInf) continue;
            const int cls = i < 3 ? i : LaunchClass(c);
            const size_t at = T.At(c, k);
            if (T.prune && Hopeless(b, T.to_go[cls][at], std::min(*best_cost, known))) continue;
            const int32_t from = i == 0   ? static_cast<int32_t>(c * K + k)
                                 : i == 1 ? grp_at[T.group[c] * K + k]
                                 : i == 2 ? any_at[k]
                                          : static_cast<int32_t>(C * K);
            const float fin = T.finish[cls][at];
            if (fin >= 0) {
              const double secs = T.FinishSeconds(cls, c, fin);
              const double cost = b + secs / 3600 * price, time = t0 + secs;
              if (time > horizon_s + 1e-6 || cost > budget) continue;
              if (time_goal ? (time < *best_time || (time == *best_time && cost < *best_cost))
                            : (cost < *best_cost || (cost == *best_cost && time < *best_time))) {
                *best_cost = cost;
                *best_time = time;
                if (rec) fin_parent_ = from, fin_window_ = j, fin_config_ = static_cast<int32_t>(c);
              }
              continue;
            }
            int level = 0;
            double x = 0;
            if (carry) {
              x = Interpolated(cls, at, k, X[from] - k);
              level = std::min(K - 1, static_cast<int>(x));
            } else {
              level = next[cls][at];
            }
            const size_t to = c * K + level;
            const double v = b + window_cost;
            if (v < N[to] || (carry && v == N[to] && x > NX[to])) {
              N[to] = v;
              if (carry) NX[to] = x;
              next_top = std::max(next_top, level);
              n_lo[c] = std::min(n_lo[c], level);
              n_hi[c] = std::max(n_hi[c], level);
              if (P) (*P)[to] = from;
            }
          }
        }
      }
      if (rec) Keep(&N, n_lo, n_hi);
      std::swap(V, N);
      std::swap(X, NX);
      std::swap(v_lo, n_lo);
      std::swap(v_hi, n_hi);
      top = next_top;
      // The time goal stops at the first window with a finish (later ones finish later); the cost
      // goal when no state is cheaper than the best finish.
      if (time_goal && *best_time < kInf) break;
      if (!time_goal && *best_cost < kInf && !Promising(V, v_lo, v_hi, from_level, *best_cost))
        break;
    }
  }

  // Whether no schedule on from a state that has cost v and at least to_go to pay can count:
  // beyond `best` (the cost goal's best finish so far) or the budget (the time goal). A rounding's
  // worth is spared, so that the schedule which reaches the bound stays.
  bool Hopeless(double v, double to_go, double best) const {
    const double bound = time_goal ? budget : best;
    return v + to_go > bound * (1 + 1e-9) + 1e-9;
  }

  // Whether a state of V (rows' levels in [lo, hi]) costs less than `best` and is not Hopeless.
  bool Promising(const std::vector<double>& V, const std::vector<int>& lo,
                 const std::vector<int>& hi, const std::vector<double>& from_level,
                 double best) const {
    for (size_t c = 0; c <= C; ++c)
      for (int k = lo[c]; k <= hi[c]; ++k)
        if (V[c * K + k] < best && !(T.prune && Hopeless(V[c * K + k], from_level[k], best)))
          return true;
    return false;
  }

  // Configuration c as the schedule names it: with the zone of its spot nodes where its type is
  // sold in several.
  std::string Name(size_t c) const {
    std::string name = T.configs[c].ToString();
    const auto market = s.spot.find(T.configs[c].type);
    if (T.zone[c] >= 0 && market != s.spot.end() && market->second.zones() > 1)
      name += " in " + market->second.zone_name(static_cast<size_t>(T.zone[c]));
    return name;
  }

  // The switch class of running configuration c first: none for a free launch (free_launch_),
  // a batch switch on the instances of one, else a switch.
  int LaunchClass(size_t c) const { return launch_class_[c]; }

  // The position (levels) after a window on T's entry `at` (level k) from f in [0, 1) levels
  // beyond k: between that level's and the next one's (a finish there counts as the target),
  // below the last level.
  double Interpolated(int cls, size_t at, int k, double f) const {
    const double x0 = T.next_x[cls][at];
    const double x1 = k + 1 < K ? T.next_x[cls][at + 1] : K;  // K where it finishes
    return std::min(x0 + std::clamp(f, 0.0, 1.0) * (x1 - x0), below_K_);
  }

  // Keeps the parents (scratch_) of N's states that survive the dominance pruning, and clears
  // scratch_ for the next window.
  void Keep(std::vector<double>* N, const std::vector<int>& lo, const std::vector<int>& hi) {
    for (size_t c = 0; c <= C; ++c) DropDominated(&(*N)[c * K], lo[c], hi[c]);
    parent_.emplace_back();
    for (size_t c = 0; c <= C; ++c)
      for (int k = lo[c]; k <= hi[c]; ++k) {
        const size_t at = c * K + k;
        if ((*N)[at] < kInf) parent_.back().emplace_back(static_cast<int32_t>(at), scratch_[at]);
        scratch_[at] = -1;
      }
  }

  // The configuration of each window of the last recorded Forward()'s finish (index C: idle).
  // Empty when none finished.
  std::vector<int32_t> Windows() const {
    if (fin_window_ < 0) return {};
    // Walk back: the state at the start of window j + 1 names the configuration of window j.
    std::vector<int32_t> per_window(fin_window_ + 1);
    per_window[fin_window_] = fin_config_;
    int32_t state = fin_parent_;
    for (int j = fin_window_ - 1; j >= 0 && state >= 0; --j) {
      per_window[j] = state / K;
      const auto& pj = parent_[j];
      const auto it = std::lower_bound(pj.begin(), pj.end(), std::make_pair(state, INT32_MIN));
      state = it != pj.end() && it->first == state ? it->second : -1;
    }
    return per_window;
  }

  // The last recorded Forward()'s schedule followed with the exact progress of every window:
  // *cost and *time (s) of its finish; false when it does not finish within the horizon and
  // budget.
  bool Follow(double* cost, double* time) const { return Follow(Windows(), cost, time); }

  // The same for a schedule given as the configuration of each window (index C: idle) from the
  // job standing in the start configuration at time 0 (the first configuration it runs, at time
  // 0 or after waiting for capacity, is its launch); false also when it finishes beyond the
  // horizon or budget.
  bool Follow(const std::vector<int32_t>& per_window, double* cost, double* time) const {
    int32_t prev = static_cast<int32_t>(C);
    double u = T.model.StartProgress(), paid = 0;
    bool launched = false;
    for (size_t j = 0; j < per_window.size(); ++j) {
      const int32_t c = per_window[j];
      const int32_t was = prev;
      prev = c;
      if (c == static_cast<int32_t>(C)) continue;  // idle: free, no progress
      const int cls = !launched  ? LaunchClass(c)
                      : was == c ? 0
                      : was != static_cast<int32_t>(C) && T.group[was] == T.group[c] ? 1
                                                                                     : 2;
      launched = true;
      const Config& cfg = T.configs[c];
      double fin = -1;
      u = T.model.Advance(cfg, u, T.model.TrainSeconds(cfg, T.switch_s[cls]), &fin);
      if (fin >= 0) {
        const double secs = T.FinishSeconds(cls, c, fin);
        *cost = paid + secs / 3600 * T.price[c];
        *time = j * T.W + secs;
        return *time <= horizon_s + 1e-6 && *cost <= budget;
      }
      paid += T.W / 3600 * T.price[c];
    }
    return false;
  }

  // The changes of the last recorded Forward()'s schedule after its first window (counted as the
  // simulator counts a policy's), and with `text` the schedule: "HOURS h: CONFIG" at each change.
  void Schedule(OracleResult* out, bool text) const {
    OracleResult& r = *out;
    const std::vector<int32_t> per_window = Windows();
    for (int j = 0; j <= fin_window_; ++j) {
      if (j > 0 && per_window[j] == per_window[j - 1]) continue;
      if (j > 0) ++r.switches;
      if (!text) continue;
      const int32_t c = per_window[j];
      std::ostringstream line;
      line << std::fixed << std::setprecision(2) << j * T.W / 3600
           << " h: " << (c == static_cast<int32_t>(C) ? std::string("idle") : Name(c));
      r.schedule.push_back(line.str());
    }
  }

  // The best single configuration in hindsight: one switch from the start at time 0, then that
  // configuration throughout. Exact (every traced configuration, any purchase) where capacity
  // never runs out; on a type with a capacity trace, its spot configurations among the kept ones
  // run the recursion (idling, free, while the capacity is gone; coming back costs switch_s;
  // each window's progress rounded down to a level) and are also followed exactly, running
  // whenever the capacity is there; the better of the two counts.
  void BestFixed(OracleResult* out) const {
    OracleResult& r = *out;
    r.fixed_cost = kInf;
    auto consider = [&](double cost, double time, const std::string& name) {
      if (time > horizon_s + 1e-6 || cost > budget) return;
      const bool better = time_goal ? (r.fixed_cost == kInf || time < r.fixed_makespan_h * 3600)
                                    : cost < r.fixed_cost;
      if (!better) return;
      r.fixed_cost = cost;
      r.fixed_makespan_h = time / 3600;
      r.fixed_config = name;
    };
    Config spot_start = s.start;
    spot_start.purchase = Purchase::kSpot;
    for (const Config& base : s.candidates) {
      const InstanceType& it = s.catalog.types[s.catalog.Find(base.type)];
      for (Purchase p : {Purchase::kOnDemand, Purchase::kSpot, Purchase::kAnchor}) {
        if (p != Purchase::kOnDemand && !it.has_spot()) continue;
        if (p == Purchase::kAnchor && base.nodes < 2) continue;
        if (p != Purchase::kOnDemand && s.spot.count(base.type)) continue;  // below
        Config c = base;
        c.purchase = p;
        const bool stays = c == s.start || (T.start_spot >= 0 && c == spot_start);
        const double sw = stays                     ? 0
                          : c.SameHardware(s.start) ? s.cost.batch_switch_s
                                                    : s.cost.switch_s;
        double fin = -1;
        T.model.Advance(c, T.model.StartProgress(), 1e15, &fin);
        if (fin < 0) continue;
        const double secs = sw + fin * (1 + T.model.CheckpointShare(c));
        consider(secs / 3600 * HourlyPrice(it, c.nodes, p), secs, c.ToString());
      }
    }
    for (size_t c = 0; c < C; ++c) {
      if (T.spot_nodes[c] == 0 || !s.spot.count(T.configs[c].type)) continue;  // done above
      const int cls0 = LaunchClass(c);
      std::vector<double> run_v(K, kInf), idle_v(K, kInf), run_n(K, kInf), idle_n(K, kInf);
      double best = kInf, best_t = kInf;
      const double price = T.price[c], window_cost = T.W / 3600 * price;
      const std::vector<double>& from_level = T.from_level[1];  // next_lo's
      int top = 0;  // as in Forward: no state above it yet
      for (int j = 0; j < H; ++j) {
        std::fill(run_n.begin(), run_n.begin() + top + 1, kInf);
        std::fill(idle_n.begin(), idle_n.begin() + top + 1, kInf);
        int next_top = top;
        DropDominated(run_v.data(), 0, top);  // as in Forward
        DropDominated(idle_v.data(), 0, top);
        bool alive = j == 0;
        const bool allowed = Allowed(c, j);
        for (int k = 0; k <= top; ++k) {
          // Its launch: at time 0, or after waiting for the capacity since then (nothing paid).
          const bool unlaunched = k == 0 && (j == 0 || idle_v[0] == 0);
          const double base[3] = {run_v[k], unlaunched ? 0.0 : kInf, idle_v[k]};
          const int cls_of[3] = {0, cls0, 2};
          if (may_idle) idle_n[k] = std::min(run_v[k], idle_v[k]);
          if (T.prune && Hopeless(idle_n[k], from_level[k], best))
            idle_n[k] = kInf;  // as in Forward
          if (run_v[k] < kInf || idle_n[k] < kInf) alive = true;
          if (!allowed) {
            if (may_idle && j == 0 && k == 0)
              idle_n[0] = 0;  // waits for its capacity from the start
            continue;
          }
          for (int i = 0; i < 3; ++i) {
            const double b = base[i];
            if (b == kInf) continue;
            const int cls = cls_of[i];
            const size_t at = T.At(c, k);
            if (T.prune && Hopeless(b, T.to_go[cls][at], best)) continue;
            const float fin = T.finish[cls][at];
            if (fin >= 0) {
              const double secs = T.FinishSeconds(cls, c, fin);
              const double cost = b + secs / 3600 * price, time = j * T.W + secs;
              if (time > horizon_s + 1e-6 || cost > budget) continue;
              if (time_goal ? time < best_t : cost < best) best = cost, best_t = time;
              continue;
            }
            const int level = T.next_lo[cls][at];
            run_n[level] = std::min(run_n[level], b + window_cost);
            next_top = std::max(next_top, level);
          }
        }
        std::swap(run_v, run_n);
        std::swap(idle_v, idle_n);
        top = next_top;
        if (!alive || (time_goal && best_t < kInf)) break;
        if (!time_goal && best < kInf &&
            *std::min_element(run_v.begin(), run_v.begin() + top + 1) >= best &&
            *std::min_element(idle_v.begin(), idle_v.begin() + top + 1) >= best)
          break;
      }
      if (best < kInf) consider(best, best_t, Name(c));
    }
    // The same configurations run whenever the trace lets them, followed with the exact progress:
    // the soonest finish, and often the cheapest (the recursion above rounds progress down, but
    // may wait out a window whose restart would cost more than its work is worth).
    for (size_t c = 0; c < C; ++c) {
      if (T.spot_nodes[c] == 0 || !s.spot.count(T.configs[c].type)) continue;
      const int32_t cfg = static_cast<int32_t>(c);
      std::vector<int32_t> per_window(H);
      for (int j = 0; j < H; ++j) per_window[j] = Allowed(c, j) ? cfg : static_cast<int32_t>(C);
      double cost = 0, time = 0;
      if (Follow(per_window, &cost, &time)) consider(cost, time, Name(c));
    }
    if (r.fixed_cost == kInf) r.fixed_cost = 0;
  }

 private:
  const Oracle::Tables& T;
  const Scenario& s;
  const size_t C;
  const int K;
  int H = 0;
  double horizon_s = 0, budget = kInf;
  bool time_goal = false, may_idle = false;
  std::map<std::pair<std::string, int>, std::vector<int>> avail_;  // per type and zone
  std::vector<const std::vector<int>*> avail_of_;  // per configuration: its spot capacity trace
  std::vector<char> free_launch_;  // per configuration: launched without a switch (this seed)
  std::vector<int> launch_class_;  // per configuration: the switch class of running it first
  // Per window, (state, the state it came from) for the states kept, in the order of the states.
  std::vector<std::vector<std::pair<int32_t, int32_t>>> parent_;
  std::vector<int32_t> scratch_;  // the window's parents while it is built
  int32_t fin_parent_ = -1, fin_window_ = -1, fin_config_ = -1;
  const double below_K_ = std::nextafter(static_cast<double>(K), 0.0);  // the last level's top
};

}  // namespace

const Oracle& Oracle::Refined() const {
  std::lock_guard<std::mutex> lock(refine_mu_);
  if (!refined_) {
    OracleOptions o = o_;
    o.levels *= 2;
    refined_ = std::make_unique<Oracle>(s_, o);
  }
  return *refined_;
}

double OracleHorizon(const Scenario& s, double slowest_h) {
  if (s.objective.deadline_h > 0) return s.objective.deadline_h;
  return std::max(2 * slowest_h, s.decision_interval_s / 3600);
}

double Oracle::Horizon(double horizon) const {
  double horizon_h = horizon > 0 ? horizon : o_.horizon_h;
  if (s_.objective.deadline_h > 0)
    horizon_h =
        horizon_h > 0 ? std::min(horizon_h, s_.objective.deadline_h) : s_.objective.deadline_h;
  if (!(horizon_h > 0)) throw InputError("oracle: no horizon (no deadline and horizon_h = 0)");
  return horizon_h;
}

namespace {
// The schedule that the recursion carrying positions finds, followed exactly; where it does not
// finish (its interpolation was too hopeful), the one that rounds down (which always does).
void FollowOne(Solver* solver, const Oracle::Tables& t, bool schedule, OracleResult* r) {
  double plan = kInf, plan_time = kInf;
  double cost = kInf, time = kInf;
  solver->Forward(nullptr, &plan, &plan_time, true);
  if (!(plan < kInf && solver->Follow(&cost, &time))) {
    solver->Forward(t.next_lo, &plan, &plan_time, true);
    cost = time = kInf;
    // (Followed exactly, it makes no less progress than rounded down: the recursion's own
    // figures stand only should the model's progress not be monotone.)
    if (plan < kInf && !solver->Follow(&cost, &time)) cost = plan, time = plan_time;
  }
  r->finished = cost < kInf;
  r->cost = cost;
  r->makespan_h = time / 3600;
  if (r->finished || schedule) solver->Schedule(r, schedule);
}
}  // namespace

OracleResult Oracle::Solve(uint64_t seed, double horizon, double give_up, bool best_fixed) const {
  const double horizon_h = Horizon(horizon);
  OracleResult r;
  double cost_lo = kInf, time_lo = kInf;
  Solver solver(*t_, s_, seed, horizon_h);
  if (s_.objective.goal == Goal::kTime) {
    solver.Forward(t_->next_hi, &cost_lo, &time_lo, false);
    // The time goal's search stops at its first finish: one beyond give_up × the lower bound's
    // time is not looked for.
    if (give_up > 0 && time_lo < kInf && give_up * time_lo / 3600 < horizon_h) {
      Solver quick(*t_, s_, seed, give_up * time_lo / 3600);
      FollowOne(&quick, *t_, o_.schedule, &r);
    } else {
      FollowOne(&solver, *t_, o_.schedule, &r);
    }
  } else {
    // The schedule first: its cost, followed exactly, is no lower than the lower bound's (which
    // rounds every window's progress up), so the bound's recursion prunes against it.
    FollowOne(&solver, *t_, o_.schedule, &r);
    solver.Forward(t_->next_hi, &cost_lo, &time_lo, false, r.finished ? r.cost : kInf);
  }
  r.cost_lower = cost_lo;
  r.makespan_lower_h = time_lo / 3600;
  if (best_fixed) solver.BestFixed(&r);
  return r;
}

}  // namespace cloudtune::replay
