// safetensors: strict reader and deterministic writer.
//
// Format (github.com/huggingface/safetensors, README and src/tensor.rs):
//   0     u64 LE header length N
//   8     N bytes of UTF-8 JSON: an object mapping tensor names to
//         {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
//         plus an optional "__metadata__" object whose values are all strings
//   8+N   the data buffer; tensor bytes are data[begin, end), little-endian, C order
//
// The reader accepts exactly what the reference implementation accepts, plus it rejects
// duplicate keys (which the reference documents as forbidden but does not check):
//   - N <= kSafetensorsMaxHeaderBytes (kTooLarge) and 8 + N <= file size (kCorruption);
//   - the header is valid UTF-8 JSON, an object, with no duplicate keys at any level;
//   - each dtype is one of formats/dtype.h (kUnsupported otherwise);
//   - shape is an array of non-negative integers, data_offsets two non-negative integers;
//   - sorted by offsets, the tensors are contiguous from 0: no gap, no overlap, end >= begin;
//   - end - begin == product(shape) * DTypeSize(dtype), computed with overflow checks;
//   - 8 + N + (last end) == file size: no trailing bytes;
//   - "__metadata__", if present, is an object of string values.
// Empty (0-element) tensors and 0-rank (scalar, one element) tensors are allowed. Values
// (NaN, Inf) are not inspected. Every error is kCorruption unless stated, and names the file,
// the tensor, the field and the byte offset.
#ifndef BLZ_FORMATS_SAFETENSORS_H_
#define BLZ_FORMATS_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/dtype.h"

namespace blz::formats {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // empty = 0-rank (one element)
  uint64_t begin = 0;  // byte offset relative to the data buffer (file offset 8 + N + begin)
  uint64_t end = 0;    // one past the last byte

  uint64_t bytes() const { return end - begin; }
  // product(shape) (1 for a 0-rank tensor). Validated not to overflow by the reader.
  uint64_t NumElements() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;      // sorted by (begin, end, name): file order
  std::map<std::string, std::string> metadata;  // "__metadata__" (empty when absent)
  uint64_t header_length = 0;  // N
  uint64_t data_start = 0;     // 8 + N
  uint64_t file_size = 0;      // 8 + N + data bytes

  // Index into `tensors` of the tensor named `name`, or -1.
  int64_t Find(std::string_view name) const;
};

// Parses and validates a safetensors prefix. `prefix` holds at least the first 8 + N bytes of
// the file (more is fine); `file_size` is the size of the whole file. `file_name` is used only
// in error messages.
Result<SafetensorsHeader> ParseSafetensorsHeader(ByteSpan prefix, uint64_t file_size,
                                                 std::string_view file_name);

// A memory-mapped, validated safetensors file. Tensor data are views into the map (valid while
// this object lives); nothing is copied.
class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors: kNotFound, kIOError, kInvalidArgument (not a regular
  // file), plus those of ParseSafetensorsHeader.
  static Result<SafetensorsFile> Open(const std::string& path);

  const SafetensorsHeader& header() const { return header_; }
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  // The 8-byte length prefix followed by the N header bytes, verbatim.
  ByteSpan HeaderBytes() const { return file_.bytes().subspan(0, header_.data_start); }
  // REQUIRES: i < tensors().size().
  ByteSpan TensorData(size_t i) const;
  const MappedFile& file() const { return file_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

// A tensor to write: its bytes (little-endian, C order) must be exactly
// product(shape) * DTypeSize(dtype) long.
struct SafetensorsTensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  ByteSpan data;
};

// A tensor to plan: name, dtype and shape only (its data length is product(shape) x dtype size).
struct SafetensorsTensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
};

// The layout a writer produces for a set of tensors.
struct SafetensorsLayout {
  std::string header_bytes;     // 8-byte LE length + JSON header padded with spaces to 8n
  std::vector<size_t> order;    // indices into the input, in data order
  std::vector<uint64_t> begin;  // data offset of input tensor i (same indexing as the input)
  uint64_t data_bytes = 0;      // size of the data buffer
};

// Plans a file: tensors are ordered by descending dtype size, then by name (bytewise), as the
// reference writer does; the JSON header lists "__metadata__" first (when not empty), then the
// tensors in data order, each as {"dtype","shape","data_offsets"}. Only the names, dtypes,
// shapes and data lengths of `tensors` are read. Errors: kInvalidArgument (duplicate or
// reserved name "__metadata__", data length != shape x dtype size, header > cap).
Result<SafetensorsLayout> PlanSafetensors(const std::vector<SafetensorsTensorView>& tensors,
                                          const std::map<std::string, std::string>& metadata);
// The same plan from names, dtypes and shapes alone (for writers that stream the data later).
Result<SafetensorsLayout> PlanSafetensors(const std::vector<SafetensorsTensorSpec>& tensors,
                                          const std::map<std::string, std::string>& metadata);

// Writes a valid safetensors file at `path` (atomically, via AtomicFile) from the tensors'
// bytes, in PlanSafetensors's layout. The same input always gives the same bytes. Refuses an
// existing `path` (kAlreadyExists).
Status WriteSafetensors(const std::string& path,
                        const std::vector<SafetensorsTensorView>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace blz::formats

#endif  // BLZ_FORMATS_SAFETENSORS_H_
