// blz strategy "lowrank" (truncated SVD, computed with Eigen): the matrix A (m = shape[0]
// rows x n = product of the other dims, C order) is factored as A_k = a b with
// a = U_k diag(sigma_k) (float32 [m, k]) and b = V_k^T (float32 [k, n]).
//
// Error budget. The stored reconstruction must satisfy
//     ||reconstruction - target||_F^2 <= (1 - energy) ||d||_F^2,
// i.e. for the delta: keep at least `energy` of sum sigma_i(d)^2. Two candidates:
//   "delta":  A = d; decode adds a b to acc. k = the smallest rank meeting the budget.
//   "target": A = W = float32(base + d); decode REPLACES acc with a b. Its k must meet the
//             SAME absolute budget, (1 - energy) ||d||^2 (not a share of ||W||^2, which would
//             allow an error as large as a share of the whole weight), and it is checked
//             against W after the float32 factors are formed.
// Both cost 4 k (m + n) bytes, so the smaller k wins; a tie keeps "delta". The target is
// searched only for k below the delta's, and only by the randomized search (never a second
// full SVD), so a target that is only slightly cheaper may be missed.
//
// How k is found (float32 throughout; ||A||^2 in double from the input): a randomized range
// finder (Halko-Martinsson-Tropp) with 2 power iterations and a fixed-seed Gaussian test
// matrix, subspace size l = 32, 64, 128, ...: B = Q^T A, and since ||A - Q U_k S_k V_k^T||^2
// = ||A||^2 - sum_{i<k} sigma_i(B)^2 exactly, the budget test needs no estimate. k may exceed
// the optimal rank by a few (flat spectra); it never misses the budget (to float32 precision:
// a relative tolerance of 1e-5 of ||A||^2). Once l would pass min(m, n)/8, Eigen's BDCSVD of
// A decides instead (optimal k). Encoding is deterministic for a given build.
//
// Header meta, in this order: {"strategy":"lowrank","shape":[...],"dtype":"float32",
// "of":"delta"|"target","rank":k,"energy":energy}; records "a" float32 [m, k] and "b" float32
// [k, n] (both present, 0 bytes when k = 0: an all-zero delta adds nothing; a rank-0 target is
// all +0.0).
//
// Decode, bit-reproducible: for each row i, row[j] = +0.0, then for l = 0..k-1 ascending
// row[j] = row[j] + a[i,l] * b[l,j] (float32 multiply, then float32 add; no FMA); then
// acc[i,j] = acc[i,j] + row[j] ("delta") or acc[i,j] = row[j] ("target").
// docs/wdelta.md "blz strategies".
#ifndef BLZ_PATCHER_LOSSY_LOWRANK_H_
#define BLZ_PATCHER_LOSSY_LOWRANK_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// `base` are the float32 base values (for the "target" candidate: W = base + d, in float32).
// kInvalidArgument for rank < 2, energy outside (0, 1] (or NaN), d or base not of the
// shape's element count, or NaN/Inf in d or base.
// `max_rank` (the rank past which the factors would cost more than the caller's alternative,
// e.g. the exact encoding): kTooLarge as soon as the search shows the delta needs more. The
// randomized search then gives up once its subspace would pass max_rank + 32, so a full-rank
// delta with a small cap costs a few randomized rounds instead of a full SVD (which still
// decides when the subspace reaches min(m, n) / 8 first); a delta whose optimal rank is just
// below max_rank may be reported kTooLarge (a saving of a few percent missed). Time (Release, one core): 0.1-0.25 s for a
// 1024^2..2048^2 delta of rank ~10-20; a full-rank (Gaussian) one ends in a full SVD: 1.2 s
// at 1024^2, 8 s at 2048^2.
Result<formats::WdeltaTensorOut> EncodeLowRank(const std::string& name, std::span<const float> d,
                                               std::span<const float> base,
                                               const std::vector<uint64_t>& shape,
                                               double energy,
                                               std::optional<uint64_t> max_rank = std::nullopt);
// kCorruption naming tensor and field when the meta or a record does not match the layout
// above; kInvalidArgument when acc.size() is not the element count. acc is untouched on error.
Status DecodeAddLowRank(const TensorPayload& p, std::span<float> acc);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_LOWRANK_H_
