// Data-parallel training of a small CNN on Fashion-MNIST over a Gloo process group on 127.0.0.1,
// with the cloudtune hooks wired in (lines marked [cloudtune], here and in fashion_mnist.h).
//
//   train_fashion_mnist --workers 2            # spawns 2 worker processes of itself and
//                                              # serves their store, as torchrun's agent does
//   RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p train_fashion_mnist   # one worker
//   CLOUDTUNE=1 train_fashion_mnist --workers 2                                   # tuner on
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "estimator/core/env.h"
#include "examples/adaptive_batch.h"
#include "examples/fashion_mnist.h"
#include "plugin/torch/tcp_store.h"

namespace {

struct Flags {
  int workers = 0;  // > 0: spawn this many worker processes and wait for them
  int epochs = 2;
  int64_t steps = 0;  // stop after this many optimizer steps (0 = run all epochs)
  int batch = 64;     // local batch per micro-step
  int accum = 1;      // micro-steps per optimizer step
  double lr = 0.05;
  uint64_t seed = 1;
  int threads = 1;
  int log_every = 100;
  int64_t test_limit = 0;  // score at most this many test samples per worker (0 = all)
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string cache;
  int slow_rank = -1;  // this rank sleeps slow_ms per step (straggler demonstration)
  int slow_ms = 0;
  int nan_rank = -1;  // this rank's gradients are NaN at the steps nan_steps lists
  std::vector<int64_t> nan_steps;
  int fail_rank = -1;  // on the job's first attempt this rank exits (status 3) at step fail_step
  int64_t fail_step = 0;
  std::vector<int> batches;  // per-rank local batches (unequal: a mixed cluster's balanced batches)
  cloudtune::examples::AdaptiveFlags adaptive;  // --adaptive-batch, --validation-csv, ...
};

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Set by the launcher, as torchrun's agent sets it: the job's TCPStore is served at MASTER_PORT
// already, so rank 0 joins it as a client.
constexpr const char* kAgentStore = "TORCHELASTIC_USE_AGENT_STORE";

// Spawns `n` copies of this program (without --workers) as ranks 0..n-1 and waits. If one fails,
// the others are stopped. Returns the exit status. The launcher serves the job's TCPStore itself,
// as torchrun's agent does, on MASTER_PORT or else on a port the kernel picks: the port is held
// from the start, so no other process can take it before the workers meet there.
int Launch(int n, int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--workers") {
      ++i;
      continue;
    }
    if (a.rfind("--workers=", 0) == 0) continue;
    args.push_back(a);
  }
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::string port;
  try {
    store = cloudtune::plugin::ServeStore(static_cast<uint16_t>(EnvInt("MASTER_PORT", 0)),
                                          std::chrono::seconds(120));
    port = std::to_string(store->getPort());
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: cannot serve the job's store on port "
              << EnvInt("MASTER_PORT", 0) << " (MASTER_PORT; 0: any free port): " << e.what()
              << "\n";
    return 1;
  }
  std::map<pid_t, int> ranks;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 0);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::setenv(kAgentStore, "True", 1);
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv("/proc/self/exe", cargs.data());
      std::perror("execv");
      std::_Exit(127);
    }
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    ranks[pid] = r;
  }
  int rc = 0;
  while (!ranks.empty()) {
    int status = 0;
    pid_t pid = ::wait(&status);
    if (pid < 0) break;
    auto it = ranks.find(pid);
    if (it == ranks.end()) continue;
    const int r = it->second;
    ranks.erase(it);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && rc == 0) {
      rc = 1;
      std::cerr << "train_fashion_mnist: worker " << r << " failed ("
                << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                        : "exit " + std::to_string(WEXITSTATUS(status)))
                << "); stopping the others\n";
      for (auto& [p, _] : ranks) ::kill(p, SIGTERM);
    }
  }
  return rc;
}

// The job's process group: a TCPStore served by rank 0 (or by the launcher, or torchrun's agent),
// Gloo over loopback.
c10::intrusive_ptr<c10d::ProcessGroupGloo> MakeGroup(int rank, int world) {
  const cloudtune::core::LaunchEnv launch = cloudtune::core::LaunchEnv::Read();
  c10d::TCPStoreOptions so = cloudtune::plugin::StoreOptions();
  so.port = static_cast<uint16_t>(launch.master_port > 0 ? launch.master_port : 29500);
  so.isServer = rank == 0 && !launch.agent_store;
  so.numWorkers = world;
  so.timeout = std::chrono::seconds(120);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(
      launch.master_addr.empty() ? "127.0.0.1" : launch.master_addr, so);
  // The agent's store outlives a restart: each attempt keeps its keys apart.
  if (launch.agent_store)
    store = c10::make_intrusive<c10d::PrefixStore>(launch.AttemptPrefix(), store);
  auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, opts);
}

// --batches: sets this rank's local batch; returns their mean (0 without --batches) and the
// largest in *max_bsz. Throws std::invalid_argument on a list that does not fit the workers.
int64_t ApplyBatches(Flags* f, int rank, int world, int64_t* max_bsz) {
  if (f->batches.empty()) return 0;
  if (static_cast<int>(f->batches.size()) != world)
    throw std::invalid_argument("--batches: " + std::to_string(f->batches.size()) +
                                " local batches for " + std::to_string(world) + " workers");
  int64_t sum = 0;
  for (int b : f->batches) sum += b;
  if (sum % world)
    throw std::invalid_argument("--batches: their mean must be a whole number of samples");
  *max_bsz = *std::max_element(f->batches.begin(), f->batches.end());
  f->batch = f->batches[rank];
  return sum / world;
}

int Worker(Flags f) {
  using namespace cloudtune::examples;
  const int rank = EnvInt("RANK", 0);
  const int world = EnvInt("WORLD_SIZE", 1);
  int64_t max_bsz = f.batch;
  const int64_t mean_bsz = ApplyBatches(&f, rank, world, &max_bsz);
  torch::set_num_threads(f.threads);
  const auto t0 = std::chrono::steady_clock::now();
  auto log = [&](const std::string& s) {
    if (rank == 0) std::cout << s << std::endl;
  };

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  if (world > 1) pg = MakeGroup(rank, world);

  // Data: this worker's shard of the training set (every world-th sample).
  std::string cache = f.cache;
  if (cache.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    cache = std::string(tmp && *tmp ? tmp : "/tmp") + "/cloudtune-fashion-mnist";
  }
  const std::string root = PrepareFashionMnist(f.data, cache);
  torch::data::datasets::MNIST train(root, torch::data::datasets::MNIST::Mode::kTrain);
  torch::data::datasets::MNIST test(root, torch::data::datasets::MNIST::Mode::kTest);
  auto normalize = [](const torch::Tensor& x) { return (x - 0.2860) / 0.3530; };
  auto shard = torch::arange(rank, train.images().size(0), world);
  const torch::Tensor x_train = normalize(train.images().index_select(0, shard));
  const torch::Tensor y_train = train.targets().index_select(0, shard);
  auto tshard = torch::arange(rank, test.images().size(0), world);
  const torch::Tensor x_test = normalize(test.images().index_select(0, tshard));
  const torch::Tensor y_test = test.targets().index_select(0, tshard);

  torch::manual_seed(f.seed);  // same initial weights on every rank
  Net net;
  if (pg) {
    std::vector<torch::Tensor> ps;
    for (auto& p : net->parameters()) ps.push_back(p.data());
    for (auto& p : ps) {
      std::vector<torch::Tensor> one{p};
      pg->broadcast(one)->wait();
    }
  }
  FlatGrads fg(*net);
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(f.lr).momentum(0.9));
  torch::Tensor accum;

  // A worker failure for torchrun to restart (--fail-rank): on the first attempt only.
  const bool fails = rank == f.fail_rank && cloudtune::core::LaunchEnv::Read().restart_count == 0;
  if (fails && f.fail_step == 0) std::_Exit(3);
  cloudtune::Init({rank, world, 0, mean_bsz > 0 ? static_cast<int>(mean_bsz) : f.batch,
                   f.accum});                                     // [cloudtune]
  cloudtune::plugin::Plugin* ct = cloudtune::plugin::Instance();  // [cloudtune]
  cloudtune::plugin::Plugin off(cloudtune::runtime::Options{});
  if (!ct) ct = &off;

  log("train_fashion_mnist: " + std::to_string(world) + " worker(s), local batch " +
      std::to_string(f.batch) + " x " + std::to_string(f.accum) + " micro-step(s), " +
      std::to_string(x_train.size(0)) + " training samples per worker");
  const int64_t n = x_train.size(0);
  const int64_t per_step = static_cast<int64_t>(f.batch) * f.accum;
  const int64_t steps_per_epoch = n / (max_bsz * f.accum);  // the same on every rank
  int64_t step = 0;
  bool stop = false;
  if (f.adaptive.active()) {  // the evaluated loop of examples/adaptive_batch.h replaces the epochs
    LoopContext lc{&net,  &opt,    &fg,      &accum,  pg.get(),     ct,          rank,
                   world, x_train, y_train,  x_test,  y_test,       f.batch,     f.accum,
                   f.lr,  f.seed,  f.epochs, f.steps, f.test_limit, f.log_every, t0};
    stop = RunAdaptiveLoop(f.adaptive, lc);
  }
  for (int epoch = 1; epoch <= f.epochs && !stop; ++epoch) {
    net->train();
    auto gen = at::detail::createCPUGenerator(f.seed * 1000003 + epoch * 7919 + rank);
    auto perm = torch::randperm(n, gen);
    double loss_window = 0;
    int window = 0;
    auto window_start = std::chrono::steady_clock::now();
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      if (fails && step == f.fail_step) std::_Exit(3);
      std::vector<std::pair<torch::Tensor, torch::Tensor>> micro;
      for (int a = 0; a < f.accum; ++a) {
        auto idx = perm.narrow(0, s * per_step + a * f.batch, f.batch);
        micro.emplace_back(x_train.index_select(0, idx), y_train.index_select(0, idx));
      }
      loss_window += TrainStep(
          net, opt, fg, accum, pg.get(), world, micro, ct, rank == f.slow_rank ? f.slow_ms : 0,
          rank == f.nan_rank && std::count(f.nan_steps.begin(), f.nan_steps.end(), step + 1) > 0,
          mean_bsz);
      ++window;
      ++step;
      if (step % f.log_every == 0) {
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
        char buf[160];
        std::snprintf(buf, sizeof buf, "epoch %d step %lld  loss %.4f  %.0f samples/s", epoch,
                      static_cast<long long>(step), loss_window / window,
                      window * per_step * world / dt);
        log(buf);
        loss_window = 0;
        window = 0;
        window_start = std::chrono::steady_clock::now();
      }
      if (f.steps > 0 && step >= f.steps) {
        stop = true;
        break;
      }
    }
    // Test accuracy: each rank scores its shard of the test set; one all-reduce of the counts.
    torch::NoGradGuard no_grad;
    net->eval();
    double correct = 0;
    const int64_t n_test =
        f.test_limit > 0 ? std::min<int64_t>(f.test_limit, x_test.size(0)) : x_test.size(0);
    for (int64_t i = 0; i < n_test; i += 1000) {
      const int64_t len = std::min<int64_t>(1000, n_test - i);
      auto pred = net->forward(x_test.narrow(0, i, len)).argmax(1);
      correct += pred.eq(y_test.narrow(0, i, len)).sum().item<double>();
    }
    auto counts = torch::tensor({correct, static_cast<double>(n_test)}, torch::kDouble);
    if (pg) {
      std::vector<torch::Tensor> c{counts};
      pg->allreduce(c)->wait();
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "epoch %d done: test accuracy %.4f (%.0f s)", epoch,
                  counts[0].item<double>() / counts[1].item<double>(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    log(buf);
  }
  cloudtune::Shutdown();  // [cloudtune]
  if (pg) {
    std::vector<torch::Tensor> b{torch::zeros({1})};
    pg->barrier()->wait();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Data-parallel Fashion-MNIST training with the cloudtune hooks"};
  app.add_option("--workers", f.workers,
                 "spawn N worker processes on 127.0.0.1 (0 = be one worker)");
  app.add_option("--epochs", f.epochs, "epochs over the training set");
  app.add_option("--steps", f.steps, "stop after this many optimizer steps (0 = all epochs)");
  app.add_option("--batch", f.batch, "local batch (samples per worker per micro-step)");
  app.add_option("--accum", f.accum, "gradient-accumulation micro-steps per optimizer step");
  app.add_option("--lr", f.lr, "SGD learning rate (momentum 0.9)");
  app.add_option("--seed", f.seed, "random seed");
  app.add_option("--threads", f.threads, "intra-op threads per worker");
  app.add_option("--log-every", f.log_every, "steps between progress lines");
  app.add_option("--test-limit", f.test_limit, "score at most N test samples per worker (0 = all)");
  app.add_option("--data", f.data, "directory with the Fashion-MNIST IDX files (.gz or plain)");
  app.add_option("--cache", f.cache,
                 "where to decompress them (default $TMPDIR/cloudtune-fashion-mnist)");
  app.add_option("--slow-rank", f.slow_rank, "make this rank a straggler (with --slow-ms)");
  app.add_option("--slow-ms", f.slow_ms, "milliseconds the --slow-rank worker sleeps per step");
  app.add_option("--nan-rank", f.nan_rank,
                 "this rank's gradients are NaN at the --nan-steps (the step is skipped, as a loss "
                 "scaler skips it)");
  app.add_option("--nan-steps", f.nan_steps, "optimizer steps (1-based) with NaN gradients")
      ->delimiter(',');
  app.add_option("--fail-rank", f.fail_rank,
                 "on the job's first attempt (TORCHELASTIC_RESTART_COUNT unset or 0) this rank "
                 "exits with status 3 at --fail-step: a worker failure for torchrun to restart");
  app.add_option("--fail-step", f.fail_step,
                 "optimizer steps done when --fail-rank exits (0: before the tuner starts; "
                 "the epoch loop, not --adaptive-batch)");
  app.add_option(
         "--batches", f.batches,
         "local batch of each worker, in rank order (e.g. 48,80: unequal batches, gradients "
         "weighted by samples); overrides --batch")
      ->delimiter(',');
  cloudtune::examples::AddAdaptiveFlags(app, &f.adaptive);
  CLI11_PARSE(app, argc, argv);
  if (!cloudtune::examples::PrepareAdaptive(f.adaptive)) return 2;
  if (!f.batches.empty() && f.adaptive.active()) {
    std::cerr << "train_fashion_mnist: --batches and the adaptive batch loop are exclusive\n";
    return 2;
  }
  for (int b : f.batches)
    if (b < 1) f.batch = 0;  // reported below
  if (f.batch < 1 || f.accum < 1 || f.epochs < 1 || f.threads < 1 || f.log_every < 1 ||
      f.workers < 0) {
    std::cerr << "train_fashion_mnist: --batch (and each of --batches), --accum, --epochs, "
                 "--threads, --log-every must be >= 1 and --workers >= 0\n";
    return 2;
  }
  if (f.workers > 0 && !std::getenv("RANK")) return Launch(f.workers, argc, argv);
  try {
    return Worker(f);
  } catch (const std::exception& e) {
    std::cerr << "train_fashion_mnist: rank " << EnvInt("RANK", 0) << ": " << e.what() << "\n";
    return 1;
  }
}
