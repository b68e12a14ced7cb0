// Statistical efficiency (DESIGN §4): gradient noise scale, gain of one step at batch B, goodput,
// and a model of how the noise scale drifts with batch and progress, fitted with Ceres, that
// predicts the optimizer steps needed to reach a target progress at any batch.
//
// CONTRACT used by search/ and plugin/ (keep these signatures; add freely):
//   NoiseState s{grad_sqr, grad_var, base_batch};
//   double g = Gain(s, batch);  double e = Efficiency(s, batch);
//   EfficiencyModel m = FitEfficiency(observations, opts);   // or EfficiencyModel::FromNoise(s)
//   StepsPrediction p = m.StepsToProgress(batch, from_progress, to_progress);
//   nlohmann::json j = m.ToJson();  EfficiencyModel::FromJson(j, "name");
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cloudtune::estimator {

// Smoothed gradient statistics at the batch the job ran. Progress is counted in optimizer steps
// at base_batch (B0).
struct NoiseState {
  double grad_sqr = 0;    // |G|^2, squared norm of the true gradient
  double grad_var = 0;    // tr(Sigma), gradient variance normalised to base_batch
  double base_batch = 1;  // B0, samples per optimizer step that grad_var refers to
  bool biased = false;    // estimated from consecutive steps of one replica
  // Noise scale phi = B0 * tr(Sigma) / |G|^2 (samples). Infinity when grad_sqr == 0.
  double noise_scale() const;
};

// Progress (in B0-steps) made by one optimizer step at `batch` samples:
// (tr + |G|^2) / (tr / s + |G|^2), s = batch / B0.
double Gain(const NoiseState& s, double batch);
// Statistical efficiency gain / s, in (0, 1] for batch >= B0.
double Efficiency(const NoiseState& s, double batch);

struct StepsPrediction {
  double steps = 0;      // optimizer steps
  double log_sigma = 0;  // one standard deviation of log(steps)
};

class EfficiencyModel {
 public:
  // The plain theory: the noise state taken as constant (no drift).
  static EfficiencyModel FromNoise(const NoiseState& s);
  // Gain of one step at `batch` when the run has made `progress` B0-steps.
  double GainAt(double batch, double progress) const;
  // Steps at `batch` to go from `from_progress` to `to_progress` (B0-steps).
  StepsPrediction StepsToProgress(double batch, double from_progress, double to_progress) const;
  nlohmann::json ToJson() const;
  static EfficiencyModel FromJson(const nlohmann::json& j, const std::string& source);
  // (drift parameters, identified flags: owned by the efficiency implementation)
};

}  // namespace cloudtune::estimator
