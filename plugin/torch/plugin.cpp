#include "plugin/torch/plugin.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "estimator/core/atomic_file.h"
#include "estimator/core/version.h"
#include "hooks/grad_norm.h"
#include "plugin/runtime/runtime.h"
#include "plugin/torch/c10d_store.h"

namespace cloudtune::plugin {
namespace {

nlohmann::json Finite(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

nlohmann::json StatsJson(const hooks::RunningStats& s) {
  return {{"mean", s.mean()}, {"std", s.stddev()}, {"min", s.min()}, {"max", s.max()}};
}

}  // namespace

Plugin::Plugin(runtime::Options options, core::LaunchEnv launch)
    : opt_(std::move(options)),
      launch_(std::move(launch)),
      gns_(hooks::GnsOptions{opt_.gns_target_error, opt_.gns_max_window, 8, 0}) {}

Plugin::~Plugin() { Finish(); }

void Plugin::Log(const std::string& line) const {
  if (opt_.log_level == "error") return;
  std::cerr << "cloudtune: " + line + "\n" << std::flush;
}

void Plugin::Fail(const char* where, const std::string& what) {
  if (!enabled_.exchange(false)) return;
  std::cerr << "cloudtune: internal error in " << where << ": " << what
            << "; plugin switched off, training continues\n";
}

bool Plugin::Start(const JobInfo& job) {
  if (!opt_.enabled) return false;
  try {
    job_ = job;
    if (job_.world_size < 1) job_.world_size = 1;
    if (job_.micro_steps < 1) job_.micro_steps = 1;
    if (job_.num_nodes <= 0) job_.num_nodes = launch_.NumNodes(job_.world_size);
    leader_ = job_.rank == 0;
#ifdef CLOUDTUNE_WITH_CUDA
    use_cuda_ = job_.cuda;
#endif
    started_ = std::chrono::steady_clock::now();
    // What this rank alone can tell; then every rank agrees (a rank that is off must not leave
    // the others adding the noise-scale element to the all-reduce).
    std::string error;
    bool ok = opt_.IsValid(&error);
    if (!ok) {
      if (leader_) std::cerr << "cloudtune: invalid setting " << error << "; plugin switched off\n";
    } else if (leader_ && !sidecar_.Open(opt_.sidecar, &error)) {
      std::cerr << "cloudtune: " << error << "; plugin switched off on every rank\n";
      ok = false;
    }
    std::shared_ptr<runtime::KeyValueStore> store = ConnectStore();
    if (!Agree(store.get(), ok)) {
      sidecar_.Close();
      return false;
    }
    enabled_ = true;
    StartRuntime(std::move(store));  // tuner, HTTP, preemption, stragglers, state (never throws)
    if (leader_) WriteStartRecord();
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: cannot start: " << e.what() << "; plugin switched off\n";
    enabled_ = false;
  }
  return enabled();
}

std::shared_ptr<runtime::KeyValueStore> Plugin::ConnectStore() {
  if (job_.world_size < 2) return nullptr;
  std::string error = "MASTER_PORT is not set";
  std::shared_ptr<runtime::KeyValueStore> store;
  if (launch_.master_port > 0) store = ConnectJobStore(launch_, &error);
  if (!store) store_error_ = error;
  return store;
}

bool Plugin::Agree(runtime::KeyValueStore* store, bool local_ok) {
  if (job_.world_size < 2) return local_ok;
  if (!store) {
    // No store to agree through: each rank decides alone (a job launched without MASTER_ADDR /
    // MASTER_PORT); said once.
    if (leader_ && local_ok)
      Log("cannot agree on/off across ranks (job store: " + store_error_ +
          "); each rank decides alone");
    return local_ok;
  }
  // Unique to this rendezvous round and the same on every rank of it: torch elastic picks a new
  // MASTER_PORT per round, while the restart count differs between an agent that restarted and
  // one that just joined (an elastic scale-up).
  const std::string prefix =
      "cloudtune/on/" + launch_.run_id + "/" + std::to_string(launch_.master_port) + "/";
  std::string why;
  const bool on = runtime::AgreeAcrossRanks(*store, prefix, job_.world_size, local_ok,
                                            opt_.agree_timeout_seconds, &why);
  if (!on && local_ok)
    std::cerr << "cloudtune: rank " << job_.rank << ": switched off on every rank: " << why << "\n";
  return on;
}

void Plugin::WriteStartRecord() {
  nlohmann::json options;
  for (const auto& v : runtime::EnvTable())
    options[v.name] = core::GetEnv(v.name).value_or(v.default_value);
  nlohmann::json start = {{"version", core::Version()},
                          {"world_size", job_.world_size},
                          {"num_nodes", job_.num_nodes},
                          {"gpus_per_node", std::max(1, job_.world_size / job_.num_nodes)},
                          {"rank", job_.rank},
                          {"pid", static_cast<int64_t>(::getpid())},
                          {"restart_count", launch_.restart_count},
                          {"options", options}};
  if (runtime_) {
    const runtime::CloudInstance& in = runtime_->instance();
    start["instance"] = {{"instance_type", runtime_->instance_type()},
                         {"purchase", core::PurchaseName(runtime_->purchase())},
                         {"prices_known", runtime_->prices_known()},
                         {"provider", in.provider},
                         {"source", in.source},
                         {"note", in.note}};
    start["restored_state"] = runtime_->restored();
  }
  if (job_.local_bsz > 0) start["config"] = ConfigJson(KeyFor(job_.local_bsz, job_.micro_steps));
  sidecar_.Write("start", 0, start);
  Log("on; sidecar " + opt_.sidecar + ", profile " + opt_.profile + ", " +
      std::to_string(job_.world_size) + " replica(s) on " + std::to_string(job_.num_nodes) +
      " machine(s), a measurement every " + std::to_string(opt_.measure_every) + " steps");
}

void Plugin::StartRuntime(std::shared_ptr<runtime::KeyValueStore> store) {
  try {
    runtime::RuntimeSetup rs;
    rs.options = opt_;
    rs.rank = job_.rank;
    rs.world_size = job_.world_size;
    rs.num_nodes = job_.num_nodes;
    rs.launch = launch_;
    // "local" (the default, or said explicitly) = find where the job runs.
    rs.detect_instance = opt_.instance_type == "local";
    rs.gpu_name = GpuName();
    runtime::Sidecar* sidecar = &sidecar_;
    rs.record = [sidecar](const std::string& kind, long long step, const nlohmann::json& rec) {
      sidecar->Write(kind, step, rec);
    };
    if (opt_.straggler_every > 0 && job_.world_size > 1) {
      rs.store = std::move(store);
      if (!rs.store && leader_) Log("straggler detection off: " + store_error_);
    }
    runtime_ = std::make_unique<runtime::Runtime>(std::move(rs));
    runtime_->Start();
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: online tuner not started: " << e.what() << "\n";
    runtime_.reset();
  }
}

std::string Plugin::GpuName() const {
#ifdef CLOUDTUNE_WITH_CUDA
  if (job_.cuda) {
    try {
      return hooks::CudaDeviceName();
    } catch (const std::exception&) {
    }
  }
#endif
  return "";
}

void Plugin::SetTarget(const runtime::Target& target) {
  if (runtime_) runtime_->SetTarget(target);
}

void Plugin::SetObserver(Observer observer) { observer_ = std::move(observer); }

bool Plugin::ShouldCheckpoint() const { return runtime_ && runtime_->ShouldCheckpoint(); }

core::ConfigKey Plugin::KeyFor(int64_t local_bsz, int64_t micro_steps) const {
  core::ConfigKey k;
  k.num_nodes = job_.num_nodes;
  k.num_replicas = job_.world_size;
  k.local_bsz = static_cast<int>(local_bsz);
  k.accum_steps = static_cast<int>(micro_steps - 1);
  k.instance_type = opt_.instance_type;
  return k;
}

nlohmann::json Plugin::ConfigJson(const core::ConfigKey& k) const {
  return {{"num_nodes", k.num_nodes},         {"num_replicas", k.num_replicas},
          {"local_bsz", k.local_bsz},         {"accum_steps", k.accum_steps},
          {"global_batch", k.global_batch()}, {"instance_type", k.instance_type}};
}

#ifdef CLOUDTUNE_WITH_CUDA
#define CLOUDTUNE_TIMER(call) \
  do {                        \
    if (use_cuda_)            \
      cuda_timer_.call;       \
    else                      \
      timer_.call;            \
  } while (0)
#else
#define CLOUDTUNE_TIMER(call) timer_.call
#endif

void Plugin::StepBegin() {
  if (!enabled()) return;
  try {
    CLOUDTUNE_TIMER(StepBegin());
  } catch (const std::exception& e) {
    Fail("step_begin", e.what());
  }
}

void Plugin::SyncBegin() {
  if (!enabled()) return;
  try {
    CLOUDTUNE_TIMER(SyncBegin());
  } catch (const std::exception& e) {
    Fail("sync_begin", e.what());
  }
}

void Plugin::SyncEnd() {
  if (!enabled()) return;
  try {
    CLOUDTUNE_TIMER(SyncEnd());
  } catch (const std::exception& e) {
    Fail("sync_end", e.what());
  }
}

at::Tensor Plugin::GradsLocalTensor(const std::vector<at::Tensor>& grads) {
#ifdef CLOUDTUNE_WITH_CUDA
  if (enabled() && use_cuda_) {
    try {
      if (!noted_model_) NoteModel(grads);
      at::Tensor s = hooks::SquaredNormDevice(grads);
      cuda_local_ = cuda_local_.defined() ? cuda_local_ + s : s;
      ++micro_seen_;
      return cuda_local_;
    } catch (const std::exception& e) {
      Fail("grads_local", e.what());
    }
  }
#endif
  const double v = GradsLocal(grads);
  at::Device dev = at::kCPU;
  for (const auto& g : grads)
    if (g.defined()) dev = g.device();
  return at::scalar_tensor(v, at::TensorOptions().dtype(at::kDouble).device(dev));
}

void Plugin::GradsReducedTensor(const std::vector<at::Tensor>& grads,
                                const at::Tensor& reduced_slot) {
  if (!enabled() || !leader_) return;
#ifdef CLOUDTUNE_WITH_CUDA
  if (use_cuda_) {
    try {
      const int64_t micro = micro_seen_ > 0 ? micro_seen_ : 1;
      const int count = static_cast<int>(job_.world_size * micro);
      // Single-replica consecutive mode is not done on the device; the previous copy in flight
      // still being read means this step is not sampled (no blocking).
      if (count < 2 || micro_seen_ == 0 || cuda_scalars_.Pending()) return;
      cuda_sample_ = hooks::GnsSample{};
      cuda_sample_.count = count;
      at::Tensor vals =
          at::stack({reduced_slot.reshape({}).to(at::kDouble) / static_cast<double>(micro),
                     hooks::SquaredNormDevice(grads)});
      cuda_scalars_.Start(vals);
    } catch (const std::exception& e) {
      Fail("grads_reduced", e.what());
    }
    return;
  }
#endif
  GradsReduced(grads, reduced_slot.item<double>());
}

void Plugin::NoteModel(const std::vector<at::Tensor>& tensors) {
  if (noted_model_ || tensors.empty() || !enabled()) return;
  noted_model_ = true;
  if (!leader_ || !runtime_) return;
  try {
    std::vector<std::vector<int64_t>> shapes;
    shapes.reserve(tensors.size());
    double bytes = 0;
    for (const auto& t : tensors) {
      shapes.push_back(t.sizes().vec());
      if (t.defined()) bytes += static_cast<double>(t.numel()) * t.element_size();
    }
    runtime::ModelSignature signature = runtime::MakeSignature(shapes);
    signature.gradient_bytes = bytes;
    runtime_->SetModelSignature(signature);
  } catch (const std::exception& e) {
    Fail("model_signature", e.what());
  }
}

double Plugin::GradsLocal(const std::vector<at::Tensor>& grads) {
  if (!enabled()) return 0;
  try {
    if (!noted_model_) NoteModel(grads);
    local_sum_ += hooks::SquaredNorm(grads);
    ++micro_seen_;
    return local_sum_;
  } catch (const std::exception& e) {
    Fail("grads_local", e.what());
    return 0;
  }
}

void Plugin::GradsReduced(const std::vector<at::Tensor>& grads, double reduced_slot) {
  if (!enabled() || !leader_) return;
  try {
    const int64_t micro = micro_seen_ > 0 ? micro_seen_ : 1;
    const int count = static_cast<int>(job_.world_size * micro);
    if (count >= 2) {
      pending_ = hooks::GnsSample{};
      pending_.local_sqr = reduced_slot / static_cast<double>(micro);
      pending_.total_sqr = hooks::SquaredNorm(grads);
      pending_.count = count;
      if (replica_mean_batch_ > 0 && replica_inv_batch_ > 0) {
        // Unequal batches, combined weighted by samples: each of the count gradients has b_k
        // samples; the step's gradient is sum_k b_k/(B m) g_kj, B = world x mean batch.
        pending_.mean_inv_batch = replica_inv_batch_;
        pending_.combined_inv_batch =
            1.0 / (static_cast<double>(job_.world_size) * replica_mean_batch_ * micro);
      }
      have_pending_ = micro_seen_ > 0;  // no GradsLocal calls: the slot means nothing
    } else {
      // One replica, no accumulation: pair this step with the previous one (biased).
      double sqr = 0, dot = 0;
      const bool paired = hooks::SquaredNormAndDotWithPrevious(grads, &prev_grads_, &sqr, &dot);
      if (paired && prev_valid_) {
        pending_ = hooks::GnsSample{};
        pending_.local_sqr = 0.5 * (sqr + prev_sqr_);
        pending_.total_sqr = 0.25 * (sqr + prev_sqr_ + 2 * dot);
        pending_.count = 2;
        pending_.biased = true;
        have_pending_ = true;
      } else if (!std::isfinite(sqr)) {
        pending_ = hooks::GnsSample{};
        pending_.local_sqr = sqr;
        pending_.count = 2;
        have_pending_ = true;  // counted as skipped
      }
      prev_sqr_ = sqr;
      prev_valid_ = std::isfinite(sqr);  // a non-finite step is never paired with the next
    }
  } catch (const std::exception& e) {
    Fail("grads_reduced", e.what());
  }
}

void Plugin::ReplicaBatches(double mean_inv_batch, double mean_batch) {
  if (!enabled()) return;
  const bool ok = std::isfinite(mean_inv_batch) && std::isfinite(mean_batch) &&
                  mean_inv_batch > 0 && mean_batch > 0;
  replica_inv_batch_ = ok ? mean_inv_batch : 0;
  replica_mean_batch_ = ok ? mean_batch : 0;
}

void Plugin::StepEnd(int64_t local_bsz, int64_t micro_steps) {
  if (!enabled()) return;
  try {
    hooks::StepSample s;
    bool timed = false;
#ifdef CLOUDTUNE_WITH_CUDA
    if (use_cuda_)
      cuda_timer_.StepEnd(local_bsz, micro_steps);
    else
#endif
      timed = timer_.StepEnd(local_bsz, micro_steps, &s);
    step_.store(step_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (runtime_)  // per-rank times for the straggler check
      runtime_->StepTimes(step_, timed ? s.step_time : -1.0, timed ? s.compute_time() : -1.0);
    local_sum_ = 0;
    micro_seen_ = 0;
    // By Jensen's inequality mean(1/b) * mean(b) >= 1, with equality only when every b is equal.
    uneven_batches_ = replica_mean_batch_ * replica_inv_batch_ > 1 + 1e-9;
    replica_inv_batch_ = replica_mean_batch_ = 0;
#ifdef CLOUDTUNE_WITH_CUDA
    cuda_local_ = at::Tensor();
#endif
    if (!leader_) {
      have_pending_ = false;
      return;
    }
    const core::ConfigKey key = KeyFor(local_bsz, micro_steps > 0 ? micro_steps : 1);
    if (!have_config_ || !(key == config_)) {
      if (have_config_) {
        EndInterval();          // the old configuration's partial interval
        have_pending_ = false;  // this step's gradient pair mixed two batch sizes
      }
      config_ = key;
      have_config_ = true;
      warmup_left_ = opt_.warmup_steps;
      interval_begin_step_ = step_ - 1;
      interval_begin_time_ = std::chrono::steady_clock::now();
    }
    if (have_pending_) {
      pending_.micro_batch = static_cast<double>(local_bsz);
      gns_.Update(pending_);
      have_pending_ = false;
    }
    if (timed) AddTiming(s);
#ifdef CLOUDTUNE_WITH_CUDA
    if (use_cuda_) {
      std::vector<double> v;
      if (cuda_scalars_.Ready(&v) && v.size() == 2) {
        cuda_sample_.local_sqr = v[0];
        cuda_sample_.total_sqr = v[1];
        cuda_sample_.micro_batch = static_cast<double>(local_bsz);
        gns_.Update(cuda_sample_);
      }
      while (cuda_timer_.Poll(&s)) AddTiming(s);  // steps whose events completed
    }
#endif
    if (step_ - interval_begin_step_ >= opt_.measure_every || RecordIsLongEnough()) EndInterval();
  } catch (const std::exception& e) {
    Fail("step_end", e.what());
  }
}

void Plugin::AddTiming(const hooks::StepSample& s) {
  // A late (CUDA) sample of the previous configuration is dropped.
  if (s.local_bsz != config_.local_bsz || s.micro_steps != config_.accum_steps + 1) return;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  if (!(s.step_time > 0)) return;
  step_stats_.Add(s.step_time);
  sync_stats_.Add(s.sync_time);
  compute_stats_.Add(s.compute_time());
  interval_samples_ += static_cast<double>(config_.global_batch());
  std::lock_guard<std::mutex> lock(profile_mu_);
  ConfigStats& c = configs_[config_];
  c.step_sum += s.step_time;
  c.sync_sum += s.sync_time;
  ++c.rows;
}

std::vector<core::Measurement> Plugin::profile() const {
  std::lock_guard<std::mutex> lock(profile_mu_);
  std::vector<core::Measurement> out;
  for (const auto& [key, c] : configs_) {
    if (c.rows == 0) continue;
    core::Measurement m;
    m.key = key;
    m.step_time = c.step_sum / c.rows;
    m.sync_time = c.sync_sum / c.rows;
    m.rows = static_cast<int>(c.rows);
    out.push_back(m);
  }
  return out;
}

void Plugin::WriteProfile() {
  auto rows = profile();
  if (rows.empty()) return;
  std::ostringstream text;
  estimator::WriteTrace(text, rows);
  sidecar_.Post([path = opt_.profile, body = text.str()] {
    std::string error;
    if (!core::WriteFileAtomically(path, body, &error)) {
      static bool logged = false;
      if (!logged) std::cerr << "cloudtune: profile: " << error << "\n";
      logged = true;
    }
  });
}

bool Plugin::RecordIsLongEnough() const {
  if (!(opt_.measure_seconds > 0) || step_stats_.count() < runtime::kMinRecordSteps) return false;
  const std::chrono::duration<double> spanned =
      std::chrono::steady_clock::now() - interval_begin_time_;
  return spanned.count() >= opt_.measure_seconds;
}

void Plugin::EndInterval() {
  const int64_t steps = step_ - interval_begin_step_;
  interval_begin_step_ = step_;
  interval_begin_time_ = std::chrono::steady_clock::now();
  if (steps <= 0) return;
  const hooks::GnsState g = gns_.State();
  const double window = step_stats_.count() ? step_stats_.mean() * step_stats_.count() : 0;
  const double sps = window > 0 ? interval_samples_ / window : 0;
  if (step_stats_.count() > 0) {
    nlohmann::json rec = {{"config", ConfigJson(config_)},
                          {"steps", steps},
                          {"timed_steps", step_stats_.count()},
                          {"step_time", StatsJson(step_stats_)},
                          {"compute_time", StatsJson(compute_stats_)},
                          {"sync_time", StatsJson(sync_stats_)},
                          {"samples_per_second", sps},
                          {"grad_sqr", g.valid ? Finite(g.grad_sqr) : nlohmann::json()},
                          {"grad_var", g.valid ? Finite(g.grad_var) : nlohmann::json()},
                          {"base_batch", g.base_batch},
                          {"noise_scale", g.valid ? Finite(g.noise_scale()) : nlohmann::json()},
                          {"noise_log_sigma", g.valid ? Finite(g.log_sigma) : nlohmann::json()},
                          {"gns_window", g.window},
                          {"biased", g.biased},
                          {"gns_steps", g.steps},
                          {"skipped_steps", g.skipped}};
    sidecar_.Write("measurement", step_.load(), rec);
    WriteProfile();
  }
  if (runtime_ || observer_) {
    core::Snapshot snap = Measured();
    snap.samples_per_second = sps;
    if (runtime_) runtime_->Observe(snap);
    if (observer_) {
      try {
        observer_(std::make_shared<const core::Snapshot>(std::move(snap)));
      } catch (const std::exception& e) {
        std::cerr << "cloudtune: observer failed: " << e.what() << "; observer dropped\n";
        observer_ = nullptr;
      }
    }
  }
  step_stats_.Reset();
  sync_stats_.Reset();
  compute_stats_.Reset();
  interval_samples_ = 0;
}

core::Snapshot Plugin::Measured() const {
  core::Snapshot snap;
  snap.step = step_;
  snap.elapsed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  snap.current = config_;
  snap.profile = profile();
  const hooks::GnsState g = gns_.State();
  snap.noise = g;  // the core::NoiseState part
  snap.noise_valid = g.valid;
  snap.skipped_steps = g.skipped;
  snap.mixed_cluster = uneven_batches_;
  return snap;
}

void Plugin::EndOnSignal(const char* signal_name) {
  if (!leader_ || !enabled() || finished_.exchange(true)) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  sidecar_.WriteLast("end", step_.load(),
                     {{"steps", step_.load()},
                      {"elapsed_seconds", elapsed},
                      {"signal", signal_name},
                      {"configurations", static_cast<int64_t>(profile().size())},
                      {"profile", opt_.profile}});
  WriteProfile();
  sidecar_.Flush();
}

void Plugin::Finish() {
  if (!enabled() || finished_.exchange(true)) return;
  try {
    if (runtime_) {  // before the sidecar closes
      const core::Snapshot last = Measured();
      runtime_->Stop(leader_ ? &last : nullptr);
    }
    if (leader_) {
      EndInterval();
      const hooks::GnsState g = gns_.State();
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      nlohmann::json rec = {{"steps", step_.load()},
                            {"elapsed_seconds", elapsed},
                            {"grad_sqr", g.valid ? Finite(g.grad_sqr) : nlohmann::json()},
                            {"grad_var", g.valid ? Finite(g.grad_var) : nlohmann::json()},
                            {"noise_scale", g.valid ? Finite(g.noise_scale()) : nlohmann::json()},
                            {"biased", g.biased},
                            {"skipped_steps", g.skipped},
                            {"configurations", static_cast<int64_t>(profile().size())},
                            {"profile", opt_.profile}};
      sidecar_.WriteLast("end", step_.load(), rec);
      WriteProfile();
      sidecar_.Close();
      Log("done after " + std::to_string(step_) + " steps; sidecar " + opt_.sidecar);
    }
  } catch (const std::exception& e) {
    std::cerr << "cloudtune: finish: " << e.what() << "\n";
  }
  enabled_ = false;
}

}  // namespace cloudtune::plugin
