#include "plugin/runtime/options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <variant>

#include "estimator/core/csv.h"
#include "estimator/core/env.h"
#include "estimator/core/types.h"

namespace cloudtune::runtime {
namespace {

using Member =
    std::variant<bool Options::*, int Options::*, double Options::*, std::string Options::*>;

struct Field {
  const char* key;  // lower-case field name; the variable is CLOUDTUNE_<KEY> ("" = CLOUDTUNE)
  Member member;
  const char* doc;
};

// The single list every reader uses: FromEnv, IsValid messages and EnvTable.
const std::vector<Field>& Fields() {
  static const std::vector<Field> fields = {
      {"", &Options::enabled, "1 switches the plugin on; unset or 0 = every hook is a no-op"},
      {"sidecar", &Options::sidecar, "JSON Lines sidecar written by rank 0"},
      {"profile", &Options::profile, "trace CSV of this job's measurements per configuration"},
      {"instance_type", &Options::instance_type,
       "instance type (catalog name); local = ask the cloud's metadata, else the CUDA device"},
      {"measure_every", &Options::measure_every, "optimizer steps per measurement record"},
      {"measure_seconds", &Options::measure_seconds,
       "a record also closes after this many seconds once it holds 5 timed steps (0 = off)"},
      {"warmup_steps", &Options::warmup_steps,
       "steps ignored at start-up and after a configuration change"},
      {"gns_target_error", &Options::gns_target_error,
       "relative standard error the smoothed gradient-noise statistics aim for"},
      {"gns_max_window", &Options::gns_max_window,
       "longest effective window (steps) of the gradient-noise averages"},
      {"max_local_batch", &Options::max_local_batch,
       "largest local batch the tuner may propose (0 = no limit)"},
      {"max_accum_steps", &Options::max_accum_steps,
       "most extra accumulation micro-steps per optimizer step the tuner may propose (0 = none)"},
      {"max_nodes", &Options::max_nodes, "most instances a proposal may use (quota)"},
      {"max_gpus", &Options::max_gpus, "most GPUs over all instances a proposal may use (quota)"},
      {"max_batch_growth", &Options::max_batch_growth,
       "largest proposed global batch as a multiple of the largest one run (0 = no bound)"},
      {"mixed_types", &Options::mixed_types,
       "instance types a mixed cluster may combine when spot capacity is short (0 = off, 2, 3)"},
      {"wait_for_spot", &Options::wait_for_spot,
       "without a deadline: wait out spot shortages (cost; a budget nothing else meets) (0 = leave "
       "spot)"},
      {"observe_batch_first", &Options::observe_batch_first,
       "under a deadline, measure the current hardware at a larger batch (in process) before a "
       "move while one local batch is measured (0 = move at once)"},
      {"refit_seconds", &Options::refit_seconds, "seconds between background refits"},
      {"objective", &Options::objective, "what the tuner minimises: cost or time"},
      {"deadline_hours", &Options::deadline_hours, "finish within this many hours (0 = none)"},
      {"budget_usd", &Options::budget_usd, "spend at most this many USD (0 = none)"},
      {"target_progress", &Options::target_progress,
       "progress (B0-steps: steps at the initial batch) that counts as finished (0 = none)"},
      {"target_steps", &Options::target_steps,
       "optimizer steps at the initial batch that count as finished (0 = none)"},
      {"target_samples", &Options::target_samples,
       "training samples that count as finished (0 = none)"},
      {"target_epochs", &Options::target_epochs,
       "epochs that count as finished; needs CLOUDTUNE_DATASET_SIZE (0 = none)"},
      {"dataset_size", &Options::dataset_size, "samples per epoch (0 = unknown)"},
      {"catalog", &Options::catalog, "instance catalog CSV (empty = built-in)"},
      {"candidates", &Options::candidates,
       "trace CSV of the only configurations the tuner may propose (empty = the whole space)"},
      {"clouds", &Options::clouds,
       "comma-separated clouds the tuner may propose types of, e.g. aws (empty = every cloud)"},
      {"gpus", &Options::gpus,
       "comma-separated GPU models the tuner may propose, e.g. T4,A10G (empty = every GPU)"},
      {"http", &Options::http, "host:port of the HTTP endpoint (empty = off)"},
      {"state", &Options::state, "state file kept across restarts (empty = none)"},
      {"history", &Options::history,
       "job history database for warm starts (empty = ~/.cache/cloudtune/history.sqlite, off = "
       "none)"},
      {"metadata_url", &Options::metadata_url,
       "instance metadata to ask: auto (on cloud VMs), off, or an http:// base URL"},
      {"preemption_url", &Options::preemption_url,
       "URL polled for preemption notices (empty = off)"},
      {"preemption_poll_seconds", &Options::preemption_poll_seconds,
       "seconds between preemption polls"},
      {"agree_timeout_seconds", &Options::agree_timeout_seconds,
       "seconds the ranks wait for each other to agree on/off at start-up"},
      {"straggler_every", &Options::straggler_every, "steps between straggler checks (0 = off)"},
      {"log_level", &Options::log_level, "log verbosity: error, warn, info or debug"},
  };
  return fields;
}

std::string VarName(const Field& f) {
  std::string name = "CLOUDTUNE";
  if (*f.key) {
    name += '_';
    for (const char* c = f.key; *c; ++c) name += static_cast<char>(std::toupper(*c));
  }
  return name;
}

std::string ToString(const Options& o, const Member& m) {
  return std::visit(
      [&](auto ptr) -> std::string {
        using T = std::decay_t<decltype(o.*ptr)>;
        if constexpr (std::is_same_v<T, bool>) {
          return (o.*ptr) ? "1" : "0";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return o.*ptr;
        } else {
          std::ostringstream s;
          s << (o.*ptr);
          return s.str();
        }
      },
      m);
}

// Parses `text` into the member; returns "" or why it failed.
std::string Parse(Options& o, const Member& m, const std::string& text) {
  return std::visit(
      [&](auto ptr) -> std::string {
        using T = std::decay_t<decltype(o.*ptr)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (text == "1" || text == "true" || text == "on" || text == "yes") {
            o.*ptr = true;
          } else if (text.empty() || text == "0" || text == "false" || text == "off" ||
                     text == "no") {
            o.*ptr = false;
          } else {
            return "expected 1 or 0";
          }
          return "";
        } else if constexpr (std::is_same_v<T, std::string>) {
          o.*ptr = text;
          return "";
        } else if constexpr (std::is_same_v<T, int>) {
          char* end = nullptr;
          errno = 0;
          long v = std::strtol(text.c_str(), &end, 10);
          if (text.empty() || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX)
            return "expected an integer";
          o.*ptr = static_cast<int>(v);
          return "";
        } else {
          char* end = nullptr;
          errno = 0;
          double v = std::strtod(text.c_str(), &end);
          if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v))
            return "expected a finite number";
          o.*ptr = v;
          return "";
        }
      },
      m);
}

const Field& FieldFor(const void* member_addr, const Options& o) {
  for (const Field& f : Fields()) {
    const void* addr = std::visit([&](auto ptr) -> const void* { return &(o.*ptr); }, f.member);
    if (addr == member_addr) return f;
  }
  return Fields().front();
}

}  // namespace

Options Options::FromEnv(std::string* error,
                         const std::function<const char*(const char*)>& getenv) {
  Options o;
  if (error) error->clear();
  for (const Field& f : Fields()) {
    const std::string name = VarName(f);
    const std::optional<std::string> v = core::GetEnv(name, getenv);
    if (!v) continue;
    std::string why = Parse(o, f.member, *v);
    if (!why.empty() && error && error->empty()) *error = name + "='" + *v + "': " + why;
  }
  return o;
}

bool Options::IsValid(std::string* error) const {
  auto fail = [&](const void* member, const std::string& why) {
    if (error) {
      const Field& f = FieldFor(member, *this);
      *error = VarName(f) + "='" + ToString(*this, f.member) + "': " + why;
    }
    return false;
  };
  if (sidecar.empty()) return fail(&sidecar, "must not be empty");
  if (profile.empty()) return fail(&profile, "must not be empty");
  if (instance_type.empty()) return fail(&instance_type, "must not be empty");
  if (instance_type.find_first_of(",\"\n\r") != std::string::npos)
    return fail(&instance_type, "must not contain a comma, quote or newline");
  if (measure_every < 1) return fail(&measure_every, "must be >= 1 (steps)");
  if (!(measure_seconds >= 0) || !std::isfinite(measure_seconds))
    return fail(&measure_seconds, "must be >= 0 (seconds, 0 = by steps only)");
  if (warmup_steps < 0) return fail(&warmup_steps, "must be >= 0 (steps)");
  if (!(gns_target_error > 0) || !std::isfinite(gns_target_error))
    return fail(&gns_target_error, "must be > 0");
  if (!(gns_max_window >= 8) || !std::isfinite(gns_max_window))
    return fail(&gns_max_window, "must be >= 8 (steps)");
  if (max_local_batch < 0) return fail(&max_local_batch, "must be >= 0 (0 = no limit)");
  if (max_accum_steps < 0) return fail(&max_accum_steps, "must be >= 0 (0 = none)");
  if (max_nodes < 1) return fail(&max_nodes, "must be >= 1 (instances)");
  if (max_gpus < 1) return fail(&max_gpus, "must be >= 1 (GPUs)");
  if (!(max_batch_growth == 0 || max_batch_growth >= 1) || !std::isfinite(max_batch_growth))
    return fail(&max_batch_growth, "must be >= 1, or 0 (no bound)");
  if (mixed_types != 0 && mixed_types != 2 && mixed_types != 3)
    return fail(&mixed_types, "must be 0 (off), 2 or 3");
  if (!(refit_seconds > 0)) return fail(&refit_seconds, "must be > 0 (seconds)");
  core::Goal goal;
  if (!core::ParseGoal(objective, &goal)) return fail(&objective, "must be 'cost' or 'time'");
  if (deadline_hours < 0) return fail(&deadline_hours, "must be >= 0 (hours, 0 = none)");
  if (budget_usd < 0) return fail(&budget_usd, "must be >= 0 (USD, 0 = none)");
  if (target_progress < 0) return fail(&target_progress, "must be >= 0");
  if (target_steps < 0) return fail(&target_steps, "must be >= 0 (steps)");
  if (target_samples < 0) return fail(&target_samples, "must be >= 0 (samples)");
  if (target_epochs < 0) return fail(&target_epochs, "must be >= 0 (epochs)");
  if (dataset_size < 0) return fail(&dataset_size, "must be >= 0 (samples)");
  if (target_epochs > 0 && !(dataset_size > 0) && !(target_progress > 0) && !(target_steps > 0) &&
      !(target_samples > 0))
    return fail(&target_epochs, "needs CLOUDTUNE_DATASET_SIZE (samples per epoch)");
  for (const std::string* list : {&clouds, &gpus}) {
    if (list->find_first_of("\"\n\r") != std::string::npos)
      return fail(list, "must not contain a quote or newline");
    for (const std::string& item : List(*list))
      if (item.empty()) return fail(list, "an empty item in the comma-separated list");
  }
  if (!http.empty()) {
    auto colon = http.rfind(':');
    bool ok = colon != std::string::npos && colon > 0 && colon + 1 < http.size();
    if (ok) {
      char* end = nullptr;
      long port = std::strtol(http.c_str() + colon + 1, &end, 10);
      ok = *end == '\0' && port >= 0 && port <= 65535;
    }
    if (!ok) return fail(&http, "expected host:port with a port in 0..65535");
  }
  if (metadata_url != "auto" && metadata_url != "off" && metadata_url.rfind("http://", 0) != 0)
    return fail(&metadata_url, "must be auto, off or an http:// URL");
  if (!(preemption_poll_seconds > 0))
    return fail(&preemption_poll_seconds, "must be > 0 (seconds)");
  if (!(agree_timeout_seconds > 0) || !std::isfinite(agree_timeout_seconds))
    return fail(&agree_timeout_seconds, "must be > 0 (seconds)");
  if (straggler_every < 0) return fail(&straggler_every, "must be >= 0 (steps, 0 = off)");
  if (log_level != "error" && log_level != "warn" && log_level != "info" && log_level != "debug")
    return fail(&log_level, "must be error, warn, info or debug");
  return true;
}

std::vector<std::string> Options::List(const std::string& value) {
  if (core::csv::Trim(value).empty()) return {};
  return core::csv::Split(value);
}

const std::vector<EnvVar>& EnvTable() {
  static const std::vector<EnvVar> table = [] {
    std::vector<EnvVar> t;
    Options defaults;
    for (const Field& f : Fields()) t.push_back({VarName(f), ToString(defaults, f.member), f.doc});
    return t;
  }();
  return table;
}

}  // namespace cloudtune::runtime
