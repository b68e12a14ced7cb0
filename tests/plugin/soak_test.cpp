// Soak test of the plugin hooks: 100,000 optimizer steps through a Plugin with the
// online tuner running (frequent measurements and background refits, saved state), no model. Each
// step sleeps 50 us in its "all-reduce" so the run spans many refit periods (about 10 s).
// Memory must stay flat after the warm-up; the peak and resident sizes are printed and recorded.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "plugin/torch/plugin.h"

namespace cloudtune::plugin {
namespace {

namespace fs = std::filesystem;

// VmHWM / VmRSS of this process in kB (-1 when unreadable).
long StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  }
  return -1;
}

TEST(PluginSoak, HundredThousandStepsKeepMemoryFlat) {
  const fs::path dir =
      fs::temp_directory_path() / ("cloudtune-soak-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  runtime::Options o;
  o.enabled = true;
  o.sidecar = (dir / "s.jsonl").string();
  o.profile = (dir / "p.csv").string();
  o.state = (dir / "state.json").string();
  o.measure_every = 100;
  o.warmup_steps = 2;
  o.refit_seconds = 0.1;
  o.instance_type = "g4dn.12xlarge";
  o.target_progress = 20000;
  o.log_level = "error";
  std::string why;
  ASSERT_TRUE(o.IsValid(&why)) << why;

  at::manual_seed(0);
  // Two tiny gradients: a fixed mean plus one of a few pre-drawn noise draws, so the noise
  // estimate is valid and the refits have something to fit.
  const at::Tensor mean_w = at::full({64}, 0.05), mean_b = at::full({8}, 0.05);
  std::vector<at::Tensor> noise_w, noise_b;
  for (int i = 0; i < 16; ++i) {
    noise_w.push_back(0.1 * at::randn({64}));
    noise_b.push_back(0.1 * at::randn({8}));
  }

  constexpr int kSteps = 100000, kWarm = 10000, kPeriod = 5000;
  long hwm_warm = -1, rss_warm = -1;
  const auto t0 = std::chrono::steady_clock::now();
  {
    Plugin p(o);
    ASSERT_TRUE(p.Start({0, 1, 1, 32, 1}));
    for (int i = 1; i <= kSteps; ++i) {
      // Two configurations, alternating every kPeriod steps (config change -> warm-up, refit).
      const int64_t bsz = (i - 1) / kPeriod % 2 == 0 ? 32 : 64;
      p.StepBegin();
      const std::vector<at::Tensor> g = {mean_w + noise_w[i % 16], mean_b + noise_b[i % 16]};
      const double slot = p.GradsLocal(g);
      p.SyncBegin();
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // the "all-reduce"
      p.SyncEnd();
      p.GradsReduced(g, slot);
      p.StepEnd(bsz, 1);
      if (i == kWarm) {
        hwm_warm = StatusKb("VmHWM");
        rss_warm = StatusKb("VmRSS");
      }
    }
    ASSERT_TRUE(p.enabled());  // no internal error switched it off
    EXPECT_EQ(p.step(), kSteps);
    EXPECT_EQ(p.profile().size(), 2u);
    p.Finish();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long hwm_end = StatusKb("VmHWM"), rss_end = StatusKb("VmRSS");
  ASSERT_GT(hwm_warm, 0);
  ASSERT_GT(hwm_end, 0);

  char buf[300];
  std::snprintf(buf, sizeof buf,
                "soak: %d steps in %.1f s; after %d steps VmHWM %ld kB VmRSS %ld kB; after %d "
                "steps VmHWM %ld kB VmRSS %ld kB; peak growth %ld kB",
                kSteps, seconds, kWarm, hwm_warm, rss_warm, kSteps, hwm_end, rss_end,
                hwm_end - hwm_warm);
  std::cout << buf << std::endl;
  RecordProperty("steps", kSteps);
  RecordProperty("seconds", std::to_string(seconds));
  RecordProperty("vm_hwm_kb_after_warmup", static_cast<int>(hwm_warm));
  RecordProperty("vm_rss_kb_after_warmup", static_cast<int>(rss_warm));
  RecordProperty("vm_hwm_kb_end", static_cast<int>(hwm_end));
  RecordProperty("vm_rss_kb_end", static_cast<int>(rss_end));
  // Flat memory: the peak grows by less than 8 MB over the last 90,000 steps.
  EXPECT_LT(hwm_end - hwm_warm, 8 * 1024) << buf;
  EXPECT_LT(rss_end - rss_warm, 8 * 1024) << buf;

  // The sidecar: every line parses; start first, end last; one measurement per 100 steps.
  std::ifstream in(dir / "s.jsonl");
  std::string line;
  int lines = 0, measurements = 0, recommendations = 0;
  nlohmann::json first, last;
  while (std::getline(in, line)) {
    nlohmann::json r;
    ASSERT_NO_THROW(r = nlohmann::json::parse(line)) << "line " << lines + 1 << ": " << line;
    if (lines == 0) first = r;
    last = r;
    ++lines;
    const std::string kind = r.value("kind", "");
    if (kind == "measurement") ++measurements;
    if (kind == "recommendation") {
      ++recommendations;
      EXPECT_TRUE(r.contains("inputs")) << line;
      std::cout << "soak: recommendation at step " << r.value("step", 0LL) << " ("
                << r.value("trigger", "?") << ")" << std::endl;
    }
  }
  EXPECT_EQ(first["kind"], "start");
  EXPECT_EQ(last["kind"], "end");
  EXPECT_EQ(last["steps"], kSteps);
  EXPECT_EQ(measurements, kSteps / o.measure_every);
  EXPECT_GE(recommendations, 1);
  EXPECT_TRUE(fs::exists(dir / "state.json"));
  std::cout << "soak: sidecar " << lines << " lines, " << measurements << " measurements, "
            << recommendations << " recommendations" << std::endl;
  RecordProperty("sidecar_lines", lines);
  RecordProperty("recommendations", recommendations);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cloudtune::plugin
