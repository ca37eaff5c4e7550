// Structural identity of a model file, compatible with las7/weight-inspect (commit 7e16458):
// the structural hash is the SHA-256 of a canonical JSON document holding the format, the GGUF
// version, the metadata and the tensor descriptors (name, dtype, shape, byte_length). Tensor
// data bytes, offsets, padding and tensor order are excluded. The exact canonical form (value
// encodings, escaping, float handling, dimension order, byte_length of quantized types) is
// pinned in docs/structural-hash.md; where weight-inspect's SPEC.md and its golden output
// disagree, this follows the golden output (i.e. what its code emits).
//
// The hash works on a format-neutral StructuralInput. Adapters build one from a parsed file
// header (no tensor data needed): StructuralInputFromGguf below; the safetensors and .blz
// adapters live next to their readers and fill the same struct:
//   safetensors: format "safetensors", no gguf_version, metadata = the __metadata__ entries as
//   StructuralValue::String, dtype = the safetensors dtype lower-cased ("f32", "bf16"), shape as
//   in the file, byte_length = end - begin.
#ifndef BLZ_FORMATS_STRUCTURAL_HASH_H_
#define BLZ_FORMATS_STRUCTURAL_HASH_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/gguf.h"

namespace blz::formats {

// A typed metadata value. Its canonical encoding (EncodeStructuralValue) is a string:
//   kNull "null"; kBool "true"/"false"; kInt decimal; kUInt decimal of the value cast to int64
//   (so values >= 2^63 come out negative, as in weight-inspect); kF32 "f32:" + decimal of the
//   u64 bits of the value widened to f64; kF64 decimal of its u64 bits; kString '"' + escaped
//   text + '"'; kArray "[" + items joined by "," + "]".
//   kGgufArray: a GGUF array kept in its file encoding (one buffer, never one object per
//   element; issue 9), encoded exactly as the kArray of its elements converted by the GGUF
//   adapter (StructuralInputFromGguf) would be, streaming from the buffer.
struct StructuralValue {
  enum class Kind : uint8_t { kNull, kBool, kInt, kUInt, kF32, kF64, kString, kArray, kGgufArray };
  Kind kind = Kind::kNull;
  // kBool: 0/1; kInt: two's complement bits; kUInt: the value; kF32: the 32 float bits;
  // kF64: the 64 double bits; kGgufArray: the element count.
  uint64_t bits = 0;
  // kString: the text (any bytes; invalid UTF-8 is replaced); kGgufArray: the elements as
  // GgufValue::raw holds them.
  std::string str;
  std::vector<StructuralValue> items;  // kArray
  GgufType gguf_element_type = GgufType::kUint8;  // kGgufArray

  static StructuralValue Null() { return {}; }
  static StructuralValue Bool(bool v) { return Scalar(Kind::kBool, v ? 1 : 0); }
  static StructuralValue Int(int64_t v) { return Scalar(Kind::kInt, static_cast<uint64_t>(v)); }
  static StructuralValue UInt(uint64_t v) { return Scalar(Kind::kUInt, v); }
  static StructuralValue F32Bits(uint32_t bits) { return Scalar(Kind::kF32, bits); }
  static StructuralValue F64Bits(uint64_t bits) { return Scalar(Kind::kF64, bits); }
  static StructuralValue F32(float v);
  static StructuralValue F64(double v);
  static StructuralValue String(std::string v);
  static StructuralValue Array(std::vector<StructuralValue> items);
  // A GGUF array value (REQUIRES: array.type == kArray); takes its `raw` buffer. A malformed
  // `raw` (never from the reader or GgufValue::Array) encodes the elements that are whole and
  // stops there.
  static StructuralValue GgufArray(GgufValue array);

 private:
  static StructuralValue Scalar(Kind k, uint64_t bits) {
    StructuralValue v;
    v.kind = k;
    v.bits = bits;
    return v;
  }
};

struct StructuralTensor {
  std::string name;
  std::string dtype;            // "f32", "q4_k", ... (lower case)
  std::vector<uint64_t> shape;  // as the format stores it (GGUF: ne0 first)
  uint64_t byte_length = 0;     // GGUF: 0 for quantized types
  bool operator==(const StructuralTensor& other) const = default;
};

// The format-neutral input. Metadata and tensors may come in any order; a repeated key or
// tensor name keeps its last entry (as weight-inspect's BTreeMap does).
struct StructuralInput {
  std::string format;                   // "gguf", "safetensors", ...
  std::optional<uint32_t> gguf_version;  // GGUF only; omitted from the JSON when absent
  std::vector<std::pair<std::string, StructuralValue>> metadata;
  std::vector<StructuralTensor> tensors;
};

// The canonical content: keys and names made valid UTF-8, sorted bytewise, deduplicated;
// metadata values encoded.
struct CanonicalStructure {
  std::string format;
  std::optional<uint32_t> gguf_version;
  std::map<std::string, std::string> metadata;       // key -> encoded value
  std::map<std::string, StructuralTensor> tensors;  // name -> descriptor
};

// The weight-inspect string encoding of one value (see StructuralValue), before JSON escaping.
// Memory: the encoding itself (up to ~6.25 bytes per byte of a GGUF array: "f32:<20 digits>,"
// per 4-byte float). The hash does not build it (see StructuralHash).
std::string EncodeStructuralValue(const StructuralValue& v);

// Materializes every encoded value: for `blz diff` (which prints changed values) and tests.
CanonicalStructure Canonicalize(const StructuralInput& input);

// Compact JSON, fixed key order: {"format":..,"gguf_version":..,"metadata":{..},"tensors":
// {name:{"name","dtype","shape","byte_length"}}}; strings escaped as serde_json does.
std::string CanonicalJson(const CanonicalStructure& c);
std::string CanonicalJson(const StructuralInput& input);

// Lower-case hex SHA-256 of CanonicalJson (64 digits). Streams: the canonical JSON is fed to
// SHA-256 in 64 KiB pieces as it is generated, straight from the input's values (GGUF arrays
// from their file bytes), so beyond the input it needs O(keys + tensors) memory for the sort,
// plus one string value's UTF-8-repaired copy at a time; never the JSON or an encoded value.
std::string StructuralHash(const StructuralInput& input);

// "wi:<format>:<gguf_version or 0>:<first 8 hex digits of the hash>", e.g. "wi:gguf:3:d775e08a".
std::string StructuralId(std::string_view format, std::optional<uint32_t> gguf_version,
                         std::string_view structural_hash);

struct StructuralIdentity {
  std::string format;
  std::optional<uint32_t> gguf_version;
  std::string structural_hash;  // 64 hex
  uint64_t tensor_count = 0;    // after deduplication
  uint64_t metadata_count = 0;
  std::string id;               // StructuralId(...)
};

// The hash and counts of `input`, streaming as StructuralHash does.
StructuralIdentity Identify(const StructuralInput& input);

// weight-inspect's `identity` text (golden/id_tiny_gguf.txt), ending in a newline.
std::string IdentityText(const StructuralIdentity& identity);
// weight-inspect's `identity --json`: pretty JSON {schema: 1, format, structural_hash,
// tensor_count, metadata_count}, ending in a newline.
std::string IdentityJson(const StructuralIdentity& identity);

struct MetadataChange {
  std::string key;
  std::string old_value;  // encoded values
  std::string new_value;
};

struct TensorChange {
  std::string name;
  std::string dtype_old, dtype_new;
  std::vector<uint64_t> shape_old, shape_new;
  uint64_t byte_length_old = 0, byte_length_new = 0;
};

// The structural difference from `old` to `new` (all lists sorted bytewise by key / name).
struct StructuralDiff {
  bool format_equal = true;
  bool hash_equal = true;
  bool tensor_count_equal = true;
  bool metadata_count_equal = true;
  std::vector<std::string> metadata_added, metadata_removed;
  std::vector<MetadataChange> metadata_changed;
  std::vector<std::string> tensors_added, tensors_removed;
  std::vector<TensorChange> tensor_changes;
  // Not in the JSON (weight-inspect does not report them); used by the text form.
  std::string format_old, format_new;
  std::optional<uint32_t> gguf_version_old, gguf_version_new;
  std::string hash_old, hash_new;

  // True iff the structural hashes are equal.
  bool identical() const { return hash_equal; }
};

StructuralDiff DiffStructures(const StructuralInput& old_input, const StructuralInput& new_input);

// weight-inspect's `diff --json`: pretty JSON with "schema": 1 first, then format_equal,
// hash_equal, tensor_count_equal, metadata_count_equal, metadata_added, metadata_removed,
// metadata_changed [{key, old_value, new_value}], tensors_added, tensors_removed,
// tensor_changes [{name, dtype_old, dtype_new, shape_old, shape_new, byte_length_old,
// byte_length_new}]. Ends in a newline.
std::string DiffJson(const StructuralDiff& diff);

// weight-inspect's `diff` text: IDENTICAL / DIFFERENT, a rule, counts, "Structural ID: changed|
// unchanged"; `verbose` adds the per-tensor and per-key details. Differences from
// weight-inspect (docs/structural-hash.md): DIFFERENT whenever the hashes differ (also for a
// format or version change, which get their own lines), and a "Metadata changes" line when
// metadata differs.
std::string DiffText(const StructuralDiff& diff, bool verbose);

// The GGUF adapter: format "gguf", gguf_version, every metadata key with its typed value
// (integers keep their signedness, float32 stays F32, arrays item by item), tensors with
// dtype = lower-case ggml type name, shape = dims in file order (ne0 first), byte_length = the
// data size for the plain types (f32, f16, bf16, f64, i8, i16, i32, i64) and 0 for quantized
// types. Needs only the header. Arrays become kGgufArray values holding the array's bytes
// (no per-element objects); the rvalue overload moves them instead of copying.
StructuralInput StructuralInputFromGguf(const GgufHeader& header);
StructuralInput StructuralInputFromGguf(GgufHeader&& header);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_STRUCTURAL_HASH_H_
