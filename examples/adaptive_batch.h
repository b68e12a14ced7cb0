// The Fashion-MNIST example's evaluated training loop: in-process batch-size adaptation
// (--adaptive-batch, estimator::BatchSizeController), learning-rate scaling, progress accounting in
// steps at B0, a validation trace (--validation-csv, the `cloudtune steps` input format) and a
// test-accuracy stop condition (--target-accuracy). Used by examples/train_fashion_mnist.cpp when
// any of these flags is given (otherwise its plain epoch loop runs).
//
// Every `adapt_every` optimizer steps rank 0 reads the plugin's gradient-noise state
// (plugin::Instance()->noise()) and the measured step times (Instance()->profile()), asks the tuner
// runtime (Runtime::AdviseBatch: the batch-size controller with the runtime's efficiency model) for
// the local batch x micro-steps that maximise goodput (switching only beyond its hysteresis
// threshold) and the LR scale of that batch, and broadcasts the decision as one small
// tensor over the job's own process group; all ranks adopt it at the same step. Every decision is
// logged ("adaptive-batch: step N switch ..." or "adaptive-batch: step N keep ...: reason").
//
// Step times of configurations not run yet: the measured step time of the current configuration,
// its compute part scaled by a linear compute model C(b) = a + c*b per micro-step fitted to a short
// forward/backward probe at start-up (T(b, s) = sync + k * s * C(b), k = measured / modelled
// compute of the current configuration). Configurations already run use their measured time.
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
#include <string>
#include <vector>

#include "estimator/batch_size.h"
#include "estimator/efficiency.h"
#include "examples/fashion_mnist.h"
#include "plugin/runtime/runtime.h"

namespace cloudtune::examples {

// Flags of the evaluated loop (see AddAdaptiveFlags for their documentation).
struct AdaptiveFlags {
  bool adaptive_batch = false;  // let the controller change the batch
  int adapt_every = 50;         // optimizer steps between decisions (>= 1)
  double base_batch = 0;        // B0, total samples per step of progress (0 = initial batch)
  std::string lr_scaling;       // "adascale" | "sqrt" | "linear" | "none" ("" = adascale when
                                // adapting, none otherwise)
  int max_local_batch = 0;      // cap of the local batch (0 = CLOUDTUNE_MAX_LOCAL_BATCH or 512)
  int max_accum = 0;            // most micro-steps per optimizer step when adapting (>= 1; 0 = 1)
  double switch_threshold = 0.05;
  std::string validation_csv;  // rank 0 writes progress,iteration,metric,grad_sqr,grad_var
  double target_accuracy = 0;  // stop once test accuracy >= this (0 = off)
  int eval_every = 0;          // evaluate every E steps (0 = at the end of each epoch)
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
               "adapt the batch in-process to maximise goodput (needs the plugin; sets "
               "CLOUDTUNE=1 when unset)");
  app.add_option("--adapt-every", f->adapt_every, "optimizer steps between batch decisions");
  app.add_option("--base-batch", f->base_batch,
                 "B0: total batch that progress and grad_var refer to (0 = the initial batch)");
  app.add_option("--lr-scaling", f->lr_scaling,
                 "LR rule relative to --lr at B0: adascale|sqrt|linear|none (default adascale with "
                 "--adaptive-batch, none otherwise)");
  app.add_option("--max-local-batch", f->max_local_batch,
                 "largest local batch --adaptive-batch may choose (0 = CLOUDTUNE_MAX_LOCAL_BATCH "
                 "or 512)");
  app.add_option("--max-accum", f->max_accum,
                 "most micro-steps per optimizer step --adaptive-batch may choose (0 = 1)");
  app.add_option("--switch-threshold", f->switch_threshold,
                 "switch only when the predicted goodput gain exceeds this fraction");
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
  if (!(f.switch_threshold >= 0)) return fail("--switch-threshold must be >= 0");
  if (!(f.target_accuracy >= 0 && f.target_accuracy <= 1))
    return fail("--target-accuracy must be in [0, 1]");
  if (f.eval_every < 0) return fail("--eval-every must be >= 0");
  // The gradient noise (decisions, validation trace, AdaScale gain) comes from the plugin.
  if (f.adaptive_batch || !f.validation_csv.empty() || r != "none") ::setenv("CLOUDTUNE", "1", 0);
  return true;
}

namespace detail {

// Per-micro-step compute time C(b) = a + c*b, least squares on (b, seconds).
struct ComputeModel {
  double a = 0, c = 1;
  double At(double b) const { return a + c * b; }
  void Fit(const std::vector<std::pair<double, double>>& pts) {
    double n = 0, sb = 0, st = 0, sbb = 0, sbt = 0;
    for (auto& [b, t] : pts) {
      n += 1, sb += b, st += t, sbb += b * b, sbt += b * t;
    }
    const double den = n * sbb - sb * sb;
    if (n < 2 || den <= 0) {
      a = 0, c = n > 0 ? st / sb : 1;
      return;
    }
    c = (n * sbt - sb * st) / den;
    a = (st - c * sb) / n;
    if (c <= 0) c = 1e-9;
    if (a < 0) {  // refit through the origin
      a = 0, c = sbt / sbb;
    }
  }
};

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
  c10d::ProcessGroup* pg = nullptr;
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
    controller_ = std::make_unique<estimator::BatchSizeController>(ControllerOptions());
  }

  // Runs training until --steps, --epochs or --target-accuracy.
  void Run() {
    n_ = SharedSampleCount();
    if (f_.adaptive_batch) ProbeCompute();
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

  estimator::BatchSizeOptions ControllerOptions() const {
    estimator::BatchSizeOptions bo;
    bo.max_local_batch = 512;
    if (c_.ct && c_.ct->options().max_local_batch > 0)  // CLOUDTUNE_MAX_LOCAL_BATCH
      bo.max_local_batch = c_.ct->options().max_local_batch;
    if (f_.max_local_batch > 0) bo.max_local_batch = f_.max_local_batch;
    bo.max_accum_steps = std::max(f_.max_accum, 1) - 1;
    bo.min_global_batch = b0_;
    bo.switch_threshold = f_.switch_threshold;
    bo.lr_scaling = rule_;
    std::string err;
    if (!bo.IsValid(&err)) throw std::runtime_error("batch-size options: " + err);
    return bo;
  }

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

  // Compute-time probe (every rank, so that they stay in step): forward/backward at a few local
  // batches (8..128), the fastest of 2 repetitions each. Parameters are untouched.
  void ProbeCompute() {
    std::vector<std::pair<double, double>> pts;
    const int cap = controller_->options().max_local_batch;
    for (int b = 8; b <= std::min<int>({cap, 128, static_cast<int>(n_)}); b *= 2) {
      double best = 1e30;
      for (int rep = 0; rep < 2; ++rep) {
        auto x = c_.x_train.narrow(0, 0, b);
        auto y = c_.y_train.narrow(0, 0, b);
        const auto s = Clock::now();
        c_.fg->flat.zero_();
        torch::nll_loss((*c_.net)->forward(x), y).backward();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - s).count());
      }
      pts.emplace_back(b, best);
    }
    c_.fg->flat.zero_();
    cm_.Fit(pts);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "adaptive-batch: compute probe %zu batch sizes: %.3g ms + %.3g ms/sample per "
                  "micro-step; B0 %g, LR rule %s, max local batch %d, threshold %.0f%%",
                  pts.size(), cm_.a * 1e3, cm_.c * 1e3, b0_, rule_name_.c_str(), cap,
                  f_.switch_threshold * 100);
    Log(buf);
  }

  void OpenValidationCsv() {
    if (!leader_ || f_.validation_csv.empty()) return;
    csv_.open(f_.validation_csv);
    if (!csv_) throw std::runtime_error("cannot write --validation-csv " + f_.validation_csv);
    csv_ << "progress,iteration,metric,grad_sqr,grad_var\n" << std::flush;
  }

  // Step time of (local, extra accumulation) at this world size, from the plugin's profile.
  estimator::BatchSizeController::StepTimeFn StepTimeFn() const {
    const auto prof = c_.ct->profile();
    std::vector<core::Measurement> mine;
    double k = 1, sync = 0;
    bool have_cur = false;
    for (const auto& m : prof) {
      if (m.key.num_replicas != c_.world || m.rows < 1) continue;
      mine.push_back(m);
      if (m.key.local_bsz == local_ && m.key.accum_steps + 1 == micro_) {
        const double comp = std::max(m.compute_time(), 1e-9);
        k = comp / (micro_ * cm_.At(local_));
        sync = std::max(m.sync_time, 0.0);
        have_cur = true;
      }
    }
    if (!have_cur) k = 1;
    return [mine, k, sync, cm = cm_](int l, int extra) {
      for (const auto& m : mine)
        if (m.key.local_bsz == l && m.key.accum_steps == extra) return m.step_time;
      return sync + k * (extra + 1) * cm.At(l);
    };
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
    char buf[400];
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
    estimator::BatchSizeDecision d;
    std::string why;
    try {
      const runtime::Runtime* rt = c_.ct->tuner_runtime();
      if (!rt) throw std::runtime_error("the tuner runtime is off");
      d = rt->AdviseBatch(*controller_, c_.world, StepTimeFn(), ns, account_->progress(), local_,
                          micro_ - 1);
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (!why.empty()) {
      std::snprintf(buf, sizeof buf, "adaptive-batch: step %lld keep local %d x %d: %s",
                    static_cast<long long>(step_), local_, micro_, why.c_str());
    } else if (d.switched) {
      msg[0] = d.local_bsz, msg[1] = d.accum_steps + 1, msg[3] = 1;
      msg[2] = scale_lr_ ? d.lr_scale : 1.0;
      std::snprintf(buf, sizeof buf,
                    "adaptive-batch: step %lld switch local %d x %d -> %d x %d (global %g -> "
                    "%lld)%s, predicted goodput gain %+.1f%%, noise scale %.0f, gain %.2f, lr "
                    "x%.3f, progress %.1f",
                    static_cast<long long>(step_), local_, micro_, d.local_bsz, d.accum_steps + 1,
                    Global(), d.global_batch,
                    d.forced ? " forced: current configuration infeasible" : "",
                    d.predicted_gain * 100, ns.noise_scale(),
                    estimator::Gain(ns, double(d.global_batch)), msg[2], account_->progress());
    } else {
      std::snprintf(buf, sizeof buf,
                    "adaptive-batch: step %lld keep local %d x %d (global %g): best candidate "
                    "gains %+.1f%% <= threshold %.0f%%, noise scale %.0f, lr x%.3f",
                    static_cast<long long>(step_), local_, micro_, Global(),
                    (d.current_goodput > 0 ? d.best_goodput / d.current_goodput - 1 : 0) * 100,
                    f_.switch_threshold * 100, ns.noise_scale(), msg[2]);
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
  std::unique_ptr<estimator::BatchSizeController> controller_;
  ComputeModel cm_;
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
