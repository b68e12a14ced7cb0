#include "plugin/runtime/options.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace cloudtune::runtime {
namespace {

// FromEnv over a fake environment.
Options FromMap(const std::map<std::string, std::string>& env, std::string* err) {
  return Options::FromEnv(err, [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Options, DefaultsAreValid) {
  std::string err;
  Options o;
  EXPECT_TRUE(o.IsValid(&err)) << err;
  EXPECT_FALSE(o.enabled);
  EXPECT_EQ(o.sidecar, "cloudtune.sidecar.jsonl");
  EXPECT_EQ(o.profile, "cloudtune.profile.csv");
  EXPECT_EQ(o.instance_type, "local");
  EXPECT_EQ(o.refit_seconds, 30);
}

TEST(Options, EmptyEnvironmentGivesDefaultsAndPluginOff) {
  std::string err = "x";
  Options o = FromMap({}, &err);
  EXPECT_TRUE(err.empty());
  EXPECT_FALSE(o.enabled);
}

TEST(Options, ReadsEveryKindOfField) {
  std::string err;
  Options o = FromMap({{"CLOUDTUNE", "1"},
                       {"CLOUDTUNE_SIDECAR", "/tmp/s.jsonl"},
                       {"CLOUDTUNE_MEASURE_EVERY", "7"},
                       {"CLOUDTUNE_GNS_TARGET_ERROR", "0.1"},
                       {"CLOUDTUNE_OBJECTIVE", "time"},
                       {"CLOUDTUNE_HTTP", "127.0.0.1:8080"}},
                      &err);
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_TRUE(o.enabled);
  EXPECT_EQ(o.sidecar, "/tmp/s.jsonl");
  EXPECT_EQ(o.measure_every, 7);
  EXPECT_EQ(o.gns_target_error, 0.1);
  EXPECT_EQ(o.objective, "time");
  EXPECT_TRUE(o.IsValid(&err)) << err;
}

TEST(Options, UnparsableValueNamesVariableAndValue) {
  std::string err;
  FromMap({{"CLOUDTUNE", "1"}, {"CLOUDTUNE_MEASURE_EVERY", "often"}}, &err);
  EXPECT_NE(err.find("CLOUDTUNE_MEASURE_EVERY='often'"), std::string::npos) << err;
  FromMap({{"CLOUDTUNE", "maybe"}}, &err);
  EXPECT_NE(err.find("CLOUDTUNE='maybe'"), std::string::npos) << err;
  FromMap({{"CLOUDTUNE_GNS_TARGET_ERROR", "nan"}}, &err);
  EXPECT_NE(err.find("CLOUDTUNE_GNS_TARGET_ERROR"), std::string::npos) << err;
}

TEST(Options, OutOfRangeValueNamesVariableAndValue) {
  struct Case {
    const char* var;
    const char* value;
  };
  for (Case c : {Case{"CLOUDTUNE_MEASURE_EVERY", "0"}, Case{"CLOUDTUNE_GNS_MAX_WINDOW", "4"},
                 Case{"CLOUDTUNE_OBJECTIVE", "speed"}, Case{"CLOUDTUNE_HTTP", "localhost"},
                 Case{"CLOUDTUNE_HTTP", "h:99999"}, Case{"CLOUDTUNE_BUDGET_USD", "-3"},
                 Case{"CLOUDTUNE_LOG_LEVEL", "loud"}, Case{"CLOUDTUNE_SIDECAR", ""},
                 Case{"CLOUDTUNE_INSTANCE_TYPE", "a,b"}, Case{"CLOUDTUNE_REFIT_SECONDS", "0"},
                 Case{"CLOUDTUNE_CLOUDS", "aws,,gcp"}, Case{"CLOUDTUNE_GPUS", "T4,"},
                 Case{"CLOUDTUNE_MAX_NODES", "0"}, Case{"CLOUDTUNE_MAX_GPUS", "-8"}}) {
    std::string err;
    Options o = FromMap({{c.var, c.value}}, &err);
    ASSERT_TRUE(err.empty()) << err;
    EXPECT_FALSE(o.IsValid(&err)) << c.var;
    EXPECT_NE(err.find(std::string(c.var) + "='" + c.value + "'"), std::string::npos) << err;
  }
}

TEST(Options, ListsAreSplitAtCommasAndTrimmed) {
  EXPECT_TRUE(Options::List("").empty());
  EXPECT_TRUE(Options::List("  ").empty());
  EXPECT_EQ(Options::List("aws"), std::vector<std::string>({"aws"}));
  EXPECT_EQ(Options::List(" T4, A10G ,L4"), std::vector<std::string>({"T4", "A10G", "L4"}));
}

TEST(Options, EnvTableListsEveryVariableOnceWithItsDefault) {
  const auto& t = EnvTable();
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front().name, "CLOUDTUNE");
  std::set<std::string> names;
  for (const auto& v : t) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name;
    EXPECT_FALSE(v.doc.empty()) << v.name;
    EXPECT_EQ(v.name.rfind("CLOUDTUNE", 0), 0u);
  }
  for (const char* need :
       {"CLOUDTUNE_SIDECAR", "CLOUDTUNE_PROFILE", "CLOUDTUNE_INSTANCE_TYPE",
        "CLOUDTUNE_MEASURE_EVERY", "CLOUDTUNE_GNS_TARGET_ERROR", "CLOUDTUNE_MAX_LOCAL_BATCH",
        "CLOUDTUNE_REFIT_SECONDS", "CLOUDTUNE_OBJECTIVE", "CLOUDTUNE_DEADLINE_HOURS",
        "CLOUDTUNE_BUDGET_USD", "CLOUDTUNE_TARGET_PROGRESS", "CLOUDTUNE_CATALOG", "CLOUDTUNE_HTTP",
        "CLOUDTUNE_STATE", "CLOUDTUNE_PREEMPTION_URL", "CLOUDTUNE_PREEMPTION_POLL_SECONDS",
        "CLOUDTUNE_STRAGGLER_EVERY", "CLOUDTUNE_LOG_LEVEL"})
    EXPECT_TRUE(names.count(need)) << need;
  // Defaults round-trip: reading the table's defaults back gives a valid, default Options.
  std::map<std::string, std::string> env;
  for (const auto& v : t) env[v.name] = v.default_value;
  std::string err;
  Options o = FromMap(env, &err);
  EXPECT_TRUE(err.empty()) << err;
  EXPECT_TRUE(o.IsValid(&err)) << err;
  EXPECT_EQ(o.refit_seconds, Options{}.refit_seconds);
  EXPECT_EQ(o.measure_every, Options{}.measure_every);
}

std::string ReadSourceFile(const std::string& rel) {
  std::FILE* f = std::fopen((std::string(CLOUDTUNE_SOURCE_DIR "/") + rel).c_str(), "r");
  if (f == nullptr) return "";
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return text;
}

// Every variable documented in docs/plugin.md and in the README's table.
TEST(Options, DocsListEveryVariable) {
  for (const char* doc : {"docs/plugin.md", "README.md"}) {
    const std::string text = ReadSourceFile(doc);
    ASSERT_FALSE(text.empty()) << doc << " missing";
    for (const auto& v : EnvTable())
      EXPECT_NE(text.find("`" + v.name + "`"), std::string::npos) << v.name << " not in " << doc;
  }
}

}  // namespace
}  // namespace cloudtune::runtime
