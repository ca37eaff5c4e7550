#include "formats/export/torch_pickle.h"

#include <limits>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/bytes.h"
#include "core/checked.h"
#include "core/text.h"
#include "formats/json_strict.h"

namespace blz::exporter {
namespace {

using formats::DType;

constexpr uint64_t kMaxInt64 = uint64_t(std::numeric_limits<int64_t>::max());
// Python's pickler writes SETITEMS in batches of 1000; the unpicklers take any batch size.
constexpr size_t kSetItemsBatch = 1000;

// Pickle opcodes (CPython Lib/pickle.py names).
constexpr char kProto = '\x80';
constexpr char kGlobal = 'c';
constexpr char kEmptyTuple = ')';
constexpr char kReduce = 'R';
constexpr char kMark = '(';
constexpr char kBinUnicode = 'X';
constexpr char kBinInt1 = 'K';
constexpr char kBinInt2 = 'M';
constexpr char kBinInt = 'J';
constexpr char kLong1 = '\x8a';
constexpr char kTuple = 't';
constexpr char kBinPersId = 'Q';
constexpr char kNewFalse = '\x89';
constexpr char kSetItems = 'u';
constexpr char kStop = '.';

std::string TensorLabel(size_t i, const TorchTensorSpec& t) {
  return "tensor " + std::to_string(i) + " '" + EscapeForTerminal(t.name) + "'";
}

class PickleWriter {
 public:
  void Op(char op) { out_.push_back(op); }
  void Global(std::string_view module, std::string_view name) {
    Op(kGlobal);
    out_.append(module);
    out_.push_back('\n');
    out_.append(name);
    out_.push_back('\n');
  }
  // REQUIRES: s.size() < 2^32 (names are capped far below).
  void Unicode(std::string_view s) {
    Op(kBinUnicode);
    AppendLE32(&out_, uint32_t(s.size()));
    out_.append(s);
  }
  // A non-negative int, in the shortest form CPython's pickler uses for it.
  void Int(uint64_t v) {
    if (v <= 0xff) {
      Op(kBinInt1);
      out_.push_back(char(v));
    } else if (v <= 0xffff) {
      Op(kBinInt2);
      out_.push_back(char(v & 0xff));
      out_.push_back(char(v >> 8));
    } else if (v <= 0x7fffffff) {
      Op(kBinInt);
      AppendLE32(&out_, uint32_t(v));
    } else {
      // LONG1: little-endian two's complement, shortest length whose top bit is clear.
      std::string bytes;
      uint64_t rest = v;
      while (rest != 0) {
        bytes.push_back(char(rest & 0xff));
        rest >>= 8;
      }
      if ((uint8_t(bytes.back()) & 0x80) != 0) bytes.push_back('\0');
      Op(kLong1);
      out_.push_back(char(bytes.size()));
      out_.append(bytes);
    }
  }
  void IntTuple(const std::vector<uint64_t>& values) {
    if (values.empty()) {
      Op(kEmptyTuple);
      return;
    }
    Op(kMark);
    for (uint64_t v : values) Int(v);
    Op(kTuple);
  }
  // collections.OrderedDict() on the stack.
  void EmptyOrderedDict() {
    Global("collections", "OrderedDict");
    Op(kEmptyTuple);
    Op(kReduce);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::optional<std::string_view> TorchStorageClass(DType t) {
  switch (t) {
    case DType::kF64: return "DoubleStorage";
    case DType::kF32: return "FloatStorage";
    case DType::kF16: return "HalfStorage";
    case DType::kBF16: return "BFloat16Storage";
    case DType::kI64: return "LongStorage";
    case DType::kI32: return "IntStorage";
    case DType::kI16: return "ShortStorage";
    case DType::kI8: return "CharStorage";
    case DType::kU8: return "ByteStorage";
    case DType::kBool: return "BoolStorage";
    case DType::kU16:
    case DType::kU32:
    case DType::kU64:
    case DType::kF8_E4M3:
    case DType::kF8_E5M2:
      return std::nullopt;
  }
  return std::nullopt;
}

Result<std::vector<TorchTensorLayout>> ValidateTorchTensors(
    const std::vector<TorchTensorSpec>& tensors) {
  if (tensors.size() > kMaxTorchTensors) {
    return TooLarge("pytorch export: " + std::to_string(tensors.size()) +
                    " tensors, more than the cap of " + std::to_string(kMaxTorchTensors));
  }
  std::unordered_set<std::string_view> names;
  names.reserve(tensors.size());
  std::vector<TorchTensorLayout> layouts;
  layouts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TorchTensorSpec& t = tensors[i];
    const std::string label = "pytorch export: " + TensorLabel(i, t);
    if (t.name.empty()) return InvalidArgument(label + ": empty name");
    if (t.name.size() > kMaxTorchNameBytes) {
      return InvalidArgument(label + ": name of " + std::to_string(t.name.size()) +
                             " bytes, more than the cap of " +
                             std::to_string(kMaxTorchNameBytes));
    }
    if (auto bad = formats::FindInvalidUtf8(t.name)) {
      return InvalidArgument(label + ": name is not valid UTF-8 at byte " +
                             std::to_string(*bad));
    }
    if (!names.insert(t.name).second) return InvalidArgument(label + ": duplicate name");
    if (!TorchStorageClass(t.dtype)) {
      return Unsupported(label + ": dtype " + std::string(formats::DTypeName(t.dtype)) +
                         " has no PyTorch storage class (supported: F64, F32, F16, BF16, "
                         "I64, I32, I16, I8, U8, BOOL)");
    }
    if (t.shape.size() > kMaxTorchRank) {
      return InvalidArgument(label + ": rank " + std::to_string(t.shape.size()) +
                             " is more than " + std::to_string(kMaxTorchRank));
    }
    // Both the element count and the largest stride (product of max(dim, 1)) must fit int64.
    uint64_t elements = 1;
    uint64_t span = 1;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const uint64_t dim = t.shape[d];
      if (dim > kMaxInt64 || !CheckedMul(span, dim == 0 ? 1 : dim, &span) || span > kMaxInt64) {
        return TooLarge(label + ": shape dimension " + std::to_string(d) + " (" +
                        std::to_string(dim) + ") makes sizes or strides overflow int64");
      }
      elements *= dim;  // cannot overflow: elements <= span
    }
    uint64_t bytes = 0;
    if (!CheckedMul(elements, formats::DTypeSize(t.dtype), &bytes) || bytes > kMaxInt64) {
      return TooLarge(label + ": " + std::to_string(elements) + " elements overflow int64 bytes");
    }
    layouts.push_back({elements, bytes});
  }
  return layouts;
}

std::vector<uint64_t> TorchContiguousStrides(const std::vector<uint64_t>& shape) {
  std::vector<uint64_t> strides(shape.size());
  uint64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= shape[d] == 0 ? 1 : shape[d];
  }
  return strides;
}

Result<std::string> EncodeTorchStateDictPickle(const std::vector<TorchTensorSpec>& tensors) {
  BLZ_ASSIGN_OR_RETURN(std::vector<TorchTensorLayout> layouts, ValidateTorchTensors(tensors));
  PickleWriter w;
  w.Op(kProto);
  w.Op('\x02');
  w.EmptyOrderedDict();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TorchTensorSpec& t = tensors[i];
    if (i % kSetItemsBatch == 0) w.Op(kMark);
    w.Unicode(t.name);
    // value: _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)
    w.Global("torch._utils", "_rebuild_tensor_v2");
    w.Op(kMark);
    w.Op(kMark);  // the persistent id tuple
    w.Unicode("storage");
    w.Global("torch", *TorchStorageClass(t.dtype));
    w.Unicode(std::to_string(i));
    w.Unicode("cpu");
    w.Int(layouts[i].elements);
    w.Op(kTuple);
    w.Op(kBinPersId);
    w.Int(0);  // storage offset
    w.IntTuple(t.shape);
    w.IntTuple(TorchContiguousStrides(t.shape));
    w.Op(kNewFalse);  // requires_grad
    w.EmptyOrderedDict();  // backward hooks
    w.Op(kTuple);
    w.Op(kReduce);
    if (i % kSetItemsBatch == kSetItemsBatch - 1 || i + 1 == tensors.size()) w.Op(kSetItems);
  }
  w.Op(kStop);
  return w.Take();
}

}  // namespace blz::exporter
