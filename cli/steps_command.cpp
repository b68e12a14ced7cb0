// `cloudtune steps --observed B=FILE [--observed B=FILE ...] --batch B --progress P` (DESIGN §5):
// fits the efficiency drift model to validation traces observed at the given batch sizes and
// predicts the optimizer steps a run at batch B needs to reach progress P.
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "estimator/core/error.h"
#include "estimator/efficiency.h"

namespace cloudtune::cli {
namespace {

double PositiveArg(const std::string& v, const std::string& arg) {
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(d))
    throw InputError(arg + ": '" + v + "' is not a number");
  if (d <= 0) throw InputError(arg + ": " + v + " must be positive");
  return d;
}

struct StepsArgs {
  std::vector<std::string> observed;
  std::string batch, progress, from = "0";
  double base_batch = 0;  // B0 the traces refer to; 0 = the smallest observed batch
  double extrapolate = 0.02;
  double drift_exponent = estimator::EfficiencyFitOptions{}.drift_exponent;
  double growth_sigma = estimator::EfficiencyFitOptions{}.growth_sigma;
  std::string model_out;
};

void RunSteps(const StepsArgs& a) {
  if (a.observed.empty()) throw InputError("--observed: at least one B=FILE is required");
  std::vector<core::NoiseObservation> all;
  double max_progress = 0;
  std::string max_file;
  for (const auto& spec : a.observed) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
      throw InputError("--observed: '" + spec + "' is not B=FILE (batch size '=' validation CSV)");
    const double b = PositiveArg(spec.substr(0, eq), "--observed '" + spec + "': batch");
    const std::string path = spec.substr(eq + 1);
    double mp = 0;
    auto v = estimator::ReadValidationTrace(path, b, &mp);
    all.insert(all.end(), v.begin(), v.end());
    if (mp > max_progress) {
      max_progress = mp;
      max_file = path;
    }
  }
  const double batch = PositiveArg(a.batch, "--batch");
  const double progress = PositiveArg(a.progress, "--progress");
  double from = 0;
  {
    char* end = nullptr;
    from = std::strtod(a.from.c_str(), &end);
    if (a.from.empty() || end != a.from.c_str() + a.from.size() || !std::isfinite(from) || from < 0)
      throw InputError("--from-progress: '" + a.from + "' is not a number >= 0");
    if (from > progress)
      throw InputError("--from-progress: " + a.from + " is beyond --progress " + a.progress);
  }
  if (!(a.extrapolate >= 0)) throw InputError("--extrapolate: must be >= 0");
  if (progress > max_progress * (1 + a.extrapolate)) {
    std::ostringstream os;
    os.precision(10);
    os << "--progress: " << a.progress << " is beyond the observed progress (at most "
       << max_progress << ", in " << max_file << "; --extrapolate allows " << 100 * a.extrapolate
       << "% more)";
    throw InputError(os.str());
  }
  if (!(a.base_batch >= 0) || !std::isfinite(a.base_batch))
    throw InputError("--base-batch: must be a number >= 0 (0 = the smallest observed batch)");
  estimator::EfficiencyFitOptions fo;
  fo.base_batch = a.base_batch;
  fo.drift_exponent = a.drift_exponent;
  fo.growth_sigma = a.growth_sigma;
  std::string err;
  if (!fo.IsValid(&err))
    throw InputError((err.find("growth_sigma") != std::string::npos ? "--growth-sigma: "
                                                                    : "--drift-exponent: ") +
                     err);
  estimator::EfficiencyModel m = estimator::FitEfficiency(all, fo);
  if (!a.model_out.empty()) Output(a.model_out, m.ToJson().dump(2) + "\n");
  const auto p = m.StepsToProgress(batch, from, progress);
  const double s = batch / m.base_batch();
  const double r0 = m.NoiseRatioAt(m.base_batch(), progress);
  const double rb = m.NoiseRatioAt(batch, progress);
  nlohmann::json out;
  out["iterations"] = std::round(p.steps);
  out["log_sigma"] = p.log_sigma;
  out["iterations_low"] = p.steps * std::exp(-p.log_sigma);
  out["iterations_high"] = p.steps * std::exp(p.log_sigma);
  out["iterations_plain_theory"] = p.steps_plain;
  out["iterations_no_extrapolation"] = p.steps_no_extrapolation;
  out["batch"] = batch;
  out["progress"] = progress;
  out["from_progress"] = from;
  out["base_batch"] = m.base_batch();
  out["single_batch"] = m.single_batch();
  nlohmann::json drift;
  drift["noise_scale_base"] = m.base_batch() * r0;
  drift["noise_scale_at_batch"] = m.base_batch() * rb;
  drift["kappa"] = s > 1 ? std::log(rb / r0) / std::log(s) : 0.0;
  drift["gain_at_batch"] = m.GainAt(batch, progress);
  drift["efficiency_at_batch"] = m.EfficiencyAt(batch, progress);
  drift["model"] = m.ToJson();
  out["drift"] = drift;
  std::cout << out.dump(2) << "\n";
}

}  // namespace

void RegisterStepsCommand(CLI::App& app) {
  auto a = std::make_shared<StepsArgs>();
  CLI::App* c = app.add_subcommand(
      "steps",
      "Predict the optimizer steps a run at --batch needs to reach --progress, from validation "
      "traces (progress,iteration,metric,grad_sqr,grad_var) observed at other batch sizes");
  c->add_option("--observed", a->observed,
                "B=FILE: the validation trace of a run at total batch B (repeatable). grad_var is "
                "normalised to, and progress counted in steps at, the base batch")
      ->required();
  c->add_option("--base-batch", a->base_batch,
                "B0 (samples): the batch the traces' progress and grad_var refer to (default 0 = "
                "the smallest observed batch; give it when the traces were normalised to a batch "
                "not observed here, e.g. a later run of a job that started smaller)");
  c->add_option("--batch", a->batch, "total batch size B of the predicted run (> 0)")->required();
  c->add_option("--progress", a->progress, "target progress (steps at the base batch)")->required();
  c->add_option("--from-progress", a->from, "progress already made (default 0)");
  c->add_option(
      "--extrapolate", a->extrapolate,
      "how far (fraction) --progress may lie beyond the observed progress (default 0.02)");
  c->add_option("--drift-exponent", a->drift_exponent,
                "prior of the exponent gamma of the noise scale's batch dependence (default 1.0; "
                "fitted when >= 3 batches are observed)");
  c->add_option("--growth-sigma", a->growth_sigma,
                "sigma of an unmodelled growth exponent of the noise ratio beyond the largest "
                "observed batch (default 0.29; widens log_sigma with log(B / largest observed))");
  c->add_option("-o,--model", a->model_out, "also write the fitted efficiency model JSON here");
  c->callback([a]() { RunSteps(*a); });
}

}  // namespace cloudtune::cli
