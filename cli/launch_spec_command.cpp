// cloudtune launch-spec SOURCE --format skypilot|pytorchjob|torchrun: what the user's engine runs
// to act on a recommendation (cli/launch_spec.h). SOURCE is a sidecar, a `recommend --format json`
// file, or a running job's endpoint (http://HOST:PORT, asked for GET /v1/recommendation). With
// --start instead of SOURCE: a new job's first launch, bought as search::AdviseLaunch advises.
#include <chrono>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "cli/launch_spec.h"
#include "estimator/core/env.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "plugin/runtime/fit_and_search.h"
#include "plugin/runtime/http_client.h"
#include "plugin/runtime/options.h"

namespace cloudtune::cli {
namespace {

struct LaunchArgs {
  std::string source, format = "skypilot", catalog, out, start, objective;
  double deadline = 0, budget = 0;
  // Given on the command line (else CLOUDTUNE_DEADLINE_HOURS, CLOUDTUNE_BUDGET_USD).
  CLI::Option *deadline_given = nullptr, *budget_given = nullptr;
  LaunchSpecOptions options;
};

// A new job's first launch: its objective and costs as the job will read them (the CLOUDTUNE_*
// settings of this environment), overridden by --objective, --deadline and --budget.
LaunchPlan FirstLaunch(const LaunchArgs& a, const search::Catalog& catalog) {
  std::string error;
  runtime::Options o = runtime::Options::FromEnv(&error);
  if (!error.empty()) throw InputError(error);
  core::Goal goal;
  if (!a.objective.empty() && !core::ParseGoal(a.objective, &goal))
    throw InputError("--objective: '" + a.objective + "' (expected cost or time)");
  if (!a.objective.empty()) o.objective = a.objective;
  if (a.deadline_given->count() > 0) o.deadline_hours = a.deadline;
  if (a.budget_given->count() > 0) o.budget_usd = a.budget;
  if (!o.IsValid(&error)) throw InputError("launch-spec --start: " + error);
  const runtime::FitAndSearchOptions fo = runtime::SearchOptionsFrom(o, &catalog);
  std::string reason;
  LaunchPlan p = PlanFirstLaunch(ParseConfigArg(a.start, "--start"), fo.recommend.objective,
                                 fo.recommend.cost, catalog, &reason);
  std::cerr << "cloudtune: launch " << p.instance_type << " " << reason << "\n";
  return p;
}

LaunchPlan FromEndpoint(const std::string& url, const search::Catalog& catalog) {
  runtime::HttpUrl u;
  std::string error;
  if (!runtime::ParseHttpUrl(url, &u, &error)) throw InputError(url + ": " + error);
  runtime::HttpRequestSpec spec;
  spec.target = "/v1/recommendation";
  spec.read_timeout = std::chrono::milliseconds(10000);
  spec.max_body_bytes = 64 << 20;
  const runtime::HttpAnswer a = runtime::HttpExchange(u, spec);
  const std::string where = url + spec.target;
  if (!a.ok) throw InputError(where + ": " + a.error);
  if (a.status == 503) throw InputError(where + ": the job has no recommendation yet (503)");
  if (a.status != 200) throw InputError(where + ": HTTP " + std::to_string(a.status));
  return PlanFromRecommendation(core::ParseJson(a.body, where), where, catalog);
}

void Run(const LaunchArgs& a) {
  const std::string catalog_path =
      a.catalog.empty() ? core::GetEnv("CLOUDTUNE_CATALOG").value_or("") : a.catalog;
  const search::Catalog catalog = search::ResolveCatalog(catalog_path);
  if (a.source.empty() == a.start.empty())
    throw InputError(
        "launch-spec: give either a SOURCE (a recommendation) or --start (a first "
        "launch), not both");
  if (!a.source.empty() &&
      (!a.objective.empty() || a.deadline_given->count() > 0 || a.budget_given->count() > 0))
    throw InputError("--objective, --deadline and --budget go with --start (a SOURCE has its own)");
  const LaunchPlan plan = !a.start.empty()                    ? FirstLaunch(a, catalog)
                          : a.source.rfind("http://", 0) == 0 ? FromEndpoint(a.source, catalog)
                                                              : ReadLaunchPlan(a.source, catalog);
  std::string text;
  if (a.format == "skypilot") {
    text = SkyPilotTaskYaml(plan, a.options);
  } else if (a.format == "pytorchjob") {
    text = PyTorchJobYaml(plan, a.options);
  } else if (a.format == "torchrun") {
    text = TorchrunCommand(plan, a.options);
  } else {
    throw InputError("--format: '" + a.format + "' is not skypilot, pytorchjob or torchrun");
  }
  Output(a.out, text);
}

}  // namespace

void RegisterLaunchSpecCommand(CLI::App& app) {
  auto a = std::make_shared<LaunchArgs>();
  CLI::App* c = app.add_subcommand(
      "launch-spec",
      "Write what your engine runs to act on a recommendation: a SkyPilot task, a Kubeflow "
      "PyTorchJob (elastic) or a torchrun command");
  c->add_option("source", a->source,
                "A job's sidecar, a `recommend --format json` file, or http://HOST:PORT of a "
                "running job (CLOUDTUNE_HTTP)");
  c->add_option("--start", a->start,
                "Instead of SOURCE, a new job's first launch: TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ"
                "[:ACCUM], on spot when the objective is cost with no deadline and spot's price "
                "with its expected revocations is the lower (the reason goes to stderr)");
  c->add_option("--objective", a->objective,
                "With --start: cost or time (default $CLOUDTUNE_OBJECTIVE, else cost)");
  a->deadline_given = c->add_option(
      "--deadline", a->deadline,
      "With --start: deadline in hours, 0 = none (default $CLOUDTUNE_DEADLINE_HOURS)");
  a->budget_given =
      c->add_option("--budget", a->budget,
                    "With --start: budget in USD, 0 = none (default $CLOUDTUNE_BUDGET_USD)");
  c->add_option("--format", a->format, "skypilot, pytorchjob or torchrun (default skypilot)");
  c->add_option("--name", a->options.name, "Job name (default cloudtune-job)");
  c->add_option("--command", a->options.command,
                "Training command torchrun starts; {local_bsz} {global_batch} {accum_steps} "
                "{nodes} {gpus_per_node} {replicas} {lr_scale} are filled in (default "
                "'train.py --batch {local_bsz}')");
  c->add_option("--image", a->options.image, "Container image (pytorchjob)");
  c->add_option("--rdzv-port", a->options.rdzv_port, "c10d rendezvous port (default 29400)");
  c->add_option("--min-nodes", a->options.min_nodes,
                "Elastic minimum node count (default: the proposal's; 1 on spot)");
  c->add_option("--max-nodes", a->options.max_nodes,
                "Elastic maximum node count (default: the proposal's)");
  c->add_option("--max-restarts", a->options.max_restarts,
                "Restarts (failures and membership changes) before giving up (default 3)");
  c->add_option("--catalog", a->catalog,
                "Catalog CSV replacing the embedded one (prefix '+' to extend it); default "
                "$CLOUDTUNE_CATALOG");
  c->add_option("-o,--output", a->out, "Write to this file instead of stdout");
  c->callback([a] { Run(*a); });
}

}  // namespace cloudtune::cli
