// How far a reconstruction is from the true target, per tensor and for a whole model.
// Everything is accumulated in double over float32 inputs (each value widened exactly, the
// differences taken in double). An element where any of base, target or reconstruction is
// NaN or +-Inf is counted in `nonfinite` (and in `elements`) and left out of every sum and
// of max_abs: the norms are over the finite triples only.
//
//   rel_l2       ||r - t||_2 / ||t||_2          (0 when both are 0; +inf when only t is 0)
//   delta_rel_l2 ||r - t||_2 / ||t - b||_2      (error relative to the true delta; 0 if both
//                                                are 0; +inf when only the delta is 0)
//   cosine       <r, t> / (||r|| ||t||)         (1 when both are 0, 0 when only one is;
//                                                clamped to [-1, 1])
//   max_abs      max |r_i - t_i|
//
// Sums are kept per Add() chunk and then added to the running totals, so a Merge() of
// accumulators equals one accumulator over the same chunks up to double rounding (exactly
// when the sums are exact).
#ifndef BLZ_PATCHER_LOSSY_ERROR_METRICS_H_
#define BLZ_PATCHER_LOSSY_ERROR_METRICS_H_

#include <cstdint>
#include <span>

namespace blz::lossy {

struct ErrorMetrics {
  uint64_t elements = 0;
  uint64_t nonfinite = 0;
  double rel_l2 = 0;
  double delta_rel_l2 = 0;
  double cosine = 1;
  double max_abs = 0;
};

// Streaming: Add() consecutive chunks of (base, target, reconstruction), equal lengths;
// Merge() accumulators of other tensors for a model-level figure (norms over all elements).
class ErrorAccumulator {
 public:
  void Add(std::span<const float> base, std::span<const float> target,
           std::span<const float> recon);
  void Merge(const ErrorAccumulator& other);
  ErrorMetrics Finish() const;

 private:
  uint64_t elements_ = 0, nonfinite_ = 0;
  double err2_ = 0, t2_ = 0, r2_ = 0, rt_ = 0, d2_ = 0, max_abs_ = 0;
};

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_ERROR_METRICS_H_
