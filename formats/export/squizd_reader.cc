// SQUIZD v1 reader and validator (formats/export/squizd.h; the format: docs/squizd.md).
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/mmap_file.h"
#include "core/text.h"
#include "formats/export/squizd.h"
#include "formats/float_convert.h"

namespace blz::exporter {
namespace {

// Header field offsets.
constexpr uint64_t kOffVersion = 4;
constexpr uint64_t kOffFlags = 6;
constexpr uint64_t kOffLayerCount = 10;
constexpr uint64_t kOffArchId = 12;
constexpr uint64_t kOffSparsityCrc = 14;
constexpr uint64_t kOffEagleHash = 18;
constexpr uint64_t kOffReserved = 26;
constexpr uint64_t kOffSparsityMeta = 128;
constexpr uint64_t kOffEagleMeta = 160;
constexpr uint64_t kOffReserved2 = 192;
constexpr uint64_t kMetaBytes = 32;

constexpr uint64_t kFnvBasis = 0xCBF29CE484222325ull;
constexpr uint64_t kFnvPrime = 0x100000001B3ull;

uint64_t Fnv1a64(uint64_t h, ByteSpan data) {
  for (uint8_t b : data) {
    h ^= b;
    h *= kFnvPrime;
  }
  return h;
}

uint16_t LoadLE16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }

float LoadF32(const uint8_t* p) {
  uint32_t bits = LoadLE32(p);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Strict UTF-8 (no overlong forms, no surrogates, <= U+10FFFF).
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t c = uint8_t(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      uint8_t cc = uint8_t(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = cp << 6 | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// Builds the messages: "<source>: <field> at byte <offset>: <what>".
class Checker {
 public:
  explicit Checker(std::string_view source) : source_(source) {}
  Status Bad(std::string_view field, uint64_t offset, const std::string& what) const {
    return Corruption(source_ + ": " + std::string(field) + " at byte " +
                      std::to_string(offset) + ": " + what);
  }
  Status NotHandled(std::string_view field, uint64_t offset, const std::string& what) const {
    return Unsupported(source_ + ": " + std::string(field) + " at byte " +
                       std::to_string(offset) + ": " + what);
  }

 private:
  std::string source_;
};

// First non-zero byte in [begin, end) of `b`, or `end`.
uint64_t FirstNonZero(ByteSpan b, uint64_t begin, uint64_t end) {
  for (uint64_t i = begin; i < end; ++i) {
    if (b[i] != 0) return i;
  }
  return end;
}

Status CheckZero(const Checker& c, ByteSpan b, uint64_t begin, uint64_t end,
                 std::string_view field) {
  uint64_t at = FirstNonZero(b, begin, end);
  if (at == end) return Status::Ok();
  return c.Bad(field, at, "must be zero (reserved), found " + std::to_string(b[at]));
}

Status ParseHeader(const Checker& c, ByteSpan b, SquizdFile* f) {
  const uint8_t* p = b.data();
  f->version = LoadLE16(p + kOffVersion);
  if (f->version != kSquizdVersion) {
    return c.Bad("header.version", kOffVersion,
                 "version " + std::to_string(f->version) + ", only 1 is supported");
  }
  f->flags = LoadLE32(p + kOffFlags);
  if ((f->flags & ~kSquizdKnownFlags) != 0) {
    return c.Bad("header.flags", kOffFlags,
                 "reserved bits 7-31 set (flags " + Hex32(f->flags) + ")");
  }
  constexpr uint32_t kNoDecoder = kSquizdFlagAstc | kSquizdFlagTcaTbe | kSquizdFlagAneCoreml;
  if ((f->flags & kNoDecoder) != 0) {
    std::string names;
    for (const std::string& n : SquizdFlagNames(f->flags & kNoDecoder)) {
      names += (names.empty() ? "" : "|") + n;
    }
    return c.NotHandled("header.flags", kOffFlags, names + " blocks are not supported by blz");
  }
  uint16_t layer_count = LoadLE16(p + kOffLayerCount);
  if (layer_count == 0) return c.Bad("header.layer_count", kOffLayerCount, "0 layers");
  // Validate before allocating: the table must fit in the file before its entries get memory.
  const uint64_t table_end = kSquizdHeaderBytes + kSquizdLayerEntryBytes * uint64_t{layer_count};
  if (table_end > b.size()) {
    return c.Bad("layer table", kSquizdHeaderBytes,
                 std::to_string(layer_count) + " entries end at byte " +
                     std::to_string(table_end) + ", past the end of the file (" +
                     std::to_string(b.size()) + " bytes)");
  }
  f->layers.resize(layer_count);
  f->arch_id = LoadLE16(p + kOffArchId);
  f->sparsity_crc32 = LoadLE32(p + kOffSparsityCrc);
  f->eagle_hash = LoadLE64(p + kOffEagleHash);
  BLZ_RETURN_IF_ERROR(CheckZero(c, b, kOffReserved, kOffSparsityMeta, "header.reserved"));
  BLZ_RETURN_IF_ERROR(CheckZero(c, b, kOffReserved2, kSquizdHeaderBytes, "header.reserved2"));

  // Sparsity metadata (bytes 128..159) and its CRC32.
  if ((f->flags & kSquizdFlagSparse) == 0) {
    if (f->sparsity_crc32 != 0) {
      return c.Bad("header.sparsity_crc32", kOffSparsityCrc, "must be 0 when SPARSE is unset");
    }
    BLZ_RETURN_IF_ERROR(CheckZero(c, b, kOffSparsityMeta, kOffSparsityMeta + kMetaBytes,
                                  "header.sparsity_meta (SPARSE unset)"));
  } else {
    const uint8_t* m = p + kOffSparsityMeta;
    f->sparsity.version = LoadLE32(m);
    f->sparsity.block_size = LoadLE32(m + 4);
    f->sparsity.n_sparse_layers = LoadLE32(m + 8);
    f->sparsity.mean_sparsity = LoadF32(m + 12);
    if (f->sparsity.version != 1) {
      return c.Bad("sparsity_meta.sparsity_version", kOffSparsityMeta,
                   std::to_string(f->sparsity.version) + ", expected 1");
    }
    if (f->sparsity.block_size == 0) {
      return c.Bad("sparsity_meta.block_size", kOffSparsityMeta + 4, "0");
    }
    if (f->sparsity.n_sparse_layers > layer_count) {
      return c.Bad("sparsity_meta.n_sparse_layers", kOffSparsityMeta + 8,
                   std::to_string(f->sparsity.n_sparse_layers) + " > layer_count " +
                       std::to_string(layer_count));
    }
    float ms = f->sparsity.mean_sparsity;
    if (!(ms >= 0.0f && ms <= 1.0f)) {
      return c.Bad("sparsity_meta.mean_sparsity", kOffSparsityMeta + 12,
                   "not a fraction in [0, 1]");
    }
    BLZ_RETURN_IF_ERROR(CheckZero(c, b, kOffSparsityMeta + 16, kOffSparsityMeta + kMetaBytes,
                                  "sparsity_meta.reserved"));
    uint32_t crc = static_cast<uint32_t>(crc32(0L, m, static_cast<uInt>(kMetaBytes)));
    if (crc != f->sparsity_crc32) {
      return c.Bad("header.sparsity_crc32", kOffSparsityCrc,
                   "stored " + Hex32(f->sparsity_crc32) + ", CRC32 of bytes 128..159 is " +
                       Hex32(crc));
    }
  }

  // Draft-head metadata (bytes 160..191) and its FNV-1a-64.
  if ((f->flags & kSquizdFlagEagle) == 0) {
    if (f->eagle_hash != 0) {
      return c.Bad("header.eagle_hash", kOffEagleHash, "must be 0 when EAGLE is unset");
    }
    BLZ_RETURN_IF_ERROR(CheckZero(c, b, kOffEagleMeta, kOffEagleMeta + kMetaBytes,
                                  "header.eagle_meta (EAGLE unset)"));
  } else {
    const uint8_t* m = p + kOffEagleMeta;
    f->eagle.draft_offset = LoadLE64(m);
    f->eagle.draft_length = LoadLE64(m + 8);
    f->eagle.n_draft_layers = LoadLE32(m + 16);
    f->eagle.draft_vocab = LoadLE32(m + 20);
    BLZ_RETURN_IF_ERROR(CheckZero(c, b, kOffEagleMeta + 24, kOffEagleMeta + kMetaBytes,
                                  "eagle_meta.reserved"));
    uint64_t h = Fnv1a64(kFnvBasis, b.subspan(kOffEagleMeta, kMetaBytes));
    if (h != f->eagle_hash) {
      return c.Bad("header.eagle_hash", kOffEagleHash,
                   "stored " + Hex(f->eagle_hash) + ", FNV-1a-64 of bytes 160..191 is " +
                       Hex(h));
    }
  }
  return Status::Ok();
}

// One weight block at [off, off + len) (already inside the file).
Status ParseBlock(const Checker& c, const SquizdFile& f, uint64_t entry_off, SquizdLayer* l) {
  ByteSpan b = f.bytes;
  const uint64_t off = l->weight_offset, len = l->weight_length;
  const bool sparse = (f.flags & kSquizdFlagSparse) != 0;
  const std::string where = "layer " + std::to_string(l->index);
  if (len < 4) {
    return c.Bad(where + " weight_length", entry_off + 12,
                 std::to_string(len) + " bytes, too short for a block magic");
  }
  std::string_view magic = AsChars(b.subspan(off, 4));
  uint64_t header = 0;
  uint64_t data = 0;
  auto need = [&](uint64_t n) -> Status {
    if (len < n) {
      return c.Bad(where + " " + std::string(magic) + " block", off,
                   "weight_length " + std::to_string(len) + " < its " + std::to_string(n) +
                       "-byte header");
    }
    return Status::Ok();
  };
  const uint8_t* p = b.data() + off;
  if (magic == "INT4" || magic == "INT2") {
    const bool int4 = magic == "INT4";
    const uint32_t flag = int4 ? kSquizdFlagInt4 : kSquizdFlagInt2;
    if ((f.flags & flag) == 0) {
      return c.Bad(where + " block magic", off,
                   std::string(magic) + " block in a file without the " + std::string(magic) +
                       " flag");
    }
    header = int4 ? 12 : 16;
    BLZ_RETURN_IF_ERROR(need(header));
    uint32_t rows = LoadLE32(p + 4), cols = LoadLE32(p + 8);
    if (rows == 0) return c.Bad(where + " n_rows", off + 4, "0");
    if (cols == 0) return c.Bad(where + " n_cols", off + 8, "0");
    l->kind = int4 ? SquizdBlockKind::kInt4 : SquizdBlockKind::kInt2;
    l->shape = {rows, cols};
    l->elements = uint64_t{rows} * cols;
    if (int4) {
      l->sub_block_len = cols;
    } else {
      l->sub_block_len = LoadLE32(p + 12);
      if (l->sub_block_len == 0 || l->sub_block_len > cols) {
        return c.Bad(where + " sub_block_len", off + 12,
                     std::to_string(l->sub_block_len) + " not in [1, n_cols = " +
                         std::to_string(cols) + "]");
      }
    }
    data = uint64_t{rows} * CeilDiv(cols, int4 ? 2 : 4);  // < 2^64: both factors < 2^32
    l->sub_blocks = uint64_t{rows} * CeilDiv(cols, l->sub_block_len);
  } else if (magic == "NPCL") {
    header = 12;
    BLZ_RETURN_IF_ERROR(need(header));
    uint32_t code = LoadLE32(p + 4);
    if (code > 2) {
      return c.Bad(where + " NPCL dtype_code", off + 4,
                   std::to_string(code) + " (0 f32, 1 f16, 2 bf16)");
    }
    l->npcl_dtype = static_cast<SquizdNpclDtype>(code);
    uint32_t ndim = LoadLE32(p + 8);
    if (ndim > kSquizdMaxNdim) {
      return c.Bad(where + " NPCL ndim", off + 8,
                   std::to_string(ndim) + " > " + std::to_string(kSquizdMaxNdim));
    }
    header = 12 + 4 * uint64_t{ndim};
    BLZ_RETURN_IF_ERROR(need(header));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < ndim; ++d) {
      uint32_t dim = LoadLE32(p + 12 + 4 * d);
      l->shape.push_back(dim);
      if (!CheckedMul(elements, dim, &elements)) {
        return c.Bad(where + " NPCL shape", off + 12 + 4 * d, "element count overflows");
      }
    }
    l->elements = elements;
    if (!CheckedMul(elements, code == 0 ? 4 : 2, &data)) {
      return c.Bad(where + " NPCL shape", off + 12, "byte count overflows");
    }
    if (l->scale_offset != 0) {
      return c.Bad(where + " scale_offset", entry_off + 20,
                   "must be 0 for an NPCL block, found " + std::to_string(l->scale_offset));
    }
  } else {
    return c.Bad(where + " block magic", off,
                 "unknown block magic \"" + EscapeForTerminal(magic) + "\"");
  }
  uint64_t total;
  if (!CheckedAdd(header, data, &total)) {
    return c.Bad(where + " block size", off, "size overflows");
  }
  if (sparse ? len < total : len != total) {
    return c.Bad(where + " weight_length", entry_off + 12,
                 std::to_string(len) + " bytes, but the " + std::string(magic) +
                     " block's header declares " + std::to_string(total) +
                     (sparse ? " or more (SPARSE mask bytes may follow)" : ""));
  }
  l->data_offset = off + header;
  l->data_length = data;
  return Status::Ok();
}

Status ParseSczt(const Checker& c, SquizdFile* f, uint64_t* cursor) {
  ByteSpan b = f->bytes;
  const uint64_t at = *cursor;
  if (b.size() - at < 8) {
    return c.Bad("SCZT", at, "file ends before the scale table (" +
                                 std::to_string(b.size() - at) + " bytes left)");
  }
  if (std::memcmp(b.data() + at, "SCZT", 4) != 0) {
    return c.Bad("SCZT magic", at, "expected \"SCZT\" after the last weight block");
  }
  uint64_t n = LoadLE32(b.data() + at + 4);
  uint64_t expected = 0;
  for (const SquizdLayer& l : f->layers) {
    if (l.kind == SquizdBlockKind::kNpcl) continue;
    if (!CheckedAdd(expected, 1 + l.sub_blocks, &expected)) {
      return c.Bad("SCZT n_tensors", at + 4, "expected entry count overflows");
    }
  }
  if (n > (b.size() - at - 8) / kSquizdScaleEntryBytes) {
    return c.Bad("SCZT n_tensors", at + 4,
                 std::to_string(n) + " entries do not fit in the " +
                     std::to_string(b.size() - at - 8) + " bytes left");
  }
  if (n != expected) {
    return c.Bad("SCZT n_tensors", at + 4,
                 std::to_string(n) + " entries, the quantized layers need " +
                     std::to_string(expected));
  }
  f->has_sczt = true;
  f->sczt_offset = at;
  f->scales.resize(n);
  const uint64_t first = at + 8;
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* e = b.data() + first + i * kSquizdScaleEntryBytes;
    SquizdScale& s = f->scales[i];
    s.tensor_id = LoadLE64(e);
    s.scale = LoadF32(e + 8);
    s.zero = LoadF32(e + 12);
    if (!std::isfinite(s.scale) || !std::isfinite(s.zero)) {
      return c.Bad("SCZT entry " + std::to_string(i) + " scale/zero",
                   first + i * kSquizdScaleEntryBytes + 8, "not finite");
    }
  }
  uint64_t k = 0;
  for (size_t li = 0; li < f->layers.size(); ++li) {
    SquizdLayer& l = f->layers[li];
    if (l.kind == SquizdBlockKind::kNpcl) continue;
    const uint64_t entry_off = first + k * kSquizdScaleEntryBytes;
    const uint64_t table_off = kSquizdHeaderBytes + li * kSquizdLayerEntryBytes;
    if (l.scale_offset != entry_off) {
      return c.Bad("layer " + std::to_string(li) + " scale_offset", table_off + 20,
                   std::to_string(l.scale_offset) + ", its SCZT entries start at " +
                       std::to_string(entry_off));
    }
    const uint64_t id = f->scales[k].tensor_id;
    if ((id & kSquizdSubBlockBit) != 0) {
      return c.Bad("SCZT entry " + std::to_string(k) + " tensor_id", entry_off,
                   "layer " + std::to_string(li) + "'s tensor entry has the sub-block bit set");
    }
    l.tensor_id = id;
    l.tensor_scale_index = k;
    l.sub_scale_index = k + 1;
    for (uint64_t j = 0; j < l.sub_blocks; ++j) {
      const uint64_t idx = k + 1 + j;
      if (f->scales[idx].tensor_id != (id | kSquizdSubBlockBit)) {
        return c.Bad("SCZT entry " + std::to_string(idx) + " tensor_id",
                     first + idx * kSquizdScaleEntryBytes,
                     Hex(f->scales[idx].tensor_id) + ", layer " + std::to_string(li) +
                         "'s sub-block entries must be " + Hex(id | kSquizdSubBlockBit));
      }
    }
    k += 1 + l.sub_blocks;
  }
  *cursor = first + n * kSquizdScaleEntryBytes;
  return Status::Ok();
}

Status ParseDraft(const Checker& c, SquizdFile* f, uint64_t* cursor) {
  ByteSpan b = f->bytes;
  const SquizdEagleMeta& e = f->eagle;
  if (e.draft_offset != *cursor) {
    return c.Bad("eagle_meta.draft_offset", kOffEagleMeta,
                 std::to_string(e.draft_offset) + ", the EGDH appendix must start at " +
                     std::to_string(*cursor));
  }
  uint64_t end;
  if (!CheckedAdd(e.draft_offset, e.draft_length, &end) || end > b.size()) {
    return c.Bad("eagle_meta.draft_length", kOffEagleMeta + 8,
                 std::to_string(e.draft_length) + " bytes from " +
                     std::to_string(e.draft_offset) + " run past the end of the file (" +
                     std::to_string(b.size()) + " bytes)");
  }
  if (e.draft_length < 8) {
    return c.Bad("eagle_meta.draft_length", kOffEagleMeta + 8,
                 std::to_string(e.draft_length) + " bytes, too short for the EGDH header");
  }
  const uint8_t* p = b.data() + e.draft_offset;
  if (std::memcmp(p, "EGDH", 4) != 0) {
    return c.Bad("EGDH magic", e.draft_offset, "expected \"EGDH\"");
  }
  if (LoadLE32(p + 4) != e.n_draft_layers) {
    return c.Bad("EGDH n_draft_layers", e.draft_offset + 4,
                 std::to_string(LoadLE32(p + 4)) + ", eagle_meta says " +
                     std::to_string(e.n_draft_layers));
  }
  *cursor = end;
  return Status::Ok();
}

Status ParseNames(const Checker& c, SquizdFile* f, uint64_t cursor) {
  ByteSpan b = f->bytes;
  if (cursor == b.size()) return Status::Ok();
  if (b.size() - cursor < 8 || std::memcmp(b.data() + cursor, "BLZN", 4) != 0) {
    return c.Bad("end of file", cursor,
                 std::to_string(b.size() - cursor) +
                     " trailing bytes after the last section (not a BLZN name table)");
  }
  f->has_names = true;
  f->names_offset = cursor;
  uint64_t count = LoadLE32(b.data() + cursor + 4);
  if (count != f->layers.size()) {
    return c.Bad("BLZN count", cursor + 4,
                 std::to_string(count) + " names for " + std::to_string(f->layers.size()) +
                     " layers");
  }
  uint64_t at = cursor + 8;
  std::unordered_set<std::string_view> seen;
  for (SquizdLayer& l : f->layers) {
    if (b.size() - at < 4) return c.Bad("BLZN name length", at, "file ends inside the name table");
    uint64_t n = LoadLE32(b.data() + at);
    if (n == 0 || n > kSquizdMaxNameBytes || n > b.size() - at - 4) {
      return c.Bad("BLZN name length", at,
                   std::to_string(n) + " (must be 1.." + std::to_string(kSquizdMaxNameBytes) +
                       " and inside the file)");
    }
    std::string_view name = AsChars(b.subspan(at + 4, n));
    if (!IsValidUtf8(name)) return c.Bad("BLZN name", at + 4, "not valid UTF-8");
    if (!seen.insert(name).second) {
      return c.Bad("BLZN name", at + 4, "duplicate name '" + EscapeForTerminal(name) + "'");
    }
    l.name = std::string(name);
    const uint64_t id = SquizdTensorId(l.index, name);
    if (l.kind != SquizdBlockKind::kNpcl && l.tensor_id != id) {
      const uint64_t entry_off = f->sczt_offset + 8 + l.tensor_scale_index * kSquizdScaleEntryBytes;
      return c.Bad("SCZT entry " + std::to_string(l.tensor_scale_index) + " tensor_id",
                   entry_off,
                   Hex(l.tensor_id) + " is not the id of layer " + std::to_string(l.index) +
                       " '" + EscapeForTerminal(name) + "' (" + Hex(id) + ")");
    }
    l.tensor_id = id;
    at += 4 + n;
  }
  if (at != b.size()) {
    return c.Bad("end of file", at,
                 std::to_string(b.size() - at) + " trailing bytes after the BLZN name table");
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> SquizdFlagNames(uint32_t flags) {
  static constexpr const char* kNames[] = {"ASTC", "TCA_TBE", "INT4", "SPARSE",
                                           "EAGLE", "INT2", "ANE_COREML"};
  std::vector<std::string> out;
  for (uint32_t bit = 0; bit < 32; ++bit) {
    if ((flags >> bit & 1u) == 0) continue;
    out.push_back(bit < 7 ? kNames[bit] : "bit" + std::to_string(bit));
  }
  return out;
}

uint64_t SquizdTensorId(uint32_t layer_idx, std::string_view name) {
  uint8_t le[4];
  StoreLE32(le, layer_idx);
  uint64_t h = Fnv1a64(kFnvBasis, ByteSpan(le, 4));
  h = Fnv1a64(h, AsBytes(name));
  return h & ~kSquizdSubBlockBit;
}

bool IsValidSquizdName(std::string_view name) {
  return !name.empty() && name.size() <= kSquizdMaxNameBytes && IsValidUtf8(name);
}

std::string SquizdBlockName(SquizdBlockKind kind, SquizdNpclDtype dtype) {
  switch (kind) {
    case SquizdBlockKind::kInt4: return "INT4";
    case SquizdBlockKind::kInt2: return "INT2";
    case SquizdBlockKind::kNpcl: break;
  }
  switch (dtype) {
    case SquizdNpclDtype::kF32: return "NPCL-F32";
    case SquizdNpclDtype::kF16: return "NPCL-F16";
    case SquizdNpclDtype::kBF16: return "NPCL-BF16";
  }
  return "NPCL-?";
}

bool HasSquizdMagic(ByteSpan bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "SQZD", 4) == 0;
}

bool FileHasSquizdMagic(const std::string& path) {
  FILE* fp = std::fopen(path.c_str(), "rb");
  if (fp == nullptr) return false;
  uint8_t magic[4] = {};
  size_t n = std::fread(magic, 1, sizeof magic, fp);
  std::fclose(fp);
  return n == 4 && HasSquizdMagic(ByteSpan(magic, 4));
}

Result<SquizdFile> ParseSquizd(ByteSpan bytes, std::string_view source) {
  Checker c(source);
  SquizdFile f;
  f.source = std::string(source);
  f.bytes = bytes;
  if (bytes.size() < 4 || !HasSquizdMagic(bytes)) {
    return c.Bad("header.magic", 0, "not a SQUIZD file (expected \"SQZD\")");
  }
  if (bytes.size() < kSquizdHeaderBytes) {
    return c.Bad("header", bytes.size(),
                 "file is " + std::to_string(bytes.size()) + " bytes, the header needs 256");
  }
  BLZ_RETURN_IF_ERROR(ParseHeader(c, bytes, &f));

  const uint64_t size = bytes.size();
  const uint64_t table_end = kSquizdHeaderBytes + kSquizdLayerEntryBytes * f.layers.size();
  if (table_end > size) {
    return c.Bad("layer table", kSquizdHeaderBytes,
                 std::to_string(f.layers.size()) + " entries end at byte " +
                     std::to_string(table_end) + ", past the end of the file (" +
                     std::to_string(size) + " bytes)");
  }
  uint64_t cursor = table_end;
  for (size_t i = 0; i < f.layers.size(); ++i) {
    const uint64_t e = kSquizdHeaderBytes + kSquizdLayerEntryBytes * i;
    const uint8_t* p = bytes.data() + e;
    SquizdLayer& l = f.layers[i];
    l.index = LoadLE32(p);
    l.weight_offset = LoadLE64(p + 4);
    l.weight_length = LoadLE64(p + 12);
    l.scale_offset = LoadLE64(p + 20);
    const std::string where = "layer " + std::to_string(i);
    if (l.index != i) {
      return c.Bad(where + " layer_idx", e,
                   std::to_string(l.index) + ", entries must be numbered 0, 1, ... in order");
    }
    if (LoadLE32(p + 28) != 0) return c.Bad(where + " reserved", e + 28, "must be zero");
    if (l.weight_offset != cursor) {
      return c.Bad(where + " weight_offset", e + 4,
                   std::to_string(l.weight_offset) + ", blocks are contiguous in table order: "
                   "expected " + std::to_string(cursor));
    }
    uint64_t end;
    if (!CheckedAdd(l.weight_offset, l.weight_length, &end)) {
      return c.Bad(where + " weight_length", e + 12, "offset + length overflows");
    }
    if (end > size) {
      return c.Bad(where + " weight_length", e + 12,
                   std::to_string(l.weight_length) + " bytes from " +
                       std::to_string(l.weight_offset) + " run past the end of the file (" +
                       std::to_string(size) + " bytes)");
    }
    BLZ_RETURN_IF_ERROR(ParseBlock(c, f, e, &l));
    cursor = end;
  }
  if ((f.flags & (kSquizdFlagInt4 | kSquizdFlagInt2)) != 0) {
    BLZ_RETURN_IF_ERROR(ParseSczt(c, &f, &cursor));
  }
  if ((f.flags & kSquizdFlagEagle) != 0) BLZ_RETURN_IF_ERROR(ParseDraft(c, &f, &cursor));
  BLZ_RETURN_IF_ERROR(ParseNames(c, &f, cursor));
  return f;
}

Result<SquizdFile> OpenSquizd(const std::string& path) {
  BLZ_ASSIGN_OR_RETURN(MappedFile map, MappedFile::Open(path));
  auto shared = std::make_shared<MappedFile>(std::move(map));
  BLZ_ASSIGN_OR_RETURN(SquizdFile f, ParseSquizd(shared->bytes(), path));
  f.keep_alive = shared;
  return f;
}

Status VerifySquizd(const SquizdFile& f) {
  Checker c(f.source);
  for (const SquizdLayer& l : f.layers) {
    if (l.kind == SquizdBlockKind::kNpcl) continue;
    const bool int4 = l.kind == SquizdBlockKind::kInt4;
    const uint64_t cols = l.shape[1];
    const uint64_t per_byte = int4 ? 2 : 4;
    const uint64_t used = cols % per_byte;  // values in a row's last byte (0: full)
    if (used == 0) continue;
    const uint64_t row_bytes = CeilDiv(cols, per_byte);
    const uint8_t mask = static_cast<uint8_t>(0xFFu << (used * (8 / per_byte)));
    for (uint64_t r = 0; r < l.shape[0]; ++r) {
      const uint64_t at = l.data_offset + r * row_bytes + row_bytes - 1;
      if ((f.bytes[at] & mask) != 0) {
        return c.Bad("layer " + std::to_string(l.index) + " row " + std::to_string(r) +
                         " padding",
                     at, "unused bits of the row's last byte must be zero");
      }
    }
  }
  return Status::Ok();
}

Result<std::vector<float>> DequantizeSquizdLayer(const SquizdFile& f, size_t index,
                                                 uint64_t max_elements) {
  if (index >= f.layers.size()) {
    return InvalidArgument(f.source + ": no layer " + std::to_string(index));
  }
  const SquizdLayer& l = f.layers[index];
  if (l.elements > max_elements) {
    return TooLarge(f.source + ": layer " + std::to_string(index) + " has " +
                    std::to_string(l.elements) + " values, more than " +
                    std::to_string(max_elements));
  }
  std::vector<float> out(l.elements);
  ByteSpan data = f.bytes.subspan(l.data_offset, l.data_length);
  if (l.kind == SquizdBlockKind::kNpcl) {
    formats::ValueType t = l.npcl_dtype == SquizdNpclDtype::kF32   ? formats::ValueType::kF32
                           : l.npcl_dtype == SquizdNpclDtype::kF16 ? formats::ValueType::kF16
                                                                   : formats::ValueType::kBF16;
    BLZ_RETURN_IF_ERROR(formats::DecodeElements(t, data, l.elements, 0, out));
    return out;
  }
  const bool int4 = l.kind == SquizdBlockKind::kInt4;
  const uint64_t rows = l.shape[0], cols = l.shape[1];
  const uint64_t row_bytes = CeilDiv(cols, int4 ? 2 : 4);
  const uint64_t per_row = CeilDiv(cols, l.sub_block_len);
  for (uint64_t r = 0; r < rows; ++r) {
    const uint8_t* row = data.data() + r * row_bytes;
    for (uint64_t col = 0; col < cols; ++col) {
      int q;
      if (int4) {
        unsigned nib = (col & 1) != 0 ? row[col / 2] >> 4 : row[col / 2] & 0x0Fu;
        q = nib >= 8 ? int(nib) - 16 : int(nib);
      } else {
        unsigned crumb = (row[col / 4] >> (2 * (col & 3))) & 3u;
        q = crumb >= 2 ? int(crumb) - 4 : int(crumb);
      }
      const SquizdScale& s = f.scales[l.sub_scale_index + r * per_row + col / l.sub_block_len];
      out[r * cols + col] = SquizdDequant(q, s.scale, s.zero);
    }
  }
  return out;
}

std::string SquizdSummaryText(const SquizdFile& f) {
  std::string flags;
  for (const std::string& n : SquizdFlagNames(f.flags)) flags += (flags.empty() ? "" : "|") + n;
  if (flags.empty()) flags = "none";
  std::string out = "SQUIZD v" + std::to_string(f.version) + ": " + EscapeForTerminal(f.source) +
                    "\n  size: " + std::to_string(f.bytes.size()) + " bytes\n  flags: " + flags +
                    " (" + Hex32(f.flags) + ")\n  arch_id: " + std::to_string(f.arch_id) +
                    "\n  layers: " + std::to_string(f.layers.size()) +
                    "\n  scale entries (SCZT): " + std::to_string(f.scales.size()) +
                    "\n  names (BLZN): " + (f.has_names ? "yes" : "no") + "\n";
  if ((f.flags & kSquizdFlagSparse) != 0) {
    out += "  sparsity: block_size " + std::to_string(f.sparsity.block_size) + ", " +
           std::to_string(f.sparsity.n_sparse_layers) + " sparse layers, mean " +
           formats::stats_text::Number(f.sparsity.mean_sparsity) + "\n";
  }
  if ((f.flags & kSquizdFlagEagle) != 0) {
    out += "  eagle draft head: " + std::to_string(f.eagle.n_draft_layers) + " layers, vocab " +
           std::to_string(f.eagle.draft_vocab) + ", " + std::to_string(f.eagle.draft_length) +
           " bytes at " + std::to_string(f.eagle.draft_offset) + "\n";
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows = {{"IDX", "NAME", "KIND", "SHAPE", "BYTES"}};
  for (const SquizdLayer& l : f.layers) {
    rows.push_back({std::to_string(l.index), l.name.empty() ? "-" : EscapeForTerminal(l.name),
                    SquizdBlockName(l.kind, l.npcl_dtype), formats::stats_text::Shape(l.shape),
                    std::to_string(l.weight_length)});
  }
  out += formats::stats_text::Table(rows, {true, false, false, false, true});
  return out;
}

nlohmann::ordered_json SquizdSummaryJson(const SquizdFile& f) {
  nlohmann::ordered_json j;
  j["path"] = f.source;
  j["format"] = "squizd";
  j["size"] = f.bytes.size();
  j["version"] = f.version;
  j["flags"] = SquizdFlagNames(f.flags);
  j["flags_value"] = f.flags;
  j["arch_id"] = f.arch_id;
  if ((f.flags & kSquizdFlagSparse) != 0) {
    j["sparsity"] = {{"version", f.sparsity.version},
                     {"block_size", f.sparsity.block_size},
                     {"n_sparse_layers", f.sparsity.n_sparse_layers},
                     {"mean_sparsity", f.sparsity.mean_sparsity},
                     {"crc32", Hex32(f.sparsity_crc32)}};
  } else {
    j["sparsity"] = nullptr;
  }
  if ((f.flags & kSquizdFlagEagle) != 0) {
    j["eagle"] = {{"draft_offset", f.eagle.draft_offset},
                  {"draft_length", f.eagle.draft_length},
                  {"n_draft_layers", f.eagle.n_draft_layers},
                  {"draft_vocab", f.eagle.draft_vocab},
                  {"fnv1a64", Hex(f.eagle_hash)}};
  } else {
    j["eagle"] = nullptr;
  }
  j["scale_entries"] = f.scales.size();
  j["named"] = f.has_names;
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const SquizdLayer& l : f.layers) {
    nlohmann::ordered_json e;
    e["index"] = l.index;
    e["name"] = l.name;
    e["kind"] = SquizdBlockName(l.kind, l.npcl_dtype);
    e["shape"] = l.shape;
    e["offset"] = l.weight_offset;
    e["bytes"] = l.weight_length;
    e["tensor_id"] = Hex(l.tensor_id);
    layers.push_back(std::move(e));
  }
  j["layers"] = std::move(layers);
  return j;
}

std::string SquizdVerifyText(const SquizdFile& f) {
  std::string flags;
  for (const std::string& n : SquizdFlagNames(f.flags)) flags += (flags.empty() ? "" : "|") + n;
  if (flags.empty()) flags = "no flags";
  return "ok: " + EscapeForTerminal(f.source) + " (SQUIZD v" + std::to_string(f.version) + ", " +
         std::to_string(f.layers.size()) + " layers, " + flags + ", " +
         std::to_string(f.bytes.size()) + " bytes)\n";
}

nlohmann::ordered_json SquizdVerifyJson(const SquizdFile& f) {
  nlohmann::ordered_json j;
  j["path"] = f.source;
  j["format"] = "squizd";
  j["ok"] = true;
  j["layers"] = f.layers.size();
  j["bytes"] = f.bytes.size();
  return j;
}

}  // namespace blz::exporter
