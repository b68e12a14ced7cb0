// Hours and objective values as the recommendations' reasons and tables print them (search/
// internal; defined in recommendation_output.cpp). Costs: FormatCost (search/catalog.h).
#pragma once

#include <string>

#include "search/search.h"

namespace cloudtune::search {

std::string Hours(double hours);  // "1.234 h" below 10 h, "12.34 h" from there
// FormatCost (in the catalog's unit) for the cost goal, Hours for the time goal.
std::string Value(Goal g, double x, CostUnit unit);

}  // namespace cloudtune::search
