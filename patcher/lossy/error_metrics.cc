#include "patcher/lossy/error_metrics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

namespace blz::lossy {

void ErrorAccumulator::Add(std::span<const float> base, std::span<const float> target,
                           std::span<const float> recon) {
  // The three spans are consecutive chunks of the same tensor; a caller passing different
  // lengths has a bug, and only the common prefix can be measured.
  const size_t n = std::min({base.size(), target.size(), recon.size()});
  uint64_t nonfinite = 0;
  double err2 = 0, t2 = 0, r2 = 0, rt = 0, d2 = 0, max_abs = max_abs_;
  for (size_t i = 0; i < n; ++i) {
    const float b = base[i], t = target[i], r = recon[i];
    if (!std::isfinite(b) || !std::isfinite(t) || !std::isfinite(r)) {
      ++nonfinite;
      continue;
    }
    const double e = double(r) - double(t);
    const double d = double(t) - double(b);
    err2 += e * e;
    t2 += double(t) * double(t);
    r2 += double(r) * double(r);
    rt += double(r) * double(t);
    d2 += d * d;
    max_abs = std::max(max_abs, std::fabs(e));
  }
  // Per-chunk partial sums, then one add each: fewer large + small additions than adding
  // every element into the running model-level total.
  elements_ += n;
  nonfinite_ += nonfinite;
  err2_ += err2;
  t2_ += t2;
  r2_ += r2;
  rt_ += rt;
  d2_ += d2;
  max_abs_ = max_abs;
}

void ErrorAccumulator::Merge(const ErrorAccumulator& other) {
  elements_ += other.elements_;
  nonfinite_ += other.nonfinite_;
  err2_ += other.err2_;
  t2_ += other.t2_;
  r2_ += other.r2_;
  rt_ += other.rt_;
  d2_ += other.d2_;
  max_abs_ = std::max(max_abs_, other.max_abs_);
}

namespace {

// ||e|| / ||x|| from squared norms: 0 when both are 0, +inf when only x is.
double RelativeNorm(double e2, double x2) {
  if (x2 == 0) return e2 == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(e2) / std::sqrt(x2);
}

}  // namespace

ErrorMetrics ErrorAccumulator::Finish() const {
  ErrorMetrics m;
  m.elements = elements_;
  m.nonfinite = nonfinite_;
  m.rel_l2 = RelativeNorm(err2_, t2_);
  m.delta_rel_l2 = RelativeNorm(err2_, d2_);
  if (r2_ == 0 && t2_ == 0) {
    m.cosine = 1;
  } else if (r2_ == 0 || t2_ == 0) {
    m.cosine = 0;
  } else {
    // Rounding can put |cos| a hair above 1; a cosine is in [-1, 1] by definition.
    m.cosine = std::clamp(rt_ / (std::sqrt(r2_) * std::sqrt(t2_)), -1.0, 1.0);
  }
  m.max_abs = max_abs_;
  return m;
}

}  // namespace blz::lossy
