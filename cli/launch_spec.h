// `cloudtune launch-spec`: turns a recommendation into what the user's engine runs: a SkyPilot task
// YAML, a Kubeflow PyTorchJob (elastic, c10d rendezvous) or a plain torchrun command line.
//
// The recommendation comes from a job's sidecar (its last `recommendation` record, with the
// `start` record's CLOUDTUNE_* settings), from `cloudtune recommend --format json`, or from the
// job's HTTP endpoint (GET /v1/recommendation); all three carry
//   "proposed": {"config": {"instance_type", "nodes", "gpus_per_node", "replicas", "local_bsz",
//                           "accum_steps", "global_batch", "purchase"}, "checkpoint_interval_s"}
// (search/recommend.h). YAML is written with yaml-cpp. Field names follow the engines' documented
// schemas: SkyPilot's task YAML (name, resources.{cloud, instance_type, accelerators, use_spot},
// num_nodes, envs, run) and Kubeflow training-operator's PyTorchJob v1 (spec.elasticPolicy.
// {rdzvBackend, minReplicas, maxReplicas, maxRestarts}, spec.nprocPerNode,
// spec.pytorchReplicaSpecs.Worker).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "search/catalog.h"
#include "search/search.h"

namespace cloudtune::cli {

// What to launch, read from a recommendation.
struct LaunchPlan {
  std::string instance_type;  // catalog name (or what the job called its machine)
  std::string cloud;          // "aws", "gcp", "azure" from the catalog; "" when not in it
  std::string gpu_model;      // catalog GPU model ("T4"); "" when not in the catalog
  int nodes = 1;              // machines
  int gpus_per_node = 1;      // workers per machine (torchrun --nproc-per-node)
  int local_bsz = 0;          // samples per worker per micro-step
  int accum_steps = 0;        // extra accumulation micro-steps per optimizer step
  int global_batch = 0;       // samples per optimizer step = local_bsz * replicas * (accum + 1)
  bool spot = false;          // purchase "spot" (else on demand)
  double checkpoint_interval_s = 0;  // the recommendation's checkpoint interval; 0 = none given
  // Learning-rate multiplier for the new batch: global_batch / the current global batch (the
  // linear scaling rule; 1 when the recommendation names no current configuration).
  double lr_scale = 1;
  std::map<std::string, std::string> env;  // CLOUDTUNE_* settings to carry over
  std::string source;                      // "FILE[:LINE]" the plan was read from
};

struct LaunchSpecOptions {
  // Job name (SkyPilot task name, PyTorchJob metadata.name, torchrun --rdzv-id). Lower-case
  // letters, digits and '-' (a Kubernetes name).
  std::string name = "cloudtune-job";
  // The training command torchrun starts on every worker. Placeholders {local_bsz},
  // {global_batch}, {accum_steps}, {nodes}, {gpus_per_node}, {replicas}, {lr_scale} are replaced
  // by the plan's values. Must not be empty.
  std::string command = "train.py --batch {local_bsz}";
  // Container image of the PyTorchJob's workers (required for that format only).
  std::string image;
  // c10d rendezvous port (torchrun's default 29400). In (0, 65535].
  int rdzv_port = 29400;
  // Elastic bounds on the node count: torchrun --nnodes=MIN:MAX, the PyTorchJob's
  // minReplicas/maxReplicas. 0 = the plan's node count (min 1 when the plan runs spot, so that the
  // job survives a revocation). >= 0; min <= max when both are set.
  int min_nodes = 0;
  int max_nodes = 0;
  // torchrun --max-restarts and the PyTorchJob's maxRestarts (failures and membership changes).
  int max_restarts = 3;
  bool IsValid(std::string* error) const;
};

// The plan of one recommendation document (a `recommend` JSON, the HTTP endpoint's JSON or a
// sidecar record). `where` names the source in messages; `catalog` fills cloud and GPU model.
// Throws cloudtune::InputError "WHERE: field: what" on a missing, mistyped or contradictory field
// (replicas != nodes x gpus_per_node, a global batch that is not local x replicas x (accum + 1), a
// purchase other than spot/on-demand, more GPUs per node than the instance type has).
LaunchPlan PlanFromRecommendation(const nlohmann::json& doc, const std::string& where,
                                  const search::Catalog& catalog);
// A job's first launch (`launch-spec --start`), before anything is measured: `start` (its
// instance type, nodes, GPUs per node, local batch and accumulation) bought as search::AdviseLaunch
// advises for `objective` and `cost` (its reason in *reason), checked as a recommendation's
// proposal is. The objective travels in env (CLOUDTUNE_OBJECTIVE; CLOUDTUNE_DEADLINE_HOURS and
// CLOUDTUNE_BUDGET_USD when set). Throws cloudtune::InputError "--start: ..." for a type the
// catalog does not know or a configuration it cannot run.
LaunchPlan PlanFirstLaunch(search::Config start, const search::ObjectiveOptions& objective,
                           const search::CostOptions& cost, const search::Catalog& catalog,
                           std::string* reason);
// Reads `path`: one JSON document (a recommendation) or a JSON Lines sidecar (its last
// `recommendation` record, plus the `start` record's non-empty CLOUDTUNE_* options).
LaunchPlan ReadLaunchPlan(const std::string& path, const search::Catalog& catalog);

// The training command with its placeholders replaced.
std::string ExpandCommand(const LaunchPlan& plan, const std::string& command);

// The three formats. Throw cloudtune::InputError on invalid options (or a PyTorchJob without an
// image).
std::string SkyPilotTaskYaml(const LaunchPlan& plan, const LaunchSpecOptions& options);
std::string PyTorchJobYaml(const LaunchPlan& plan, const LaunchSpecOptions& options);
// One line: "ENV=... torchrun --nnodes=MIN:MAX --nproc-per-node=G --rdzv-backend=c10d
// --rdzv-endpoint=$CLOUDTUNE_RDZV_HOST:PORT --rdzv-id=NAME --max-restarts=N COMMAND".
std::string TorchrunCommand(const LaunchPlan& plan, const LaunchSpecOptions& options);

}  // namespace cloudtune::cli
