// Helpers for the patcher/lossy codec tests: a TensorPayload built straight from an encoder's
// WdeltaTensorOut (no .wdelta file in between), and fixed-seed random matrices whose value
// distributions are written out here (not std::*_distribution, whose sequences differ
// between standard libraries).
#ifndef BLZ_TESTS_PATCHER_LOSSY_LOSSY_TEST_UTIL_H_
#define BLZ_TESTS_PATCHER_LOSSY_LOSSY_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <numbers>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy::testing {

// Owns the encoder's output and a TensorPayload whose views point into it, with the header
// object as a file would hold it (meta, then {"_ref": field} per field). Not movable: the
// payload points into it.
struct OwnedPayload {
  explicit OwnedPayload(formats::WdeltaTensorOut o) : out(std::move(o)), meta(out.meta) {
    for (const auto& [field, array] : out.fields) meta[field] = {{"_ref", field}};
    payload.name = out.name;
    payload.meta = &meta;
    for (const auto& [field, array] : out.fields) {
      payload.fields.emplace(field, formats::WdeltaArrayView{array.dtype, array.shape,
                                                             ByteSpan(array.bytes)});
    }
  }
  OwnedPayload(const OwnedPayload&) = delete;
  OwnedPayload& operator=(const OwnedPayload&) = delete;

  formats::WdeltaTensorOut out;
  nlohmann::ordered_json meta;
  TensorPayload payload;
};

inline std::unique_ptr<OwnedPayload> AsPayload(formats::WdeltaTensorOut out) {
  return std::make_unique<OwnedPayload>(std::move(out));
}

// Uniform in (0, 1), 53 bits.
inline double Uniform01(std::mt19937_64& g) { return (double(g() >> 11) + 0.5) * 0x1.0p-53; }

// Laplace(0, b) by inverting its CDF: |x| ~ Exp(1/b), random sign.
inline std::vector<float> LaplaceValues(uint64_t n, double b, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double u = Uniform01(g) - 0.5;
    x = float(-b * std::copysign(1.0, u) * std::log(1.0 - 2.0 * std::fabs(u)));
  }
  return v;
}

// N(0, sigma^2) by Box-Muller.
inline std::vector<float> GaussianValues(uint64_t n, double sigma, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; i += 2) {
    const double r = sigma * std::sqrt(-2.0 * std::log(Uniform01(g)));
    const double t = 2.0 * std::numbers::pi * Uniform01(g);
    v[i] = float(r * std::cos(t));
    if (i + 1 < n) v[i + 1] = float(r * std::sin(t));
  }
  return v;
}

// Uniform on (-a, a).
inline std::vector<float> UniformValues(uint64_t n, double a, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(a * (2.0 * Uniform01(g) - 1.0));
  return v;
}

}  // namespace blz::lossy::testing

#endif  // BLZ_TESTS_PATCHER_LOSSY_LOSSY_TEST_UTIL_H_
