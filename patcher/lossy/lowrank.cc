#include "patcher/lossy/lowrank.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <random>
#include <utility>

#include <Eigen/Dense>
#include <Eigen/SVD>

#include "patcher/lossy/payload_check.h"

namespace blz::lossy {

namespace {

using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic>;  // column-major
using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRowF = Eigen::Map<const RowMatF>;
using Eigen::Index;

// First randomized subspace dimension; doubled until it captures the energy asked for.
constexpr Index kFirstSubspace = 32;
// Power iterations of the randomized range finder: enough to separate the leading singular
// values of slowly decaying spectra (Halko, Martinsson, Tropp 2011, section 4.5).
constexpr int kPowerIterations = 2;
// The randomized search stops and a full BDCSVD is done once the subspace would exceed
// min(m, n) / kFullSvdFraction: past that the rounds of a flat spectrum cost more than
// the full decomposition they end in (measured: docs/wdelta.md "lowrank").
constexpr Index kFullSvdFraction = 8;
// float32 SVD: squared singular values sum to ||A||^2 within a few ulps x min(m, n); a rank
// whose residual is within this share of ||A||^2 of the budget is accepted.
constexpr double kRelativeTolerance = 1e-5;
constexpr uint64_t kSeed = 0x626c7a6c6f777261ULL;  // "blzlowra": encodes are repeatable

// One factorization A ~ a b: a = U_k diag(sigma_k) (m x k), b = V_k^T (k x n).
struct Factors {
  Index k = 0;
  RowMatF a;
  RowMatF b;
};

// Independent N(0, 1) values from a fixed-seed mt19937_64 (Box-Muller on 53-bit uniforms,
// written out so that the sequence does not depend on the standard library).
MatF GaussianMatrix(Index rows, Index cols, uint64_t seed) {
  std::mt19937_64 gen(seed);
  auto uniform = [&gen] { return (double(gen() >> 11) + 0.5) * 0x1.0p-53; };  // (0, 1)
  MatF g(rows, cols);
  float* p = g.data();
  const Index n = rows * cols;
  for (Index i = 0; i < n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(uniform()));
    const double t = 2.0 * std::numbers::pi * uniform();
    p[i] = float(r * std::cos(t));
    if (i + 1 < n) p[i + 1] = float(r * std::sin(t));
  }
  return g;
}

// An orthonormal basis of the columns of y (thin Householder QR).
MatF Orthonormalize(const MatF& y) {
  Eigen::HouseholderQR<MatF> qr(y);
  return qr.householderQ() * MatF::Identity(y.rows(), y.cols());
}

// The smallest k with total - sum_{i<k} s_i^2 <= budget (within the float tolerance), or
// nullopt when even all of `s` leave more than the budget.
std::optional<Index> PickRank(const Eigen::VectorXf& s, double total, double budget) {
  const double allowed = budget + kRelativeTolerance * total;
  double kept = 0;
  if (total <= allowed) return 0;
  for (Index i = 0; i < s.size(); ++i) {
    kept += double(s[i]) * double(s[i]);
    if (total - kept <= allowed) return i + 1;
  }
  return std::nullopt;
}

Factors MakeFactors(const MatF& u, const Eigen::VectorXf& s, const MatF& v, Index k) {
  Factors f;
  f.k = k;
  f.a = u.leftCols(k) * s.head(k).asDiagonal();
  f.b = v.leftCols(k).transpose();
  return f;
}

// Truncated SVD of A (m x n, row-major) keeping the smallest rank whose residual
// ||A - A_k||_F^2 is at most `budget`, where total = ||A||_F^2 (in double, from the input).
// With max_rank set, gives up (nullopt) as soon as that rank cannot be met. Without
// `full_after_randomized`, gives up rather than follow a failed randomized search with a
// full SVD (a small matrix, where the full SVD is the first step, still gets it).
std::optional<Factors> Truncate(const MapRowF& a, double total, double budget,
                                std::optional<Index> max_rank, bool full_after_randomized) {
  const Index m = a.rows(), n = a.cols(), min_mn = std::min(m, n);
  if (total <= budget + kRelativeTolerance * total || min_mn == 0) {
    Factors zero;
    zero.a.resize(m, 0);
    zero.b.resize(0, n);
    return zero;
  }
  for (Index l = std::min(kFirstSubspace, min_mn);; l = std::min(2 * l, min_mn)) {
    if (max_rank && l > *max_rank + kFirstSubspace) return std::nullopt;
    if (kFullSvdFraction * l > min_mn) {
      if (!full_after_randomized && l > kFirstSubspace) return std::nullopt;
      Eigen::BDCSVD<MatF> svd(a, Eigen::ComputeThinU | Eigen::ComputeThinV);
      // All min(m, n) singular values keep everything; only rounding can leave a residual.
      const Index k = PickRank(svd.singularValues(), total, budget).value_or(min_mn);
      if (max_rank && k > *max_rank) return std::nullopt;
      return MakeFactors(svd.matrixU(), svd.singularValues(), svd.matrixV(), k);
    }
    // Randomized range finder with power iterations: Q (m x l) orthonormal, B = Q^T A.
    MatF y = a * GaussianMatrix(n, l, kSeed + uint64_t(l));
    for (int it = 0; it < kPowerIterations; ++it) {
      const MatF z = Orthonormalize(a.transpose() * Orthonormalize(y));
      y = a * z;
    }
    const MatF q = Orthonormalize(y);
    const MatF b = q.transpose() * a;
    // ||A - Q U_k S_k V_k^T||^2 = ||A||^2 - sum_{i<k} sigma_i(B)^2 (Q U_k is orthonormal),
    // so the budget test below is exact, not an estimate. First a cheap test on ||B||^2.
    if (total - b.cast<double>().squaredNorm() > budget + kRelativeTolerance * total) {
      if (l == min_mn) return std::nullopt;  // unreachable in exact arithmetic
      continue;
    }
    Eigen::BDCSVD<MatF> svd(b, Eigen::ComputeThinU | Eigen::ComputeThinV);
    const std::optional<Index> k = PickRank(svd.singularValues(), total, budget);
    if (!k) {
      if (l == min_mn) return std::nullopt;
      continue;
    }
    if (max_rank && *k > *max_rank) return std::nullopt;
    return MakeFactors(q * svd.matrixU(), svd.singularValues(), svd.matrixV(), *k);
  }
}

double SquaredNorm(std::span<const float> x) {
  double s = 0;
  for (float v : x) s += double(v) * double(v);
  return s;
}

// ||w - a b||_F^2 in double (the product in float32 through Eigen: a check, not the decode).
double Residual(const MapRowF& w, const Factors& f) {
  if (f.k == 0) return double(w.cast<double>().squaredNorm());
  const RowMatF p = f.a * f.b;
  return (w.cast<double>() - p.cast<double>()).squaredNorm();
}

formats::WdeltaArray FloatArray(const RowMatF& m) {
  formats::WdeltaArray out;
  out.dtype = "float32";
  out.shape = {uint64_t(m.rows()), uint64_t(m.cols())};
  AppendFloats(std::span<const float>(m.data(), size_t(m.size())), &out.bytes);
  return out;
}

}  // namespace

Result<formats::WdeltaTensorOut> EncodeLowRank(const std::string& name, std::span<const float> d,
                                               std::span<const float> base,
                                               const std::vector<uint64_t>& shape,
                                               double energy,
                                               std::optional<uint64_t> max_rank) {
  const std::string where = "lowrank: tensor '" + name + "'";
  if (shape.size() < 2) {
    return InvalidArgument(where + ": rank " + std::to_string(shape.size()) +
                           " (lowrank takes matrices; 1-D tensors stay exact or sparse)");
  }
  if (!(energy > 0.0 && energy <= 1.0)) {
    return InvalidArgument(where + ": energy " + std::to_string(energy) +
                           " is outside (0, 1]");
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t count, ShapeElements(shape));
  if (count != d.size() || count != base.size()) {
    return InvalidArgument(where + ": " + std::to_string(d.size()) + " delta and " +
                           std::to_string(base.size()) + " base values for a shape of " +
                           std::to_string(count) + " elements");
  }
  for (size_t i = 0; i < d.size(); ++i) {
    if (!std::isfinite(d[i]) || !std::isfinite(base[i])) {
      return InvalidArgument(where + ": element " + std::to_string(i) +
                             " of the delta or the base is not finite");
    }
  }
  const Index m = Index(shape[0]);
  const Index n = m == 0 ? 0 : Index(count / shape[0]);
  const MapRowF dm(d.data(), m, n);
  const double d2 = SquaredNorm(d);
  // The error budget, the same for both candidates: ||reconstruction - target||^2 <=
  // (1 - energy) ||d||^2 (for "delta" that is "keep `energy` of d's squared norm").
  const double budget = (1.0 - energy) * d2;
  std::optional<Index> cap;
  if (max_rank.has_value()) cap = Index(std::min<uint64_t>(*max_rank, uint64_t(std::min(m, n))));
  // With a cap the search gives up once its subspace passes cap + kFirstSubspace, before any
  // full SVD a small cap would not pay for (see the header).
  std::optional<Factors> best = Truncate(dm, d2, budget, cap, true);
  if (!best) {
    if (cap.has_value()) {
      return TooLarge(where + ": keeping " + std::to_string(energy) +
                      " of the delta's energy needs a rank above " + std::to_string(*cap));
    }
    return Internal(where + ": the SVD of the delta did not converge");
  }
  const char* of = "delta";
  if (best->k > 0) {
    std::vector<float> w(d.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = base[i] + d[i];
    const MapRowF wm(w.data(), m, n);
    // Only a strictly smaller rank is cheaper (same m, n). The target of a fine-tune is
    // rarely low-rank, so it gets the randomized search only: no second full SVD.
    std::optional<Factors> t = Truncate(wm, SquaredNorm(w), budget, best->k - 1, false);
    // W is larger than d; float32 rounding of its factors must still fit d's budget.
    if (t && Residual(wm, *t) <= budget) {
      best = std::move(t);
      of = "target";
    }
  }

  formats::WdeltaTensorOut out;
  out.name = name;
  out.meta = nlohmann::ordered_json::object();
  out.meta["strategy"] = "lowrank";
  out.meta["shape"] = shape;
  out.meta["dtype"] = "float32";
  out.meta["of"] = of;
  out.meta["rank"] = uint64_t(best->k);
  out.meta["energy"] = energy;
  out.fields.emplace_back("a", FloatArray(best->a));
  out.fields.emplace_back("b", FloatArray(best->b));
  return out;
}

Status DecodeAddLowRank(const TensorPayload& p, std::span<float> acc) {
  BLZ_RETURN_IF_ERROR(CheckPayloadStrategy(p, "lowrank"));
  BLZ_ASSIGN_OR_RETURN(std::vector<uint64_t> shape, PayloadMatrixShape(p, "lowrank"));
  const uint64_t count = *ShapeElements(shape);  // PayloadShape checked it fits
  const uint64_t m = shape[0];
  const uint64_t n = m == 0 ? 0 : count / m;
  BLZ_RETURN_IF_ERROR(CheckAccSize(p, acc.size(), count));
  BLZ_ASSIGN_OR_RETURN(std::string of, PayloadString(p, "of"));
  if (of != "delta" && of != "target") {
    return Corruption("tensor '" + p.name + "': \"of\" is \"" + of +
                      "\", expected \"delta\" or \"target\"");
  }
  BLZ_ASSIGN_OR_RETURN(uint64_t k, PayloadUint(p, "rank"));
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaArrayView av, PayloadField(p, "a", "float32", {m, k}));
  BLZ_ASSIGN_OR_RETURN(formats::WdeltaArrayView bv, PayloadField(p, "b", "float32", {k, n}));
  const bool replace = of == "target";
  if (k == 0) {  // the product is zero: a delta adds nothing, a target is all +0.0
    if (replace) std::fill(acc.begin(), acc.end(), 0.0f);
    return Status::Ok();
  }
  std::vector<float> a, b;
  LoadFloats(av.bytes, &a);
  LoadFloats(bv.bytes, &b);
  // Row i of the product: row[j] = sum over l = 0..k-1, ascending, of a[i,l] * b[l,j], each
  // step rounded to float32 (row starts at +0.0). Then acc[i,j] = acc[i,j] + row[j] (delta)
  // or acc[i,j] = row[j] (target). The j loop may be vectorized: every lane does the same
  // float32 operations in the same order, so results do not depend on the build or threads.
  std::vector<float> row(n);
  for (uint64_t i = 0; i < m; ++i) {
    std::fill(row.begin(), row.end(), 0.0f);
    const float* ai = a.data() + i * k;
    for (uint64_t l = 0; l < k; ++l) {
      const float s = ai[l];
      const float* bl = b.data() + l * n;
      for (uint64_t j = 0; j < n; ++j) row[j] = row[j] + s * bl[j];
    }
    float* out = acc.data() + i * n;
    if (replace) {
      std::copy(row.begin(), row.end(), out);
    } else {
      for (uint64_t j = 0; j < n; ++j) out[j] = out[j] + row[j];
    }
  }
  return Status::Ok();
}

}  // namespace blz::lossy
