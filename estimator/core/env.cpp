#include "estimator/core/env.h"

#include <cstdlib>

namespace cloudtune::core {
namespace {

int IntOr(const std::optional<std::string>& v, int fallback) {
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v->c_str(), &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 30) return fallback;
  return static_cast<int>(x);
}

}  // namespace

std::optional<std::string> GetEnv(const std::string& name, const EnvLookup& lookup) {
  const char* v = lookup ? lookup(name.c_str()) : std::getenv(name.c_str());
  if (!v) return std::nullopt;
  return std::string(v);
}

LaunchEnv LaunchEnv::Read(const EnvLookup& lookup) {
  LaunchEnv e;
  e.rank = IntOr(GetEnv("RANK", lookup), -1);
  e.world_size = IntOr(GetEnv("WORLD_SIZE", lookup), -1);
  e.local_rank = IntOr(GetEnv("LOCAL_RANK", lookup), -1);
  e.local_world_size = IntOr(GetEnv("LOCAL_WORLD_SIZE", lookup), -1);
  e.group_rank = IntOr(GetEnv("GROUP_RANK", lookup), -1);
  e.group_world_size = IntOr(GetEnv("GROUP_WORLD_SIZE", lookup), -1);
  e.master_addr = GetEnv("MASTER_ADDR", lookup).value_or("");
  e.master_port = IntOr(GetEnv("MASTER_PORT", lookup), 0);
  e.restart_count = IntOr(GetEnv("TORCHELASTIC_RESTART_COUNT", lookup), 0);
  e.run_id = GetEnv("TORCHELASTIC_RUN_ID", lookup).value_or("");
  e.agent_store = GetEnv("TORCHELASTIC_USE_AGENT_STORE", lookup).value_or("") == "True";
  return e;
}

std::string LaunchEnv::AttemptPrefix() const {
  return agent_store ? "/worker/attempt_" + std::to_string(restart_count) : "";
}

int LaunchEnv::NumNodes(int world_size) const {
  if (group_world_size > 0) return group_world_size;
  if (local_world_size > 0 && world_size > 0 && world_size % local_world_size == 0)
    return world_size / local_world_size;
  return 1;
}

}  // namespace cloudtune::core
