// cloudtune report: the HTML report of a recorded sidecar has each plot, inlined, with nothing
// fetched from the network; a killed job's sidecar still reports what it has and says what is
// missing; a replay result renders too; and the page opens in a headless browser (Debian's
// chromium) with no console error, a screenshot written to the test's directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using cloudtune::cli_test::CliResult;
using cloudtune::cli_test::RunCli;
using cloudtune::cli_test::Slurp;
using cloudtune::cli_test::TmpDir;
using cloudtune::cli_test::Write;

const std::string kSidecar = CLOUDTUNE_SOURCE_DIR "/tests/data/fmnist_sidecar.jsonl";

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Runs `report ARGS`; skips the test when no python3 with matplotlib is installed.
#define REPORT_OR_SKIP(r, args)                                       \
  const CliResult r = RunCli("report " + std::string(args));          \
  if (r.status == 1 && r.err.find("matplotlib") != std::string::npos) \
  GTEST_SKIP() << "python3-matplotlib is not installed (scripts/install-deps.sh): " << r.err

TEST(Report, RecordedSidecarHasEachPlot) {
  const std::string html = TmpDir() + "/report.html";
  REPORT_OR_SKIP(r, kSidecar + " -o " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = Slurp(html);
  for (const char* id :
       {"id='step-time'", "id='throughput'", "id='noise'", "id='pareto'", "id='history'",
        "id='events'", "what to do next", "saving against staying put", "exposed communication",
        "configuration change", "Pareto front", "current configuration", "recommendation",
        "deadline 2 h"})
    EXPECT_NE(page.find(id), std::string::npos) << id;
  EXPECT_GE(Count(page, "<svg"), 5u);
  // Self-contained: no script, nothing loaded from elsewhere.
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("src=\"http"), std::string::npos);
  EXPECT_EQ(page.find("href=\"http"), std::string::npos);
  EXPECT_EQ(page.find("Incomplete sidecar"), std::string::npos);
  // Five human lines after the file name.
  EXPECT_EQ(r.out.rfind("report: " + html + "\nnext: switch -> ", 0), 0u) << r.out;
  EXPECT_EQ(Count(r.out, "\n"), 6u) << r.out;
}

// A job on machines no catalog prices: its recommendations count costs in GPU-hours
// ("cost_unit"), and the report's figures say GPU-h, not $.
TEST(Report, CostsInGpuHoursWhereTheMachinesHaveNoPrice) {
  std::ifstream in(kSidecar);
  std::string text;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json rec = nlohmann::json::parse(line);
    if (rec.value("kind", "") == "recommendation") rec["cost_unit"] = "gpu_hours";
    text += rec.dump() + "\n";
  }
  const std::string path = Write("local.jsonl", text), html = TmpDir() + "/local.html";
  REPORT_OR_SKIP(r, path + " -o " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const size_t finish = r.out.find("\nfinish: ");
  ASSERT_NE(finish, std::string::npos) << r.out;
  const std::string line = r.out.substr(finish + 1, r.out.find('\n', finish + 1) - finish - 1);
  EXPECT_EQ(Count(line, " GPU-h"), 2u) << line;
  EXPECT_EQ(line.find('$'), std::string::npos) << line;
  const std::string page = Slurp(html);
  EXPECT_NE(page.find(" GPU-h ("), std::string::npos);  // the saving against staying put
}

TEST(Report, TruncatedSidecarReportsWhatItHasAndWhatIsMissing) {
  std::ifstream in(kSidecar);
  std::string text, line;
  for (int i = 0; i < 12 && std::getline(in, line); ++i) text += line + "\n";
  std::getline(in, line);
  text += line.substr(0, 40);  // the job was killed mid-write
  const std::string path = Write("killed.jsonl", text), html = TmpDir() + "/killed.html";
  REPORT_OR_SKIP(r, path + " -o " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = Slurp(html);
  EXPECT_NE(page.find("Incomplete sidecar"), std::string::npos);
  EXPECT_NE(page.find("line 13 is truncated"), std::string::npos);
  EXPECT_NE(page.find("no end record"), std::string::npos);
  EXPECT_NE(page.find("id='step-time'"), std::string::npos);
  EXPECT_NE(r.out.find("problems: line 13 is truncated"), std::string::npos) << r.out;
}

TEST(Report, ReplayResultRendersPoliciesAgainstTheOracle) {
  const std::string json = TmpDir() + "/replay.json", html = TmpDir() + "/replay.html";
  const CliResult rep = RunCli("replay " CLOUDTUNE_SOURCE_DIR
                               "/data/scenarios/pollux-cifar10-g4dn.json --seeds 1 --format json "
                               "-o " +
                               json);
  ASSERT_EQ(rep.status, 0) << rep.err;
  REPORT_OR_SKIP(r, json + " -o " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string page = Slurp(html);
  EXPECT_NE(page.find("Policies against the oracle"), std::string::npos);
  EXPECT_NE(page.find("oracle"), std::string::npos);
  EXPECT_GE(Count(page, "<svg"), 2u);
  EXPECT_NE(r.out.find("cloudtune cost vs oracle"), std::string::npos) << r.out;
}

TEST(Report, BadInputs) {
  const CliResult none = RunCli("report /nonexistent/sidecar.jsonl -o " + TmpDir() + "/x.html");
  EXPECT_EQ(none.status, 1);
  EXPECT_EQ(none.err, "cloudtune: error: /nonexistent/sidecar.jsonl: cannot open\n");
  const std::string junk = Write("junk.jsonl", "not json\nnor this\n");
  const CliResult bad = RunCli("report " + junk + " -o " + TmpDir() + "/x.html");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, "cloudtune: error: " + junk + ": no sidecar record (2 unparseable line(s))\n");
}

std::string Chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (::access(c, X_OK) == 0) return c;
  return "";
}

TEST(Report, OpensInAHeadlessBrowserWithoutConsoleErrors) {
  const std::string chromium = Chromium();
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not installed (scripts/install-deps.sh installs it)";
  const std::string dir = TmpDir(), html = dir + "/browser.html";
  REPORT_OR_SKIP(r, kSidecar + " -o " + html);
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string profile = dir + "/chromium-profile", shot = dir + "/report.png";
  fs::create_directories(profile);
  const std::string cmd =
      "timeout 120 " + chromium +
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run"
      " --disable-background-networking --disable-component-update --disable-sync"
      " --user-data-dir=" +
      profile + " --enable-logging=stderr --v=0 --window-size=1200,3000" + " --screenshot=" + shot +
      " file://" + html + " >" + dir + "/chromium.out 2>" + dir + "/chromium.err";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Slurp(dir + "/chromium.err");
  ASSERT_TRUE(fs::exists(shot)) << Slurp(dir + "/chromium.err");
  EXPECT_GT(fs::file_size(shot), 20000u);  // a rendered page, not a blank one
  const std::string log = Slurp(dir + "/chromium.err");
  EXPECT_EQ(log.find("CONSOLE"), std::string::npos) << log;
  EXPECT_EQ(log.find("Uncaught"), std::string::npos) << log;
  std::cout << "screenshot: " << shot << "\n";
}

}  // namespace
