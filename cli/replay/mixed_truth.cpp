#include "cli/replay/mixed_truth.h"

#include <algorithm>
#include <map>

namespace cloudtune::replay {

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// y at x on the line through (x0, y0) and (x1, y1).
double Line(double x, double x0, double y0, double x1, double y1) {
  return x1 == x0 ? y0 : y0 + (y1 - y0) * (x - x0) / (x1 - x0);
}

}  // namespace

double MixedBatch(const search::MixedEvaluation& m) {
  double b = 0;
  for (size_t i = 0; i < m.config.parts.size() && i < m.local_bsz.size(); ++i)
    b += static_cast<double>(m.config.parts[i].replicas()) * m.local_bsz[i];
  return b;
}

std::optional<core::ConfigKey> OneHardwareKey(const search::MixedConfig& c,
                                              const std::vector<int>& local_bsz) {
  if (!c.OneHardware() || local_bsz.size() != c.parts.size()) return std::nullopt;
  for (int b : local_bsz)
    if (b != local_bsz[0]) return std::nullopt;
  core::ConfigKey k;
  k.instance_type = c.parts[0].type;
  k.num_nodes = c.nodes();
  k.num_replicas = c.replicas();
  k.local_bsz = local_bsz[0];
  return k;
}

bool SameMixed(const std::optional<search::MixedEvaluation>& a,
               const std::optional<search::MixedEvaluation>& b, bool batches) {
  if (!a || !b) return !a && !b;
  const auto& pa = a->config.parts;
  const auto& pb = b->config.parts;
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); ++i)
    if (pa[i].type != pb[i].type || pa[i].nodes != pb[i].nodes ||
        pa[i].gpus_per_node != pb[i].gpus_per_node || pa[i].purchase != pb[i].purchase)
      return false;
  return !batches || a->local_bsz == b->local_bsz;
}

MixedTruth::MixedTruth(const search::Catalog& catalog, const std::vector<core::Measurement>& traces)
    : catalog_(catalog), traces_(traces) {}

std::optional<double> MixedTruth::Compute(const std::string& type, int gpus_per_node,
                                          int local_bsz) const {
  // Rows on the fewest nodes measured with this many GPUs per node (one node when there is one).
  int fewest = 0;
  for (const auto& m : traces_)
    if (m.key.instance_type == type && m.key.accum_steps == 0 &&
        m.key.num_replicas == m.key.num_nodes * gpus_per_node &&
        (fewest == 0 || m.key.num_nodes < fewest))
      fewest = m.key.num_nodes;
  if (fewest == 0) return std::nullopt;
  std::map<int, double> by_batch;  // local batch -> compute seconds
  for (const auto& m : traces_)
    if (m.key.instance_type == type && m.key.accum_steps == 0 && m.key.num_nodes == fewest &&
        m.key.num_replicas == fewest * gpus_per_node)
      by_batch[m.key.local_bsz] = std::max(1e-9, m.compute_time());
  const double b = local_bsz, lo = by_batch.begin()->first, hi = by_batch.rbegin()->first;
  if (b < 0.5 * lo || b > 1.5 * hi) return std::nullopt;
  if (by_batch.size() == 1) return by_batch.begin()->second * b / lo;
  // The two measured batches around b (or the two nearest at an end).
  auto upper = by_batch.lower_bound(local_bsz);
  if (upper == by_batch.begin()) ++upper;
  if (upper == by_batch.end()) --upper;
  auto lower = std::prev(upper);
  const double y = Line(b, lower->first, lower->second, upper->first, upper->second);
  if (y > 0) return y;
  const auto& near = b < lo ? *by_batch.begin() : *by_batch.rbegin();
  return near.second * b / near.first;
}

std::optional<double> MixedTruth::Sync(const std::string& type, int nodes,
                                       int gpus_per_node) const {
  std::map<int, std::vector<double>> by_nodes;
  for (const auto& m : traces_)
    if (m.key.instance_type == type && m.key.accum_steps == 0 &&
        m.key.num_replicas == m.key.num_nodes * gpus_per_node)
      by_nodes[m.key.num_nodes].push_back(m.sync_time);
  if (by_nodes.empty()) return std::nullopt;
  auto at = [&](std::map<int, std::vector<double>>::const_iterator it) {
    return Median(it->second);
  };
  auto upper = by_nodes.lower_bound(nodes);
  if (upper == by_nodes.end()) return std::nullopt;  // beyond the largest measured count
  if (upper->first == nodes) return at(upper);
  if (upper == by_nodes.begin()) return std::nullopt;  // below the smallest
  auto lower = std::prev(upper);
  return Line(nodes, lower->first, at(lower), upper->first, at(upper));
}

std::optional<MixedTruthStep> MixedTruth::Step(const search::MixedConfig& c,
                                               const std::vector<int>& local_bsz) const {
  if (c.parts.empty() || local_bsz.size() != c.parts.size()) return std::nullopt;
  const int nodes = c.nodes();
  // One hardware at one local batch (spot and on-demand nodes of a type): the measured row.
  if (const auto key = OneHardwareKey(c, local_bsz)) {
    for (const auto& m : traces_)
      if (m.key == *key) return MixedTruthStep{m.step_time, m.sync_time};
  }
  double compute = 0, slowest_gbps = 0;
  for (size_t i = 0; i < c.parts.size(); ++i) {
    const auto& part = c.parts[i];
    const int ti = catalog_.Find(part.type);
    if (ti < 0 || local_bsz[i] < 1) return std::nullopt;
    const auto part_compute = Compute(part.type, part.gpus_per_node, local_bsz[i]);
    if (!part_compute) return std::nullopt;
    compute = std::max(compute, *part_compute);
    const double gbps = catalog_.types[ti].network_gbps;
    if (slowest_gbps == 0 || gbps < slowest_gbps) slowest_gbps = gbps;
  }
  std::optional<double> sync;
  for (const auto& part : c.parts) {
    const auto s = Sync(part.type, nodes, part.gpus_per_node);
    if (!s) continue;
    const double gbps = catalog_.types[catalog_.Find(part.type)].network_gbps;
    const double scaled = *s * std::max(1.0, slowest_gbps > 0 ? gbps / slowest_gbps : 1.0);
    sync = std::max(sync.value_or(0.0), scaled);
  }
  if (!sync) return std::nullopt;
  return MixedTruthStep{compute + *sync, *sync};
}

}  // namespace cloudtune::replay
