// `cloudtune recommend` / `cloudtune replay` end to end: runs the built binary and checks stdout,
// stderr and the exit status, and that the CLI's numbers are the library's (search::Recommend).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "estimator/core/trace.h"
#include "search/catalog.h"
#include "search/recommend.h"
#include "tests/shared_data.h"

namespace {

using cloudtune::cli_test::Slurp;
using cloudtune::cli_test::TmpDir;
using cloudtune::cli_test::Write;
using Result = cloudtune::cli_test::CliResult;
using cloudtune::cli_test::RunCli;

const std::string kPollux = std::string(CLOUDTUNE_SHARED_DIR) + "/data/traces/pollux-t4/";
const std::string kScenarios = std::string(CLOUDTUNE_SOURCE_DIR) + "/data/scenarios/";

// A profile a running job could have recorded: the cifar10 configurations on 1-2 nodes of the
// shipped Pollux T4 trace (g4dn.12xlarge), in the plugin's trace format.
std::string Profile() {
  static const std::string path = [] {
    auto all = cloudtune::estimator::ReadTraces({kPollux + "cifar10/placements.csv"});
    std::vector<cloudtune::core::Measurement> kept;
    for (auto m : all)
      if (m.key.num_nodes <= 2) {
        m.key.instance_type = "g4dn.12xlarge";
        kept.push_back(m);
      }
    std::ostringstream s;
    cloudtune::estimator::WriteTrace(s, kept);
    return Write("profile.csv", s.str());
  }();
  return path;
}

const char* kCommon = " --gns 0.02,0.6,128 --target-progress 20000";

// What `recommend --profile PROFILE --gns kGns --target-progress 20000 [--objective o]` asks.
cloudtune::search::Recommendation InProcess(cloudtune::search::Goal goal, double budget) {
  cloudtune::search::RecommendRequest req;
  req.profile = cloudtune::estimator::ReadTraces({Profile()});
  req.noise = cloudtune::core::NoiseState{};
  req.noise->grad_sqr = 0.02;
  req.noise->grad_var = 0.6;
  req.noise->base_batch = 128;
  static const cloudtune::search::Catalog catalog = cloudtune::search::ResolveCatalog("");
  req.catalog = &catalog;
  req.options.objective.goal = goal;
  req.options.objective.budget_usd = budget;
  req.options.target_progress = 20000;
  return cloudtune::search::Recommend(req);
}

// The CLI runs the job's runtime, which adds what a live recommendation record carries (the
// fitted models, progress, trigger, inputs …) to the search's document.
nlohmann::json SearchPart(nlohmann::json j) {
  for (const char* k : {"models", "progress", "target_progress", "target", "step",
                        "straggler_factor", "trigger", "preempted", "inputs"}) {
    EXPECT_TRUE(j.contains(k)) << "the recommendation lacks " << k;
    j.erase(k);
  }
  return j;
}

void ExpectEvaluationFields(const nlohmann::json& e, const std::string& what) {
  for (const char* k :
       {"config", "description", "step_time_s", "throughput", "steps", "goodput", "price_per_hour",
        "hours", "hours_range", "cost_usd", "cost_range", "log_sigma", "switch_s",
        "expected_revocations", "checkpoint_interval_s", "feasible"})
    EXPECT_TRUE(e.contains(k)) << what << " lacks " << k;
  for (const char* k : {"instance_type", "nodes", "gpus_per_node", "replicas", "local_bsz",
                        "accum_steps", "global_batch", "purchase"})
    EXPECT_TRUE(e["config"].contains(k)) << what << ".config lacks " << k;
  EXPECT_GT(e["cost_usd"].get<double>(), 0) << what;
  EXPECT_GT(e["hours"].get<double>(), 0) << what;
  EXPECT_LE(e["cost_range"][0].get<double>(), e["cost_usd"].get<double>()) << what;
  EXPECT_GE(e["cost_range"][1].get<double>(), e["cost_usd"].get<double>()) << what;
}

TEST(RecommendCli, JsonHasTheDocumentedFieldsAndTheLibrarysNumbers) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Result r = RunCli("recommend --profile " + Profile() + kCommon + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "cloudtune.recommendation/1");
  EXPECT_EQ(j["objective"], "cost");
  EXPECT_TRUE(j["action"] == "keep" || j["action"] == "switch" || j["action"] == "measure");
  EXPECT_FALSE(j["reason"].get<std::string>().empty());
  EXPECT_GT(j["candidates_evaluated"].get<size_t>(), 50000u);  // batches within the growth bound
  EXPECT_NE(j["catalog"].get<std::string>().find("embedded"), std::string::npos);
  ExpectEvaluationFields(j["current"], "current");
  ExpectEvaluationFields(j["proposed"], "proposed");
  ExpectEvaluationFields(j["best_predicted"], "best_predicted");
  ASSERT_FALSE(j["alternatives"].empty());
  for (const auto& a : j["alternatives"]) ExpectEvaluationFields(a, "alternative");
  // The current configuration defaults to the profile's most-measured one, on demand.
  EXPECT_EQ(j["current"]["config"]["instance_type"], "g4dn.12xlarge");
  EXPECT_EQ(j["current"]["config"]["purchase"], "on-demand");
  // Cheapest: the proposal costs no more than the current configuration.
  EXPECT_LE(j["best_predicted"]["cost_usd"].get<double>(), j["current"]["cost_usd"].get<double>());

  // Same inputs in-process give the same numbers (the CLI adds nothing of its own).
  const auto lib = InProcess(cloudtune::search::Goal::kCost, 0);
  const auto lj = lib.ToJson();
  EXPECT_EQ(j["action"], lj["action"]);
  EXPECT_EQ(j["proposed"]["description"], lj["proposed"]["description"]);
  EXPECT_DOUBLE_EQ(j["proposed"]["cost_usd"].get<double>(), lib.proposed.cost);
  EXPECT_DOUBLE_EQ(j["proposed"]["hours"].get<double>(), lib.proposed.hours);
  EXPECT_DOUBLE_EQ(j["proposed"]["step_time_s"].get<double>(), lib.proposed.step_time_s);
  EXPECT_DOUBLE_EQ(j["current"]["cost_usd"].get<double>(), lib.current.cost);
  EXPECT_DOUBLE_EQ(j["current"]["goodput"].get<double>(), lib.current.goodput);
  EXPECT_EQ(j["candidates_evaluated"].get<size_t>(), lib.evaluated);
  EXPECT_EQ(SearchPart(j), lj);  // and everything else too
}

TEST(RecommendCli, TimeObjectiveWithABudgetMatchesTheLibrary) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Result r = RunCli("recommend --profile " + Profile() + kCommon +
                    " --objective time --budget 5 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["objective"], "time");
  EXPECT_LE(j["proposed"]["cost_usd"].get<double>(), 5.0);
  const auto lib = InProcess(cloudtune::search::Goal::kTime, 5);
  EXPECT_EQ(SearchPart(j), lib.ToJson());
  // Faster than the cost-optimal proposal.
  const auto cost = InProcess(cloudtune::search::Goal::kCost, 0);
  EXPECT_LE(lib.proposed.hours, cost.proposed.hours);
}

TEST(RecommendCli, TableFormat) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Result r = RunCli("recommend --profile " + Profile() + kCommon + " --format table");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto lib = InProcess(cloudtune::search::Goal::kCost, 0);
  EXPECT_EQ(r.out, lib.ToTable());
  EXPECT_EQ(r.out.rfind("action: ", 0), 0u) << r.out;
  for (const char* s : {"\nreason: ", "configuration", "hours", "cost", "goodput", "\ncurrent ",
                        "\nproposed ", "\nalt 1 ", "candidates evaluated; catalog: "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  // Columns line up: every row of the table has "h" (hours) at the same column.
  std::istringstream in(r.out);
  size_t col = std::string::npos;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("current ", 0) && line.rfind("proposed ", 0) && line.rfind("alt ", 0)) continue;
    const size_t h = line.find(" h ");
    ASSERT_NE(h, std::string::npos) << line;
    if (col == std::string::npos) col = h;
    EXPECT_EQ(h, col) << line;
  }
}

// --clouds and --gpus: only the types on those clouds with those GPUs are proposed.
TEST(RecommendCli, OnlyTheCloudsAndGpusGiven) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Result r = RunCli("recommend --profile " + Profile() + kCommon +
                    " --clouds gcp --gpus T4,L4 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::vector<nlohmann::json> proposals = {j["proposed"], j["best_predicted"]};
  for (const auto& a : j["alternatives"]) proposals.push_back(a);
  for (const auto& e : proposals) {
    const std::string type = e["config"]["instance_type"];
    const auto& c = cloudtune::search::DefaultCatalog();
    ASSERT_GE(c.Find(type), 0) << type;
    EXPECT_EQ(c.types[c.Find(type)].cloud, "gcp") << type;
    const std::string gpu = c.types[c.Find(type)].gpu_model;
    EXPECT_TRUE(gpu == "T4" || gpu == "L4") << type << " " << gpu;
  }
}

TEST(RecommendCli, BadInputs) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string ok = "recommend --profile " + Profile() + kCommon;
  struct Case {
    std::string args, message;
  };
  const std::string bad_catalog = Write("bad_catalog.csv",
                                        "cloud,region,instance_type,gpu_model,gpus,"
                                        "ondemand_usd_per_hour,spot_usd_per_hour\n"
                                        "aws,r,x.big,T4,4,3.9,1.2\n"
                                        "aws,r,y.big,T4,4,-3,1\n");
  const std::string unknown_gpu = Write("gpu_catalog.csv",
                                        "cloud,region,instance_type,gpu_model,gpus,"
                                        "ondemand_usd_per_hour\n"
                                        "aws,r,z.big,Z9,4,3.9\n");
  const std::vector<Case> cases = {
      {"recommend --profile /nonexistent/profile.csv" + std::string(kCommon),
       "cloudtune: error: /nonexistent/profile.csv: cannot open\n"},
      {ok + " --objective speed",
       "cloudtune: error: --objective: 'speed' (expected cost or time)\n"},
      {ok + " --budget -5", "cloudtune: error: --budget: must be >= 0, got -5\n"},
      {ok + " --deadline -1", "cloudtune: error: --deadline: must be >= 0, got -1\n"},
      {ok + " --format xml", "cloudtune: error: --format: 'xml' (expected json or table)\n"},
      {ok + " --spent 10 --exploration-spent 11",
       "cloudtune: error: --exploration-spent: 11 exceeds --spent 10\n"},
      {ok + " --spent -1", "cloudtune: error: --spent: must be >= 0, got -1\n"},
      {"recommend --profile " + Profile() + " --gns 0.02,0.6 --target-progress 20000",
       "cloudtune: error: --gns: expected grad_sqr,grad_var,B0, got '0.02,0.6'\n"},
      {"recommend --profile " + Profile() + " --gns 0.02,abc,128 --target-progress 20000",
       "cloudtune: error: --gns grad_var: 'abc' is not a number\n"},
      {"recommend --profile " + Profile() + " --gns 0.02,0.6,0 --target-progress 20000",
       "cloudtune: error: --gns: grad_sqr and grad_var must be >= 0 and B0 > 0\n"},
      {"recommend --profile " + Profile() + " --gns /nonexistent/gns.json --target-progress 1",
       "cloudtune: error: /nonexistent/gns.json: cannot open\n"},
      {"recommend --profile " + Profile() + " --gns 0.02,0.6,128 --target-progress 0",
       "cloudtune: error: --target-progress: must be > 0, got 0\n"},
      {ok + " --catalog " + bad_catalog,
       "cloudtune: error: " + bad_catalog +
           ":3: y.big: ondemand_usd_per_hour: negative value -3\n"},
      {ok + " --catalog " + unknown_gpu,
       "cloudtune: error: " + unknown_gpu +
           ":2: z.big: gpu_model: unknown GPU 'Z9' (not in the GPU specs: give its figures, "
           "gpu_fp32_tflops and/or gpu_memory_bandwidth_gbs)\n"},
      {ok + " --max-nodes 0", "cloudtune: error: --max-nodes: must be >= 1, got 0\n"},
      {ok + " --max-gpus -4", "cloudtune: error: --max-gpus: must be >= 1, got -4\n"},
      {ok + " --clouds aws,oracle",
       "cloudtune: error: --clouds='aws,oracle': no instance type of the catalog has cloud "
       "'oracle' (it has "
       "aws, azure, gcp)\n"},
      {ok + " --gpus H300",
       "cloudtune: error: --gpus='H300': no instance type of the catalog has GPU model 'H300' (it "
       "has "
       "A10, A100, A100-80GB, A10G, H100, H200, L4, L40S, M60, P100, T4, V100, V100-32GB)\n"},
      {ok + " --current nope.large:1:4:32",
       "cloudtune: error: current configuration: instance type 'nope.large' is not in the "
       "catalog\n"},
      {ok + " --current g4dn.12xlarge:1:4",
       "cloudtune: error: --current: expected "
       "TYPE:NODES:GPUS_PER_NODE:LOCAL_BSZ[:ACCUM[:PURCHASE]]"
       ", got 'g4dn.12xlarge:1:4'\n"},
  };
  for (const auto& c : cases) {
    Result r = RunCli(c.args);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_EQ(r.err, c.message) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

// ---- replay ------------------------------------------------------------------------------------

std::string Scenario(const nlohmann::json& patch, const std::vector<std::string>& erase,
                     const std::string& name) {
  std::ifstream f(kScenarios + "pollux-cifar10-g4dn.json");
  nlohmann::json j;
  f >> j;
  // Paths in the shipped file are relative to its folder: make them absolute for a copy in /tmp.
  for (auto& p : j["traces"][0]["csv"]) p = kScenarios + p.get<std::string>();
  j["noise"]["validation_csv"] = kScenarios + j["noise"]["validation_csv"].get<std::string>();
  if (!patch.is_null()) j.merge_patch(patch);
  for (const auto& k : erase) j.erase(k);
  return Write(name, j.dump(2));
}

TEST(ReplayCli, DeterministicForASeed) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string path = kScenarios + "pollux-cifar10-g4dn.json";
  Result a = RunCli("replay " + path + " --seeds 5");
  Result b = RunCli("replay " + path + " --seeds 5");
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  for (const char* p : {"cloudtune", "oracle", "fixed-on-demand", "cheapest-spot", "fastest-first",
                        "deepvm-flopp", "pollux-goodput", "summary over 1 runs"})
    EXPECT_NE(a.out.find(p), std::string::npos) << p;
  // JSON output: the same numbers, every policy finished, the oracle's cost is the reference.
  Result j1 = RunCli("replay " + path + " --seeds 5 --format json");
  Result j2 = RunCli("replay " + path + " --seeds 5 --format json");
  ASSERT_EQ(j1.status, 0) << j1.err;
  EXPECT_EQ(j1.out, j2.out);
  const auto j = nlohmann::json::parse(j1.out);
  EXPECT_EQ(j["schema"], "cloudtune.replay/1");
  ASSERT_EQ(j["runs"].size(), 1u);
  EXPECT_EQ(j["runs"][0]["seed"], 5);
  double oracle = 0;
  for (const auto& p : j["runs"][0]["policies"]) {
    EXPECT_TRUE(p["finished"].get<bool>()) << p["policy"];
    if (p["policy"] == "oracle") oracle = p["cost_usd"].get<double>();
  }
  ASSERT_GT(oracle, 0);
  for (const auto& p : j["runs"][0]["policies"]) {
    EXPECT_DOUBLE_EQ(p["cost_vs_oracle"].get<double>(), p["cost_usd"].get<double>() / oracle);
    EXPECT_GE(p["cost_usd"].get<double>(), 0.95 * oracle) << p["policy"];
    if (p["policy"] == "oracle") {
      EXPECT_GT(p["cost_lower_usd"].get<double>(), 0);
      EXPECT_LE(p["cost_lower_usd"].get<double>(), p["cost_usd"].get<double>());
      EXPECT_GT(p["makespan_lower_h"].get<double>(), 0);
    }
  }
  // The cost goal: the ratio against the oracle's bound is no smaller than against its schedule,
  // and the table names the bound as a cost.
  const auto& sum = j["summary"];
  EXPECT_GE(sum["cloudtune_cost_vs_oracle_bound_median"].get<double>(),
            sum["cloudtune_cost_vs_oracle_median"].get<double>());
  EXPECT_GE(sum["cloudtune_cost_vs_oracle_bound_p90"].get<double>(),
            sum["cloudtune_cost_vs_oracle_p90"].get<double>());
  EXPECT_NE(a.out.find("no schedule of its model costs less than $"), std::string::npos);
  // Another seed is a different run (measurement noise), but still deterministic.
  Result c = RunCli("replay " + path + " --seeds 6 --format json");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_NE(c.out, j1.out);
}

// The time goal's bound is a makespan: the oracle's line says how soon, not how cheap.
TEST(ReplayCli, TheTimeGoalsBoundIsAMakespan) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  Result r = RunCli("replay " + kScenarios + "pollux-imagenet-budget.json --seeds 1");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no schedule of its model within the budget finishes sooner than "),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("costs less than"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vs the oracle's bound"), std::string::npos) << r.out;
}

// Every run's header states the scenario's constraints in full, not at the precision the table
// before it was printed in.
TEST(ReplayCli, EveryRunsHeaderStatesTheConstraintsInFull) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string path =
      Scenario({{"objective", {{"goal", "cost"}, {"deadline_h", 2.345}, {"budget_usd", 12.345}}}},
               {}, "constraints.json");
  Result r = RunCli("replay " + path + " --seeds 1 2");
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* seed : {"seed 1 ", "seed 2 "}) {
    const size_t head = r.out.find(seed);
    ASSERT_NE(head, std::string::npos) << r.out;
    const std::string line = r.out.substr(head, r.out.find('\n', head) - head);
    EXPECT_NE(line.find("; deadline 2.345 h; budget $12.345)"), std::string::npos) << line;
  }
}

// The runs of several scenarios replayed at once on several threads (one pool for every seed of
// every scenario) give exactly what one thread gives, in scenario and seed order.
TEST(ReplayCli, ParallelRunsGiveTheSameOutput) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string paths =
      kScenarios + "pollux-cifar10-g4dn.json " + kScenarios + "pollux-ncf-measured.json";
  Result one = RunCli("replay " + paths + " --seeds 3 1 2 --format json --jobs 1");
  Result three = RunCli("replay " + paths + " --seeds 3 1 2 --format json --jobs 3");
  ASSERT_EQ(one.status, 0) << one.err;
  ASSERT_EQ(three.status, 0) << three.err;
  EXPECT_EQ(one.out, three.out);
  const auto j = nlohmann::json::parse(one.out);
  ASSERT_EQ(j["runs"].size(), 6u);
  EXPECT_EQ(j["runs"][0]["seed"], 3);
  EXPECT_EQ(j["runs"][2]["seed"], 2);
  EXPECT_EQ(j["runs"][0]["scenario"], "pollux-cifar10-g4dn");
  EXPECT_EQ(j["runs"][3]["scenario"], "pollux-ncf-measured");
  EXPECT_EQ(j["runs"][3]["seed"], 3);
}

// A policy that never reaches the target has bought nothing at any cost: the table says so, the
// JSON gives no ratio to the oracle, it counts as a miss (a constraint or not) and no saving is
// measured against it. Here the spot market never has the start's two nodes: fixed spot waits for
// them to the end of the simulation, while the cloudtune job starts elastically on the one node to
// be had.
TEST(ReplayCli, APolicyThatNeverFinishesIsAMissAndNoReference) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  std::string ones = R"({"metadata": {"gap_seconds": 600}, "data": [1)";
  for (int i = 0; i < 300; ++i) ones += ", 1";
  const std::string trace = Write("one_node.json", ones + "]}");
  const std::string path = Scenario(
      {{"spot", {{"reading", "count"}, {"offset_h", 0}, {"traces", {{"g4dn.12xlarge", trace}}}}}},
      {}, "one_node_market.json");
  Result r = RunCli("replay " + path + " --seeds 1 --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  bool seen_spot = false, seen_cloudtune = false;
  for (const auto& p : j["runs"][0]["policies"]) {
    if (p["policy"] == "fixed-spot") {
      seen_spot = true;
      EXPECT_FALSE(p["finished"].get<bool>());
      EXPECT_TRUE(p["cost_vs_oracle"].is_null()) << p["cost_vs_oracle"];  // infinitely dear
    }
    if (p["policy"] == "cloudtune") {
      seen_cloudtune = true;
      EXPECT_TRUE(p["finished"].get<bool>());
      EXPECT_NE(p["schedule"][0].get<std::string>().find("1x g4dn.12xlarge"), std::string::npos)
          << p["schedule"][0];
      // The oracle launches there too: not beaten beyond its discretisation.
      EXPECT_GE(p["cost_vs_oracle"].get<double>(), 0.98);
    }
  }
  EXPECT_TRUE(seen_spot && seen_cloudtune);
  const auto& sum = j["summary"];
  EXPECT_EQ(sum["missed_runs"]["fixed-spot"], 1) << sum.dump();
  EXPECT_FALSE(sum["missed_runs"].contains("cloudtune")) << sum.dump();
  EXPECT_TRUE(sum["cloudtune_saving_vs_fixed_spot_median"].is_null()) << sum.dump();
  Result t = RunCli("replay " + path + " --seeds 1");
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_NE(t.out.find("(did not finish)"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("missed, or not finished (runs): cheapest-spot 1; fixed-spot 1;"),
            std::string::npos)
      << t.out;
}

TEST(ReplayCli, BadScenarios) {
  CLOUDTUNE_NEEDS_SHARED_DATA();
  const std::string malformed = Write("malformed.json", "{\"schema\": \"cloudtune.scenario/1\",\n");
  const std::string no_start = Scenario({}, {"start"}, "no_start.json");
  const std::string no_traces = Scenario({}, {"traces"}, "no_traces.json");
  const std::string bad_goal = Scenario({{"objective", {{"goal", "speed"}}}}, {}, "goal.json");
  const std::string bad_seeds =
      Scenario({{"seeds", nlohmann::json::array({-1})}}, {}, "seeds.json");
  const std::string bad_type =
      Scenario({{"start", {{"instance_type", "p3.2xlarge"}}}}, {}, "start_type.json");
  const std::string bad_extra = Scenario(
      {{"catalog_extra",
        {{{"cloud", "aws"}, {"region", "r"}, {"instance_type", "g4dn.12xlarge"}, {"gpus", 4}}}}},
      {}, "extra.json");
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"replay /nonexistent/s.json", "cloudtune: error: /nonexistent/s.json: cannot open\n"},
      {"replay " + malformed,
       "cloudtune: error: " + malformed +
           ": not valid JSON (corrupt or truncated at byte 36): [json.exception.parse_error.101] "
           "parse error at line 2, column 1: syntax "
           "error while parsing object key - unexpected end of input; expected string literal\n"},
      {"replay " + no_start, "cloudtune: error: " + no_start + ": start: missing\n"},
      {"replay " + no_traces, "cloudtune: error: " + no_traces + ": traces: missing or empty\n"},
      {"replay " + bad_goal,
       "cloudtune: error: " + bad_goal + ": objective: goal: 'speed' (expected cost or time)\n"},
      {"replay " + bad_seeds,
       "cloudtune: error: " + bad_seeds + ": seeds: not a non-negative integer\n"},
      {"replay " + bad_type,
       "cloudtune: error: " + bad_type +
           ": start: 2x p3.2xlarge (4 GPUs/node) on-demand, batch 64x8 = 512 is not a traced "
           "configuration\n"},
      {"replay " + bad_extra,
       "cloudtune: error: " + bad_extra + ": catalog_extra[0]: missing column 'gpu_model'\n"},
      {"replay " + kScenarios + "pollux-cifar10-g4dn.json --format xml",
       "cloudtune: error: --format: 'xml' (expected table or json)\n"},
  };
  for (const auto& c : cases) {
    Result r = RunCli(c.args);
    EXPECT_EQ(r.status, 1) << c.args;
    EXPECT_EQ(r.err, c.message) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
  }
}

}  // namespace
