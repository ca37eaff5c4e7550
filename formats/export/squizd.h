// SQUIZD v1 (konjoai/squish docs/squizd_format_spec.md): a strict reader/validator and a writer
// (INT4 per-row quantized 2-D tensors, NPCL F32/F16/BF16 for the rest).
//
// The upstream spec leaves much undefined (tensor_id, block layout details, where SCZT lives,
// which bytes the CRC/FNV cover, the reserved ranges). Every choice blz makes is written down in
// docs/squizd.md, which is the format as blz reads and writes it. In short:
//   - one layer-table entry per tensor, idx == its position, blocks contiguous right after the
//     table in table order (no padding); NPCL blocks may appear in an INT4/INT2 file;
//   - INT4 rows are byte-aligned: n_rows x ceil(n_cols / 2) bytes, signed nibbles, low nibble =
//     even column; INT2 likewise with n_rows x ceil(n_cols / 4) bytes (crumb j of a byte in bits
//     2j..2j+1, signed -2..1);
//   - the SCZT table follows the last weight block (present iff INT4 or INT2 is flagged); each
//     quantized layer owns one tensor entry (id high bit clear) followed by its sub-block
//     entries (same id | high bit): one per row for INT4, ceil(n_cols / sub_block_len) per row
//     for INT2; value = (q - zero) * scale of the element's sub-block entry;
//   - tensor_id = FNV-1a-64(u32 LE layer_idx || name bytes) with bit 63 cleared;
//   - an optional blz name table "BLZN" ends the file (tensor names; tensor_ids are checked
//     against it when present).
//
// Everything here is in namespace blz::exporter and is thread-compatible (no shared state).
#ifndef BLZ_FORMATS_EXPORT_SQUIZD_H_
#define BLZ_FORMATS_EXPORT_SQUIZD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/tensor_stats.h"

namespace blz::exporter {

// --- Constants ------------------------------------------------------------------------------

inline constexpr uint64_t kSquizdHeaderBytes = 256;
inline constexpr uint64_t kSquizdLayerEntryBytes = 32;
inline constexpr uint64_t kSquizdScaleEntryBytes = 16;
inline constexpr uint16_t kSquizdVersion = 1;
inline constexpr uint32_t kSquizdMaxLayers = 65535;   // layer_count is a u16
inline constexpr uint32_t kSquizdMaxNdim = 8;         // NPCL ndim cap (blz's choice)
inline constexpr uint32_t kSquizdMaxNameBytes = 65536;  // BLZN name length cap
inline constexpr uint64_t kSquizdSubBlockBit = uint64_t{1} << 63;

// Header flag bits.
inline constexpr uint32_t kSquizdFlagAstc = 1u << 0;
inline constexpr uint32_t kSquizdFlagTcaTbe = 1u << 1;
inline constexpr uint32_t kSquizdFlagInt4 = 1u << 2;
inline constexpr uint32_t kSquizdFlagSparse = 1u << 3;
inline constexpr uint32_t kSquizdFlagEagle = 1u << 4;
inline constexpr uint32_t kSquizdFlagInt2 = 1u << 5;
inline constexpr uint32_t kSquizdFlagAneCoreml = 1u << 6;
inline constexpr uint32_t kSquizdKnownFlags = 0x7Fu;

// "ASTC", "TCA_TBE", "INT4", "SPARSE", "EAGLE", "INT2", "ANE_COREML" for the set bits, in bit
// order; unknown bits as "bit<N>".
std::vector<std::string> SquizdFlagNames(uint32_t flags);

// tensor_id of (layer_idx, name): FNV-1a-64 over the 4 bytes of layer_idx (LE) then the name's
// bytes, with bit 63 cleared (bit 63 marks sub-block scale entries).
uint64_t SquizdTensorId(uint32_t layer_idx, std::string_view name);

// True when `name` can be stored in the BLZN name table: 1..kSquizdMaxNameBytes bytes of valid
// UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool IsValidSquizdName(std::string_view name);

// --- Parsed file ----------------------------------------------------------------------------

enum class SquizdBlockKind : uint8_t { kInt4, kInt2, kNpcl };
// NPCL dtype_code values.
enum class SquizdNpclDtype : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

// "INT4", "INT2", "NPCL-F32", "NPCL-F16", "NPCL-BF16".
std::string SquizdBlockName(SquizdBlockKind kind, SquizdNpclDtype dtype);

struct SquizdScale {
  uint64_t tensor_id = 0;
  float scale = 0;
  float zero = 0;
};

struct SquizdLayer {
  uint32_t index = 0;           // layer_idx (== position in the table)
  uint64_t weight_offset = 0;   // as in the table
  uint64_t weight_length = 0;
  uint64_t scale_offset = 0;    // file offset of the layer's SCZT tensor entry; 0 for NPCL
  SquizdBlockKind kind = SquizdBlockKind::kNpcl;
  SquizdNpclDtype npcl_dtype = SquizdNpclDtype::kF32;  // NPCL only
  std::vector<uint64_t> shape;  // INT4/INT2: {n_rows, n_cols}; NPCL: the shape (C order)
  uint64_t elements = 0;        // product(shape) (1 for a 0-rank NPCL tensor)
  uint32_t sub_block_len = 0;   // INT4: n_cols (one sub-block per row); INT2: as stored
  uint64_t data_offset = 0;     // file offset of the packed values / element bytes
  uint64_t data_length = 0;     // their length (trailing SPARSE mask bytes excluded)
  // INT4/INT2: the SCZT entries, as indices into SquizdFile::scales: the tensor entry and the
  // first of `sub_blocks` sub-block entries (row-major: row r, sub-block b at r * per_row + b).
  uint64_t tensor_scale_index = 0;
  uint64_t sub_scale_index = 0;
  uint64_t sub_blocks = 0;
  uint64_t tensor_id = 0;       // INT4/INT2: from SCZT; NPCL: SquizdTensorId when named, else 0
  std::string name;             // from BLZN; empty when the file has no name table
};

// Header bytes 128..159 when SPARSE is set.
struct SquizdSparsityMeta {
  uint32_t version = 0;
  uint32_t block_size = 0;
  uint32_t n_sparse_layers = 0;
  float mean_sparsity = 0;
};

// Header bytes 160..191 when EAGLE is set.
struct SquizdEagleMeta {
  uint64_t draft_offset = 0;
  uint64_t draft_length = 0;
  uint32_t n_draft_layers = 0;
  uint32_t draft_vocab = 0;
};

struct SquizdFile {
  std::string source;  // the name used in messages (a path)
  ByteSpan bytes;      // the whole file (valid while `map` / the caller's buffer lives)
  std::shared_ptr<const void> keep_alive;  // set by OpenSquizd

  uint16_t version = 0;
  uint32_t flags = 0;
  uint16_t arch_id = 0;
  uint32_t sparsity_crc32 = 0;
  uint64_t eagle_hash = 0;
  SquizdSparsityMeta sparsity;  // zero unless SPARSE
  SquizdEagleMeta eagle;        // zero unless EAGLE

  std::vector<SquizdLayer> layers;
  bool has_sczt = false;
  uint64_t sczt_offset = 0;     // the "SCZT" magic
  std::vector<SquizdScale> scales;  // every SCZT entry, in file order
  bool has_names = false;
  uint64_t names_offset = 0;    // the "BLZN" magic (when has_names)
};

// True when `bytes` starts with "SQZD".
bool HasSquizdMagic(ByteSpan bytes);
// True when the file at `path` exists and starts with "SQZD" (false on any read error).
bool FileHasSquizdMagic(const std::string& path);

// Parses and validates a whole SQUIZD file held in `bytes` (which must outlive the result).
// `source` names the file in messages. Checks (docs/squizd.md "Validation"): magic, version,
// flags, reserved bytes, sparsity/eagle metadata and their CRC32 / FNV-1a-64, layer_count, the
// layer table (order, contiguity, overflow-checked bounds), every block's magic and sizes, the
// SCZT table (bounds, grouping, ids, finite values), the EGDH appendix, the BLZN names and the
// end of the file. Block payloads are not scanned (VerifySquizd does that).
// Errors: kCorruption naming the file, field and byte offset; kUnsupported for the ASTC,
// TCA_TBE and ANE_COREML flags (blz has no decoder for those blocks).
Result<SquizdFile> ParseSquizd(ByteSpan bytes, std::string_view source);

// Maps `path` (core/mmap_file.h) and parses it. Errors: those of MappedFile::Open, ParseSquizd.
Result<SquizdFile> OpenSquizd(const std::string& path);

// Everything ParseSquizd checked (it was parsed by it) plus a scan of every block's payload:
// the padding nibbles/crumbs at the end of INT4/INT2 rows must be zero. Errors: kCorruption
// naming the layer and byte offset.
Status VerifySquizd(const SquizdFile& file);

// Layer `index`'s values as floats: INT4/INT2 dequantized ((q - zero) * scale, computed in
// float), NPCL decoded exactly. Refuses more than `max_elements` values (kTooLarge);
// kInvalidArgument for a bad index.
Result<std::vector<float>> DequantizeSquizdLayer(const SquizdFile& file, size_t index,
                                                 uint64_t max_elements = uint64_t{1} << 28);

// One quantized element's value, exactly as the reader computes it.
inline float SquizdDequant(int q, float scale, float zero) {
  return (static_cast<float>(q) - zero) * scale;
}

// What `blz inspect FILE.squizd` prints: version, flags by name, arch_id, sizes, then a table
// of layers (idx, name, kind, shape, bytes). Ends with a newline.
std::string SquizdSummaryText(const SquizdFile& file);
// {"path", "format": "squizd", "size", "version", "flags": [names], "flags_value", "arch_id",
//  "sparsity": {...} | null, "eagle": {...} | null, "scale_entries", "named",
//  "layers": [{"index", "name", "kind", "shape", "offset", "bytes", "tensor_id" (hex)}]}
nlohmann::ordered_json SquizdSummaryJson(const SquizdFile& file);

// What `blz verify FILE.squizd` prints after VerifySquizd succeeded:
// "ok: <path> (SQUIZD v1, <n> layers, <flags>, <size>)\n" and
// {"path", "format": "squizd", "ok": true, "layers", "bytes"}.
std::string SquizdVerifyText(const SquizdFile& file);
nlohmann::ordered_json SquizdVerifyJson(const SquizdFile& file);

// --- Writer ---------------------------------------------------------------------------------

struct SquizdWriteOptions {
  // INT4 for 2-D tensors of floating-point element types (F32, F16, BF16, F64, F8, Q8_0, Q4_0)
  // with at least one row and column; NPCL for everything else.
  bool int4 = true;
  // By default a tensor is quantized only when its INT4 block plus its SCZT entries (16 bytes
  // per row) are smaller than the NPCL block would be (e.g. a [50257, 2] embedding stays NPCL:
  // one scale per 2 values costs more than it saves). int4_always quantizes every eligible one.
  bool int4_always = false;
  // INT2 blocks: not implemented by the writer (kUnsupported when set).
  bool int2 = false;
  bool overwrite = false;  // replace an existing out_path instead of kAlreadyExists
  uint16_t arch_id = 0;    // header arch_id (0 = generic)
  bool write_names = true; // append the BLZN name table
};

struct SquizdTensorReport {
  std::string name;
  std::string source_dtype;      // ValueTensor::dtype ("F32", "BF16", "Q4_K", ...)
  std::vector<uint64_t> shape;
  std::string block_kind;        // "INT4", "NPCL-F32", "NPCL-F16", "NPCL-BF16"
  uint64_t bytes = 0;            // the block's length (weight_length)
  uint64_t scale_entries = 0;    // SCZT entries of this tensor (0 for NPCL)
  double max_abs_error = 0;      // over finite source values, against the value read back
  double relative_l2_error = 0;  // sqrt(sum err^2 / sum x^2); 0 when exact
};

struct SquizdReport {
  std::string path;
  uint32_t flags = 0;
  uint64_t file_bytes = 0;
  std::vector<SquizdTensorReport> tensors;  // in source (= layer) order
};

// {"path", "format": "squizd", "flags", "bytes", "tensors": [{"name", "source_dtype", "shape",
//  "block", "bytes", "scale_entries", "max_abs_error", "relative_l2_error"}]}
nlohmann::ordered_json SquizdReportJson(const SquizdReport& report);

// Writes every tensor of `source`, in its order, as one SQUIZD layer (docs/squizd.md, "Writer"),
// atomically (core/file_util.h AtomicFile). Streams tensor by tensor: memory is one tensor's
// output block plus the SCZT table, never the model. INT4: per row, scale = max|x| / 7
// (max|x| itself when that is below FLT_MIN), q = round-half-away(x / scale) clamped to -7..7,
// zero = 0; every element then reads back within scale / 2 (plus float rounding). NPCL keeps
// F32/F16/BF16 bytes as they are; other decodable types become F32.
// `report` (optional) receives per-tensor sizes and errors.
// Errors: kAlreadyExists (out_path exists, !overwrite); kInvalidArgument (no tensors, a NaN or
// infinite value in an INT4 tensor, naming tensor and element); kTooLarge (more than 65535
// tensors, a dimension beyond u32, more than 8 dims); kUnsupported (a tensor type blz cannot
// decode, int2); kIOError.
Status WriteSquizd(const formats::ModelTensors& source, const SquizdWriteOptions& options,
                   const std::string& out_path, SquizdReport* report);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_SQUIZD_H_
