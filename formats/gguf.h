// A strict GGUF reader and writer (GGUF versions 2 and 3, little-endian). Specified in
// docs/gguf.md; it follows ggml's own reader (ggml-org/ggml src/gguf.cpp) and is stricter in a
// few documented places. Summary of the layout (all integers little-endian):
//
//   0   magic "GGUF" (47 47 55 46)
//   4   u32 version (2 or 3)
//   8   u64 tensor_count
//   16  u64 kv_count
//   24  kv_count x { gguf_string key, u32 value type, value }
//       tensor_count x { gguf_string name, u32 n_dims (<= 4), u64 dims[n_dims] (ne0 first),
//                        u32 ggml type, u64 offset (relative to the data section) }
//   header_bytes: zero padding up to data_start = header_bytes rounded up to the alignment
//   data_start: each tensor's bytes at data_start + offset, zero padding up to the alignment
//               between tensors; offsets are exactly the running padded sum (in order, no gaps).
//   The file ends at the end of the last tensor, or at that end padded to the alignment (with
//   no tensors: at header_bytes or at data_start).
//
// gguf_string = u64 byte length + bytes (no terminator). The alignment is the u32 value of
// `general.alignment` (a non-zero power of two), 32 when the key is absent.
//
// Two modes: kHeaderOnly checks everything up to the end of the tensor infos (including that
// offsets are the running padded sum) and nothing after it, so it works on a file whose data
// section is missing or truncated; kFull also requires every tensor's bytes to be in the file,
// every padding byte to be zero and nothing after the (optionally padded) last tensor.
//
// Errors name the source (file path), the field or tensor, and the byte offset:
//   kCorruption  the bytes violate the format (bad magic, truncation, bad value, bad offset, ...)
//   kTooLarge    a count, string or array length exceeds a cap below
//   kUnsupported GGUF version other than 2 and 3, a byte-swapped (big-endian) file, an unknown
//                or removed ggml type id
#ifndef BLZ_FORMATS_GGUF_H_
#define BLZ_FORMATS_GGUF_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/ggml_types.h"

namespace blz::formats {

inline constexpr uint64_t kGgufDefaultAlignment = 32;
// Caps (each length is also bounded by the bytes left in the input).
inline constexpr uint64_t kMaxGgufStringBytes = 1ull << 30;   // any string value (ggml: 1 GiB)
inline constexpr uint64_t kMaxGgufKeyBytes = 65535;           // metadata keys (GGUF spec)
inline constexpr uint64_t kMaxGgufTensorNameBytes = 63;       // ggml: < GGML_MAX_NAME (64)
// Arrays are held as their file bytes (see GgufValue), never decoded per element, so their
// memory is bounded by the file size, not by this count.
inline constexpr uint64_t kMaxGgufArrayElements = 1ull << 30;
inline constexpr uint32_t kMaxGgufArrayDepth = 8;             // array of array of ... (8 levels)
inline constexpr uint64_t kMaxGgufTensors = 1ull << 20;
inline constexpr uint64_t kMaxGgufKvs = 1ull << 20;
inline constexpr uint32_t kMaxGgufDims = 4;

// Metadata value types; the numeric values are the on-disk ids (u32).
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint8", "int8", ..., "float64"; "unknown" for other values.
std::string_view GgufTypeName(GgufType t);
// Bytes of a scalar of type `t` (1, 2, 4 or 8); 0 for kString and kArray.
uint32_t GgufScalarSize(GgufType t);

// One metadata value. Scalars keep their exact bits so a value re-encodes byte for byte.
//
// Arrays are held as ONE buffer with the elements exactly as the file encodes them, never as
// one object per element, so an array costs its size in the file plus a constant (a 100 MiB
// u8 array costs 100 MiB, not 78 bytes per element; issue 9). Nothing in blz decodes a whole
// array: Item(i) decodes one element, NextGgufItem walks them, and the structural hash
// (formats/structural_hash.h) streams its encoding straight from `raw`.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  // Numeric and bool scalars: the value's little-endian bits, zero-extended to 64 bits
  // (int8 -1 is 0xff; float32 1.0 is 0x3f800000; bool is 0 or 1).
  uint64_t bits = 0;
  // kString: the bytes (GGUF says UTF-8; not checked, as in ggml).
  std::string str;
  // kArray: element type, count, and the `count` elements as encoded in the file:
  //   numeric / bool elements: count * size little-endian bytes;
  //   kString elements: count x {u64 length, bytes};
  //   kArray elements: count x {u32 element type, u64 count, elements} (recursively).
  // Values from the reader and from Array() are well-formed; the writer checks `raw` against
  // `count` (and parses the result back), so a hand-edited `raw` cannot produce a bad file.
  GgufType element_type = GgufType::kUint8;
  uint64_t count = 0;
  std::string raw;

  static GgufValue U8(uint8_t v);
  static GgufValue I8(int8_t v);
  static GgufValue U16(uint16_t v);
  static GgufValue I16(int16_t v);
  static GgufValue U32(uint32_t v);
  static GgufValue I32(int32_t v);
  static GgufValue F32(float v);
  static GgufValue Bool(bool v);
  static GgufValue String(std::string v);
  static GgufValue U64(uint64_t v);
  static GgufValue I64(int64_t v);
  static GgufValue F64(double v);
  // An array of `items`, each of type `element_type`. Error (kInvalidArgument) if an item's
  // type differs, or for nested arrays if the nesting exceeds kMaxGgufArrayDepth.
  static Result<GgufValue> Array(GgufType element_type, std::span<const GgufValue> items);

  // Element i of an array (REQUIRES: type == kArray, i < count, `raw` well-formed), as a
  // standalone value. Numeric / bool elements are O(1); string and array elements walk `raw`
  // from the start (O(bytes before element i)). A default value if `raw` is malformed.
  GgufValue Item(uint64_t i) const;

  // The value of an integer scalar of any width (signed ones sign-extended; uint64 values
  // >= 2^63 wrap), nullopt for other types.
  std::optional<int64_t> AsInt() const;
  // uint8/16/32/64 only.
  std::optional<uint64_t> AsUInt() const;
  // float32 (widened) or float64.
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const { return type == GgufType::kString ? &str : nullptr; }

  bool operator==(const GgufValue& other) const = default;
};

// One array element decoded in place (views into the array's `raw`; no copy).
struct GgufItemView {
  GgufType type = GgufType::kUint8;  // the array's element type
  uint64_t bits = 0;                 // numeric / bool: LE bits, zero-extended
  std::string_view str;              // kString: the bytes
  GgufType element_type = GgufType::kUint8;  // kArray: the nested array's element type,
  uint64_t count = 0;                        //         count
  std::string_view raw;                      //         and elements (as GgufValue::raw)
};

// Splits the first element of type `element_type` off the front of `*rest` (an array's `raw`,
// or what is left of it) into `*out` and advances `*rest` past it. Bounds-checked: returns
// false, leaving `*rest` unchanged, if `*rest` does not start with a whole element (or nests
// arrays deeper than kMaxGgufArrayDepth). Never allocates.
bool NextGgufItem(GgufType element_type, std::string_view* rest, GgufItemView* out);

// Arrays nested in `v`, counting `v` itself: 0 for a non-array, 1 for an array of scalars or
// strings (or an empty array), ... Walks `raw`; a malformed `raw` counts as
// kMaxGgufArrayDepth + 1.
uint32_t GgufArrayDepth(const GgufValue& v);

struct GgufKv {
  std::string key;
  GgufValue value;
  bool operator==(const GgufKv& other) const = default;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // file order: ne0 (the row length, fastest varying) first
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;         // relative to data_start; the running padded sum
  uint64_t n_bytes = 0;        // set by the reader and by AssignGgufOffsets
  bool operator==(const GgufTensorInfo& other) const = default;
};

struct GgufHeader {
  uint32_t version = 3;
  std::vector<GgufKv> metadata;        // file order
  std::vector<GgufTensorInfo> tensors;  // file order = data order
  bool operator==(const GgufHeader& other) const = default;
};

// The value of `key`, or nullptr.
const GgufValue* FindGgufValue(const GgufHeader& header, std::string_view key);

enum class GgufMode : uint8_t { kHeaderOnly, kFull };

struct GgufFile {
  GgufHeader header;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t header_bytes = 0;  // magic .. end of the last tensor info
  uint64_t data_start = 0;    // header_bytes rounded up to the alignment
  uint64_t data_bytes = 0;    // sum of the tensors' sizes, each padded to the alignment
  uint64_t file_size = 0;     // bytes given to the parser
  bool data_checked = false;  // kFull: data present, padding zero, nothing trailing
  // kFull only: true if the file ends at data_start + data_bytes (the padded end), false if it
  // ends at the last tensor's end (with no tensors: at header_bytes). When both are the same
  // offset this is true.
  bool padded_end = true;

  // Absolute byte range of tensor i's data [begin, begin + n_bytes).
  uint64_t TensorBegin(size_t i) const { return data_start + header.tensors[i].offset; }
};

// Parses a whole GGUF file held in `bytes` (normally a memory map). `source` names the file in
// error messages. See the file comment for the modes and error codes.
Result<GgufFile> ParseGguf(ByteSpan bytes, GgufMode mode, std::string_view source);

// A memory-mapped, parsed GGUF file.
class GgufReader {
 public:
  // Errors: kNotFound / kIOError from the map, then ParseGguf's.
  static Result<GgufReader> Open(const std::string& path, GgufMode mode);

  const GgufFile& file() const { return file_; }
  const GgufHeader& header() const { return file_.header; }
  const std::string& path() const { return map_.path(); }
  ByteSpan bytes() const { return map_.bytes(); }
  // Tensor i's bytes (n_bytes long). REQUIRES: i < tensor count. In kHeaderOnly mode a tensor
  // whose bytes are not all in the file gives an empty span.
  ByteSpan TensorData(size_t i) const;

 private:
  MappedFile map_;
  GgufFile file_;
};

// --- Writer -------------------------------------------------------------------------------

// Sets each tensor's n_bytes from its type and dims, and its offset to the running padded sum
// under the header's alignment (general.alignment or 32). Errors (kInvalidArgument): bad dims
// or block divisibility, a bad general.alignment.
Status AssignGgufOffsets(GgufHeader* header);

// Encodes bytes [0, header_bytes): magic, version, counts, metadata and tensor infos, exactly
// as the reader reads them. The result is checked by parsing it back (kHeaderOnly); any header
// the reader would reject gives kInvalidArgument with the reader's message. Array `count`
// fields must match their element containers.
Result<std::string> EncodeGgufHeader(const GgufHeader& header);

struct GgufWriteOptions {
  // End the file padded to the alignment (what ggml writes) instead of right after the last
  // tensor (with no tensors: at data_start instead of header_bytes). Pass
  // GgufFile::padded_end to reproduce a file that was read.
  bool pad_end = true;
};

// Receives the output in order; a non-OK status aborts the write.
using GgufSink = std::function<Status(ByteSpan)>;

// Writes a whole GGUF file to `sink`: the encoded header, zero padding, each tensor's bytes
// (`tensor_data[i]` must be exactly tensor i's n_bytes) with zero padding between them, and
// the end padding per `options`. A file read in kFull mode and written back with its header,
// its TensorData spans and pad_end = padded_end reproduces the input byte for byte.
// Errors: kInvalidArgument (bad header, wrong number or size of tensor data), the sink's.
Status WriteGguf(const GgufHeader& header, std::span<const ByteSpan> tensor_data,
                 const GgufWriteOptions& options, const GgufSink& sink);

// WriteGguf into `path`, atomically (core/file_util.h AtomicFile). Refuses to replace an
// existing file (kAlreadyExists).
Status WriteGgufFile(const std::string& path, const GgufHeader& header,
                     std::span<const ByteSpan> tensor_data, const GgufWriteOptions& options);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_GGUF_H_
