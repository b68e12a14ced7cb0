#include "estimator/efficiency.h"

#include <ceres/ceres.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <istream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "estimator/core/csv.h"
#include "estimator/core/error.h"
#include "estimator/core/stats.h"

namespace cloudtune::estimator {

namespace csv = core::csv;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// The growth exponent's prior, uniform on [0, 1] (EfficiencyFitOptions::fit_progress_growth).
constexpr double kGrowthPriorMean = 0.5;
const double kGrowthPriorSigma = 1.0 / std::sqrt(12.0);

// log r(P, s) - rho0 for drift d and exponent gamma: -log(exp(-d) + (1 - exp(-d)) * s^-gamma).
template <typename T>
T LogRatioOffset(const T& d, double s, const T& gamma) {
  using std::exp;
  using std::log;
  T e = exp(-d);
  return -log(e + (T(1.0) - e) * exp(-gamma * std::log(s)));
}
double LogRatioOffset(double d, double s, double gamma) {
  return LogRatioOffset<double>(d, s, gamma);
}

struct ObsResidual {
  ObsResidual(double log_r, double s, double w, double sigma)
      : log_r(log_r), s(s), w(w), sigma(sigma) {}
  template <typename T>
  bool operator()(const T* rho_a, const T* rho_b, const T* d_a, const T* d_b, const T* g,
                  T* res) const {
    T rho = (1.0 - w) * rho_a[0] + w * rho_b[0];
    T d = (1.0 - w) * d_a[0] + w * d_b[0];
    res[0] = (T(log_r) - rho - LogRatioOffset(d, s, g[0])) / sigma;
    return true;
  }
  double log_r, s, w, sigma;
};

// Same, for an observation that falls on one knot (or beyond the ends).
struct ObsResidual1 {
  ObsResidual1(double log_r, double s, double sigma) : log_r(log_r), s(s), sigma(sigma) {}
  template <typename T>
  bool operator()(const T* rho, const T* d, const T* g, T* res) const {
    res[0] = (T(log_r) - rho[0] - LogRatioOffset(d[0], s, g[0])) / sigma;
    return true;
  }
  double log_r, s, sigma;
};

struct DiffResidual {
  explicit DiffResidual(double sigma) : sigma(sigma) {}
  template <typename T>
  bool operator()(const T* a, const T* b, T* res) const {
    res[0] = (b[0] - a[0]) / sigma;
    return true;
  }
  double sigma;
};

struct PriorResidual {
  PriorResidual(double mean, double sigma) : mean(mean), sigma(sigma) {}
  template <typename T>
  bool operator()(const T* a, T* res) const {
    res[0] = (a[0] - mean) / sigma;
    return true;
  }
  double mean, sigma;
};

// Position of `p` among sorted knot progresses: index j and weight w towards j + 1.
void Locate(const std::vector<double>& kp, double p, size_t* j, double* w) {
  if (kp.size() == 1 || p <= kp.front()) {
    *j = 0;
    *w = 0;
    return;
  }
  if (p >= kp.back()) {
    *j = kp.size() - 1;
    *w = 0;
    return;
  }
  size_t hi = std::upper_bound(kp.begin(), kp.end(), p) - kp.begin();
  *j = hi - 1;
  *w = (p - kp[*j]) / (kp[hi] - kp[*j]);
}

using csv::Fail;
using csv::Trim;

std::vector<NoiseObservation> ParseValidation(std::istream& f, const std::string& path,
                                              double batch, double* max_progress) {
  std::string line;
  int lineno = 0;
  std::vector<std::string> header;
  while (std::getline(f, line)) {
    ++lineno;
    if (!Trim(line).empty()) {
      header = csv::Split(line);
      break;
    }
  }
  if (header.empty()) Fail(path, lineno > 0 ? lineno : 1, 0, "empty file (no header)");
  const int header_line = lineno;
  std::map<std::string, int> col;
  for (size_t i = 0; i < header.size(); ++i) col[header[i]] = static_cast<int>(i);
  auto need = [&](const char* c) {
    auto it = col.find(c);
    if (it == col.end()) Fail(path, header_line, 0, std::string("missing column '") + c + "'");
    return it->second;
  };
  const int c_prog = need("progress"), c_iter = need("iteration"), c_sqr = need("grad_sqr"),
            c_var = need("grad_var");
  std::vector<NoiseObservation> v;
  double maxp = 0;
  double prev = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (Trim(line).empty()) continue;
    auto fs = csv::Split(line);
    if (fs.size() != header.size())
      Fail(path, lineno, 0,
           "expected " + std::to_string(header.size()) + " fields, found " +
               std::to_string(fs.size()));
    NoiseObservation o;
    o.batch = batch;
    const double p = csv::Number(fs[c_prog], path, lineno, c_prog + 1, "progress", false);
    if (p < prev)
      Fail(path, lineno, c_prog + 1,
           "progress: " + fs[c_prog] + " is less than the previous row's");
    o.iteration = csv::Number(fs[c_iter], path, lineno, c_iter + 1, "iteration", false);
    o.grad_sqr = csv::Number(fs[c_sqr], path, lineno, c_sqr + 1, "grad_sqr", true);
    o.grad_var = csv::Number(fs[c_var], path, lineno, c_var + 1, "grad_var", true);
    o.progress = 0.5 * (prev + p);
    prev = p;
    maxp = std::max(maxp, p);
    v.push_back(o);
  }
  if (v.empty()) Fail(path, header_line, 0, "no data rows after the header");
  if (max_progress) *max_progress = maxp;
  return v;
}

}  // namespace

std::vector<NoiseObservation> ParseValidationTrace(std::istream& in, const std::string& name,
                                                   double batch, double* max_progress) {
  if (!(batch > 0) || !std::isfinite(batch)) throw InputError(name + ": batch must be positive");
  return ParseValidation(in, name, batch, max_progress);
}

std::vector<NoiseObservation> ReadValidationTrace(const std::string& path, double batch,
                                                  double* max_progress) {
  std::ifstream f(path);
  if (!f) throw InputError(path + ": cannot open");
  return ParseValidationTrace(f, path, batch, max_progress);
}

double GainFromRatio(double r, double s) {
  if (std::isinf(r)) return s;
  return (r + 1.0) / (r / s + 1.0);
}

double Gain(const NoiseState& st, double batch) {
  const double s = batch / st.base_batch;
  if (st.grad_sqr <= 0) return st.grad_var > 0 ? s : 1.0;
  return (st.grad_var + st.grad_sqr) / (st.grad_var / s + st.grad_sqr);
}

double Efficiency(const NoiseState& st, double batch) {
  return Gain(st, batch) * st.base_batch / batch;
}

bool EfficiencyFitOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!(base_batch >= 0) || !std::isfinite(base_batch))
    return fail("base_batch must be >= 0 (0 = the smallest observed batch)");
  if (max_knots < 1) return fail("max_knots must be >= 1");
  if (max_observations < 2 * max_knots) return fail("max_observations must be >= 2 * max_knots");
  if (!(obs_sigma > 0) || !std::isfinite(obs_sigma)) return fail("obs_sigma must be > 0");
  if (!(smooth_sigma > 0) || !std::isfinite(smooth_sigma)) return fail("smooth_sigma must be > 0");
  if (!(drift_prior_sigma > 0) || !std::isfinite(drift_prior_sigma))
    return fail("drift_prior_sigma must be > 0");
  if (!(max_drift > 0) || !std::isfinite(max_drift)) return fail("max_drift must be > 0");
  if (!(drift_exponent >= 0.1 && drift_exponent <= 3))
    return fail("drift_exponent must be in [0.1, 3]");
  if (!(drift_exponent_sigma > 0) || !std::isfinite(drift_exponent_sigma))
    return fail("drift_exponent_sigma must be > 0");
  if (!(min_log_sigma >= 0) || !std::isfinite(min_log_sigma))
    return fail("min_log_sigma must be >= 0");
  if (!(extrapolation_sigma >= 0) || !std::isfinite(extrapolation_sigma))
    return fail("extrapolation_sigma must be >= 0");
  if (!(growth_sigma >= 0) || !std::isfinite(growth_sigma))
    return fail("growth_sigma must be >= 0");
  return true;
}

EfficiencyModel EfficiencyModel::FromNoise(const NoiseState& s, const EfficiencyFitOptions& options,
                                           double measured_batch, double measured_progress) {
  EfficiencyModel m;
  m.base_batch_ = s.base_batch;
  m.single_batch_ = true;
  m.max_batch_ = measured_batch > 0 ? measured_batch : s.base_batch;  // what it was measured at
  m.noise_log_sigma_ = std::isfinite(s.log_sigma) ? std::max(0.0, s.log_sigma) : 0.0;
  m.min_log_sigma_ = options.min_log_sigma;
  m.extrapolation_sigma_ = options.extrapolation_sigma;
  m.growth_sigma_ = options.growth_sigma;
  Knot k;
  if (s.grad_sqr <= 0)
    k.rho0 = s.grad_var > 0 ? std::log(std::numeric_limits<double>::max()) : -50.0;
  else if (s.grad_var <= 0)
    k.rho0 = -50.0;
  else
    k.rho0 = std::log(s.grad_var / s.grad_sqr);
  if (options.fit_progress_growth && measured_progress > 0 && std::isfinite(measured_progress)) {
    k.progress = measured_progress;
    m.delta_ = kGrowthPriorMean;
    m.delta_sigma_ = kGrowthPriorSigma;
  }
  m.knots_.push_back(k);
  return m;
}

void EfficiencyModel::At(double progress, double* rho0, double* drift) const {
  if (knots_.empty()) {
    *rho0 = 0;
    *drift = 0;
    return;
  }
  if (progress >= knots_.back().progress) {
    *rho0 = knots_.back().rho0;
    if (delta_ > 0 && progress > knots_.back().progress && knots_.back().progress > 0)
      *rho0 += delta_ * std::log(progress / knots_.back().progress);
    *drift = knots_.back().drift;
    return;
  }
  if (knots_.size() == 1 || progress <= knots_.front().progress) {
    *rho0 = knots_.front().rho0;
    *drift = knots_.front().drift;
    return;
  }
  auto it = std::upper_bound(knots_.begin(), knots_.end(), progress,
                             [](double p, const Knot& k) { return p < k.progress; });
  const Knot& b = *it;
  const Knot& a = *(it - 1);
  const double w = (progress - a.progress) / (b.progress - a.progress);
  *rho0 = (1 - w) * a.rho0 + w * b.rho0;
  *drift = (1 - w) * a.drift + w * b.drift;
}

double EfficiencyModel::NoiseRatioAt(double batch, double progress) const {
  double rho0, d;
  At(progress, &rho0, &d);
  return std::exp(rho0 + LogRatioOffset(d, batch / base_batch_, gamma_));
}

double EfficiencyModel::GainAt(double batch, double progress) const {
  const double s = batch / base_batch_;
  return GainFromRatio(NoiseRatioAt(batch, progress), s);
}

// Integral of dP / gain over [from, to], the noise ratio evaluated at batch min(s, cap_s) * B0.
double EfficiencyModel::StepsAt(double batch, double from, double to, double cap_s) const {
  if (!(to > from)) return 0;
  const double s = batch / base_batch_;
  const double s_noise = std::min(s, cap_s);
  std::vector<double> cuts{from};
  for (const Knot& k : knots_)
    if (k.progress > from && k.progress < to) cuts.push_back(k.progress);
  cuts.push_back(to);
  auto inv_gain = [&](double p) {
    double rho0, d;
    At(p, &rho0, &d);
    return 1.0 / GainFromRatio(std::exp(rho0 + LogRatioOffset(d, s_noise, gamma_)), s);
  };
  // Simpson on each piece: the integrand is smooth between knots.
  constexpr int kSub = 8;
  double steps = 0;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const double a = cuts[i], b = cuts[i + 1], h = (b - a) / kSub;
    double sum = inv_gain(a) + inv_gain(b);
    for (int k = 1; k < kSub; ++k) sum += (k % 2 ? 4.0 : 2.0) * inv_gain(a + k * h);
    steps += sum * h / 3.0;
  }
  return steps;
}

StepsPrediction EfficiencyModel::StepsToProgress(double batch, double from_progress,
                                                 double to_progress) const {
  if (!(batch > 0) || !std::isfinite(batch))
    throw std::invalid_argument("StepsToProgress: batch must be positive");
  StepsPrediction p;
  p.steps = StepsAt(batch, from_progress, to_progress, kInf);
  p.steps_plain = StepsAt(batch, from_progress, to_progress, 1.0);
  const double cap = max_batch_ > 0 ? max_batch_ / base_batch_ : 1.0;
  p.steps_no_extrapolation = StepsAt(batch, from_progress, to_progress, cap);
  double extrap = 0;
  if (p.steps > 0 && p.steps_no_extrapolation > 0)
    extrap = extrapolation_sigma_ * std::abs(std::log(p.steps / p.steps_no_extrapolation));
  // The steps' sensitivity to the noise ratio r at this batch, |d log steps / d log r| =
  // |r/(r+1) - (r/s)/(r/s+1)| (gain = (r+1)/(r/s+1)), through which every error of log r below
  // reaches the steps (the delta method).
  const double s = batch / base_batch_;
  const double r = NoiseRatioAt(batch, 0.5 * (from_progress + to_progress));
  const double sens_r =
      std::isfinite(r) && r > 0 ? std::abs(r / (r + 1) - (r / s) / (r / s + 1)) : 0;
  // Noise of the fitted curves: the residual scatter of log r averaged over the knots the path
  // crosses.
  const double noise =
      residual_rms_ * sens_r / std::sqrt(std::max<double>(1.0, static_cast<double>(knots_.size())));
  // Beyond the largest observed batch: an unmodelled growth of r with the batch, and the sampling
  // noise of a measured noise state.
  const double reach = max_batch_ > 0 && batch > max_batch_ ? std::log(batch / max_batch_) : 0;
  const double growth = growth_sigma_ * reach * sens_r;
  const double sampling = noise_log_sigma_ * sens_r;
  // The growth with progress forecast beyond the last knot: steps one standard deviation of its
  // exponent either way.
  double forecast = 0;
  if (delta_sigma_ > 0 && !knots_.empty() && to_progress > knots_.back().progress) {
    EfficiencyModel lo = *this, hi = *this;
    lo.delta_ = std::max(0.0, delta_ - delta_sigma_);
    hi.delta_ = delta_ + delta_sigma_;
    const double a = lo.StepsAt(batch, from_progress, to_progress, kInf);
    const double b = hi.StepsAt(batch, from_progress, to_progress, kInf);
    if (a > 0 && b > 0) forecast = 0.5 * std::log(a / b);
  }
  p.log_sigma = std::sqrt(min_log_sigma_ * min_log_sigma_ + extrap * extrap + noise * noise +
                          growth * growth + sampling * sampling + forecast * forecast);
  return p;
}

StepsPrediction EfficiencyModel::TimeToProgress(double batch, double from_progress,
                                                double to_progress, double step_time) const {
  StepsPrediction p = StepsToProgress(batch, from_progress, to_progress);
  p.steps *= step_time;
  p.steps_no_extrapolation *= step_time;
  p.steps_plain *= step_time;
  return p;
}

namespace {

// An observation as the fit uses it: log r = log(grad_var / grad_sqr) at s = batch / B0.
struct Use {
  double log_r, s, progress;
};

// Checks every observation's batch and progress; returns their ranges.
void CheckObservations(const std::vector<NoiseObservation>& obs, double* min_batch,
                       double* max_batch, double* max_progress) {
  *min_batch = kInf, *max_batch = 0, *max_progress = 0;
  for (size_t i = 0; i < obs.size(); ++i) {
    const auto& o = obs[i];
    if (!(o.batch > 0) || !std::isfinite(o.batch))
      throw InputError("efficiency fit: observation " + std::to_string(i) +
                       ": batch must be positive and finite");
    if (!(o.progress >= 0) || !std::isfinite(o.progress))
      throw InputError("efficiency fit: observation " + std::to_string(i) +
                       ": progress must be >= 0 and finite");
    *min_batch = std::min(*min_batch, o.batch);
    *max_batch = std::max(*max_batch, o.batch);
    *max_progress = std::max(*max_progress, o.progress);
  }
}

// Whether the fit can use an observation: positive, finite statistics.
bool Usable(const NoiseObservation& o) {
  return o.grad_sqr > 0 && o.grad_var > 0 && std::isfinite(o.grad_sqr) && std::isfinite(o.grad_var);
}

// A usable observation as the fit takes it: log r, batch in units of B0, progress.
Use ToUse(const NoiseObservation& o, double b0) {
  return {std::log(o.grad_var / o.grad_sqr), o.batch / b0, o.progress};
}

// The observations with positive, finite statistics (the others are counted in *skipped), and
// their distinct batches, sorted.
std::vector<Use> UsableObservations(const std::vector<NoiseObservation>& obs, double b0,
                                    std::vector<double>* batches, int* skipped) {
  std::vector<Use> use;
  for (const auto& o : obs) {
    if (!Usable(o)) {
      ++*skipped;
      continue;
    }
    use.push_back(ToUse(o, b0));
    bool seen = false;
    for (double b : *batches) seen |= std::abs(b - o.batch) <= 1e-9 * o.batch;
    if (!seen) batches->push_back(o.batch);
  }
  if (use.empty())
    throw InputError("efficiency fit: no observation with positive grad_sqr and grad_var");
  std::sort(batches->begin(), batches->end());
  return use;
}

// Many observations (a live job's per-interval history): per batch, replace runs of neighbouring
// observations (in progress) by their median log r at their mean progress.
std::vector<Use> BinObservations(const std::vector<Use>& use, const std::vector<double>& batches,
                                 double b0, int max_observations) {
  std::vector<Use> binned;
  const double keep = static_cast<double>(max_observations) / use.size();
  for (double b : batches) {
    std::vector<Use> mine;
    for (const auto& u : use)
      if (std::abs(u.s * b0 - b) <= 1e-9 * b) mine.push_back(u);
    std::sort(mine.begin(), mine.end(),
              [](const Use& x, const Use& y) { return x.progress < y.progress; });
    const size_t bins = std::max<size_t>(1, static_cast<size_t>(std::lround(keep * mine.size())));
    for (size_t k = 0; k < bins; ++k) {
      const size_t lo = k * mine.size() / bins, hi = (k + 1) * mine.size() / bins;
      if (hi <= lo) continue;
      std::vector<double> lr;
      double p = 0;
      for (size_t i = lo; i < hi; ++i) {
        lr.push_back(mine[i].log_r);
        p += mine[i].progress;
      }
      binned.push_back({core::Median(lr, 0.0), mine[lo].s, p / (hi - lo)});
    }
  }
  return binned;
}

// Knots at quantiles of the observed progress, at most as many as the best-covered batch has
// observations (so every knot is supported by data).
std::vector<double> KnotProgress(const std::vector<Use>& use, const std::vector<double>& batches,
                                 double b0, int max_knots) {
  std::vector<double> prog;
  for (const auto& u : use) prog.push_back(u.progress);
  std::sort(prog.begin(), prog.end());
  size_t per_batch = 0;
  for (double b : batches) {
    size_t c = 0;
    for (const auto& u : use) c += std::abs(u.s * b0 - b) <= 1e-9 * b;
    per_batch = std::max(per_batch, c);
  }
  const size_t k_count =
      std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(max_knots), per_batch));
  std::vector<double> kp;
  for (size_t k = 0; k < k_count; ++k) {
    const double q = k_count == 1 ? 0.5 : static_cast<double>(k) / (k_count - 1);
    const double v = prog[static_cast<size_t>(std::lround(q * (prog.size() - 1)))];
    if (kp.empty() || v > kp.back()) kp.push_back(v);
  }
  return kp;
}

// Initial rho0 per knot: median log r of the smallest-batch observations nearest to it.
std::vector<double> StartRho(const std::vector<Use>& use, const std::vector<double>& batches,
                             double b0, const std::vector<double>& kp) {
  const size_t K = kp.size();
  std::vector<double> rho(K);
  std::vector<std::vector<double>> near(K);
  for (const auto& u : use) {
    if (std::abs(u.s * b0 - batches.front()) > 1e-9 * batches.front()) continue;
    size_t j;
    double w;
    Locate(kp, u.progress, &j, &w);
    near[w > 0.5 ? j + 1 : j].push_back(u.log_r);
  }
  std::vector<double> all;
  for (const auto& u : use) all.push_back(u.log_r);
  const double fallback = core::Median(all, 0.0);
  for (size_t k = 0; k < K; ++k) rho[k] = near[k].empty() ? fallback : core::Median(near[k], 0.0);
  return rho;
}

// Fits rho0 and d at the knots kp (and gamma when fit_gamma) to the observations, from the values
// given: robust observation residuals, smoothness between neighbouring knots, priors.
void SolveKnots(const std::vector<Use>& use, const std::vector<double>& kp,
                const EfficiencyFitOptions& options, bool single_batch, bool fit_gamma,
                std::vector<double>* rho_out, std::vector<double>* drift_out, double* gamma) {
  std::vector<double>& rho = *rho_out;
  std::vector<double>& drift = *drift_out;
  const size_t K = kp.size();
  ceres::Problem problem;
  problem.AddParameterBlock(gamma, 1);
  problem.SetParameterLowerBound(gamma, 0, 0.1);
  problem.SetParameterUpperBound(gamma, 0, 3.0);
  if (fit_gamma)
    problem.AddResidualBlock(new ceres::AutoDiffCostFunction<PriorResidual, 1, 1>(new PriorResidual(
                                 options.drift_exponent, options.drift_exponent_sigma)),
                             nullptr, gamma);
  else
    problem.SetParameterBlockConstant(gamma);
  for (size_t k = 0; k < K; ++k) {
    problem.AddParameterBlock(&rho[k], 1);
    problem.AddParameterBlock(&drift[k], 1);
    problem.SetParameterLowerBound(&drift[k], 0, 0.0);
    problem.SetParameterUpperBound(&drift[k], 0, options.max_drift);
    if (single_batch) problem.SetParameterBlockConstant(&drift[k]);
  }
  for (const auto& u : use) {
    size_t j;
    double w;
    Locate(kp, u.progress, &j, &w);
    auto* loss = new ceres::CauchyLoss(1.0);
    if (w == 0) {
      problem.AddResidualBlock(new ceres::AutoDiffCostFunction<ObsResidual1, 1, 1, 1, 1>(
                                   new ObsResidual1(u.log_r, u.s, options.obs_sigma)),
                               loss, &rho[j], &drift[j], gamma);
    } else {
      problem.AddResidualBlock(new ceres::AutoDiffCostFunction<ObsResidual, 1, 1, 1, 1, 1, 1>(
                                   new ObsResidual(u.log_r, u.s, w, options.obs_sigma)),
                               loss, &rho[j], &rho[j + 1], &drift[j], &drift[j + 1], gamma);
    }
  }
  for (size_t k = 0; k + 1 < K; ++k) {
    problem.AddResidualBlock(new ceres::AutoDiffCostFunction<DiffResidual, 1, 1, 1>(
                                 new DiffResidual(options.smooth_sigma)),
                             new ceres::CauchyLoss(1.0), &rho[k], &rho[k + 1]);
    if (!single_batch)
      problem.AddResidualBlock(new ceres::AutoDiffCostFunction<DiffResidual, 1, 1, 1>(
                                   new DiffResidual(options.smooth_sigma)),
                               new ceres::CauchyLoss(1.0), &drift[k], &drift[k + 1]);
  }
  if (!single_batch)
    for (size_t k = 0; k < K; ++k)
      problem.AddResidualBlock(new ceres::AutoDiffCostFunction<PriorResidual, 1, 1>(
                                   new PriorResidual(0.0, options.drift_prior_sigma)),
                               nullptr, &drift[k]);

  ceres::Solver::Options so;
  // The Jacobian is banded (an observation touches its two neighbouring knots, a smoothness term
  // two knots) plus gamma's one dense column: sparse normal equations solve it in time linear in
  // the knots, where a dense QR grows with their cube.
  so.linear_solver_type = ceres::SPARSE_NORMAL_CHOLESKY;
  so.max_num_iterations = 200;
  so.num_threads = 1;
  so.logging_type = ceres::SILENT;
  so.minimizer_progress_to_stdout = false;
  ceres::Solver::Summary summary;
  ceres::Solve(so, &problem, &summary);
}

// The mean growth exponent of rho0 beyond the observed progress: the prior updated by the
// least-squares slope of log r on log P (each observation brought to B0 by the fitted drift) over
// the upper half (in log P) of the observed progress, one point per doubling of progress, weighed
// by its standard error; the prior alone with fewer than three doublings there. It is kept within
// [0, 1]. Its standard deviation is the prior's whatever the records (kGrowthPriorSigma): they
// measure the exponent of the stretch behind the job, and the one ahead may differ within the
// physics' range (a decaying learning rate lifts r; a run near its loss floor flattens it), which
// no scatter of the past shows.
double ProgressGrowth(const std::vector<Use>& use, const EfficiencyModel& m) {
  double lo = kInf, hi = 0;
  for (const auto& u : use)
    if (u.progress > 0) lo = std::min(lo, u.progress), hi = std::max(hi, u.progress);
  if (!(hi > lo)) return kGrowthPriorMean;
  const double from = 0.5 * (std::log(lo) + std::log(hi));
  std::vector<double> x, y;
  const Use* last = nullptr;
  for (const auto& u : use) {
    if (!(u.progress > 0) || std::log(u.progress) < from) continue;
    // A record that repeats the one before it exactly (an estimator's state that stopped
    // changing, a held value) is no new measurement: counted again at a later progress, it would
    // read as a flat growth with no scatter, i.e. as certainty.
    if (last && last->s == u.s && last->log_r == u.log_r) continue;
    last = &u;
    const double b = u.s * m.base_batch();
    x.push_back(std::log(u.progress));
    y.push_back(u.log_r - std::log(m.NoiseRatioAt(b, u.progress) /
                                   m.NoiseRatioAt(m.base_batch(), u.progress)));
  }
  // One point per doubling of progress, the mean of the records in it. Records come evenly in
  // time, so in log P they crowd the latest doubling, and consecutive ones share most of the
  // smoothed estimator's window: counted one by one they would weigh the last stretch alone and
  // read its scatter as independent, a slope and a certainty the history does not show.
  struct Bin {
    double x = 0, y = 0;
    int n = 0;
  };
  std::map<long, Bin> bins;
  for (size_t i = 0; i < x.size(); ++i) {
    Bin& b = bins[static_cast<long>(std::floor((x[i] - from) / std::log(2.0)))];
    b.x += x[i], b.y += y[i], ++b.n;
  }
  x.clear(), y.clear();
  for (const auto& [doubling, b] : bins) x.push_back(b.x / b.n), y.push_back(b.y / b.n);
  const size_t n = x.size();
  if (n < 3) return kGrowthPriorMean;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += x[i] / n, my += y[i] / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  if (!(sxx > 0)) return kGrowthPriorMean;
  const double slope = sxy / sxx;
  double sse = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = y[i] - my - slope * (x[i] - mx);
    sse += e * e;
  }
  const double se = std::sqrt(sse / (n - 2) / sxx);
  if (!(se > 0)) return std::clamp(slope, 0.0, 1.0);
  const double w_prior = 1 / (kGrowthPriorSigma * kGrowthPriorSigma), w_data = 1 / (se * se);
  return std::clamp((w_prior * kGrowthPriorMean + w_data * slope) / (w_prior + w_data), 0.0, 1.0);
}

}  // namespace

EfficiencyModel FitEfficiency(const std::vector<NoiseObservation>& obs,
                              const EfficiencyFitOptions& options) {
  std::string err;
  if (!options.IsValid(&err)) throw InputError("efficiency fit options: " + err);
  if (obs.empty()) throw InputError("efficiency fit: no observations");
  double min_batch, max_batch, max_progress;
  CheckObservations(obs, &min_batch, &max_batch, &max_progress);
  double b0 = options.base_batch;
  if (b0 == 0) b0 = min_batch;

  EfficiencyModel m;
  m.base_batch_ = b0;
  m.max_batch_ = max_batch;
  m.max_progress_ = max_progress;
  m.min_log_sigma_ = options.min_log_sigma;
  m.extrapolation_sigma_ = options.extrapolation_sigma;
  m.growth_sigma_ = options.growth_sigma;

  std::vector<double> batches;
  std::vector<Use> use = UsableObservations(obs, b0, &batches, &m.n_skipped_);
  m.batches_ = batches;
  m.n_obs_ = static_cast<int>(use.size());
  m.single_batch_ = batches.size() < 2;
  if (use.size() > static_cast<size_t>(options.max_observations))
    use = BinObservations(use, batches, b0, options.max_observations);

  const std::vector<double> kp = KnotProgress(use, batches, b0, options.max_knots);
  const size_t K = kp.size();
  std::vector<double> rho = StartRho(use, batches, b0, kp);
  std::vector<double> drift(K, m.single_batch_ ? 0.0 : 0.1);
  double gamma = options.drift_exponent;
  m.gamma_fitted_ = !m.single_batch_ && options.fit_drift_exponent && batches.size() >= 3;
  SolveKnots(use, kp, options, m.single_batch_, m.gamma_fitted_, &rho, &drift, &gamma);

  m.gamma_ = gamma;
  for (size_t k = 0; k < K; ++k) m.knots_.push_back({kp[k], rho[k], drift[k]});

  std::vector<double> abs_res;
  for (const auto& u : use) {
    double r0, d;
    m.At(u.progress, &r0, &d);
    abs_res.push_back(std::abs(u.log_r - r0 - LogRatioOffset(d, u.s, m.gamma_)));
  }
  m.residual_rms_ = 1.4826 * core::Median(abs_res, 0.0);
  if (options.fit_progress_growth) {
    m.delta_ = ProgressGrowth(use, m);
    m.delta_sigma_ = kGrowthPriorSigma;
  }
  return m;
}

void ThinNoiseHistory(std::vector<NoiseObservation>* history, size_t cap) {
  struct Batch {
    double batch;
    size_t count, oldest;  // observations, index of its oldest (the history is in order)
  };
  auto& h = *history;
  cap = std::max<size_t>(cap, 1);
  while (h.size() > cap) {
    std::vector<Batch> seen;
    for (size_t i = 0; i < h.size(); ++i) {
      auto it = std::find_if(seen.begin(), seen.end(),
                             [&](const Batch& b) { return b.batch == h[i].batch; });
      if (it == seen.end())
        seen.push_back({h[i].batch, 1, i});
      else
        ++it->count;
    }
    const auto most =
        std::max_element(seen.begin(), seen.end(), [](const Batch& a, const Batch& b) {
          return a.count != b.count ? a.count < b.count : a.oldest > b.oldest;
        });
    h.erase(h.begin() + static_cast<std::ptrdiff_t>(most->oldest));
  }
}

// ---- ProgressAccount ------------------------------------------------------------------------

double ProgressAccount::Advance(double steps, double batch, const NoiseState& noise) {
  if (!(steps >= 0) || !(batch > 0))
    throw std::invalid_argument("ProgressAccount::Advance: steps must be >= 0 and batch > 0");
  if (std::abs(noise.base_batch - base_batch_) > 1e-9 * base_batch_)
    throw std::invalid_argument("ProgressAccount::Advance: noise state has a different B0");
  const double p = steps * Gain(noise, batch);
  progress_ += p;
  steps_ += steps;
  samples_ += steps * batch;
  segments_.push_back({batch, steps, p});
  return p;
}

double ProgressAccount::Advance(double steps, double batch, const EfficiencyModel& model) {
  if (!(steps >= 0) || !(batch > 0))
    throw std::invalid_argument("ProgressAccount::Advance: steps must be >= 0 and batch > 0");
  if (std::abs(model.base_batch() - base_batch_) > 1e-9 * base_batch_)
    throw std::invalid_argument("ProgressAccount::Advance: model has a different B0");
  // Midpoint (RK2) integration of dP/dstep = gain(batch, P), in at most 1000 chunks.
  const double chunks = std::max(1.0, std::min(1000.0, std::ceil(steps)));
  const double h = steps / chunks;
  double p = progress_;
  for (int i = 0; i < static_cast<int>(chunks); ++i) {
    const double k1 = model.GainAt(batch, p);
    p += h * model.GainAt(batch, p + 0.5 * h * k1);
  }
  const double added = p - progress_;
  progress_ = p;
  steps_ += steps;
  samples_ += steps * batch;
  segments_.push_back({batch, steps, added});
  return added;
}

EfficiencyModel EfficiencyModel::FromNoiseAndHistory(const NoiseState& s,
                                                     const std::vector<NoiseObservation>& history,
                                                     double progress,
                                                     const EfficiencyFitOptions& options,
                                                     double measured_batch) {
  EfficiencyModel m = FromNoise(s, options, measured_batch, progress);
  if (!(m.delta_sigma_ > 0)) return m;  // growth off, or no progress to grow from
  std::vector<Use> use;
  for (const auto& o : history)
    if (Usable(o) && o.batch > 0 && o.progress >= 0 && o.progress <= progress)
      use.push_back(ToUse(o, m.base_batch_));
  m.delta_ = ProgressGrowth(use, m);  // its width stays FromNoise's, the prior's
  return m;
}

}  // namespace cloudtune::estimator
