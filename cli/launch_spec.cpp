#include "cli/launch_spec.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli/sidecar_reader.h"
#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "estimator/core/types.h"
#include "search/recommend.h"

namespace cloudtune::cli {
namespace {

[[noreturn]] void Fail(const std::string& where, const std::string& what) {
  throw InputError(where + ": " + what);
}

int IntField(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null())
    Fail(where, std::string("proposed.config.") + key + ": missing");
  if (!it->is_number_integer() && !(it->is_number() && std::floor(it->get<double>()) == *it))
    Fail(where, std::string("proposed.config.") + key + ": not an integer (" + it->dump() + ")");
  // Counts and batches of a real job are far below this; it keeps every product below 2^63.
  constexpr double kMax = 1e7;
  const double v = it->get<double>();
  if (!(std::fabs(v) <= kMax))
    Fail(where, std::string("proposed.config.") + key + ": " + it->dump() + " is out of range");
  return static_cast<int>(v);
}

std::string Format(double v) {
  std::ostringstream s;
  s.precision(6);
  s << v;
  return s.str();
}

// Kubernetes and SkyPilot accept lower-case names of letters, digits and '-'.
bool ValidName(const std::string& n) {
  static const std::regex re("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?");
  return std::regex_match(n, re);
}

void Check(const LaunchSpecOptions& options) {
  std::string error;
  if (!options.IsValid(&error)) throw InputError("launch-spec: " + error);
}

std::pair<int, int> NodeRange(const LaunchPlan& p, const LaunchSpecOptions& o) {
  const int lo = o.min_nodes > 0 ? o.min_nodes : (p.spot ? 1 : p.nodes);
  const int hi = o.max_nodes > 0 ? o.max_nodes : p.nodes;
  if (lo > hi)
    throw InputError("launch-spec: --min-nodes " + std::to_string(lo) + " exceeds the maximum " +
                     std::to_string(hi));
  return {lo, hi};
}

std::string Dump(const YAML::Emitter& e) { return std::string(e.c_str()) + "\n"; }

}  // namespace

bool LaunchSpecOptions::IsValid(std::string* error) const {
  auto fail = [&](const std::string& m) {
    if (error) *error = m;
    return false;
  };
  if (!ValidName(name))
    return fail("name '" + name + "' must be lower-case letters, digits and '-' (at most 63)");
  if (command.find_first_not_of(" \t") == std::string::npos) return fail("command is empty");
  if (rdzv_port <= 0 || rdzv_port > 65535)
    return fail("rdzv_port " + std::to_string(rdzv_port) + " is not in (0, 65535]");
  if (min_nodes < 0 || max_nodes < 0) return fail("min_nodes and max_nodes must be >= 0");
  if (min_nodes > 0 && max_nodes > 0 && min_nodes > max_nodes)
    return fail("min_nodes " + std::to_string(min_nodes) + " > max_nodes " +
                std::to_string(max_nodes));
  if (max_restarts < 0) return fail("max_restarts must be >= 0");
  return true;
}

LaunchPlan PlanFromRecommendation(const nlohmann::json& doc, const std::string& where,
                                  const search::Catalog& catalog) {
  if (!doc.is_object()) Fail(where, "not a JSON object");
  const auto proposed = doc.find("proposed");
  if (proposed == doc.end() || proposed->is_null())
    Fail(where, "no 'proposed' configuration (not a cloudtune recommendation?)");
  if (!proposed->is_object() || !proposed->contains("config") || !(*proposed)["config"].is_object())
    Fail(where, "proposed.config: missing or not an object");
  const nlohmann::json& c = (*proposed)["config"];
  LaunchPlan p;
  p.source = where;
  if (!c.contains("instance_type") || !c["instance_type"].is_string() ||
      c["instance_type"].get<std::string>().empty())
    Fail(where, "proposed.config.instance_type: missing or not a string");
  p.instance_type = c["instance_type"].get<std::string>();
  p.nodes = IntField(c, "nodes", where);
  p.gpus_per_node = IntField(c, "gpus_per_node", where);
  p.local_bsz = IntField(c, "local_bsz", where);
  p.accum_steps = c.contains("accum_steps") ? IntField(c, "accum_steps", where) : 0;
  if (p.nodes < 1) Fail(where, "proposed.config.nodes: " + std::to_string(p.nodes) + " < 1");
  if (p.gpus_per_node < 1)
    Fail(where, "proposed.config.gpus_per_node: " + std::to_string(p.gpus_per_node) + " < 1");
  if (p.local_bsz < 1)
    Fail(where, "proposed.config.local_bsz: " + std::to_string(p.local_bsz) + " < 1");
  if (p.accum_steps < 0)
    Fail(where, "proposed.config.accum_steps: " + std::to_string(p.accum_steps) + " < 0");
  const long long replicas_ll = static_cast<long long>(p.nodes) * p.gpus_per_node;
  if (replicas_ll > 1e7)
    Fail(where, "proposed.config: nodes x gpus_per_node = " + std::to_string(replicas_ll) +
                    " is out of range");
  const int replicas = static_cast<int>(replicas_ll);
  if (c.contains("replicas") && IntField(c, "replicas", where) != replicas)
    Fail(where, "proposed.config: replicas " + c["replicas"].dump() + " contradicts nodes " +
                    std::to_string(p.nodes) + " x gpus_per_node " +
                    std::to_string(p.gpus_per_node));
  const long long global =
      static_cast<long long>(p.local_bsz) * replicas * (static_cast<long long>(p.accum_steps) + 1);
  if (global > 1e9)
    Fail(where, "proposed.config: global batch " + std::to_string(global) + " is out of range");
  p.global_batch = static_cast<int>(global);
  if (c.contains("global_batch") && IntField(c, "global_batch", where) != p.global_batch)
    Fail(where, "proposed.config: global_batch " + c["global_batch"].dump() +
                    " contradicts local_bsz x replicas x (accum_steps + 1) = " +
                    std::to_string(p.global_batch));
  std::string purchase = "on-demand";
  if (c.contains("purchase")) {
    if (!c["purchase"].is_string()) Fail(where, "proposed.config.purchase: not a string");
    purchase = c["purchase"].get<std::string>();
  }
  core::Purchase pu;
  if (!core::ParsePurchase(purchase, &pu))
    Fail(where, "proposed.config.purchase: '" + purchase + "' is not spot, on-demand or anchor");
  if (pu == core::Purchase::kAnchor)
    Fail(where,
         "proposed.config.purchase: 'anchor' (one on-demand node, spot workers) needs two node "
         "groups; launch it as two jobs or ask `cloudtune recommend` for spot or on-demand");
  p.spot = pu == core::Purchase::kSpot;
  const int t = catalog.Find(p.instance_type);
  if (t >= 0) {
    const search::InstanceType& type = catalog.types[t];
    p.cloud = type.cloud;
    p.gpu_model = type.gpu_model;
    if (p.gpus_per_node > type.gpus)
      Fail(where, "proposed.config: gpus_per_node " + std::to_string(p.gpus_per_node) + " but " +
                      p.instance_type + " has " + std::to_string(type.gpus) + " GPU(s)");
    if (p.spot && !type.has_spot())
      Fail(where, "proposed.config: purchase spot but " + p.instance_type +
                      " has no spot offer in the catalog");
  }
  if (proposed->contains("checkpoint_interval_s") &&
      (*proposed)["checkpoint_interval_s"].is_number())
    p.checkpoint_interval_s = (*proposed)["checkpoint_interval_s"].get<double>();
  if (doc.contains("current") && doc["current"].is_object() && doc["current"].contains("config") &&
      doc["current"]["config"].is_object()) {
    const auto& cur = doc["current"]["config"];
    if (cur.contains("global_batch") && cur["global_batch"].is_number() &&
        cur["global_batch"].get<double>() > 0)
      p.lr_scale = p.global_batch / cur["global_batch"].get<double>();
  }
  p.env["CLOUDTUNE"] = "1";
  p.env["CLOUDTUNE_INSTANCE_TYPE"] = p.instance_type;
  return p;
}

LaunchPlan PlanFirstLaunch(search::Config start, const search::ObjectiveOptions& objective,
                           const search::CostOptions& cost, const search::Catalog& catalog,
                           std::string* reason) {
  const int t = catalog.Find(start.type);
  if (t < 0)
    throw InputError("--start: instance type '" + start.type + "' is not in the catalog (" +
                     catalog.source + ")");
  const search::LaunchAdvice advice =
      search::AdviseLaunch(catalog.types[t], start.nodes, objective, cost);
  if (reason) *reason = advice.reason;
  start.purchase = advice.purchase;
  const nlohmann::json doc = {{"proposed",
                               {{"config",
                                 {{"instance_type", start.type},
                                  {"nodes", start.nodes},
                                  {"gpus_per_node", start.gpus_per_node},
                                  {"local_bsz", start.local_bsz},
                                  {"accum_steps", start.accum_steps},
                                  {"purchase", core::PurchaseName(start.purchase)}}}}}};
  LaunchPlan p = PlanFromRecommendation(doc, "--start", catalog);
  p.env["CLOUDTUNE_OBJECTIVE"] = core::GoalName(objective.goal);
  auto number = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  if (objective.deadline_h > 0) p.env["CLOUDTUNE_DEADLINE_HOURS"] = number(objective.deadline_h);
  if (objective.budget_usd > 0) p.env["CLOUDTUNE_BUDGET_USD"] = number(objective.budget_usd);
  return p;
}

LaunchPlan ReadLaunchPlan(const std::string& path, const search::Catalog& catalog) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // One JSON document (recommend --format json, GET /v1/recommendation) or JSON Lines.
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded() && doc.is_object() && !doc.contains("kind"))
    return PlanFromRecommendation(doc, path, catalog);
  const Sidecar s = ReadSidecar(path);
  const SidecarRecord* rec = s.Last("recommendation");
  if (!rec)
    throw InputError(path + ": no recommendation record yet (the job has not recommended " +
                     "anything; wait for one or run `cloudtune recommend --from " + path + "`)");
  LaunchPlan p = PlanFromRecommendation(rec->json, path + ":" + std::to_string(rec->line), catalog);
  if (const SidecarRecord* start = s.Last("start");
      start && start->json.contains("options") && start->json["options"].is_object()) {
    for (const auto& [k, v] : start->json["options"].items()) {
      // Carry every setting the job ran with, except the machine it ran on (the plan names the
      // new one) and empty values (the defaults).
      if (!v.is_string() || v.get<std::string>().empty()) continue;
      if (k.rfind("CLOUDTUNE", 0) != 0 || k == "CLOUDTUNE_INSTANCE_TYPE") continue;
      p.env[k] = v.get<std::string>();
    }
  }
  return p;
}

std::string ExpandCommand(const LaunchPlan& p, const std::string& command) {
  const std::map<std::string, std::string> values{
      {"{local_bsz}", std::to_string(p.local_bsz)},
      {"{global_batch}", std::to_string(p.global_batch)},
      {"{accum_steps}", std::to_string(p.accum_steps)},
      {"{nodes}", std::to_string(p.nodes)},
      {"{gpus_per_node}", std::to_string(p.gpus_per_node)},
      {"{replicas}", std::to_string(p.nodes * p.gpus_per_node)},
      {"{lr_scale}", Format(p.lr_scale)}};
  std::string out;
  for (size_t i = 0; i < command.size();) {
    bool replaced = false;
    if (command[i] == '{') {
      for (const auto& [key, value] : values) {
        if (command.compare(i, key.size(), key) == 0) {
          out += value;
          i += key.size();
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += command[i++];
  }
  return out;
}

std::string SkyPilotTaskYaml(const LaunchPlan& p, const LaunchSpecOptions& o) {
  Check(o);
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << o.name;
  e << YAML::Key << "resources" << YAML::Value << YAML::BeginMap;
  if (!p.cloud.empty()) e << YAML::Key << "cloud" << YAML::Value << p.cloud;
  e << YAML::Key << "instance_type" << YAML::Value << p.instance_type;
  if (!p.gpu_model.empty())
    e << YAML::Key << "accelerators" << YAML::Value
      << p.gpu_model + ":" + std::to_string(p.gpus_per_node);
  e << YAML::Key << "use_spot" << YAML::Value << p.spot;
  e << YAML::EndMap;
  e << YAML::Key << "num_nodes" << YAML::Value << p.nodes;
  e << YAML::Key << "envs" << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : p.env) e << YAML::Key << k << YAML::Value << YAML::DoubleQuoted << v;
  e << YAML::EndMap;
  // SkyPilot starts `run` on every node with SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (one per line,
  // the head first) and SKYPILOT_NUM_GPUS_PER_NODE set.
  std::ostringstream run;
  run << "MASTER_ADDR=$(echo \"$SKYPILOT_NODE_IPS\" | head -n1)\n"
      << "torchrun --nnodes=" << p.nodes << " --nproc-per-node=" << p.gpus_per_node
      << " --node-rank=$SKYPILOT_NODE_RANK --rdzv-backend=c10d"
      << " --rdzv-endpoint=$MASTER_ADDR:" << o.rdzv_port << " --rdzv-id=" << o.name
      << " --max-restarts=" << o.max_restarts << " " << ExpandCommand(p, o.command) << "\n";
  e << YAML::Key << "run" << YAML::Value << YAML::Literal << run.str();
  e << YAML::EndMap;
  return Dump(e);
}

std::string PyTorchJobYaml(const LaunchPlan& p, const LaunchSpecOptions& o) {
  Check(o);
  if (o.image.empty())
    throw InputError("launch-spec: a PyTorchJob needs the workers' container image (--image)");
  const auto [lo, hi] = NodeRange(p, o);
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "apiVersion" << YAML::Value << "kubeflow.org/v1";
  e << YAML::Key << "kind" << YAML::Value << "PyTorchJob";
  e << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap << YAML::Key << "name"
    << YAML::Value << o.name << YAML::EndMap;
  e << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "elasticPolicy" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "rdzvBackend" << YAML::Value << "c10d";
  e << YAML::Key << "rdzvPort" << YAML::Value << o.rdzv_port;
  e << YAML::Key << "minReplicas" << YAML::Value << lo;
  e << YAML::Key << "maxReplicas" << YAML::Value << hi;
  e << YAML::Key << "maxRestarts" << YAML::Value << o.max_restarts;
  e << YAML::EndMap;
  e << YAML::Key << "nprocPerNode" << YAML::Value << std::to_string(p.gpus_per_node);
  e << YAML::Key << "pytorchReplicaSpecs" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "Worker" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "replicas" << YAML::Value << p.nodes;
  e << YAML::Key << "restartPolicy" << YAML::Value << "OnFailure";
  e << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  // Well-known node labels: the instance type (Kubernetes) and the capacity type (Karpenter).
  e << YAML::Key << "nodeSelector" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "node.kubernetes.io/instance-type" << YAML::Value << p.instance_type;
  e << YAML::Key << "karpenter.sh/capacity-type" << YAML::Value << (p.spot ? "spot" : "on-demand");
  e << YAML::EndMap;
  e << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  // The training operator finds the container named "pytorch".
  e << YAML::Key << "name" << YAML::Value << "pytorch";
  e << YAML::Key << "image" << YAML::Value << o.image;
  e << YAML::Key << "command" << YAML::Value << YAML::BeginSeq << "torchrun";
  std::istringstream words(ExpandCommand(p, o.command));
  for (std::string w; words >> w;) e << w;
  e << YAML::EndSeq;
  e << YAML::Key << "env" << YAML::Value << YAML::BeginSeq;
  for (const auto& [k, v] : p.env)
    e << YAML::BeginMap << YAML::Key << "name" << YAML::Value << k << YAML::Key << "value"
      << YAML::Value << YAML::DoubleQuoted << v << YAML::EndMap;
  e << YAML::EndSeq;
  e << YAML::Key << "resources" << YAML::Value << YAML::BeginMap << YAML::Key << "limits"
    << YAML::Value << YAML::BeginMap << YAML::Key << "nvidia.com/gpu" << YAML::Value
    << p.gpus_per_node << YAML::EndMap << YAML::EndMap;
  e << YAML::EndMap << YAML::EndSeq;  // container, containers
  e << YAML::EndMap << YAML::EndMap;  // template.spec, template
  e << YAML::EndMap << YAML::EndMap;  // Worker, pytorchReplicaSpecs
  e << YAML::EndMap << YAML::EndMap;  // spec, document
  return Dump(e);
}

std::string TorchrunCommand(const LaunchPlan& p, const LaunchSpecOptions& o) {
  Check(o);
  const auto [lo, hi] = NodeRange(p, o);
  std::ostringstream s;
  for (const auto& [k, v] : p.env) {
    // Single-quote values for the shell ('\'' closes, escapes and reopens).
    std::string q;
    for (char ch : v) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    s << k << "='" << q << "' ";
  }
  s << "torchrun --nnodes=" << lo << ":" << hi << " --nproc-per-node=" << p.gpus_per_node
    << " --rdzv-backend=c10d --rdzv-endpoint=${CLOUDTUNE_RDZV_HOST:-127.0.0.1}:" << o.rdzv_port
    << " --rdzv-id=" << o.name << " --max-restarts=" << o.max_restarts << " "
    << ExpandCommand(p, o.command);
  return s.str() + "\n";
}

}  // namespace cloudtune::cli
