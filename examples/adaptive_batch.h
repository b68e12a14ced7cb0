// The Fashion-MNIST example's evaluated training loop: in-process batch-size adaptation
// (--adaptive-batch, estimator::BatchSizeController), learning-rate scaling, progress accounting in
// steps at B0, a validation trace (--validation-csv, the `cloudtune steps` input format) and a
// test-accuracy stop condition (--target-accuracy). Used by examples/train_fashion_mnist.cpp when
// any of these flags is given (otherwise its plain epoch loop runs).
//
// Every `adapt_every` optimizer steps rank 0 asks the tuner runtime what it may take up in
// process (Runtime::InProcessBatch): the batch of the runtime's latest recommendation when that
// recommendation was decided from the configuration the job runs and keeps its hardware, the same
// rule the replay's job follows between its decisions (`cloudtune replay`), so what the replay
// proves is what this loop does. The LR scale of that batch is computed here, and the decision is
// broadcast as one small tensor over the job's own process group; all ranks adopt it at the same
// step. Every decision is logged ("adaptive-batch: step N switch ..." or "adaptive-batch: step N
// keep ...: reason"). The tuner refits on its own thread every CLOUDTUNE_REFIT_SECONDS and at
// once on a new configuration's first record, so a decision never waits for a fit.
//
// The caps reach the tuner's search through its options: --max-local-batch sets
// CLOUDTUNE_MAX_LOCAL_BATCH (default, when neither is set: 512) and --max-accum sets
// CLOUDTUNE_MAX_ACCUM_STEPS (micro-steps - 1; default 1 micro-step).
#pragma once

#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "estimator/batch_size.h"  // LrScale
#include "estimator/efficiency.h"
#include "examples/fashion_mnist.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::examples {

// Flags of the evaluated loop (see AddAdaptiveFlags for their documentation).
struct AdaptiveFlags {
  bool adaptive_batch = false;  // take up the tuner's batch for this hardware in process
  int adapt_every = 50;         // optimizer steps between decisions (>= 1)
  double base_batch = 0;        // B0, total samples per step of progress (0 = initial batch)
  std::string lr_scaling;       // "adascale" | "sqrt" | "linear" | "none" ("" = adascale when
                                // adapting, none otherwise)
  int max_local_batch = 0;      // cap of the local batch (0 = CLOUDTUNE_MAX_LOCAL_BATCH or 512)
  int max_accum = 0;            // most micro-steps per optimizer step when adapting (0 =
                                // CLOUDTUNE_MAX_ACCUM_STEPS + 1, or 1)
  std::string validation_csv;   // rank 0 writes progress,iteration,metric,grad_sqr,grad_var
  double target_accuracy = 0;   // stop once test accuracy >= this (0 = off)
  int eval_every = 0;           // evaluate every E steps (0 = at the end of each epoch)
  bool active() const {
    return adaptive_batch || !validation_csv.empty() || target_accuracy > 0 || eval_every > 0;
  }
  // The LR rule in force ("none" or an estimator::LrScaling name).
  std::string rule() const {
    return lr_scaling.empty() ? (adaptive_batch ? "adascale" : "none") : lr_scaling;
  }
};

inline void AddAdaptiveFlags(CLI::App& app, AdaptiveFlags* f) {
  app.add_flag("--adaptive-batch", f->adaptive_batch,
               "take up in process the batch the tuner proposes for this hardware (needs the "
               "plugin; sets CLOUDTUNE=1 when unset)");
  app.add_option("--adapt-every", f->adapt_every, "optimizer steps between batch decisions");
  app.add_option("--base-batch", f->base_batch,
                 "B0: total batch that progress and grad_var refer to (0 = the initial batch)");
  app.add_option("--lr-scaling", f->lr_scaling,
                 "LR rule relative to --lr at B0: adascale|sqrt|linear|none (default adascale with "
                 "--adaptive-batch, none otherwise)");
  app.add_option("--max-local-batch", f->max_local_batch,
                 "largest local batch the tuner may propose (sets CLOUDTUNE_MAX_LOCAL_BATCH; 0 = "
                 "that variable, or 512)");
  app.add_option("--max-accum", f->max_accum,
                 "most micro-steps per optimizer step the tuner may propose (sets "
                 "CLOUDTUNE_MAX_ACCUM_STEPS; 0 = that variable + 1, or 1)");
  app.add_option("--validation-csv", f->validation_csv,
                 "rank 0 writes progress,iteration,metric,grad_sqr,grad_var after each evaluation");
  app.add_option("--target-accuracy", f->target_accuracy,
                 "stop when the test accuracy reaches this (0 = off)");
  app.add_option("--eval-every", f->eval_every,
                 "evaluate every N optimizer steps (0 = at the end of each epoch)");
}

// Validates the flags and, when the loop needs the plugin's gradient noise and CLOUDTUNE is unset,
// switches it on (the children inherit it). Returns false with a message on stderr.
inline bool PrepareAdaptive(const AdaptiveFlags& f) {
  auto fail = [](const std::string& what) {
    std::cerr << "train_fashion_mnist: " << what << "\n";
    return false;
  };
  if (!f.active()) return true;
  estimator::LrScaling rule;
  const std::string r = f.rule();
  if (r != "none" && !estimator::ParseLrScaling(r, &rule))
    return fail("--lr-scaling '" + r + "': expected adascale, sqrt, linear or none");
  if (f.adapt_every < 1) return fail("--adapt-every must be >= 1");
  if (!(f.base_batch >= 0)) return fail("--base-batch must be >= 0");
  if (f.max_local_batch < 0 || f.max_accum < 0)
    return fail("--max-local-batch and --max-accum must be >= 0");
  if (!(f.target_accuracy >= 0 && f.target_accuracy <= 1))
    return fail("--target-accuracy must be in [0, 1]");
  if (f.eval_every < 0) return fail("--eval-every must be >= 0");
  // The gradient noise (decisions, validation trace, AdaScale gain) comes from the plugin.
  if (f.adaptive_batch || !f.validation_csv.empty() || r != "none") ::setenv("CLOUDTUNE", "1", 0);
  // The caps are the tuner's: its search proposes nothing beyond them.
  if (f.adaptive_batch) {
    const bool local = f.max_local_batch > 0, accum = f.max_accum > 0;
    ::setenv("CLOUDTUNE_MAX_LOCAL_BATCH", std::to_string(local ? f.max_local_batch : 512).c_str(),
             local);
    ::setenv("CLOUDTUNE_MAX_ACCUM_STEPS", std::to_string(accum ? f.max_accum - 1 : 0).c_str(),
             accum);
  }
  return true;
}

namespace detail {

inline core::NoiseState NoiseAtBase(const plugin::Plugin& ct, double b0, bool* valid) {
  const hooks::GnsState g = ct.noise();
  *valid = g.valid && std::isfinite(g.grad_sqr) && std::isfinite(g.grad_var);
  // GnsState::grad_var = tr(Sigma_1) / its base batch; renormalise to B0.
  return core::NoiseState{g.grad_sqr, g.grad_var * g.base_batch / b0, b0, g.biased};
}

}  // namespace detail

// What the example's Worker hands over to the loop.
struct LoopContext {
  Net* net = nullptr;
  torch::optim::Optimizer* opt = nullptr;
  FlatGrads* fg = nullptr;
  torch::Tensor* accum = nullptr;
  Collectives* pg = nullptr;
  plugin::Plugin* ct = nullptr;
  int rank = 0, world = 1;
  torch::Tensor x_train, y_train, x_test, y_test;
  int local_bsz = 64, micro_steps = 1;
  double lr = 0.05;
  uint64_t seed = 1;
  int epochs = 1;
  int64_t max_steps = 0, test_limit = 0;
  int log_every = 100;
  std::chrono::steady_clock::time_point t0;
};

namespace detail {

// The evaluated loop's state and steps; RunAdaptiveLoop below drives it.
class AdaptiveLoop {
 public:
  using Clock = std::chrono::steady_clock;

  AdaptiveLoop(const AdaptiveFlags& f, LoopContext& c)
      : f_(f), c_(c), leader_(c.rank == 0), local_(c.local_bsz), micro_(c.micro_steps) {
    if (!c_.ct->enabled() && (f_.adaptive_batch || !f_.validation_csv.empty()))
      throw std::runtime_error(
          "--adaptive-batch and --validation-csv need the plugin's gradient noise: set "
          "CLOUDTUNE=1 (the plugin is off)");
    b0_ = f_.base_batch > 0 ? f_.base_batch : double(c_.world) * local_ * micro_;
    rule_name_ = f_.rule();
    scale_lr_ = rule_name_ != "none" && estimator::ParseLrScaling(rule_name_, &rule_);
    account_ = std::make_unique<estimator::ProgressAccount>(b0_);
  }

  // Runs training until --steps, --epochs or --target-accuracy.
  void Run() {
    n_ = SharedSampleCount();
    OpenValidationCsv();
    Log(std::string("adaptive loop: ") + (f_.adaptive_batch ? "adaptive batch" : "fixed batch") +
        ", local batch " + std::to_string(local_) + " x " + std::to_string(micro_) +
        " micro-step(s), " + std::to_string(c_.world) + " worker(s)");
    perm_ = NewPermutation(epoch_);
    (*c_.net)->train();
    window_start_ = Clock::now();
    while (NextStep()) {
    }
    Summary();
  }

 private:
  void Log(const std::string& s) const {
    if (leader_) std::cout << s << std::endl;
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - c_.t0).count(); }
  double Global() const { return double(c_.world) * local_ * micro_; }

  // Same sample count on every rank, so that epochs end at the same step everywhere.
  int64_t SharedSampleCount() const {
    int64_t n = c_.x_train.size(0);
    if (c_.pg && c_.world > 1) {
      std::vector<torch::Tensor> t{torch::tensor({n}, torch::kLong)};
      c_.pg->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MIN})->wait();
      n = t[0].item<int64_t>();
    }
    return n;
  }

  void OpenValidationCsv() {
    if (!leader_ || f_.validation_csv.empty()) return;
    csv_.open(f_.validation_csv);
    if (!csv_) throw std::runtime_error("cannot write --validation-csv " + f_.validation_csv);
    csv_ << "progress,iteration,metric,grad_sqr,grad_var\n" << std::flush;
  }

  // Test accuracy (same value on every rank).
  double Evaluate() {
    torch::NoGradGuard no_grad;
    (*c_.net)->eval();
    double correct = 0;
    const int64_t n_test =
        c_.test_limit > 0 ? std::min<int64_t>(c_.test_limit, c_.x_test.size(0)) : c_.x_test.size(0);
    for (int64_t i = 0; i < n_test; i += 1000) {
      const int64_t len = std::min<int64_t>(1000, n_test - i);
      auto pred = (*c_.net)->forward(c_.x_test.narrow(0, i, len)).argmax(1);
      correct += pred.eq(c_.y_test.narrow(0, i, len)).sum().item<double>();
    }
    auto counts = torch::tensor({correct, static_cast<double>(n_test)}, torch::kDouble);
    if (c_.pg && c_.world > 1) {
      std::vector<torch::Tensor> t{counts};
      c_.pg->allreduce(t)->wait();
    }
    (*c_.net)->train();
    return counts[0].item<double>() / counts[1].item<double>();
  }

  torch::Tensor NewPermutation(int e) const {
    auto gen = at::detail::createCPUGenerator(c_.seed * 1000003 + e * 7919 + c_.rank);
    return torch::randperm(c_.x_train.size(0), gen);
  }

  // One optimizer step and what follows it; false when training is over.
  bool NextStep() {
    const int64_t per_step = int64_t(local_) * micro_;
    if (pos_ + per_step > n_) {  // end of epoch
      if (f_.eval_every == 0) {
        last_acc_ = Evaluate();
        char buf[160];
        std::snprintf(buf, sizeof buf, "epoch %d done: test accuracy %.4f (%.0f s)", epoch_,
                      last_acc_, Seconds());
        Log(buf);
      }
      if (++epoch_ > c_.epochs) return false;
      perm_ = NewPermutation(epoch_);
      pos_ = 0;
      if (per_step > n_) throw std::runtime_error("batch larger than the training shard");
    }
    Train();
    if (step_ % c_.log_every == 0) LogWindow();
    if ((f_.adaptive_batch || scale_lr_) && step_ % f_.adapt_every == 0) Decide();
    if (f_.eval_every > 0 && step_ % f_.eval_every == 0 && EvaluateAndStop()) return false;
    if (c_.max_steps > 0 && step_ >= c_.max_steps) {
      if (f_.eval_every == 0) {  // like the plain loop: score the model where it stopped
        last_acc_ = Evaluate();
        char buf[160];
        std::snprintf(buf, sizeof buf, "epoch %d stopped at step %lld: test accuracy %.4f (%.0f s)",
                      epoch_, static_cast<long long>(step_), last_acc_, Seconds());
        Log(buf);
      }
      return false;
    }
    return true;
  }

  void Train() {
    std::vector<std::pair<torch::Tensor, torch::Tensor>> mb;
    for (int a = 0; a < micro_; ++a) {
      auto idx = perm_.narrow(0, pos_ + int64_t(a) * local_, local_);
      mb.emplace_back(c_.x_train.index_select(0, idx), c_.y_train.index_select(0, idx));
    }
    pos_ += int64_t(local_) * micro_;
    loss_window_ += TrainStep(*c_.net, *c_.opt, *c_.fg, *c_.accum, c_.pg, c_.world, mb, c_.ct);
    ++window_;
    window_samples_ += Global();
    ++step_;
    if (leader_) {
      bool valid = false;
      const core::NoiseState ns = NoiseAtBase(*c_.ct, b0_, &valid);
      account_->Advance(1, Global(), valid ? ns : core::NoiseState{0, 0, b0_});
      if (valid) int_sqr_ += ns.grad_sqr, int_var_ += ns.grad_var, ++int_n_;
    }
  }

  void LogWindow() {
    const double dt = std::chrono::duration<double>(Clock::now() - window_start_).count();
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "epoch %d step %lld  loss %.4f  %.0f samples/s  batch %g  progress %.1f", epoch_,
                  static_cast<long long>(step_), loss_window_ / window_, window_samples_ / dt,
                  Global(), account_->progress());
    Log(buf);
    loss_window_ = 0, window_ = 0, window_samples_ = 0;
    window_start_ = Clock::now();
  }

  // Rank 0 asks the tuner runtime for the batch; msg = {local, micro, lr scale, switched}.
  void LeaderDecision(double msg[4]) {
    bool valid = false;
    const core::NoiseState ns = NoiseAtBase(*c_.ct, b0_, &valid);
    char buf[600];
    if (!valid) {
      std::snprintf(buf, sizeof buf,
                    "adaptive-batch: step %lld keep local %d x %d: no gradient-noise estimate yet",
                    static_cast<long long>(step_), local_, micro_);
      Log(buf);
      return;
    }
    msg[2] =
        scale_lr_ ? estimator::LrScale(rule_, Global(), b0_, estimator::Gain(ns, Global())) : 1.0;
    if (!f_.adaptive_batch) return;
    std::string why;
    std::optional<search::Config> take;
    if (const runtime::Runtime* rt = c_.ct->tuner_runtime()) {
      core::ConfigKey running;
      running.num_nodes = c_.ct->job().num_nodes;
      running.num_replicas = c_.world;
      running.local_bsz = local_;
      running.accum_steps = micro_ - 1;
      take = rt->InProcessBatch(running, &why);
    } else {
      why = "the tuner runtime is off";
    }
    const int local = take ? take->local_bsz : local_,
              micro = take ? take->accum_steps + 1 : micro_;
    if (take && int64_t(local) * micro > n_) {
      why = "the proposed " + std::to_string(local) + " x " + std::to_string(micro) +
            " exceeds the training shard";
      take.reset();
    }
    if (take && (local != local_ || micro != micro_)) {
      const double global = double(c_.world) * local * micro;
      msg[0] = local, msg[1] = micro, msg[3] = 1;
      msg[2] =
          scale_lr_ ? estimator::LrScale(rule_, global, b0_, estimator::Gain(ns, global)) : 1.0;
      std::snprintf(buf, sizeof buf,
                    "adaptive-batch: step %lld switch local %d x %d -> %d x %d (global %g -> %g), "
                    "noise scale %.0f, gain %.2f, lr x%.3f, progress %.1f: %s",
                    static_cast<long long>(step_), local_, micro_, local, micro, Global(), global,
                    ns.noise_scale(), estimator::Gain(ns, global), msg[2], account_->progress(),
                    why.c_str());
    } else {
      std::snprintf(buf, sizeof buf,
                    "adaptive-batch: step %lld keep local %d x %d (global %g), noise scale %.0f, "
                    "lr x%.3f: %s",
                    static_cast<long long>(step_), local_, micro_, Global(), ns.noise_scale(),
                    msg[2], take ? ("the tuner keeps it: " + why).c_str() : why.c_str());
    }
    Log(buf);
  }

  // Decision every adapt_every steps: rank 0 decides, everybody adopts the broadcast.
  void Decide() {
    double msg[4] = {double(local_), double(micro_), lr_scale_, 0};
    if (leader_) LeaderDecision(msg);
    if (c_.pg && c_.world > 1) {
      std::vector<torch::Tensor> t{torch::tensor({msg[0], msg[1], msg[2], msg[3]}, torch::kDouble)};
      c_.pg->broadcast(t)->wait();
      for (int i = 0; i < 4; ++i) msg[i] = t[0][i].item<double>();
    }
    if (msg[3] != 0) {
      local_ = static_cast<int>(msg[0]);
      micro_ = static_cast<int>(msg[1]);
      ++switches_;
    }
    if (scale_lr_) {
      lr_scale_ = msg[2];
      for (auto& g : c_.opt->param_groups()) g.options().set_lr(c_.lr * lr_scale_);
    }
  }

  // Evaluates, writes the validation row; true when the target accuracy is reached.
  bool EvaluateAndStop() {
    last_acc_ = Evaluate();
    if (leader_) {
      if (csv_.is_open()) {
        char row[200];
        std::snprintf(row, sizeof row, "%.6g,%lld,%.6g,%.9g,%.9g\n", account_->progress(),
                      static_cast<long long>(step_), last_acc_, int_n_ ? int_sqr_ / int_n_ : 0.0,
                      int_n_ ? int_var_ / int_n_ : 0.0);
        csv_ << row << std::flush;
      }
      int_sqr_ = int_var_ = 0, int_n_ = 0;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "step %lld: test accuracy %.4f  batch %g  progress %.1f  lr %.4g (%.0f s)",
                  static_cast<long long>(step_), last_acc_, Global(), account_->progress(),
                  c_.lr * lr_scale_, Seconds());
    Log(buf);
    reached_ = f_.target_accuracy > 0 && last_acc_ >= f_.target_accuracy;
    return reached_;
  }

  void Summary() const {
    char buf[300];
    if (f_.target_accuracy > 0)
      std::snprintf(buf, sizeof buf, "target accuracy %.4f %s at step %lld (progress %.1f, %.0f s)",
                    f_.target_accuracy, reached_ ? "reached" : "NOT reached",
                    static_cast<long long>(step_), account_->progress(), Seconds());
    else
      std::snprintf(buf, sizeof buf, "finished at step %lld (progress %.1f, %.0f s)",
                    static_cast<long long>(step_), account_->progress(), Seconds());
    Log(buf);
    std::snprintf(buf, sizeof buf,
                  "summary: steps %lld, progress %.1f, samples %.0f, final batch %g (local %d x "
                  "%d), switches %d, last accuracy %.4f",
                  static_cast<long long>(step_), account_->progress(), account_->samples(),
                  Global(), local_, micro_, switches_, last_acc_);
    Log(buf);
  }

  const AdaptiveFlags& f_;
  LoopContext& c_;
  const bool leader_;
  int local_, micro_;
  double b0_ = 1;
  std::string rule_name_;
  estimator::LrScaling rule_ = estimator::LrScaling::kAdaScale;
  bool scale_lr_ = false;
  std::unique_ptr<estimator::ProgressAccount> account_;
  int64_t n_ = 0;
  std::ofstream csv_;
  double int_sqr_ = 0, int_var_ = 0;
  int64_t int_n_ = 0;
  double lr_scale_ = 1;
  int switches_ = 0;
  int64_t step_ = 0, pos_ = 0;
  int epoch_ = 1;
  torch::Tensor perm_;
  double loss_window_ = 0, window_samples_ = 0;
  int window_ = 0;
  Clock::time_point window_start_;
  bool reached_ = false;
  double last_acc_ = -1;
};

}  // namespace detail

// Runs training until --steps, --epochs or --target-accuracy. Returns true (the example's `stop`).
inline bool RunAdaptiveLoop(const AdaptiveFlags& f, LoopContext& c) {
  detail::AdaptiveLoop(f, c).Run();
  return true;
}

}  // namespace cloudtune::examples
