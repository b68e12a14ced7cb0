// The throughput model's form (estimator/throughput.h), shared by the prediction and the fit: the
// parameterisation of the core, the growth of the network all-reduce and the model's step time.
#pragma once

#include <algorithm>
#include <cmath>

#include "estimator/throughput.h"

namespace cloudtune::estimator::detail {

constexpr int kC = kNumThroughputParams;  // core parameters

// Whether core parameter i is fitted as log(value) (else as the value: kappa, gamma, zeta_c,
// omega).
inline bool IsLogParam(int i) { return i != kKappa && i != kGamma && i != kZetaC && i != kOmega; }

// The value of a double or of a ceres::Jet.
inline double Scalar(double x) { return x; }
template <typename J>
inline double Scalar(const J& x) {
  return x.a;
}

// Growth of the network all-reduce time with the number of replicas: log(R/2), the latency of a
// tree (or the chunk count of a pipelined ring); a linear (R - 2) term, as in Pollux, over-predicts
// large jobs.
inline double RGrowth(int r) { return std::log(r / 2.0); }

// The model: per micro-step compute time T_c and step time, given the core parameters, the log
// multiplier of this configuration's all-reduce time (net_eff: node + placement + sync_batch
// effects) and of its compute time (comp_eff: batch + compute effects).
template <typename T>
void Times(const T* th, const T& net_eff, const T& comp_eff, int nodes, int replicas, double b,
           double log_b_rel, int accum, T* tc_out, T* step_out) {
  using std::exp;
  using std::log;
  const double g1 = double(replicas) / double(std::max(1, nodes)) - 1.0;  // extra GPUs per machine
  T tc = (exp(th[kAlphaC]) + exp(th[kBetaC]) * b * exp((th[kKappa] - 1.0) * log_b_rel)) *
         exp(comp_eff + th[kZetaC] * g1);
  T t = tc;
  if (replicas >= 2) {
    T tn;
    if (nodes <= 1) {
      tn = (exp(th[kAlphaL]) + exp(th[kBetaL]) * double(replicas - 2)) * exp(net_eff);
    } else {
      const double g = double(replicas) / double(nodes);
      tn = (exp(th[kAlphaN]) + exp(th[kBetaN]) * RGrowth(replicas) +
            exp(th[kDeltaN]) * (g - 1.0) / double(nodes - 1)) *
           exp(net_eff);
    }
    // T = tc + tn - softmin(omega * tc, tn), softmin(a, b) = (a^-gamma + b^-gamma)^(-1/gamma)
    // = a * exp(-softplus(gamma * log(a / b)) / gamma), with a stable softplus.
    const T a = th[kOmega] * tc;
    const T u = th[kGamma] * log(a / tn);
    T sp;
    if (Scalar(u) > 30.0) {
      sp = u + log(1.0 + exp(-u));
    } else {
      sp = log(1.0 + exp(u));
    }
    t = tc + tn - a * exp(-sp / th[kGamma]);
  }
  *tc_out = tc;
  *step_out = double(accum) * tc + t;
}

// Index of `key` in the sorted vector `v`, -1 if absent.
template <typename V, typename K>
int Find(const V& v, const K& key) {
  auto it = std::lower_bound(v.begin(), v.end(), key);
  return it == v.end() || *it != key ? -1 : static_cast<int>(it - v.begin());
}

}  // namespace cloudtune::estimator::detail
