// The Fashion-MNIST example's evaluated training loop: in-process batch-size adaptation
// (--adaptive-batch, estimator::BatchSizeController), learning-rate scaling, progress accounting in
// steps at B0, a validation trace (--validation-csv, the `cloudtune steps` input format) and a
// test-accuracy stop condition (--target-accuracy). Used by examples/train_fashion_mnist.cpp when
// any of these flags is given (otherwise its plain epoch loop runs).
//
// Every `adapt_every` optimizer steps rank 0 reads the plugin's gradient-noise state
// (cloudtune::plugin::Instance()->noise()) and the measured step times (Instance()->profile()), asks the
// controller for the local batch x micro-steps that maximise goodput (switching only beyond its
// hysteresis threshold) and the LR scale of that batch, and broadcasts the decision as one small
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
#include <string>
#include <vector>

#include "estimator/batch_size.h"
#include "estimator/efficiency.h"
#include "examples/fashion_mnist.h"

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

// Runs training until --steps, --epochs or --target-accuracy. Returns true (the example's `stop`).
inline bool RunAdaptiveLoop(const AdaptiveFlags& f, LoopContext& c) {
  namespace est = cloudtune::estimator;
  using Clock = std::chrono::steady_clock;
  const bool leader = c.rank == 0;
  auto log = [&](const std::string& s) {
    if (leader) std::cout << s << std::endl;
  };
  auto secs = [&] { return std::chrono::duration<double>(Clock::now() - c.t0).count(); };
  if (!c.ct->enabled() && (f.adaptive_batch || !f.validation_csv.empty()))
    throw std::runtime_error(
        "--adaptive-batch and --validation-csv need the plugin's gradient noise: set CLOUDTUNE=1 "
        "(the plugin is off)");

  int local = c.local_bsz, micro = c.micro_steps;
  const double b0 = f.base_batch > 0 ? f.base_batch : double(c.world) * local * micro;
  const std::string rule_name = f.rule();
  est::LrScaling rule = est::LrScaling::kAdaScale;
  const bool scale_lr = rule_name != "none" && est::ParseLrScaling(rule_name, &rule);

  est::BatchSizeOptions bo;
  bo.max_local_batch = 512;
  std::string err;
  if (c.ct && c.ct->options().max_local_batch > 0)  // CLOUDTUNE_MAX_LOCAL_BATCH
    bo.max_local_batch = c.ct->options().max_local_batch;
  if (f.max_local_batch > 0) bo.max_local_batch = f.max_local_batch;
  bo.max_accum_steps = std::max(f.max_accum, 1) - 1;
  bo.min_global_batch = b0;
  bo.switch_threshold = f.switch_threshold;
  bo.lr_scaling = rule;
  if (!bo.IsValid(&err)) throw std::runtime_error("batch-size options: " + err);
  est::BatchSizeController controller(bo);

  // Same sample count on every rank, so that epochs end at the same step everywhere.
  int64_t n = c.x_train.size(0);
  if (c.pg && c.world > 1) {
    std::vector<torch::Tensor> t{torch::tensor({n}, torch::kLong)};
    c.pg->allreduce(t, c10d::AllreduceOptions{c10d::ReduceOp::MIN})->wait();
    n = t[0].item<int64_t>();
  }

  // Compute-time probe (every rank, so that they stay in step): forward/backward at a few local
  // batches (8..128), the fastest of 2 repetitions each. Parameters are untouched.
  detail::ComputeModel cm;
  if (f.adaptive_batch) {
    std::vector<std::pair<double, double>> pts;
    for (int b = 8; b <= std::min<int>({bo.max_local_batch, 128, static_cast<int>(n)}); b *= 2) {
      double best = 1e30;
      for (int rep = 0; rep < 2; ++rep) {
        auto x = c.x_train.narrow(0, 0, b);
        auto y = c.y_train.narrow(0, 0, b);
        const auto s = Clock::now();
        c.fg->flat.zero_();
        torch::nll_loss((*c.net)->forward(x), y).backward();
        best = std::min(best, std::chrono::duration<double>(Clock::now() - s).count());
      }
      pts.emplace_back(b, best);
    }
    c.fg->flat.zero_();
    cm.Fit(pts);
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "adaptive-batch: compute probe %zu batch sizes: %.3g ms + %.3g ms/sample per "
                  "micro-step; B0 %g, LR rule %s, max local batch %d, threshold %.0f%%",
                  pts.size(), cm.a * 1e3, cm.c * 1e3, b0, rule_name.c_str(), bo.max_local_batch,
                  f.switch_threshold * 100);
    log(buf);
  }

  // Step time of (local, extra accumulation) at this world size, from the plugin's profile.
  auto step_time_fn = [&](int cur_local, int cur_micro) -> est::BatchSizeController::StepTimeFn {
    const auto prof = c.ct->profile();
    std::vector<est::Measurement> mine;
    double k = 1, sync = 0;
    bool have_cur = false;
    for (const auto& m : prof) {
      if (m.key.num_replicas != c.world || m.rows < 1) continue;
      mine.push_back(m);
      if (m.key.local_bsz == cur_local && m.key.accum_steps + 1 == cur_micro) {
        const double comp = std::max(m.compute_time(), 1e-9);
        k = comp / (cur_micro * cm.At(cur_local));
        sync = std::max(m.sync_time, 0.0);
        have_cur = true;
      }
    }
    if (!have_cur) k = 1;
    return [mine, k, sync, cm](int l, int extra) {
      for (const auto& m : mine)
        if (m.key.local_bsz == l && m.key.accum_steps == extra) return m.step_time;
      return sync + k * (extra + 1) * cm.At(l);
    };
  };

  est::ProgressAccount account(b0);
  std::ofstream csv;
  if (leader && !f.validation_csv.empty()) {
    csv.open(f.validation_csv);
    if (!csv) throw std::runtime_error("cannot write --validation-csv " + f.validation_csv);
    csv << "progress,iteration,metric,grad_sqr,grad_var\n" << std::flush;
  }
  double int_sqr = 0, int_var = 0;
  int64_t int_n = 0;
  double lr_scale = 1;
  int switches = 0;
  auto set_lr = [&](double scale) {
    lr_scale = scale;
    for (auto& g : c.opt->param_groups()) g.options().set_lr(c.lr * scale);
  };
  auto global = [&] { return double(c.world) * local * micro; };

  // Returns test accuracy (same value on every rank).
  auto evaluate = [&]() {
    torch::NoGradGuard no_grad;
    (*c.net)->eval();
    double correct = 0;
    const int64_t n_test =
        c.test_limit > 0 ? std::min<int64_t>(c.test_limit, c.x_test.size(0)) : c.x_test.size(0);
    for (int64_t i = 0; i < n_test; i += 1000) {
      const int64_t len = std::min<int64_t>(1000, n_test - i);
      auto pred = (*c.net)->forward(c.x_test.narrow(0, i, len)).argmax(1);
      correct += pred.eq(c.y_test.narrow(0, i, len)).sum().item<double>();
    }
    auto counts = torch::tensor({correct, static_cast<double>(n_test)}, torch::kDouble);
    if (c.pg && c.world > 1) {
      std::vector<torch::Tensor> t{counts};
      c.pg->allreduce(t)->wait();
    }
    (*c.net)->train();
    return counts[0].item<double>() / counts[1].item<double>();
  };

  log(std::string("adaptive loop: ") + (f.adaptive_batch ? "adaptive batch" : "fixed batch") +
      ", local batch " + std::to_string(local) + " x " + std::to_string(micro) +
      " micro-step(s), " + std::to_string(c.world) + " worker(s)");
  int64_t step = 0;
  int epoch = 1;
  int64_t pos = 0;
  auto new_perm = [&](int e) {
    auto gen = at::detail::createCPUGenerator(c.seed * 1000003 + e * 7919 + c.rank);
    return torch::randperm(c.x_train.size(0), gen);
  };
  torch::Tensor perm = new_perm(epoch);
  (*c.net)->train();
  double loss_window = 0;
  int window = 0;
  double window_samples = 0;
  auto window_start = Clock::now();
  bool reached = false;
  double last_acc = -1;
  while (true) {
    const int64_t per_step = int64_t(local) * micro;
    if (pos + per_step > n) {  // end of epoch
      if (f.eval_every == 0) {
        last_acc = evaluate();
        char buf[160];
        std::snprintf(buf, sizeof buf, "epoch %d done: test accuracy %.4f (%.0f s)", epoch,
                      last_acc, secs());
        log(buf);
      }
      if (++epoch > c.epochs) break;
      perm = new_perm(epoch);
      pos = 0;
      if (per_step > n) throw std::runtime_error("batch larger than the training shard");
    }
    std::vector<std::pair<torch::Tensor, torch::Tensor>> mb;
    for (int a = 0; a < micro; ++a) {
      auto idx = perm.narrow(0, pos + int64_t(a) * local, local);
      mb.emplace_back(c.x_train.index_select(0, idx), c.y_train.index_select(0, idx));
    }
    pos += per_step;
    loss_window += TrainStep(*c.net, *c.opt, *c.fg, *c.accum, c.pg, c.world, mb, c.ct);
    ++window;
    window_samples += global();
    ++step;
    if (leader) {
      bool valid = false;
      const est::NoiseState ns = detail::NoiseAtBase(*c.ct, b0, &valid);
      account.Advance(1, global(), valid ? ns : est::NoiseState{0, 0, b0});
      if (valid) int_sqr += ns.grad_sqr, int_var += ns.grad_var, ++int_n;
    }
    if (step % c.log_every == 0) {
      const double dt = std::chrono::duration<double>(Clock::now() - window_start).count();
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "epoch %d step %lld  loss %.4f  %.0f samples/s  batch %g  progress %.1f", epoch,
                    static_cast<long long>(step), loss_window / window, window_samples / dt,
                    global(), account.progress());
      log(buf);
      loss_window = 0, window = 0, window_samples = 0;
      window_start = Clock::now();
    }

    // Decision every adapt_every steps: rank 0 decides, everybody adopts the broadcast.
    if ((f.adaptive_batch || scale_lr) && step % f.adapt_every == 0) {
      double msg[4] = {double(local), double(micro), lr_scale, 0};
      if (leader) {
        bool valid = false;
        const est::NoiseState ns = detail::NoiseAtBase(*c.ct, b0, &valid);
        char buf[400];
        if (!valid) {
          std::snprintf(buf, sizeof buf,
                        "adaptive-batch: step %lld keep local %d x %d: no gradient-noise "
                        "estimate yet",
                        static_cast<long long>(step), local, micro);
          log(buf);
        } else {
          const double gain_cur = est::Gain(ns, global());
          msg[2] = scale_lr ? est::LrScale(rule, global(), b0, gain_cur) : 1.0;
          if (f.adaptive_batch) {
            est::BatchSizeDecision d;
            std::string why;
            try {
              d = controller.Recommend(c.world, step_time_fn(local, micro), ns, local, micro - 1);
            } catch (const std::exception& e) {
              why = e.what();
            }
            if (!why.empty()) {
              std::snprintf(buf, sizeof buf, "adaptive-batch: step %lld keep local %d x %d: %s",
                            static_cast<long long>(step), local, micro, why.c_str());
            } else if (d.switched) {
              msg[0] = d.local_bsz, msg[1] = d.accum_steps + 1, msg[3] = 1;
              msg[2] = scale_lr ? d.lr_scale : 1.0;
              std::snprintf(buf, sizeof buf,
                            "adaptive-batch: step %lld switch local %d x %d -> %d x %d (global %g "
                            "-> %lld)%s, predicted goodput gain %+.1f%%, noise scale %.0f, gain "
                            "%.2f, lr x%.3f, progress %.1f",
                            static_cast<long long>(step), local, micro, d.local_bsz,
                            d.accum_steps + 1, global(), d.global_batch,
                            d.forced ? " forced: current configuration infeasible" : "",
                            d.predicted_gain * 100, ns.noise_scale(),
                            est::Gain(ns, double(d.global_batch)), msg[2], account.progress());
            } else {
              std::snprintf(
                  buf, sizeof buf,
                  "adaptive-batch: step %lld keep local %d x %d (global %g): best "
                  "candidate gains %+.1f%% <= threshold %.0f%%, noise scale %.0f, lr "
                  "x%.3f",
                  static_cast<long long>(step), local, micro, global(),
                  (d.current_goodput > 0 ? d.best_goodput / d.current_goodput - 1 : 0) * 100,
                  f.switch_threshold * 100, ns.noise_scale(), msg[2]);
            }
            log(buf);
          }
        }
      }
      if (c.pg && c.world > 1) {
        std::vector<torch::Tensor> t{
            torch::tensor({msg[0], msg[1], msg[2], msg[3]}, torch::kDouble)};
        c.pg->broadcast(t)->wait();
        for (int i = 0; i < 4; ++i) msg[i] = t[0][i].item<double>();
      }
      if (msg[3] != 0) {
        local = static_cast<int>(msg[0]);
        micro = static_cast<int>(msg[1]);
        ++switches;
      }
      if (scale_lr) set_lr(msg[2]);
    }

    if (f.eval_every > 0 && step % f.eval_every == 0) {
      last_acc = evaluate();
      if (leader) {
        if (csv.is_open()) {
          char row[200];
          std::snprintf(row, sizeof row, "%.6g,%lld,%.6g,%.9g,%.9g\n", account.progress(),
                        static_cast<long long>(step), last_acc, int_n ? int_sqr / int_n : 0.0,
                        int_n ? int_var / int_n : 0.0);
          csv << row << std::flush;
        }
        int_sqr = int_var = 0, int_n = 0;
      }
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "step %lld: test accuracy %.4f  batch %g  progress %.1f  lr %.4g (%.0f s)",
                    static_cast<long long>(step), last_acc, global(), account.progress(),
                    c.lr * lr_scale, secs());
      log(buf);
      if (f.target_accuracy > 0 && last_acc >= f.target_accuracy) {
        reached = true;
        break;
      }
    }
    if (c.max_steps > 0 && step >= c.max_steps) {
      if (f.eval_every == 0) {  // like the plain loop: score the model where it stopped
        last_acc = evaluate();
        char buf[160];
        std::snprintf(buf, sizeof buf, "epoch %d stopped at step %lld: test accuracy %.4f (%.0f s)",
                      epoch, static_cast<long long>(step), last_acc, secs());
        log(buf);
      }
      break;
    }
  }
  char buf[300];
  if (f.target_accuracy > 0)
    std::snprintf(buf, sizeof buf, "target accuracy %.4f %s at step %lld (progress %.1f, %.0f s)",
                  f.target_accuracy, reached ? "reached" : "NOT reached",
                  static_cast<long long>(step), account.progress(), secs());
  else
    std::snprintf(buf, sizeof buf, "finished at step %lld (progress %.1f, %.0f s)",
                  static_cast<long long>(step), account.progress(), secs());
  log(buf);
  std::snprintf(buf, sizeof buf,
                "summary: steps %lld, progress %.1f, samples %.0f, final batch %g (local %d x %d), "
                "switches %d, last accuracy %.4f",
                static_cast<long long>(step), account.progress(), account.samples(), global(),
                local, micro, switches, last_acc);
  log(buf);
  return true;
}

}  // namespace cloudtune::examples
