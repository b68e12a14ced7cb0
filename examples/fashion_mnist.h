// Shared by examples/train_fashion_mnist.cpp and bench/bench_overhead.cpp: the small CNN, the
// Fashion-MNIST loader (decompresses the Debian package's .gz IDX files into a cache directory),
// and one data-parallel training step.
#pragma once

#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>  // needs USE_C10D_GLOO
#include <vector>

#include "cloudtune/cloudtune.h"
#include "estimator/core/atomic_file.h"
#include "plugin/torch/plugin.h"

namespace cloudtune::examples {

// The process group the examples' collectives (allreduce, broadcast, barrier) go through. It is the
// Gloo group itself: in LibTorch 1.x that is a c10d::ProcessGroup, in 2.x a c10d::Backend (which a
// ProcessGroup wraps), and both have these calls.
using Collectives = c10d::ProcessGroupGloo;

// conv(1→16, 3x3) → ReLU → maxpool 2 → conv(16→32, 3x3) → ReLU → maxpool 2 → fc 1568→128 → fc 10.
struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return torch::log_softmax(fc2->forward(x), 1);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

// Decompresses SRC.gz to DST (atomically: safe with concurrent workers).
inline void Gunzip(const std::string& src, const std::string& dst) {
  gzFile in = gzopen(src.c_str(), "rb");
  if (!in) throw std::runtime_error("cannot open " + src);
  std::string data;
  std::vector<char> buf(1 << 16);
  int n;
  while ((n = gzread(in, buf.data(), static_cast<unsigned>(buf.size()))) > 0)
    data.append(buf.data(), static_cast<size_t>(n));
  gzclose(in);
  if (n != 0) throw std::runtime_error("cannot decompress " + src);
  core::WriteFileAtomicallyOrThrow(dst, data);
}

// Makes sure the four IDX files exist uncompressed in `cache` (taken from `source`, where they may
// be plain or .gz) and returns `cache`.
inline std::string PrepareFashionMnist(const std::string& source, const std::string& cache) {
  namespace fs = std::filesystem;
  fs::create_directories(cache);
  for (const char* name : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const fs::path dst = fs::path(cache) / name;
    if (fs::exists(dst)) continue;
    const fs::path plain = fs::path(source) / name;
    const fs::path gz = fs::path(source) / (std::string(name) + ".gz");
    if (fs::exists(gz)) {
      Gunzip(gz.string(), dst.string());
    } else if (fs::exists(plain)) {
      fs::copy_file(plain, dst, fs::copy_options::overwrite_existing);
    } else {
      throw std::runtime_error("Fashion-MNIST file " + gz.string() +
                               " not found (Debian package dataset-fashion-mnist)");
    }
  }
  return cache;
}

// Gradients of `net`'s parameters as views into one flat buffer with one extra element at the end
// (the cloudtune slot): backward accumulates straight into it, and one all-reduce of the buffer
// carries the gradients and the slot together.
struct FlatGrads {
  torch::Tensor flat;                // numel + 3 floats: the gradients, then the cloudtune slots
  std::vector<torch::Tensor> grads;  // views of flat, one per parameter
  int64_t numel = 0;
  explicit FlatGrads(torch::nn::Module& net) {
    for (auto& p : net.parameters()) numel += p.numel();
    flat = torch::zeros({numel + 3});
    int64_t off = 0;
    for (auto& p : net.parameters()) {
      auto g = flat.narrow(0, off, p.numel()).view_as(p);
      p.mutable_grad() = g;
      grads.push_back(g);
      off += p.numel();
    }
  }
  torch::Tensor body() const { return flat.narrow(0, 0, numel); }
};

// One data-parallel optimizer step over `micro` micro-batches (gradient accumulation when > 1),
// the gradients averaged over `pg` (null = single process). Returns the mean loss. The cloudtune
// hooks are the lines marked [cloudtune]; `ct` is the process's plugin
// (cloudtune::plugin::Instance()). `mean_bsz` > 0: the replicas' local batches differ (this one's
// is the micro-batches' size) and average `mean_bsz`; the gradients are then combined weighted by
// samples, and the hooks are told the replicas' batches.
inline double TrainStep(Net& net, torch::optim::Optimizer& opt, FlatGrads& fg, torch::Tensor& accum,
                        Collectives* pg, int world_size,
                        const std::vector<std::pair<torch::Tensor, torch::Tensor>>& micro,
                        plugin::Plugin* ct, int slow_ms = 0, bool poison = false,
                        int64_t mean_bsz = 0) {
  ct->StepBegin();  // [cloudtune]
  double loss_sum = 0, slot = 0;
  const bool accumulate = micro.size() > 1;
  if (accumulate) {
    if (!accum.defined()) accum = torch::zeros({fg.numel});
    accum.zero_();
  }
  for (const auto& [x, y] : micro) {
    fg.flat.zero_();
    auto loss = torch::nll_loss(net->forward(x), y);
    loss.backward();
    loss_sum += loss.item<double>();
    slot = ct->GradsLocal({fg.body()});  // [cloudtune] this micro-step's gradients
    if (accumulate) accum.add_(fg.body());
  }
  // Non-finite gradients on this rank (--nan-rank/--nan-steps: what an fp16 overflow gives).
  if (poison) fg.body()[0] = std::numeric_limits<float>::quiet_NaN();
  // An artificially slow worker (--slow-ms): extra compute time before the all-reduce.
  if (slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms));
  if (accumulate) fg.body().copy_(accum).div_(static_cast<double>(micro.size()));
  fg.flat[fg.numel] = slot;  // [cloudtune] the local squared norms ride in the all-reduce
  const double bsz = static_cast<double>(micro.front().first.size(0));
  if (mean_bsz > 0) {  // unequal local batches: weight by samples; the batches ride along too
    fg.body().mul_(bsz / static_cast<double>(mean_bsz));
    fg.flat[fg.numel + 1] = 1.0 / bsz;
    fg.flat[fg.numel + 2] = bsz;
  }
  if (pg && world_size > 1) {
    std::vector<torch::Tensor> bufs{fg.flat};
    ct->SyncBegin();  // [cloudtune]
    pg->allreduce(bufs)->wait();
    ct->SyncEnd();  // [cloudtune]
    fg.flat.div_(world_size);
  }
  if (mean_bsz > 0)  // [cloudtune] the replicas' mean 1/b and b
    ct->ReplicaBatches(fg.flat[fg.numel + 1].item<double>(), fg.flat[fg.numel + 2].item<double>());
  ct->GradsReduced({fg.body()}, fg.flat[fg.numel].item<double>());  // [cloudtune]
  // A step whose averaged gradient is not finite is skipped, as a loss scaler skips it (every rank
  // sees the same all-reduced values, so all skip together).
  const int64_t step_bsz = mean_bsz > 0 ? mean_bsz : micro.front().first.size(0);
  if (!fg.body().isfinite().all().item<bool>()) {
    ct->StepEnd(step_bsz, static_cast<int64_t>(micro.size()));  // [cloudtune]
    return loss_sum / static_cast<double>(micro.size());
  }
  opt.step();
  ct->StepEnd(step_bsz, static_cast<int64_t>(micro.size()));  // [cloudtune]
  return loss_sum / static_cast<double>(micro.size());
}

}  // namespace cloudtune::examples
