// Cost and revocations (DESIGN §4): hourly price of a cluster by purchase option, the spot
// revocation rate it is exposed to, the Young/Daly checkpoint interval, and the expected wall time
// and cost of a given amount of work.
#pragma once

#include <limits>
#include <map>
#include <string>

#include "estimator/core/types.h"
#include "search/catalog.h"

namespace cloudtune::search {

using core::ParsePurchase;
using core::Purchase;      // estimator/core/types.h
using core::PurchaseName;  // "on-demand", "spot", "anchor"

struct CostOptions {
  double restart_s = 120;          // restart + re-rendezvous after a revocation (seconds)
  double checkpoint_s = 30;        // writing one checkpoint to remote storage, C (seconds)
  double anchor_checkpoint_s = 5;  // checkpoint held by the on-demand anchor (seconds)
  double switch_s = 180;           // changing instance type/count/purchase: provision + restart
  double batch_switch_s = 0;       // changing only the batch (applied in-process)
  // Seconds between the job seeing a revocation notice and its spot node going away: the cloud's
  // warning (AWS two minutes, GCP and Azure 30 s) less the job's polling interval; 0 = the job
  // does not watch for notices. When it covers a checkpoint (SavesOnNotice), the job saves its
  // state on the notice, and a revocation costs the restart and that checkpoint instead of the
  // work since the last periodic one (those are still written, at the Young/Daly interval, for a
  // revocation the notice misses). >= 0.
  double notice_s = 0;
  // Weight of the catalog's revocation rate against the job's own spot exposure, in node-hours of
  // observation (LearnedRevocationRate). The catalog's figure is a regional monthly average (Spot
  // Advisor's interruption band); the rate a job meets in its zone and week differs from it by
  // orders of magnitude (three shipped V100 capacity traces: 0.25-0.56 revocations per hour of
  // capacity for one node, against 1.8e-4 for g4dn.12xlarge's band in us-east-1), so one day of
  // one node's own exposure weighs as much as the band. > 0.
  double revocation_prior_node_hours = 24;
  bool IsValid(std::string* error) const;
  // Whether a notice leaves the time to write a checkpoint of `checkpoint_s` seconds.
  bool SavesOnNotice(double checkpoint_s) const;
};

// Whether `notice_s` seconds of warning (CostOptions::notice_s) leave the time to write a
// checkpoint of `checkpoint_s` seconds.
bool SavesOnNotice(double notice_s, double checkpoint_s);

// USD per hour for `nodes` instances: on-demand n·od; spot n·spot; anchor od + (n−1)·spot
// (n = 1 anchor is on-demand). Spot prices fall back to on-demand when the type has no spot offer.
double HourlyPrice(const InstanceType& t, int nodes, Purchase p);
// Spot nodes of `nodes` instances bought as `p`: all for spot, all but the on-demand anchor for
// anchor, none on demand.
int SpotNodes(int nodes, Purchase p);
// Revocations per hour of the whole cluster: (number of spot nodes) × the type's rate.
double ClusterRevocationRate(const InstanceType& t, int nodes, Purchase p);
// Young/Daly optimal checkpoint interval sqrt(2·C/λ) in seconds (C seconds, λ per hour);
// infinity when λ == 0.
double YoungDalyInterval(double checkpoint_s, double rate_per_hour);

// The revocation rate of one spot node (per hour) learned from the job's exposure to it: the
// catalog's rate counts as `prior_node_hours` of observation (a Gamma-Poisson posterior mean),
//   (catalog_rate · T0 + revocations) / (T0 + node_hours).
// No exposure: the catalog's rate. Exposure without a revocation lowers it; each revocation raises
// it by 1 / (T0 + node_hours).
double LearnedRevocationRate(double catalog_rate, const core::SpotExposure& e,
                             double prior_node_hours);
// Sets the learned rate on every type of `catalog` the job was exposed to (revocation_source says
// "learned: K revocations in H node-hours"); types not in the catalog are ignored.
void LearnRevocationRates(const std::map<std::string, core::SpotExposure>& exposure,
                          double prior_node_hours, Catalog* catalog);

struct RunEstimate {
  double hours = 0;                  // expected wall time
  double cost = 0;                   // expected USD = hours × price
  double checkpoint_interval_s = 0;  // infinity when no spot node
  double revocations = 0;            // expected revocations
  double overhead = 0;               // (hours − work_hours) / work_hours
};
// Expected time and cost of `work_hours` of uninterrupted training at `price_per_hour` exposed to
// `rate_per_hour` revocations, checkpointing every τ = YoungDalyInterval(checkpoint_s, λ), or
// every `max_interval_s` seconds when that is shorter:
//   hours = W · (1 + C/τ + λ·(R + τ/2))      (first-order: checkpoint time + per revocation the
//                                             restart R and on average half an interval lost)
// With `saved_on_notice` (CostOptions::SavesOnNotice) a revocation loses no work but costs one
// more checkpoint: hours = W · (1 + C/τ + λ·(R + C)).
RunEstimate EstimateRun(double work_hours, double price_per_hour, double rate_per_hour,
                        double checkpoint_s, double restart_s,
                        double max_interval_s = std::numeric_limits<double>::infinity(),
                        bool saved_on_notice = false);

}  // namespace cloudtune::search
