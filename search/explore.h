// Exploration: when measuring a configuration the job has not run is worth its cost (Decide's
// measurement step). A measurement reveals a configuration's step time, and at a batch beyond the
// largest the job has observed, the noise there (the steps' extrapolation); its value is the
// expected improvement of the objective (when the incumbent meets the deadline and budget) or the
// expected reduction of the excess over them (when nothing is predicted to meet them), against what
// the measurement window and the switches there and back cost, within the exploration budget
// (RecommendOptions::explore_ratio, exploration_budget_share).
#pragma once

#include <functional>
#include <sstream>

#include "search/recommend.h"

namespace cloudtune::search::detail {

// The expected excess of e over its deadline and budget (ObjectiveOptions::ExpectedExcess at e's
// hours, cost and log sigma): how infeasible candidates are ranked.
double Excess(const ObjectiveOptions& o, const Evaluation& e);

// Is measuring an uncertain configuration worth it? When it is, the recommendation measures it:
// `r`'s action and figures, `chosen` and the reason (`why`, the exploitation's reason after it).
// `sr`: the search (its top and promising candidates are the pool); `best_v`: the best
// candidate's objective; `measured`: whether the job has run a configuration.
void Explore(const SearchProblem& p, const RecommendOptions& options, const SearchResult& sr,
             double best_v, const std::function<bool(const Config&)>& measured, Recommendation* r,
             Evaluation* chosen, std::ostringstream* why);

}  // namespace cloudtune::search::detail
