// The .wdelta container of deltatensors (AaravGaurdev/deltatensors; format versions 1 and 2):
// reading, validating and writing. The codecs that fill it live in patcher/lossy/.
// Prose spec, with the blz extensions: docs/wdelta.md.
//
// Layout (all integers little-endian):
//   [0, 7)        magic "wdelta\0"
//   [7, 11)       u32 version (1 or 2)
//   [11, 15)      u32 header length H
//   [15, 15+H)    JSON header, UTF-8: {"parent_hash": hex, "strategy": s, "tensors": {name:
//                 {"strategy", "shape", "dtype", ...meta, field: {"_ref": field}, ...}}}
//                 (Python json.dumps, separators (",", ":"), ASCII escaping, insertion order;
//                 the "_ref" entries come last in each tensor object, in record order)
//   records       one per (tensor, field): u32 len + tensor name, u32 len + field name,
//                 u32 len + numpy dtype string, u32 ndim, ndim x u64 dims, u64 nbytes, bytes
//   last 32 B     SHA-256 of every preceding byte
//
// Extra top-level header keys (blz writes "blz", see docs/wdelta.md) and records whose tensor
// is not in the header are kept and ignored, as the reference does.
#ifndef BLZ_FORMATS_WDELTA_H_
#define BLZ_FORMATS_WDELTA_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/tensor_stats.h"

namespace blz::formats {

inline constexpr std::string_view kWdeltaMagic{"wdelta\0", 7};
inline constexpr uint32_t kWdeltaMinVersion = 1;
inline constexpr uint32_t kWdeltaMaxVersion = 2;

// Strategy names a tensor may carry: the reference's three, then blz's extensions
// (docs/wdelta.md "blz strategies"). Open() rejects any other (kUnsupported). A file's
// top-level "strategy" may also be "auto" (blz: tensors chose their own).
inline constexpr std::string_view kWdeltaStrategies[] = {"sparse", "quantized", "int4",
                                                         "bitdelta", "lowrank", "exact"};

// Caps the reader enforces (and the writer refuses to exceed). The reference has none; these
// are far above anything it writes.
inline constexpr uint64_t kWdeltaMaxHeaderBytes = 256ull << 20;  // JSON header
inline constexpr uint64_t kWdeltaMaxNameBytes = 64 << 10;        // a record's tensor name
inline constexpr uint64_t kWdeltaMaxFieldBytes = 1024;           // a record's field name
inline constexpr uint64_t kWdeltaMaxDtypeBytes = 32;             // a record's dtype string
inline constexpr uint32_t kWdeltaMaxNdim = 8;                    // record and meta shapes

// One array record, owned (for writing). `dtype` is a numpy dtype string ("float16", "float32",
// "uint8", "int32", "int64"); `bytes` are the little-endian element bytes, product(shape) x
// itemsize of them.
struct WdeltaArray {
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

// One array record as read: views into the reader's memory map.
struct WdeltaArrayView {
  std::string dtype;
  std::vector<uint64_t> shape;
  ByteSpan bytes;
};

// One tensor to write: `meta` is the header object WITHOUT the {"_ref"} entries (it must hold
// "strategy", "shape" and "dtype"); `fields` become records, in this order, and {"_ref": f}
// entries appended to the header object in the same order.
struct WdeltaTensorOut {
  std::string name;
  nlohmann::ordered_json meta;
  std::vector<std::pair<std::string, WdeltaArray>> fields;
};

struct WdeltaFileOut {
  uint32_t version = 1;
  std::string parent_hash;  // 64 lower-case hex digits
  std::string strategy;     // the file's top-level strategy
  std::vector<WdeltaTensorOut> tensors;  // header order
  // Extra top-level header keys written after "tensors" (blz: {"blz": {...}}); may be empty.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // Extra records (tensor name not in the header; blz stores the target's small files so).
  std::vector<std::pair<std::pair<std::string, std::string>, WdeltaArray>> extra_records;
};

// Bytes per element of a record dtype: float16 2, float32 4, uint8 1, int32 4, int64 8.
// kUnsupported for any other string.
Result<uint64_t> WdeltaItemSize(std::string_view dtype);

// Python's repr() of a double (what json.dumps writes): shortest round-trip digits, fixed
// notation for decimal exponents in [-4, 16) ("0.9", "0.0001", "100.0"), else "1e-05", "1e+16".
std::string PythonFloatRepr(double v);
// Python json.dumps(value, separators=(",", ":")) with ensure_ascii: keys in order, every
// non-ASCII character (and DEL and controls) escaped as lower-case \uXXXX (surrogate pairs
// above U+FFFF). *ok is false on a non-finite number or a string that is not UTF-8.
std::string PythonJsonDumps(const nlohmann::ordered_json& value, bool* ok);

// Serializes `file` and writes it atomically (core/file_util.h AtomicFile) to `path`.
// Errors: kInvalidArgument (a field's bytes do not match dtype x shape, an unknown record
// dtype, a version outside [1, 2], a parent_hash that is not 64 lower-case hex digits, an
// unknown strategy, a meta without strategy/shape/dtype or with a key equal to a field name,
// a tensor or (tensor, field) record twice, an extra key that collides with "parent_hash",
// "strategy" or "tensors", an extra record of a header tensor, a non-finite number in the
// header, a length above the caps), kIOError.
Status WriteWdelta(const std::string& path, const WdeltaFileOut& file);

// A validated, memory-mapped .wdelta file. Open() checks, in this order, and fails with
// kCorruption (kUnsupported for a version, record dtype or strategy it does not know; kTooLarge
// never: lengths above the caps are kCorruption) naming the file and byte offset:
//   1. size >= 47, magic, version (kUnsupported), header length (cap, and within the file
//      before the checksum);
//   2. header: strict JSON (formats/json_strict.h: UTF-8, no duplicate keys), an object with
//      string "parent_hash", string "strategy" and object "tensors" of objects;
//   3. every record: length-prefixed strings within the caps and the bytes left, ndim <= 8,
//      dtype one of float16/float32/uint8/int32/int64 (kUnsupported), nbytes within the bytes
//      left and == product(shape) x itemsize (overflow checked); a (tensor, field) record twice
//      is kCorruption (the reference would keep the last; blz refuses the ambiguity);
//   4. the trailing SHA-256 (kDigestMismatch);
//   5. the top-level strategy (kWdeltaStrategies or "auto", else kUnsupported) and per header
//      tensor: a known "strategy" (kUnsupported), "shape" (<= 8 sizes), string "dtype", and a
//      record for every {"_ref": f} entry.
// The parent hash is NOT checked here (see patcher/lossy/lossy_delta.h).
class WdeltaReader {
 public:
  static Result<WdeltaReader> Open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const;
  const std::string& parent_hash() const;
  const std::string& strategy() const;
  const nlohmann::ordered_json& header() const;
  // Tensor names in header order.
  const std::vector<std::string>& names() const;
  // The header object of tensor `name` (with its "_ref" entries). kNotFound if absent.
  Result<const nlohmann::ordered_json*> Meta(std::string_view name) const;
  // The record (tensor, field). kNotFound if absent.
  Result<WdeltaArrayView> Field(std::string_view tensor, std::string_view field) const;
  // Bytes of the records of `tensor` (record headers included): its share of the file size.
  uint64_t TensorBytes(std::string_view tensor) const;
  uint64_t file_size() const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// --- parent_hash (deltatensors lineage) --------------------------------------------------------

// SHA-256 (lower hex) over, for each name of `names` in the given order, its UTF-8 bytes then
// the tensor's raw bytes exactly as stored in `base` (BF16/F16 as their 16-bit patterns,
// little-endian). Errors: kNotFound naming the first tensor `base` lacks.
Result<std::string> WdeltaParentHash(const ModelTensors& base, const std::vector<std::string>& names);

// The orders the reference hashes in. `names` are the delta's tensors (the header's; the
// reference hashes only those, not the whole base). v2: sorted (byte order == Python's code
// point order). v1: the reference (0.3) verifies EVERY v1 file in legacy order: `names` (pass
// them in header order) grouped by the base file holding them, groups in order of their first
// appearance in `names`, names sorted within a group (deltatensors safetensors_io.py
// legacy_order; files are ValueTensor::file). For a single-file base, or shards whose names
// do not interleave, legacy == sorted. So a v1 file blz writes must hash in legacy order to
// verify in the reference; a blz reader of v1 files tries legacy, then sorted (0.2's
// in-memory save_delta hashed sorted). Names the base lacks form one group of their own.
std::vector<std::string> WdeltaSortedOrder(std::vector<std::string> names);
std::vector<std::string> WdeltaLegacyOrder(const ModelTensors& base,
                                           const std::vector<std::string>& names);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_WDELTA_H_
