// The oracle's tables: built once per scenario, shared by every seed's Solve (oracle.cpp).
#include "cli/replay/oracle_tables.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "cli/replay/parallel.h"
#include "estimator/core/error.h"
#include "search/cost.h"

namespace cloudtune::replay {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

Oracle::Oracle(const Scenario& s, const OracleOptions& o) : s_(s), o_(o) {
  std::string err;
  if (!o.IsValid(&err)) throw InputError("oracle options: " + err);
  t_ = std::make_unique<Tables>(s, o.window_s);
  Tables& T = *t_;
  T.K = o.levels;
  T.W = T.model.window_s();
  const double u0 = T.model.StartProgress();
  const double du = (s.target_progress - u0) / T.K;
  if (!(du > 0)) throw InputError("oracle: the target is no progress beyond the start");
  std::vector<double> metric(T.K);
  for (int k = 0; k < T.K; ++k) metric[k] = T.model.MetricAt(u0 + k * du);

  // Drop the batches that are never the fastest of their instances at any level (on demand, a
  // whole window).
  std::map<std::tuple<std::string, int, int>, std::vector<size_t>> by_hw;
  for (size_t i = 0; i < s.candidates.size(); ++i) {
    const Config& c = s.candidates[i];
    by_hw[{c.type, c.nodes, c.gpus_per_node}].push_back(i);
  }
  std::vector<std::vector<double>> reach(s.candidates.size());  // per candidate, per level
  ParallelFor(s.candidates.size(), o.threads, [&](size_t i) {
    const double train = T.model.TrainSeconds(s.candidates[i], 0);
    reach[i].resize(T.K);
    for (int k = 0; k < T.K; ++k) {
      double fin = -1;
      double u = T.model.Advance(s.candidates[i], u0 + k * du, metric[k], train, &fin);
      if (fin >= 0) u = s.target_progress + (train - fin);  // earlier finish = better
      reach[i][k] = u;
    }
  });
  std::vector<char> keep(s.candidates.size(), 0);
  for (auto& [hw, idx] : by_hw) {
    std::vector<double> best(T.K, -1);
    std::vector<size_t> arg(T.K, idx[0]);
    for (size_t i : idx)
      for (int k = 0; k < T.K; ++k)
        if (reach[i][k] > best[k]) best[k] = reach[i][k], arg[k] = i;
    for (int k = 0; k < T.K; ++k) keep[arg[k]] = 1;
  }
  reach.clear();
  for (size_t i = 0; i < s.candidates.size(); ++i)  // the launches (Tables::free_launch)
    if (s.candidates[i] == s.start || FewerOfTheStartsNodes(s, s.candidates[i])) keep[i] = 1;

  std::map<std::tuple<std::string, int, int, int, int>, int> groups;
  for (size_t i = 0; i < s.candidates.size(); ++i) {
    if (!keep[i]) continue;
    const Config& base = s.candidates[i];
    const InstanceType& it = s.catalog.types[s.catalog.Find(base.type)];
    std::vector<Purchase> purchases{Purchase::kOnDemand};
    if (it.has_spot()) purchases.push_back(Purchase::kSpot);
    if (it.has_spot() && base.nodes > 1) purchases.push_back(Purchase::kAnchor);
    for (Purchase p : purchases) {
      Config c = base;
      c.purchase = p;
      if (c == s.start) T.start = static_cast<int>(T.configs.size());
      Config spot_start = s.start;
      spot_start.purchase = Purchase::kSpot;
      if (c == spot_start) T.start_spot = static_cast<int>(T.configs.size());
      const bool launch =
          c == s.start || c == spot_start || (p == Purchase::kSpot && FewerOfTheStartsNodes(s, c));
      const int spot_nodes = SpotNodes(c.nodes, p);
      const auto market = s.spot.find(c.type);
      const int zones = spot_nodes > 0 && market != s.spot.end()
                            ? static_cast<int>(std::max<size_t>(1, market->second.zones()))
                            : 0;
      T.rep.push_back(T.configs.size());
      for (int z = zones > 0 ? 0 : -1; z < zones; ++z) {
        const auto key = std::make_tuple(c.type, c.nodes, c.gpus_per_node, static_cast<int>(p), z);
        const int g = groups.emplace(key, static_cast<int>(groups.size())).first->second;
        T.free_launch.push_back(launch);
        T.configs.push_back(c);
        T.group.push_back(g);
        T.price.push_back(HourlyPrice(it, c.nodes, p));
        T.ckpt_share.push_back(T.model.CheckpointShare(c));
        T.spot_nodes.push_back(spot_nodes);
        T.zone.push_back(z);
        T.row.push_back(static_cast<int>(T.rep.size()) - 1);
      }
    }
  }
  const size_t R = T.rep.size();
  for (int cls = 0; cls < 3; ++cls) {
    T.switch_s[cls] = cls == 0 ? 0 : cls == 1 ? s.cost.batch_switch_s : s.cost.switch_s;
    T.next_lo[cls].assign(R * T.K, T.K);
    T.next_hi[cls].assign(R * T.K, T.K);
    T.next_x[cls].assign(R * T.K, static_cast<float>(T.K));
    T.finish[cls].assign(R * T.K, -1.f);
  }
  ParallelFor(R * 3, o.threads, [&](size_t task) {
    const size_t c = T.rep[task / 3];
    const int cls = static_cast<int>(task % 3);
    const double train = T.model.TrainSeconds(T.configs[c], T.switch_s[cls]);
    for (int k = 0; k < T.K; ++k) {
      double fin = -1;
      const double u = T.model.Advance(T.configs[c], u0 + k * du, metric[k], train, &fin);
      if (fin >= 0) {
        T.finish[cls][T.At(c, k)] = static_cast<float>(fin);
        continue;  // next levels stay K
      }
      const double x = (u - u0) / du;
      T.next_x[cls][T.At(c, k)] = static_cast<float>(std::min<double>(T.K, std::max<double>(k, x)));
      T.next_lo[cls][T.At(c, k)] = std::min(T.K - 1, std::max(k, static_cast<int>(std::floor(x))));
      // Rounding up never reaches K: finishing needs the model to say so.
      T.next_hi[cls][T.At(c, k)] = std::min(T.K - 1, static_cast<int>(std::ceil(x - 1e-9)));
    }
  });
  T.prune = o.prune;
  if (T.prune) BoundCostToGo(&T);
}

// Tables::to_go. Per recursion (positions carried, rounded down, rounded up), the cost from each
// level to the target along the cheapest path of a graph whose nodes are the levels: from level k
// a window of any configuration and switch class either finishes (its cost) or costs a window and
// lands on a level above k that the recursion can reach (carrying positions: any between where
// the window takes the level's bottom and its top). The spot capacity, the horizon and the
// configuration the job stands in are ignored, and a window that stays on level k is never on a
// cheapest path (its options there are the same afterwards). Every schedule of a recursion is a
// path of its graph, so none costs less.
void Oracle::BoundCostToGo(Tables* tables) {
  Tables& T = *tables;
  const int K = T.K;
  const size_t R = T.rep.size();  // a configuration's copies in other zones share its bounds
  for (int cls = 0; cls < 3; ++cls) T.to_go[cls].assign(R * K, std::numeric_limits<float>::max());
  auto& level = T.from_level;
  for (auto& l : level) l.assign(K, kInf);
  auto down = [](double v) {  // v as a float no larger
    float f = static_cast<float>(std::min<double>(v, std::numeric_limits<float>::max()));
    return static_cast<double>(f) > v ? std::nextafter(f, -std::numeric_limits<float>::max()) : f;
  };
  // Where a window of class cls on configuration c from level k can land, per recursion.
  auto landing = [&](int mode, int cls, size_t at, int k, int* lo, int* hi) {
    if (mode == 0) {  // Solver::Interpolated (never below k), widened by a rounding's worth
      const double x0 = T.next_x[cls][at], x1 = k + 1 < K ? T.next_x[cls][at + 1] : K;
      *lo = std::max(k, static_cast<int>(std::floor(std::min(x0, x1) - 1e-6)));
      *hi = std::min(K - 1, static_cast<int>(std::floor(std::max(x0, x1) + 1e-6)));
    } else {
      *lo = *hi = (mode == 1 ? T.next_lo : T.next_hi)[cls][at];
    }
  };
  auto least = [&](int mode, int lo, int hi) {
    double v = kInf;
    for (int b = lo; b <= hi; ++b) v = std::min(v, level[mode][b]);
    return v;
  };
  for (int k = K - 1; k >= 0; --k) {
    // The levels' bounds first (landing above k), then each option's (landing on k too).
    for (int pass = 0; pass < 2; ++pass)
      for (const size_t c : T.rep) {
        const double window_cost = T.W / 3600 * T.price[c];
        for (int cls = 0; cls < 3; ++cls) {
          const size_t at = T.At(c, k);
          const float fin = T.finish[cls][at];
          if (fin >= 0) {
            const double cost = T.FinishSeconds(cls, c, fin) / 3600 * T.price[c];
            if (pass == 0)
              for (int mode = 0; mode < 3; ++mode) level[mode][k] = std::min(level[mode][k], cost);
            else
              T.to_go[cls][at] = down(cost);
            continue;
          }
          double option = kInf;
          for (int mode = 0; mode < 3; ++mode) {
            int lo = 0, hi = 0;
            landing(mode, cls, at, k, &lo, &hi);
            // (Progress never falls; should a table say otherwise, nothing is bounded there.)
            if (pass == 0)
              level[mode][k] =
                  std::min(level[mode][k],
                           window_cost + (lo < k ? 0.0 : least(mode, std::max(lo, k + 1), hi)));
            else
              option = std::min(option, window_cost + (lo < k ? 0.0 : least(mode, lo, hi)));
          }
          if (pass == 1) T.to_go[cls][at] = down(option);
        }
      }
  }
}

}  // namespace cloudtune::replay
