#include "plugin/runtime/sidecar.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

namespace cloudtune::runtime {
namespace {

std::string TempPath(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("cloudtune-sidecar-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<nlohmann::json> ReadLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Sidecar, FormatPutsHeaderFirst) {
  const std::string line = Sidecar::Format("measurement", 12, 1.5, {{"a", 1}, {"kind", "x"}});
  EXPECT_EQ(line.rfind("{\"schema\":\"cloudtune.sidecar/1\",\"time\":1.5,\"step\":12,"
                       "\"kind\":\"measurement\"",
                       0),
            0u)
      << line;
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["a"], 1);
  EXPECT_EQ(j["kind"], "measurement");  // reserved keys of the payload cannot override
}

TEST(Sidecar, AppendsOneParsableLinePerRecordFromManyThreads) {
  const std::string path = TempPath("threads.jsonl");
  std::filesystem::remove(path);
  {
    Sidecar s;
    std::string err;
    ASSERT_TRUE(s.Open(path, &err)) << err;
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&s, t] {
        for (int i = 0; i < 250; ++i) s.Write("measurement", i, {{"thread", t}, {"i", i}});
      });
    for (auto& t : ts) t.join();
    s.Flush();
    EXPECT_EQ(ReadLines(path).size(), 1000u);  // on disk after Flush, before Close
  }
  auto lines = ReadLines(path);
  ASSERT_EQ(lines.size(), 1000u);
  for (const auto& j : lines) {
    EXPECT_EQ(j["schema"], kSidecarSchema);
    EXPECT_TRUE(j["time"].is_number());
    EXPECT_TRUE(j["step"].is_number_integer());
  }
  // Reopening appends.
  Sidecar s;
  std::string err;
  ASSERT_TRUE(s.Open(path, &err));
  s.Write("end", 5);
  s.Close();
  EXPECT_EQ(ReadLines(path).size(), 1001u);
}

TEST(Sidecar, MissingDirectoryIsAClearError) {
  Sidecar s;
  std::string err;
  EXPECT_FALSE(s.Open("/nonexistent-dir-cloudtune/x.jsonl", &err));
  EXPECT_NE(err.find("/nonexistent-dir-cloudtune/x.jsonl"), std::string::npos) << err;
  EXPECT_FALSE(s.is_open());
  s.Write("start", 0);  // no-op, no crash
  s.Close();
}

TEST(Sidecar, PostRunsTasksInOrderAfterRecords) {
  const std::string path = TempPath("post.jsonl");
  std::filesystem::remove(path);
  Sidecar s;
  std::string err;
  ASSERT_TRUE(s.Open(path, &err));
  s.Write("start", 0);
  size_t seen = 0;
  s.Post([&] { seen = ReadLines(path).size(); });
  s.Flush();
  EXPECT_EQ(seen, 1u);
  s.Post([] { throw std::runtime_error("boom"); });  // logged, writer survives
  s.Write("end", 1);
  s.Close();
  EXPECT_EQ(ReadLines(path).size(), 2u);
}

// The "end" record is the file's last line even when other threads keep writing after it (a
// SIGTERM ends the sidecar while the training thread is still measuring).
TEST(Sidecar, NothingFollowsTheLastRecord) {
  const std::string path = TempPath("last.jsonl");
  std::filesystem::remove(path);
  Sidecar s;
  std::string err;
  ASSERT_TRUE(s.Open(path, &err));
  s.Write("start", 0);
  std::atomic<bool> go{true};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int64_t i = 1; go.load(); ++i) {
      s.Write("measurement", i);
      written.fetch_add(1);
    }
  });
  while (written.load() < 100) std::this_thread::yield();
  s.WriteLast("end", 7);
  int after = written.load();
  while (written.load() < after + 100) std::this_thread::yield();  // writes after the end
  s.Flush();
  int seen_posted = 0;
  s.Post([&] { seen_posted = 1; });  // tasks still run
  s.Flush();
  go = false;
  writer.join();
  s.Close();
  const auto lines = ReadLines(path);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines.front()["kind"], "start");
  EXPECT_EQ(lines.back()["kind"], "end");
  EXPECT_EQ(lines.back()["step"], 7);
  EXPECT_EQ(seen_posted, 1);
  for (size_t i = 1; i + 1 < lines.size(); ++i) EXPECT_EQ(lines[i]["kind"], "measurement");
  // Reopening starts a new run: records are accepted again.
  ASSERT_TRUE(s.Open(path, &err));
  s.Write("start", 0);
  s.Close();
  EXPECT_EQ(ReadLines(path).back()["kind"], "start");
}

}  // namespace
}  // namespace cloudtune::runtime
