#include "plugin/torch/c10d_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "plugin/torch/tcp_store.h"

namespace {

using cloudtune::core::LaunchEnv;

LaunchEnv Read(const std::map<std::string, std::string>& env) {
  return LaunchEnv::Read([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(C10dStore, TheAgentsStoreKeepsEachAttemptApart) {
  EXPECT_EQ(Read({}).AttemptPrefix(), "");
  EXPECT_EQ(Read({{"TORCHELASTIC_RESTART_COUNT", "2"}}).AttemptPrefix(), "");  // rank 0 serves
  EXPECT_EQ(Read({{"TORCHELASTIC_USE_AGENT_STORE", "False"}}).AttemptPrefix(), "");
  const LaunchEnv agent =
      Read({{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}});
  EXPECT_TRUE(agent.agent_store);
  EXPECT_EQ(agent.AttemptPrefix(), "/worker/attempt_2");  // torch's env:// rendezvous prefix
}

// The plugin's client of an agent's store: a counter of the first attempt is not the second's.
TEST(C10dStore, AClientOfTheAgentsStoreCountsPerAttempt) {
  auto agent = cloudtune::plugin::ServeStore(0, std::chrono::seconds(10));  // outlives attempts
  const std::string port = std::to_string(agent->getPort());
  for (int attempt = 0; attempt < 2; ++attempt) {
    const LaunchEnv launch = Read({{"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", port},
                                   {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                   {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)}});
    std::string error;
    auto store = cloudtune::plugin::ConnectJobStore(launch, &error);
    ASSERT_TRUE(store) << error;
    EXPECT_EQ(store->Add("cloudtune/on/arrived", 1), 1) << "attempt " << attempt;
    EXPECT_EQ(store->Add("cloudtune/on/arrived", 1), 2) << "attempt " << attempt;
  }
  EXPECT_EQ(agent->add("/worker/attempt_0/cloudtune/on/arrived", 0), 2);
  EXPECT_EQ(agent->add("/worker/attempt_1/cloudtune/on/arrived", 0), 2);
}

}  // namespace
