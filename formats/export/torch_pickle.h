// The pickle of a PyTorch state dict as torch.save writes it into `<archive>/data.pkl`
// (pickle protocol 2), restricted to the opcodes torch.load(weights_only=True) accepts.
//
// The object is an OrderedDict {name: tensor}, in the order of the specs; tensor i is
//   torch._utils._rebuild_tensor_v2(storage_i, 0, shape, contiguous strides, False,
//                                   OrderedDict())
// where storage_i is the persistent id ('storage', torch.<Class>Storage, '<i>', 'cpu', numel):
// torch.load reads its bytes from the archive entry `<archive>/data/<i>`.
// Opcodes used (all protocol <= 2): PROTO, GLOBAL, EMPTY_TUPLE, REDUCE, MARK, BINUNICODE,
// BININT1, BININT2, BININT, LONG1, TUPLE, BINPERSID, NEWFALSE, SETITEMS, STOP. No memo.
// The layout is documented in docs/pytorch-export.md.
#ifndef BLZ_FORMATS_EXPORT_TORCH_PICKLE_H_
#define BLZ_FORMATS_EXPORT_TORCH_PICKLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/dtype.h"

namespace blz::exporter {

// One tensor of a PyTorch state dict: its key, element type and shape (C order; empty for a
// 0-rank scalar; a 0 dimension for an empty tensor).
struct TorchTensorSpec {
  std::string name;
  formats::DType dtype;
  std::vector<uint64_t> shape;
};

// Caps checked before anything is allocated.
inline constexpr size_t kMaxTorchTensors = size_t{1} << 24;
inline constexpr size_t kMaxTorchRank = 64;
inline constexpr size_t kMaxTorchNameBytes = 64 * 1024;

// The torch storage class of `t` ("FloatStorage", ...), nullopt when torch has no matching
// storage class in every supported version (U16, U32, U64, F8_E4M3, F8_E5M2).
std::optional<std::string_view> TorchStorageClass(formats::DType t);

// The facts a writer needs about one validated tensor.
struct TorchTensorLayout {
  uint64_t elements = 0;  // product of the shape (1 for a 0-rank tensor)
  uint64_t bytes = 0;     // elements * element size
};

// Checks every spec: at most kMaxTorchTensors tensors; a name that is non-empty, valid UTF-8,
// at most kMaxTorchNameBytes long and unique; a supported dtype; rank <= kMaxTorchRank; every
// dimension, the element count and the byte count fit in int64 (torch's sizes are int64).
// Returns the layout of each tensor, in order.
// Errors: kUnsupported (dtype, naming the tensor and the dtype), kInvalidArgument (names,
// rank), kTooLarge (counts or sizes past int64 or the caps).
Result<std::vector<TorchTensorLayout>> ValidateTorchTensors(
    const std::vector<TorchTensorSpec>& tensors);

// The contiguous (C order) strides torch gives `shape`: stride[i] = prod(max(shape[j], 1)) for
// j > i. REQUIRES: the shape passed ValidateTorchTensors.
std::vector<uint64_t> TorchContiguousStrides(const std::vector<uint64_t>& shape);

// The data.pkl bytes for `tensors` (storage keys "0", "1", ... in order).
// Errors: those of ValidateTorchTensors.
Result<std::string> EncodeTorchStateDictPickle(const std::vector<TorchTensorSpec>& tensors);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_TORCH_PICKLE_H_
