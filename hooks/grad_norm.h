// Gradient squared norms: one pass over all gradient tensors, one scalar result, no per-tensor
// .item() round trip.
//
// CPU float32 contiguous tensors go through a vectorisable loop (16 float lanes, blocks summed in
// double); any other tensor (other dtype, strided, CUDA) is reduced with ATen ops into a single
// double tensor that is read once at the end.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <vector>

namespace cloudtune::hooks {

// Σ x² over n floats (the kernel; exposed for tests and the benchmark).
double SumSquares(const float* x, size_t n);
// Σ x² and Σ x·y over n floats in one pass.
void SumSquaresAndDot(const float* x, const float* y, size_t n, double* sqr, double* dot);

// Σ over all tensors of Σ x². Undefined tensors are skipped.
double SquaredNorm(const std::vector<at::Tensor>& tensors);
double SquaredNorm(const at::Tensor& tensor);

// Consecutive-steps helper for the single-replica mode: in one pass over `tensors` computes
// Σ x² and, when *prev holds the previous step's gradients (same total size), Σ x·prev; then
// stores the current gradients in *prev. Returns false when no dot product was computed
// (first step or size change).
bool SquaredNormAndDotWithPrevious(const std::vector<at::Tensor>& tensors, std::vector<float>* prev,
                                   double* sqr, double* dot);

}  // namespace cloudtune::hooks
