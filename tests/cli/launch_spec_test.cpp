// launch-spec: each format is parsed back with yaml-cpp (or split as a command line) and checked
// field by field against the recommendation; contradictory or missing input gets a message naming
// the source and the field; the CLI reads a sidecar, a recommend JSON and a job's endpoint.
#include "cli/launch_spec.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <fstream>

#include "estimator/core/error.h"
#include "estimator/core/json_file.h"
#include "search/catalog.h"
#include "tests/cli/cli_runner.h"
#include "tests/fake_http.h"

namespace cloudtune::cli {
namespace {

const std::string kData = std::string(CLOUDTUNE_SOURCE_DIR) + "/tests/data/";
// Proposes 1x Standard_NC4as_T4_v3 (Azure, 1 T4) spot, batch 64; the current global batch is 138.
const std::string kRecommendation = kData + "status_recommendation.json";
const std::string kSidecar = kData + "fmnist_sidecar.jsonl";

nlohmann::json Doc() { return core::ReadJsonFile(kRecommendation); }

// A recommendation proposing `nodes` x g4dn.12xlarge (4 T4) on demand at local batch 32.
nlohmann::json Proposal(int nodes, int gpus, const std::string& purchase = "on-demand") {
  return {{"proposed",
           {{"config",
             {{"instance_type", "g4dn.12xlarge"},
              {"nodes", nodes},
              {"gpus_per_node", gpus},
              {"replicas", nodes * gpus},
              {"local_bsz", 32},
              {"accum_steps", 1},
              {"global_batch", 32 * nodes * gpus * 2},
              {"purchase", purchase}}}}},
          {"current", {{"config", {{"global_batch", 64}}}}}};
}

std::string Message(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchSpec, DefaultOptionsAreValid) {
  std::string error;
  EXPECT_TRUE(LaunchSpecOptions{}.IsValid(&error)) << error;
  LaunchSpecOptions o;
  o.name = "Bad_Name";
  EXPECT_FALSE(o.IsValid(&error));
  EXPECT_NE(error.find("Bad_Name"), std::string::npos);
  o = {};
  o.min_nodes = 3;
  o.max_nodes = 2;
  EXPECT_FALSE(o.IsValid(&error));
}

TEST(LaunchSpec, PlanFromARecommendation) {
  const LaunchPlan p = PlanFromRecommendation(Doc(), "rec.json", search::DefaultCatalog());
  EXPECT_EQ(p.instance_type, "Standard_NC4as_T4_v3");
  EXPECT_EQ(p.cloud, "azure");
  EXPECT_EQ(p.gpu_model, "T4");
  EXPECT_EQ(p.nodes, 1);
  EXPECT_EQ(p.gpus_per_node, 1);
  EXPECT_EQ(p.local_bsz, 64);
  EXPECT_EQ(p.global_batch, 64);
  EXPECT_TRUE(p.spot);
  EXPECT_NEAR(p.lr_scale, 64.0 / 138.0, 1e-12);
  EXPECT_GT(p.checkpoint_interval_s, 0);
  EXPECT_EQ(p.env.at("CLOUDTUNE"), "1");
  EXPECT_EQ(p.env.at("CLOUDTUNE_INSTANCE_TYPE"), "Standard_NC4as_T4_v3");
}

TEST(LaunchSpec, SkyPilotTaskRoundTrips) {
  LaunchPlan p = PlanFromRecommendation(Proposal(3, 4, "spot"), "r", search::DefaultCatalog());
  p.env["CLOUDTUNE_OBJECTIVE"] = "cost";
  LaunchSpecOptions o;
  o.name = "fmnist";
  o.command = "train.py --batch {local_bsz} --accum {accum_steps} --lr-scale {lr_scale}";
  const YAML::Node y = YAML::Load(SkyPilotTaskYaml(p, o));
  EXPECT_EQ(y["name"].as<std::string>(), "fmnist");
  EXPECT_EQ(y["resources"]["cloud"].as<std::string>(), "aws");
  EXPECT_EQ(y["resources"]["instance_type"].as<std::string>(), "g4dn.12xlarge");
  EXPECT_EQ(y["resources"]["accelerators"].as<std::string>(), "T4:4");
  EXPECT_TRUE(y["resources"]["use_spot"].as<bool>());
  EXPECT_EQ(y["num_nodes"].as<int>(), 3);
  EXPECT_EQ(y["envs"]["CLOUDTUNE"].as<std::string>(), "1");
  EXPECT_EQ(y["envs"]["CLOUDTUNE_OBJECTIVE"].as<std::string>(), "cost");
  const std::string run = y["run"].as<std::string>();
  EXPECT_NE(run.find("--nnodes=3 --nproc-per-node=4"), std::string::npos) << run;
  EXPECT_NE(run.find("--node-rank=$SKYPILOT_NODE_RANK"), std::string::npos) << run;
  EXPECT_NE(run.find("train.py --batch 32 --accum 1 --lr-scale 12"), std::string::npos) << run;
}

TEST(LaunchSpec, PyTorchJobRoundTrips) {
  const LaunchPlan p =
      PlanFromRecommendation(Proposal(2, 4, "spot"), "r", search::DefaultCatalog());
  LaunchSpecOptions o;
  EXPECT_NE(Message([&] { PyTorchJobYaml(p, o); }).find("--image"), std::string::npos);
  o.image = "registry.example/fmnist:1";
  o.max_nodes = 4;
  const YAML::Node y = YAML::Load(PyTorchJobYaml(p, o));
  EXPECT_EQ(y["apiVersion"].as<std::string>(), "kubeflow.org/v1");
  EXPECT_EQ(y["kind"].as<std::string>(), "PyTorchJob");
  const YAML::Node spec = y["spec"];
  EXPECT_EQ(spec["elasticPolicy"]["rdzvBackend"].as<std::string>(), "c10d");
  EXPECT_EQ(spec["elasticPolicy"]["minReplicas"].as<int>(), 1);  // spot: survive a revocation
  EXPECT_EQ(spec["elasticPolicy"]["maxReplicas"].as<int>(), 4);
  EXPECT_EQ(spec["nprocPerNode"].as<std::string>(), "4");
  const YAML::Node w = spec["pytorchReplicaSpecs"]["Worker"];
  EXPECT_EQ(w["replicas"].as<int>(), 2);
  const YAML::Node pod = w["template"]["spec"];
  EXPECT_EQ(pod["nodeSelector"]["node.kubernetes.io/instance-type"].as<std::string>(),
            "g4dn.12xlarge");
  EXPECT_EQ(pod["nodeSelector"]["karpenter.sh/capacity-type"].as<std::string>(), "spot");
  const YAML::Node c = pod["containers"][0];
  EXPECT_EQ(c["name"].as<std::string>(), "pytorch");
  EXPECT_EQ(c["image"].as<std::string>(), o.image);
  EXPECT_EQ(c["command"][0].as<std::string>(), "torchrun");
  EXPECT_EQ(c["command"][1].as<std::string>(), "train.py");
  EXPECT_EQ(c["command"][3].as<std::string>(), "32");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 4);
  bool found = false;
  for (const auto& e : c["env"])
    found |= e["name"].as<std::string>() == "CLOUDTUNE" && e["value"].as<std::string>() == "1";
  EXPECT_TRUE(found);
}

TEST(LaunchSpec, TorchrunCommandIsElasticAndQuoted) {
  LaunchPlan p = PlanFromRecommendation(Proposal(2, 2), "r", search::DefaultCatalog());
  p.env["CLOUDTUNE_SIDECAR"] = "it's here.jsonl";
  LaunchSpecOptions o;
  o.max_nodes = 3;
  const std::string cmd = TorchrunCommand(p, o);
  EXPECT_NE(cmd.find("--nnodes=2:3 --nproc-per-node=2"), std::string::npos) << cmd;  // on demand
  EXPECT_NE(cmd.find("--rdzv-backend=c10d"), std::string::npos);
  EXPECT_NE(cmd.find("CLOUDTUNE_SIDECAR='it'\\''s here.jsonl'"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("train.py --batch 32"), std::string::npos);
  o.min_nodes = 4;
  EXPECT_FALSE(Message([&] { TorchrunCommand(p, o); }).empty());
}

TEST(LaunchSpec, ContradictoryOrMissingFieldsAreNamed) {
  const auto& cat = search::DefaultCatalog();
  auto msg = [&](nlohmann::json d) {
    return Message([&] { PlanFromRecommendation(d, "rec.json", cat); });
  };
  EXPECT_NE(msg({{"action", "stay"}}).find("rec.json: no 'proposed'"), std::string::npos);
  nlohmann::json d = Proposal(2, 4);
  d["proposed"]["config"]["replicas"] = 7;
  EXPECT_NE(msg(d).find("replicas 7 contradicts nodes 2 x gpus_per_node 4"), std::string::npos)
      << msg(d);
  d = Proposal(2, 4);
  d["proposed"]["config"]["global_batch"] = 100;
  EXPECT_NE(msg(d).find("global_batch 100 contradicts"), std::string::npos) << msg(d);
  d = Proposal(1, 8);  // g4dn.12xlarge has 4 GPUs
  EXPECT_NE(msg(d).find("gpus_per_node 8 but g4dn.12xlarge has 4"), std::string::npos) << msg(d);
  d = Proposal(1, 4, "preemptible");
  EXPECT_NE(msg(d).find("purchase: 'preemptible'"), std::string::npos) << msg(d);
  d = Proposal(1, 4, "anchor");
  EXPECT_NE(msg(d).find("'anchor'"), std::string::npos) << msg(d);
  d = Proposal(1, 4);
  d["proposed"]["config"].erase("local_bsz");
  EXPECT_NE(msg(d).find("proposed.config.local_bsz: missing"), std::string::npos) << msg(d);
  d = Proposal(1, 4);  // found by launch_spec_fuzz: converting it to int was undefined
  d["proposed"]["config"]["local_bsz"] = 1e300;
  EXPECT_NE(msg(d).find("proposed.config.local_bsz: 1e+300 is out of range"), std::string::npos)
      << msg(d);
  d = Proposal(1, 4);
  d["proposed"]["config"]["nodes"] = "two";
  EXPECT_NE(msg(d).find("proposed.config.nodes: not an integer"), std::string::npos) << msg(d);
}

TEST(LaunchSpec, SidecarCarriesTheJobsSettings) {
  const LaunchPlan p = ReadLaunchPlan(kSidecar, search::DefaultCatalog());
  EXPECT_NE(p.source.find("fmnist_sidecar.jsonl:"), std::string::npos);
  EXPECT_EQ(p.env.at("CLOUDTUNE_DEADLINE_HOURS"), "2");
  EXPECT_EQ(p.env.at("CLOUDTUNE_TARGET_PROGRESS"), "20000");
  EXPECT_EQ(p.env.count("CLOUDTUNE_HTTP"), 0u);  // empty: the default, not carried
  EXPECT_EQ(p.env.at("CLOUDTUNE_INSTANCE_TYPE"), p.instance_type);  // the new machine
  const std::string empty = cli_test::TmpDir() + "/no_recommendation.jsonl";
  std::ofstream(empty) << R"({"schema":"cloudtune.sidecar/1","time":1,"step":0,"kind":"start"})"
                       << "\n";
  EXPECT_NE(Message([&] {
              ReadLaunchPlan(empty, search::DefaultCatalog());
            }).find("no recommendation record yet"),
            std::string::npos);
}

// A new job's first launch: the start configuration, on spot for the cost goal without a deadline
// (the reason on stderr), on demand with one; the objective travels in the job's environment; bad
// input is named.
TEST(LaunchSpecCli, AFirstLaunchIsBoughtAsAdvised) {
  auto r = cli_test::RunCli("launch-spec --start g4dn.12xlarge:2:4:64 --budget 50");
  ASSERT_EQ(r.status, 0) << r.err;
  YAML::Node y = YAML::Load(r.out);
  EXPECT_EQ(y["resources"]["instance_type"].as<std::string>(), "g4dn.12xlarge");
  EXPECT_TRUE(y["resources"]["use_spot"].as<bool>());
  EXPECT_EQ(y["num_nodes"].as<int>(), 2);
  EXPECT_EQ(y["envs"]["CLOUDTUNE_OBJECTIVE"].as<std::string>(), "cost");
  EXPECT_EQ(y["envs"]["CLOUDTUNE_BUDGET_USD"].as<std::string>(), "50");
  EXPECT_NE(r.err.find("cloudtune: launch g4dn.12xlarge spot: $"), std::string::npos) << r.err;
  r = cli_test::RunCli("launch-spec --start g4dn.12xlarge:2:4:64 --deadline 5 --format torchrun");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--nnodes=2:2"), std::string::npos) << r.out;  // on demand: not elastic
  EXPECT_NE(r.out.find("CLOUDTUNE_DEADLINE_HOURS='5'"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("on demand: a deadline"), std::string::npos) << r.err;
  r = cli_test::RunCli("launch-spec --start nosuch.type:1:1:8");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--start: instance type 'nosuch.type' is not in the catalog"),
            std::string::npos)
      << r.err;
  r = cli_test::RunCli("launch-spec --start g4dn.12xlarge:1:x:8");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--start gpus_per_node: 'x' is not a number"), std::string::npos) << r.err;
  r = cli_test::RunCli("launch-spec " + kRecommendation + " --start g4dn.12xlarge:1:1:8");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;
  r = cli_test::RunCli("launch-spec --start g4dn.12xlarge:1:1:8 --objective fast");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--objective: 'fast'"), std::string::npos) << r.err;
}

TEST(LaunchSpecCli, ReadsAFileAndAJobsEndpoint) {
  auto r = cli_test::RunCli("launch-spec " + kSidecar + " --format pytorchjob --image img:1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(YAML::Load(r.out)["kind"].as<std::string>(), "PyTorchJob");
  r = cli_test::RunCli("launch-spec " + kRecommendation + " --format nomad");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("--format: 'nomad'"), std::string::npos) << r.err;

  std::ifstream f(kRecommendation);
  const std::string body((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  test::FakeHttpServer job([&](const test::FakeRequest& q) {
    test::FakeAnswer a;
    if (q.target == "/v1/recommendation") {
      a.status = 200;
      a.body = body;
      a.headers = {{"Content-Type", "application/json"}};
    }
    return a;
  });
  r = cli_test::RunCli("launch-spec " + job.url() +
                       " --format torchrun --command 'x.py {lr_scale}'");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("--nnodes=1:1 --nproc-per-node=1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x.py 0.463768"), std::string::npos) << r.out;

  test::FakeHttpServer early([](const test::FakeRequest&) {
    test::FakeAnswer a;
    a.status = 503;
    return a;
  });
  r = cli_test::RunCli("launch-spec " + early.url() + " --format torchrun");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("no recommendation yet"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cloudtune::cli
