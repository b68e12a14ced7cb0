#include "hooks/grad_norm.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace cloudtune::hooks {
namespace {

constexpr size_t kLanes = 16;    // independent float accumulators: lets the compiler use SIMD
constexpr size_t kBlock = 4096;  // floats summed in float before folding into double

bool FastPath(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous() &&
         !t.is_sparse();
}

}  // namespace

double SumSquares(const float* x, size_t n) {
  double total = 0;
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t len = std::min(kBlock, n - base);
    const float* p = x + base;
    float acc[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= len; i += kLanes)
      for (size_t j = 0; j < kLanes; ++j) acc[j] += p[i + j] * p[i + j];
    double block = 0;
    for (; i < len; ++i) block += static_cast<double>(p[i]) * p[i];
    for (size_t j = 0; j < kLanes; ++j) block += acc[j];
    total += block;
  }
  return total;
}

void SumSquaresAndDot(const float* x, const float* y, size_t n, double* sqr, double* dot) {
  double ts = 0, td = 0;
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t len = std::min(kBlock, n - base);
    const float* p = x + base;
    const float* q = y + base;
    float as[kLanes] = {}, ad[kLanes] = {};
    size_t i = 0;
    for (; i + kLanes <= len; i += kLanes)
      for (size_t j = 0; j < kLanes; ++j) {
        as[j] += p[i + j] * p[i + j];
        ad[j] += p[i + j] * q[i + j];
      }
    for (; i < len; ++i) {
      ts += static_cast<double>(p[i]) * p[i];
      td += static_cast<double>(p[i]) * q[i];
    }
    for (size_t j = 0; j < kLanes; ++j) {
      ts += as[j];
      td += ad[j];
    }
  }
  *sqr = ts;
  *dot = td;
}

double SquaredNorm(const std::vector<at::Tensor>& tensors) {
  double total = 0;
  at::Tensor slow;  // 0-dim double accumulator for tensors off the fast path
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    if (FastPath(t)) {
      total += SumSquares(t.data_ptr<float>(), static_cast<size_t>(t.numel()));
    } else {
      at::Tensor s = t.to(at::kDouble).square().sum();
      slow = slow.defined() ? slow + s.to(slow.device()) : s;
    }
  }
  if (slow.defined()) total += slow.item<double>();  // one read for all of them
  return total;
}

double SquaredNorm(const at::Tensor& tensor) {
  return SquaredNorm(std::vector<at::Tensor>{tensor});
}

bool SquaredNormAndDotWithPrevious(const std::vector<at::Tensor>& tensors, std::vector<float>* prev,
                                   double* sqr, double* dot) {
  size_t total = 0;
  for (const at::Tensor& t : tensors)
    if (t.defined()) total += static_cast<size_t>(t.numel());
  const bool have_prev = prev->size() == total;
  if (!have_prev) prev->assign(total, 0.0f);
  double s = 0, d = 0;
  size_t off = 0;
  for (const at::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    const size_t n = static_cast<size_t>(t.numel());
    at::Tensor c = FastPath(t) ? t : t.to(at::kCPU, at::kFloat).contiguous();
    const float* x = c.data_ptr<float>();
    float* p = prev->data() + off;
    double ts = 0, td = 0;
    SumSquaresAndDot(x, p, n, &ts, &td);
    std::copy(x, x + n, p);
    s += ts;
    d += td;
    off += n;
  }
  *sqr = s;
  *dot = have_prev ? d : 0;
  return have_prev;
}

}  // namespace cloudtune::hooks
