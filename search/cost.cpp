#include "search/cost.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <limits>
#include <sstream>

namespace cloudtune::search {

bool CostOptions::IsValid(std::string* error) const {
  auto ok = [](double x) { return std::isfinite(x) && x >= 0; };
  const char* bad = nullptr;
  if (!ok(restart_s))
    bad = "restart_s must be >= 0";
  else if (!(checkpoint_s > 0) || !std::isfinite(checkpoint_s))
    bad = "checkpoint_s must be > 0";
  else if (!(anchor_checkpoint_s > 0) || !std::isfinite(anchor_checkpoint_s))
    bad = "anchor_checkpoint_s must be > 0";
  else if (!ok(switch_s))
    bad = "switch_s must be >= 0";
  else if (!ok(batch_switch_s))
    bad = "batch_switch_s must be >= 0";
  else if (!ok(notice_s))
    bad = "notice_s must be >= 0";
  else if (!(revocation_prior_node_hours > 0) || !std::isfinite(revocation_prior_node_hours))
    bad = "revocation_prior_node_hours must be > 0";
  if (bad && error) *error = bad;
  return bad == nullptr;
}

bool SavesOnNotice(double notice_s, double checkpoint_s) {
  return notice_s > 0 && notice_s >= checkpoint_s;
}

bool CostOptions::SavesOnNotice(double checkpoint_s) const {
  return search::SavesOnNotice(notice_s, checkpoint_s);
}

double HourlyPrice(const InstanceType& t, int nodes, Purchase p) {
  const double spot = t.has_spot() ? t.spot_per_hour : t.ondemand_per_hour;
  switch (p) {
    case Purchase::kOnDemand:
      return nodes * t.ondemand_per_hour;
    case Purchase::kSpot:
      return nodes * spot;
    case Purchase::kAnchor:
      return t.ondemand_per_hour + (nodes - 1) * spot;
  }
  return 0;
}

double ClusterRevocationRate(const InstanceType& t, int nodes, Purchase p) {
  return t.has_spot() ? SpotNodes(nodes, p) * t.revocation_per_hour : 0.0;
}

int SpotNodes(int nodes, Purchase p) {
  switch (p) {
    case Purchase::kOnDemand:
      return 0;
    case Purchase::kSpot:
      return nodes;
    case Purchase::kAnchor:
      return std::max(0, nodes - 1);
  }
  return 0;
}

double LearnedRevocationRate(double catalog_rate, const core::SpotExposure& e,
                             double prior_node_hours) {
  const double t0 = prior_node_hours, t = std::max(0.0, e.node_hours);
  const double k = std::max(0, e.revocations);
  return (std::max(0.0, catalog_rate) * t0 + k) / (t0 + t);
}

void LearnRevocationRates(const std::map<std::string, core::SpotExposure>& exposure,
                          double prior_node_hours, Catalog* catalog) {
  for (const auto& [type, e] : exposure) {
    const int i = catalog->Find(type);
    if (i < 0 || (e.node_hours <= 0 && e.revocations <= 0)) continue;
    InstanceType& t = catalog->types[i];
    t.revocation_per_hour = LearnedRevocationRate(t.revocation_per_hour, e, prior_node_hours);
    std::ostringstream src;
    src << "learned: " << e.revocations << " revocations in " << std::fixed << std::setprecision(1)
        << e.node_hours << " node-hours";
    t.revocation_source = src.str();
  }
}

double YoungDalyInterval(double checkpoint_s, double rate_per_hour) {
  if (rate_per_hour <= 0) return std::numeric_limits<double>::infinity();
  return std::sqrt(2.0 * checkpoint_s * 3600.0 / rate_per_hour);
}

RunEstimate EstimateRun(double work_hours, double price_per_hour, double rate_per_hour,
                        double checkpoint_s, double restart_s, double max_interval_s,
                        bool saved_on_notice) {
  RunEstimate r;
  r.checkpoint_interval_s = YoungDalyInterval(checkpoint_s, rate_per_hour);
  if (max_interval_s > 0)
    r.checkpoint_interval_s = std::min(r.checkpoint_interval_s, max_interval_s);
  double overhead = 0;
  if (rate_per_hour > 0) {
    const double tau_h = r.checkpoint_interval_s / 3600.0;
    const double lost_h = saved_on_notice ? checkpoint_s / 3600.0 : tau_h / 2;
    overhead = (checkpoint_s / 3600.0) / tau_h + rate_per_hour * (restart_s / 3600.0 + lost_h);
  }
  r.overhead = overhead;
  r.hours = work_hours * (1 + overhead);
  r.cost = r.hours * price_per_hour;
  r.revocations = rate_per_hour * r.hours;
  return r;
}

}  // namespace cloudtune::search
