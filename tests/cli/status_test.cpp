// cloudtune status: against the tuner's own HTTP server (runtime::HttpServer) serving what a live
// 2-worker Fashion-MNIST job served (tests/data/status_*), the one-screen summary shows the step,
// the step-time split, the advice and the tuner's counters; --watch refreshes; no recommendation
// yet and an unreachable job are reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_runner.h"
#include "plugin/runtime/http_server.h"

namespace {

using cloudtune::cli_test::RunCli;
using cloudtune::cli_test::Slurp;
using cloudtune::runtime::HttpOptions;
using cloudtune::runtime::HttpProviders;
using cloudtune::runtime::HttpServer;

const std::string kData = CLOUDTUNE_SOURCE_DIR "/tests/data/";

HttpProviders Recorded(bool with_recommendation) {
  HttpProviders p;
  const std::string rec = with_recommendation ? Slurp(kData + "status_recommendation.json") : "";
  const std::string prof = Slurp(kData + "status_profile.json");
  const std::string met = Slurp(kData + "status_metrics.txt");
  p.recommendation = [rec] { return rec; };
  p.profile_json = [prof] { return prof; };
  p.profile_csv = [] { return std::string("num_nodes\n"); };
  p.metrics = [met] { return met; };
  return p;
}

std::string Url(const HttpServer& s) { return "http://127.0.0.1:" + std::to_string(s.BoundPort()); }

TEST(Status, SummarizesALiveJob) {
  HttpServer server(HttpOptions{}, Recorded(true));
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const auto r = RunCli("status " + Url(server));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s :
       {"cloudtune status  http://127.0.0.1:",
        "step      200   progress 256 / 20000 B0-steps (1.3%)",
        "now       1x g4dn.12xlarge, 2 replicas, batch 138, $3.912/h",
        "step time 46.4 ms = compute 37.8 ms + exposed communication 8.6 ms",
        "goodput 2290 (statistical efficiency 0.770), noise scale 183.7 samples",
        "advice    switch: 1x Standard_NC4as_T4_v3 (1 GPU/node) spot, batch 64x1 = 64",
        "0.245 h, $0.0154 to finish (staying: 0.154 h, $0.604)", "reason    cost: ",
        "tuner     2 configuration(s) measured, refits 6, fit errors 0, recommendations 4",
        "health    straggler factor 1.00, preemption notice no"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  EXPECT_LE(std::count(r.out.begin(), r.out.end(), '\n'), 24) << "more than one screen";
}

// A job on machines no catalog prices: the recommendation counts its costs in GPU-hours, and the
// screen says so instead of printing them as dollars.
TEST(Status, CostsInGpuHoursWhereTheMachinesHaveNoPrice) {
  HttpProviders p = Recorded(true);
  nlohmann::json rec = nlohmann::json::parse(Slurp(kData + "status_recommendation.json"));
  rec["cost_unit"] = "gpu_hours";
  p.recommendation = [text = rec.dump()] { return text; };
  HttpServer server(HttpOptions{}, p);
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const auto r = RunCli("status " + Url(server));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s : {"batch 138, 3.912 GPU-h/h",
                        "0.245 h, 0.0154 GPU-h to finish (staying: 0.154 h, 0.604 GPU-h)"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  // The recorded reason text is a priced job's; everything above it is the screen's own.
  const std::string figures = r.out.substr(0, r.out.find("\nreason"));
  EXPECT_EQ(figures.find('$'), std::string::npos) << r.out;
}

// A reply whose fields have other types or numbers out of any integer's range (a damaged or
// foreign endpoint) still gives a screen, with "?" where a field cannot be read.
TEST(Status, FieldsOfAnotherTypeReadAsUnknown) {
  HttpProviders p = Recorded(true);
  nlohmann::json rec = nlohmann::json::parse(Slurp(kData + "status_recommendation.json"));
  rec["cost_unit"] = 5;
  rec["action"] = nlohmann::json::array({1, 2});
  rec["reason"] = nullptr;
  nlohmann::json prof = nlohmann::json::parse(Slurp(kData + "status_profile.json"));
  prof["current"]["num_nodes"] = 1e300;
  prof["current"]["instance_type"] = 7;
  p.recommendation = [text = rec.dump()] { return text; };
  p.profile_json = [text = prof.dump()] { return text; };
  HttpServer server(HttpOptions{}, p);
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const auto r = RunCli("status " + Url(server));
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* s : {"now       ", "x ?, 2 replicas, batch 138, $3.912/h", "advice    ?: "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
}

TEST(Status, WatchRefreshes) {
  HttpServer server(HttpOptions{}, Recorded(true));
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const auto r = RunCli("status " + Url(server) + " --watch --interval 0.1 --iterations 3");
  ASSERT_EQ(r.status, 0) << r.err;
  size_t n = 0;
  for (size_t p = r.out.find("cloudtune status"); p != std::string::npos;
       p = r.out.find("cloudtune status", p + 1))
    ++n;
  EXPECT_EQ(n, 3u) << r.out;
}

TEST(Status, NoRecommendationYet) {
  HttpServer server(HttpOptions{}, Recorded(false));
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const auto r = RunCli("status " + Url(server));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("advice    none yet (the tuner has not published one)"), std::string::npos)
      << r.out;
}

TEST(Status, BadInputs) {
  HttpServer server(HttpOptions{}, Recorded(true));
  std::string err;
  ASSERT_TRUE(server.Start(&err)) << err;
  const int port = server.BoundPort();
  server.Stop();  // nothing listens there now
  const auto r = RunCli("status 127.0.0.1:" + std::to_string(port) + " --timeout 2");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(
      r.err.rfind("cloudtune: error: http://127.0.0.1:" + std::to_string(port) + "/metrics: ", 0),
      0u)
      << r.err;
  const auto bad = RunCli("status http://127.0.0.1:99999");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(
      bad.err,
      "cloudtune: error: http://127.0.0.1:99999: expected http://HOST:PORT (port 1..65535)\n");
}

}  // namespace
