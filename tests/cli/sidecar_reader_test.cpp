// cli/sidecar_reader: a recorded sidecar is read whole; a killed job's truncated sidecar still
// reads with the damage reported; a foreign schema is refused naming file and line; and
// `recommend --from` re-runs the job's own search to the job's own last recommendation.
#include "cli/sidecar_reader.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_runner.h"
#include "estimator/core/error.h"

namespace {

using cloudtune::InputError;
using cloudtune::cli::ReadSidecar;
using cloudtune::cli_test::RunCli;
using cloudtune::cli_test::Slurp;
using cloudtune::cli_test::Write;

const std::string kSidecar = CLOUDTUNE_SOURCE_DIR "/tests/data/fmnist_sidecar.jsonl";

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(SidecarReader, ReadsARecordedSidecarWhole) {
  const auto s = ReadSidecar(kSidecar);
  EXPECT_EQ(s.records.size(), Lines(kSidecar).size());
  EXPECT_TRUE(s.bad_lines.empty());
  EXPECT_EQ(s.truncated_line, 0);
  ASSERT_NE(s.Last("start"), nullptr);
  ASSERT_NE(s.Last("end"), nullptr);
  EXPECT_GE(s.OfKind("measurement").size(), 10u);
  EXPECT_GE(s.OfKind("recommendation").size(), 1u);
  EXPECT_TRUE(s.Problems().empty());
}

TEST(SidecarReader, TruncatedSidecarOfAKilledJobReadsWhatItHas) {
  const auto lines = Lines(kSidecar);
  std::string text;
  for (size_t i = 0; i < 20; ++i) text += lines[i] + "\n";
  text += "this line is damaged\n";
  text += lines[20].substr(0, lines[20].size() / 2);  // the kill cut the last write short
  const auto s = ReadSidecar(Write("killed.jsonl", text));
  EXPECT_EQ(s.records.size(), 20u);
  EXPECT_EQ(s.bad_lines, std::vector<int>{21});
  EXPECT_EQ(s.truncated_line, 22);
  std::string all;
  for (const auto& p : s.Problems()) all += p + "\n";
  EXPECT_NE(all.find("line 22 is truncated"), std::string::npos) << all;
  EXPECT_NE(all.find("1 unparseable line(s) skipped (21)"), std::string::npos) << all;
  EXPECT_NE(all.find("no end record"), std::string::npos) << all;
}

// A damaged last record whose step is out of any integer's range, or not a number, is reported as
// an unknown step (converting 2e67 to an integer is undefined behaviour: found by the fuzzer).
TEST(SidecarReader, ADamagedStepIsReportedAsUnknown) {
  const auto lines = Lines(kSidecar);
  for (const std::string step : {"2.08889e+67", "\"forty\"", "-1e300", "null"}) {
    auto j = nlohmann::json::parse(lines[1]);
    j["step"] = nlohmann::json::parse(step);
    const auto s = ReadSidecar(Write("damaged_step.jsonl", lines[0] + "\n" + j.dump() + "\n"));
    std::string all;
    for (const auto& p : s.Problems()) all += p + "\n";
    EXPECT_NE(all.find("the report stops at step ?"), std::string::npos) << step << ": " << all;
  }
  auto j = nlohmann::json::parse(lines[1]);
  j["step"] = 40;
  const auto s = ReadSidecar(Write("damaged_step.jsonl", lines[0] + "\n" + j.dump() + "\n"));
  std::string all;
  for (const auto& p : s.Problems()) all += p + "\n";
  EXPECT_NE(all.find("the report stops at step 40"), std::string::npos) << all;
}

TEST(SidecarReader, RefusesAForeignSchemaNamingFileAndLine) {
  const auto lines = Lines(kSidecar);
  std::string other = lines[1];
  other.replace(other.find("cloudtune.sidecar/1"), 19, "othertool.log/7");
  const std::string path = Write("foreign.jsonl", lines[0] + "\n" + other + "\n");
  try {
    ReadSidecar(path);
    FAIL() << "a foreign schema was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path +
                                         ":2: schema '\"othertool.log/7\"' is not "
                                         "cloudtune.sidecar/1 (not a cloudtune sidecar, or one of "
                                         "another version)");
  }
  const auto r = RunCli("report " + path + " -o " + Write("foreign.html", ""));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find(path + ":2: schema"), std::string::npos) << r.err;
  EXPECT_THROW(ReadSidecar(Write("empty.jsonl", "")), InputError);
  EXPECT_THROW(ReadSidecar("/nonexistent/sidecar.jsonl"), InputError);
}

TEST(SidecarReader, InputsNameTheMissingField) {
  const auto lines = Lines(kSidecar);
  std::string text;
  for (const auto& l : lines) {
    auto j = nlohmann::json::parse(l);
    if (j["kind"] == "recommendation") j["inputs"]["noise"].erase("grad_sqr");
    text += j.dump() + "\n";
  }
  const std::string path = Write("nofield.jsonl", text);
  const auto s = ReadSidecar(path);
  const int line = s.Last("recommendation")->line;
  try {
    cloudtune::cli::InputsFromSidecar(s);
    FAIL() << "a missing field was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ":" + std::to_string(line) +
                                         ": inputs.noise.grad_sqr: missing or not a number");
  }
  const auto r = RunCli("recommend --from " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("inputs.noise.grad_sqr"), std::string::npos) << r.err;
}

// An integer field beyond int's range or with a fraction is named, not converted (converting 1e30
// to an int is undefined).
TEST(SidecarReader, AnIntegerFieldOutOfRangeIsNamed) {
  for (const double bad : {1e30, -1e30, 2.5, 0.0}) {
    std::string text;
    for (const auto& l : Lines(kSidecar)) {
      auto j = nlohmann::json::parse(l);
      if (j["kind"] == "recommendation") j["inputs"]["current"]["num_nodes"] = bad;
      text += j.dump() + "\n";
    }
    const auto s = ReadSidecar(Write("badint.jsonl", text));
    try {
      cloudtune::cli::InputsFromSidecar(s);
      FAIL() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(": inputs.current.num_nodes: must be an integer >= 1"),
                std::string::npos)
          << e.what();
    }
  }
}

// The spot exposure a job recorded comes back with its inputs (older sidecars have none); a bad
// one is named.
// The test sidecar with inputs.<field> = value in its recommendation records, written as `name`.
std::string WithInput(const std::string& field, const nlohmann::json& value,
                      const std::string& name) {
  std::string text;
  for (const auto& l : Lines(kSidecar)) {
    auto j = nlohmann::json::parse(l);
    if (j["kind"] == "recommendation") j["inputs"][field] = value;
    text += j.dump() + "\n";
  }
  return Write(name, text);
}

TEST(SidecarReader, InputsCarryTheSpotExposure) {
  auto with = [](const nlohmann::json& exposure, const std::string& name) {
    return WithInput("spot_exposure", exposure, name);
  };
  EXPECT_TRUE(
      cloudtune::cli::InputsFromSidecar(ReadSidecar(kSidecar)).snapshot.spot_exposure.empty());
  const auto good = cloudtune::cli::InputsFromSidecar(ReadSidecar(
      with({{"g4dn.12xlarge", {{"node_hours", 6.5}, {"revocations", 2}}}}, "exposed.jsonl")));
  ASSERT_EQ(good.snapshot.spot_exposure.count("g4dn.12xlarge"), 1u);
  EXPECT_EQ(good.snapshot.spot_exposure.at("g4dn.12xlarge").node_hours, 6.5);
  EXPECT_EQ(good.snapshot.spot_exposure.at("g4dn.12xlarge").revocations, 2);
  const std::string bad =
      with({{"g4dn.12xlarge", {{"node_hours", 6.5}, {"revocations", -1}}}}, "badexposure.jsonl");
  try {
    cloudtune::cli::InputsFromSidecar(ReadSidecar(bad));
    FAIL() << "a negative revocation count was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "\"inputs.spot_exposure.g4dn.12xlarge.revocations\" = -1 is out of range (>= 0)"),
              std::string::npos)
        << e.what();
  }
}

// The bytes a step all-reduces come back with the inputs (older sidecars have none: unknown); a
// negative count is named.
TEST(SidecarReader, InputsCarryTheGradientBytes) {
  auto with = [](const nlohmann::json& bytes, const std::string& name) {
    return WithInput("gradient_bytes", bytes, name);
  };
  // The example's CNN, as the job recorded it.
  EXPECT_EQ(cloudtune::cli::InputsFromSidecar(ReadSidecar(kSidecar)).snapshot.gradient_bytes,
            827688);
  std::string older;  // the same sidecar without the field
  for (const auto& l : Lines(kSidecar)) {
    auto j = nlohmann::json::parse(l);
    if (j["kind"] == "recommendation") j["inputs"].erase("gradient_bytes");
    older += j.dump() + "\n";
  }
  EXPECT_EQ(cloudtune::cli::InputsFromSidecar(ReadSidecar(Write("older.jsonl", older)))
                .snapshot.gradient_bytes,
            0);
  EXPECT_EQ(cloudtune::cli::InputsFromSidecar(ReadSidecar(with(1000, "bytes.jsonl")))
                .snapshot.gradient_bytes,
            1000);
  try {
    cloudtune::cli::InputsFromSidecar(ReadSidecar(with(-5, "badbytes.jsonl")));
    FAIL() << "a negative byte count was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(": inputs.gradient_bytes: must be >= 0"),
              std::string::npos)
        << e.what();
  }
}

// The job's last recommendation, reproduced from what its sidecar recorded.
TEST(RecommendFrom, ReproducesTheJobsOwnLastRecommendation) {
  const auto s = ReadSidecar(kSidecar);
  const nlohmann::json& job = s.Last("recommendation")->json;
  const auto r = RunCli("recommend --from " + kSidecar + " --format json");
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["action"], job["action"]);
  EXPECT_EQ(j["proposed"]["config"], job["proposed"]["config"]);
  EXPECT_EQ(j["current"]["config"], job["current"]["config"]);
  EXPECT_EQ(j["objective"], job["objective"]);
  EXPECT_EQ(j["target_progress"], job["target_progress"]);
  // The default output is the table, which names the same proposal.
  const auto t = RunCli("recommend --from " + kSidecar);
  ASSERT_EQ(t.status, 0) << t.err;
  EXPECT_EQ(t.out.rfind("action: " + job["action"].get<std::string>(), 0), 0u) << t.out;
  EXPECT_NE(t.out.find(job["proposed"]["description"].get<std::string>()), std::string::npos);
  // A flag overrides what the job recorded.
  const auto time = RunCli("recommend --from " + kSidecar + " --objective time --format json");
  ASSERT_EQ(time.status, 0) << time.err;
  EXPECT_EQ(nlohmann::json::parse(time.out)["objective"], "time");
}

// The re-run decides with the efficiency model the job recorded: a malformed one is named.
TEST(RecommendFrom, ReadsTheEfficiencyModelTheJobDecidedWith) {
  auto lines = Lines(kSidecar);
  size_t last = 0;
  for (size_t i = 0; i < lines.size(); ++i)
    if (nlohmann::json::parse(lines[i]).value("kind", "") == "recommendation") last = i;
  nlohmann::json rec = nlohmann::json::parse(lines[last]);
  ASSERT_TRUE(rec["models"]["efficiency"].is_object());
  rec["models"]["efficiency"].erase("knots");
  lines[last] = rec.dump();
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  const std::string path = Write("badmodel.jsonl", text);
  const auto r = RunCli("recommend --from " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: " + path + ":" + std::to_string(last + 1) +
                       ": models.efficiency: knots: missing or not a non-empty array\n");
}

TEST(RecommendFrom, NeedsARecommendationRecord) {
  const auto lines = Lines(kSidecar);
  const std::string path = Write("norec.jsonl", lines[0] + "\n" + lines[1] + "\n");
  const auto r = RunCli("recommend --from " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "cloudtune: error: " + path +
                       ": no recommendation record, so no recorded inputs to re-run (the tuner "
                       "had not published one)\n");
}

}  // namespace
