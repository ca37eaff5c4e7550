// blz strategy "lowrank" (MonoSoup-style truncated SVD, computed with Eigen): the matrix
// (shape[0] x product of the other dims) is factored and the smallest rank k whose singular
// values keep at least `energy` of the squared Frobenius norm (sum of sigma_i^2 for i < k
// >= energy x sum of all sigma^2) is kept. Two candidates: the delta d (decode adds the
// product to acc) and the target W = acc + d itself (decode REPLACES acc with the product);
// the one with fewer stored bytes is written ("of": "delta" | "target" in the meta).
// Field names, dtypes, the product's summation order: docs/wdelta.md "blz strategies".
#ifndef BLZ_PATCHER_LOSSY_LOWRANK_H_
#define BLZ_PATCHER_LOSSY_LOWRANK_H_

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/wdelta.h"
#include "patcher/lossy/payload.h"

namespace blz::lossy {

// `base` are the float32 base values (for the "target" candidate: W = base + d, in float32).
// kInvalidArgument for rank < 2 or energy outside (0, 1].
Result<formats::WdeltaTensorOut> EncodeLowRank(const std::string& name, std::span<const float> d,
                                               std::span<const float> base,
                                               const std::vector<uint64_t>& shape,
                                               double energy);
Status DecodeAddLowRank(const TensorPayload& p, std::span<float> acc);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_LOWRANK_H_
