// Cost and revocations (DESIGN §4): hourly price of a cluster by purchase option, the spot
// revocation rate it is exposed to, the Young/Daly checkpoint interval, and the expected wall time
// and cost of a given amount of work.
#pragma once

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
  bool IsValid(std::string* error) const;
};

// USD per hour for `nodes` instances: on-demand n·od; spot n·spot; anchor od + (n−1)·spot
// (n = 1 anchor is on-demand). Spot prices fall back to on-demand when the type has no spot offer.
double HourlyPrice(const InstanceType& t, int nodes, Purchase p);
// Revocations per hour of the whole cluster: (number of spot nodes) × the type's rate.
double ClusterRevocationRate(const InstanceType& t, int nodes, Purchase p);
// Young/Daly optimal checkpoint interval sqrt(2·C/λ) in seconds (C seconds, λ per hour);
// infinity when λ == 0.
double YoungDalyInterval(double checkpoint_s, double rate_per_hour);

struct RunEstimate {
  double hours = 0;                  // expected wall time
  double cost = 0;                   // expected USD = hours × price
  double checkpoint_interval_s = 0;  // infinity when no spot node
  double revocations = 0;            // expected revocations
  double overhead = 0;               // (hours − work_hours) / work_hours
};
// Expected time and cost of `work_hours` of uninterrupted training at `price_per_hour` exposed to
// `rate_per_hour` revocations, checkpointing every τ = YoungDalyInterval(checkpoint_s, λ):
//   hours = W · (1 + C/τ + λ·(R + τ/2))      (first-order: checkpoint time + per revocation the
//                                             restart R and on average half an interval lost)
RunEstimate EstimateRun(double work_hours, double price_per_hour, double rate_per_hour,
                        double checkpoint_s, double restart_s);

}  // namespace cloudtune::search
