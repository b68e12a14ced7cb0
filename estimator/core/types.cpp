#include "estimator/core/types.h"

namespace cloudtune::core {

const char* GoalName(Goal g) { return g == Goal::kTime ? "time" : "cost"; }

bool ParseGoal(const std::string& name, Goal* goal) {
  if (name == "cost") {
    *goal = Goal::kCost;
    return true;
  }
  if (name == "time") {
    *goal = Goal::kTime;
    return true;
  }
  return false;
}

const char* PurchaseName(Purchase p) {
  switch (p) {
    case Purchase::kOnDemand:
      return "on-demand";
    case Purchase::kSpot:
      return "spot";
    case Purchase::kAnchor:
      return "anchor";
  }
  return "?";
}

bool ParsePurchase(const std::string& s, Purchase* out) {
  for (Purchase p : {Purchase::kOnDemand, Purchase::kSpot, Purchase::kAnchor})
    if (s == PurchaseName(p)) {
      *out = p;
      return true;
    }
  return false;
}

}  // namespace cloudtune::core
