// `cloudtune fit` and `cloudtune predict` (DESIGN §5): fit the throughput model to trace CSVs, and
// predict the step time of every configuration of a trace from a fitted model.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/progress.h"
#include "estimator/core/env.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "estimator/core/trace.h"
#include "estimator/throughput.h"
#include "estimator/throughput_types.h"
#include "search/catalog.h"

namespace cloudtune::cli {
namespace {

struct FitArgs {
  std::vector<std::string> traces;
  std::string output;
  std::string catalog;
  estimator::CrossTypeFitOptions options;
};

struct PredictArgs {
  std::string model;
  std::vector<std::string> traces;
  std::string catalog;
};

// The catalog's hardware of every instance type the rows name.
std::map<std::string, estimator::Hardware> HardwareOfTypes(
    const std::vector<core::Measurement>& data, const std::string& catalog_path) {
  std::map<std::string, estimator::Hardware> hw;
  bool any = false;
  for (const auto& m : data) any = any || !m.key.instance_type.empty();
  if (!any) return hw;
  const search::Catalog catalog = search::ResolveCatalog(
      catalog_path.empty() ? core::GetEnv("CLOUDTUNE_CATALOG").value_or("") : catalog_path);
  for (const auto& m : data)
    if (!m.key.instance_type.empty() && !hw.count(m.key.instance_type))
      hw[m.key.instance_type] = search::HardwareOf(catalog, m.key.instance_type);
  return hw;
}

// ", leave-one-out errors x1.35 the stated variance" when the fit's check widened it.
std::string LooNote(double scale) {
  if (!(scale > 1)) return "";
  std::ostringstream o;
  o << ", leave-one-out errors x" << std::fixed << std::setprecision(2) << scale
    << " the stated variance (widened)";
  return o.str();
}

void RunFit(const FitArgs& a) {
  std::string err;
  if (!a.options.IsValid(&err)) throw InputError("fit: " + err);
  Progress progress("fit", 2);
  progress.Step(1, "reading " + std::to_string(a.traces.size()) + " trace file(s)");
  const auto data = estimator::ReadTraces(a.traces);
  const auto hardware = HardwareOfTypes(data, a.catalog);
  progress.Step(2, "fitting " + std::to_string(data.size()) + " configurations");
  if (hardware.empty()) {  // no instance_type: one model (the single-type form)
    const auto model = estimator::FitThroughput(data, a.options.fit);
    progress.Done();
    Output(a.output, model.ToJson().dump(2) + "\n");
    const auto& s = model.stats();
    std::cerr << "cloudtune fit: " << s.configurations << " configurations, " << s.iterations
              << " iterations, " << std::setprecision(3) << s.seconds * 1e3
              << " ms, in-sample step-time error " << 100 * s.mape_step << "%"
              << LooNote(model.loo_variance_scale()) << " -> " << a.output << "\n";
    return;
  }
  const auto model = estimator::FitCrossType(data, hardware, a.options);
  progress.Done();
  Output(a.output, model.ToJson().dump(2) + "\n");
  std::cerr << "cloudtune fit: " << data.size() << " configurations of " << model.types().size()
            << " instance type(s), reference '" << model.reference() << "'";
  for (const auto& t : model.types()) {
    const auto& s = model.model(t).stats();
    std::cerr << "; " << t << ": " << s.configurations << " configurations, "
              << std::setprecision(3) << s.seconds * 1e3 << " ms, in-sample error "
              << 100 * s.mape_step << "%" << LooNote(model.model(t).loo_variance_scale());
    if (!hardware.at(t).known()) std::cerr << " (no catalog entry: hardware ratios unknown)";
  }
  std::cerr << " -> " << a.output << "\n";
}

void RunPredict(const PredictArgs& a) {
  const auto model =
      estimator::CrossTypeThroughputModel::FromJson(core::ReadJsonFile(a.model), a.model);
  const auto data = estimator::ReadTraces(a.traces);
  const auto hardware = HardwareOfTypes(data, a.catalog);
  std::ostringstream out;
  out << "num_nodes,num_replicas,local_bsz,accum_steps,predicted_step_time,"
         "predicted_compute_time,predicted_sync_time,predicted_throughput,log_sigma,step_time,"
         "sync_time,instance_type\n";
  out << std::setprecision(9);
  for (const auto& m : data) {
    auto hw = hardware.find(m.key.instance_type);
    const auto p = model.Predict(m.key, hw == hardware.end() ? estimator::Hardware{} : hw->second,
                                 m.max_gpus_per_node);
    out << m.key.num_nodes << "," << m.key.num_replicas << "," << m.key.local_bsz << ","
        << m.key.accum_steps << "," << p.step_time << "," << p.compute_time << "," << p.sync_time
        << "," << p.throughput << "," << p.log_sigma << "," << m.step_time << "," << m.sync_time
        << "," << m.key.instance_type << "\n";
  }
  std::cout << out.str();
}

}  // namespace

void RegisterFitCommands(CLI::App& app) {
  auto fa = std::make_shared<FitArgs>();
  CLI::App* fit = app.add_subcommand(
      "fit",
      "Fit the throughput model (compute, all-reduce and step time per configuration) to trace "
      "CSVs and write it as JSON");
  fit->add_option("traces", fa->traces,
                  "Trace CSVs (placement,local_bsz,step_time,sync_time or "
                  "num_nodes,num_replicas,local_bsz,step_time,sync_time; optional accum_steps, "
                  "instance_type); rows of the same configuration are averaged")
      ->required();
  fit->add_option("-o,--output", fa->output, "Model JSON to write (written atomically)")
      ->required();
  fit->add_option("--catalog", fa->catalog,
                  "Catalog CSV for the hardware of the rows' instance types (prefix '+' to extend "
                  "the embedded one; a row may give a GPU's figures: gpu_fp32_tflops, "
                  "gpu_memory_bandwidth_gbs); default $CLOUDTUNE_CATALOG");
  fit->add_option("--gradient-bytes", fa->options.gradient_bytes,
                  "Bytes a step all-reduces (the model's gradients; 0 = unknown): carries the "
                  "network a measured type ran at to the types it projects");
  fit->add_option("--obs-sigma", fa->options.fit.obs_sigma,
                  "Assumed std. dev. of log(time) of one measurement")
      ->capture_default_str();
  fit->add_option("--huber", fa->options.fit.huber_k,
                  "Huber threshold in units of --obs-sigma (0 = least squares)")
      ->capture_default_str();
  fit->add_option("--compute-weight", fa->options.fit.compute_weight,
                  "Weight of the compute-time residuals relative to step time")
      ->capture_default_str();
  fit->add_option("--prior-scale", fa->options.fit.prior_scale,
                  "Multiplies the priors' std. devs. (larger = weaker priors)")
      ->capture_default_str();
  fit->add_option("--node-effect-sigma", fa->options.fit.node_effect_sigma,
                  "Prior std. dev. of the per-node-count all-reduce effects (log scale)")
      ->capture_default_str();
  fit->add_option(
         "--placement-effect-sigma", fa->options.fit.placement_effect_sigma,
         "Prior std. dev. of the per-(num_nodes, num_replicas) all-reduce effects (log scale)")
      ->capture_default_str();
  fit->add_option("--batch-effect-sigma", fa->options.fit.batch_effect_sigma,
                  "Prior std. dev. of the per-batch-size compute effects (log scale)")
      ->capture_default_str();
  fit->add_option(
         "--compute-effect-sigma", fa->options.fit.compute_effect_sigma,
         "Prior std. dev. of the per-(num_nodes, num_replicas) compute effects (log scale)")
      ->capture_default_str();
  fit->add_option("--sync-batch-effect-sigma", fa->options.fit.sync_batch_effect_sigma,
                  "Prior std. dev. of the per-batch-size all-reduce effects (log scale)")
      ->capture_default_str();
  fit->add_option("--growth-sigma", fa->options.fit.growth_sigma,
                  "Std. dev. of the all-reduce's growth exponent beyond the replica counts seen "
                  "(widens those predictions; 0 = off)")
      ->capture_default_str();
  fit->add_flag("--loo-widening,!--no-loo-widening", fa->options.fit.loo_widening,
                "Widen the stated uncertainty by the fit's own leave-one-out errors where they "
                "exceed it (on by default)");
  fit->callback([fa] { RunFit(*fa); });

  auto pa = std::make_shared<PredictArgs>();
  CLI::App* predict = app.add_subcommand(
      "predict",
      "Predict step, compute and sync time of every configuration in trace CSVs from a fitted "
      "model; prints CSV on stdout");
  predict->add_option("model", pa->model, "Model JSON written by `cloudtune fit`")->required();
  predict->add_option("traces", pa->traces, "Trace CSVs whose configurations to predict")
      ->required();
  predict->add_option("--catalog", pa->catalog,
                      "Catalog CSV for the hardware of instance types the model did not measure "
                      "(prefix '+' to extend the embedded one; a row may give a GPU's figures: "
                      "gpu_fp32_tflops, gpu_memory_bandwidth_gbs); default $CLOUDTUNE_CATALOG");
  predict->callback([pa] { RunPredict(*pa); });
}

}  // namespace cloudtune::cli
