// The priors of one instance type's throughput fit, centred on another type's fitted model moved by
// the hardware ratios (see throughput_types.h).
#pragma once

#include <array>
#include <vector>

#include "estimator/throughput.h"

namespace cloudtune::estimator::detail {

struct TypePrior {
  // theta[a] - theta[b] (b < 0: theta[a]) ~ Normal(mean, sigma^2), over the core parameters.
  struct Term {
    int a, b;
    double mean, sigma;
  };
  double b_ref = 1;  // the reference batch size of beta_c, shared with the other type's model
  std::array<double, kNumThroughputParams> start{};  // starting point of the core (theta units)
  std::vector<Term> terms;
};

}  // namespace cloudtune::estimator::detail
