// SQUIZD v1 writer (formats/export/squizd.h; the format: docs/squizd.md).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/checked.h"
#include "core/file_util.h"
#include "formats/export/cast.h"
#include "formats/export/squizd.h"
#include "formats/float_convert.h"

namespace blz::exporter {
namespace {

using formats::ValueTensor;
using formats::ValueType;

struct Planned {
  const ValueTensor* tensor = nullptr;
  SquizdBlockKind kind = SquizdBlockKind::kNpcl;
  SquizdNpclDtype npcl = SquizdNpclDtype::kF32;
  bool raw_copy = false;      // NPCL: the source bytes are already the NPCL bytes
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;
  uint64_t offset = 0;        // weight_offset
  uint64_t scale_offset = 0;  // INT4: file offset of its SCZT tensor entry
  uint64_t tensor_id = 0;
};

bool IsFloatType(ValueType t) {
  switch (t) {
    case ValueType::kF32: case ValueType::kF16: case ValueType::kBF16: case ValueType::kF64:
    case ValueType::kF8_E4M3: case ValueType::kF8_E5M2: case ValueType::kQ8_0:
    case ValueType::kQ4_0:
      return true;
    default:
      return false;
  }
}

void PutF32(uint8_t* p, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  StoreLE32(p, bits);
}

void AppendEntry(std::string* s, uint64_t id, float scale, float zero) {
  uint8_t e[16];
  StoreLE64(e, id);
  PutF32(e + 8, scale);
  PutF32(e + 12, zero);
  s->append(reinterpret_cast<const char*>(e), sizeof e);
}

void AddError(CastError* err, double x, double y) {
  if (!std::isfinite(x)) return;
  const double d = y - x;
  err->max_abs = std::max(err->max_abs, std::fabs(d));
  err->sum_sq_err += d * d;
  err->sum_sq_ref += x * x;
  ++err->elements;
}

// INT4 block of a 2-D tensor: two passes over the source (row maxima, then quantization).
// Appends the block to `out` and the tensor's SCZT entries to `sczt`.
Status WriteInt4(const Planned& p, AtomicFile* out, std::string* sczt, CastError* err) {
  const ValueTensor& t = *p.tensor;
  const uint64_t rows = t.shape[0], cols = t.shape[1];
  const uint64_t row_bytes = cols / 2 + cols % 2;
  std::vector<float> amax(rows, 0.0f);
  uint64_t r = 0, c = 0;
  BLZ_RETURN_IF_ERROR(formats::VisitAsFloat(
      *t.type, t.data, t.elements, 0, t.elements,
      [&](uint64_t first, std::span<const float> values) -> Status {
        for (size_t i = 0; i < values.size(); ++i) {
          const float v = values[i];
          if (!std::isfinite(v)) {
            return InvalidArgument("tensor '" + t.name + "': element " +
                                   std::to_string(first + i) + " (row " + std::to_string(r) +
                                   ", column " + std::to_string(c) +
                                   ") is NaN or infinite, which INT4 cannot represent");
          }
          amax[r] = std::max(amax[r], std::fabs(v));
          if (++c == cols) c = 0, ++r;
        }
        return Status::Ok();
      }));
  std::vector<float> scale(rows);
  float tensor_scale = 0;
  for (uint64_t i = 0; i < rows; ++i) {
    float s = amax[i] / 7.0f;
    // A subnormal step would lose the bound (amax / s could exceed 7.5): use amax itself.
    if (s < FLT_MIN) s = amax[i];
    scale[i] = s;
    tensor_scale = std::max(tensor_scale, s);
  }
  std::vector<uint8_t> block(p.header_bytes + p.data_bytes, 0);
  std::memcpy(block.data(), "INT4", 4);
  StoreLE32(block.data() + 4, static_cast<uint32_t>(rows));
  StoreLE32(block.data() + 8, static_cast<uint32_t>(cols));
  uint8_t* data = block.data() + p.header_bytes;
  r = 0;
  c = 0;
  BLZ_RETURN_IF_ERROR(formats::VisitAsFloat(
      *t.type, t.data, t.elements, 0, t.elements,
      [&](uint64_t, std::span<const float> values) -> Status {
        for (const float x : values) {
          const float s = scale[r];
          int q = 0;
          if (s != 0.0f) q = static_cast<int>(std::clamp(std::round(x / s), -7.0f, 7.0f));
          data[r * row_bytes + c / 2] |= static_cast<uint8_t>((q & 0x0F) << ((c & 1) * 4));
          AddError(err, x, SquizdDequant(q, s, 0.0f));
          if (++c == cols) c = 0, ++r;
        }
        return Status::Ok();
      }));
  BLZ_RETURN_IF_ERROR(out->Append(ByteSpan(block)));
  AppendEntry(sczt, p.tensor_id, tensor_scale, 0.0f);
  for (uint64_t i = 0; i < rows; ++i) {
    AppendEntry(sczt, p.tensor_id | kSquizdSubBlockBit, scale[i], 0.0f);
  }
  return Status::Ok();
}

Status WriteNpcl(const Planned& p, AtomicFile* out, CastError* err) {
  const ValueTensor& t = *p.tensor;
  std::string header = "NPCL";
  AppendLE32(&header, static_cast<uint32_t>(p.npcl));
  AppendLE32(&header, static_cast<uint32_t>(t.shape.size()));
  for (uint64_t d : t.shape) AppendLE32(&header, static_cast<uint32_t>(d));
  BLZ_RETURN_IF_ERROR(out->Append(header));
  if (p.raw_copy) return out->Append(t.data);
  // Any other decodable type becomes F32 (exact for F8, Q8_0, Q4_0 and small integers).
  std::vector<uint8_t> buf;
  return formats::VisitAsDouble(
      *t.type, t.data, t.elements, 0, t.elements,
      [&](uint64_t, std::span<const double> values) -> Status {
        buf.resize(values.size() * 4);
        for (size_t i = 0; i < values.size(); ++i) {
          const float y = static_cast<float>(values[i]);
          PutF32(buf.data() + 4 * i, y);
          AddError(err, values[i], y);
        }
        return out->Append(ByteSpan(buf));
      });
}

}  // namespace

nlohmann::ordered_json SquizdReportJson(const SquizdReport& report) {
  nlohmann::ordered_json j;
  j["path"] = report.path;
  j["format"] = "squizd";
  j["flags"] = SquizdFlagNames(report.flags);
  j["bytes"] = report.file_bytes;
  nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
  for (const SquizdTensorReport& t : report.tensors) {
    nlohmann::ordered_json e;
    e["name"] = t.name;
    e["source_dtype"] = t.source_dtype;
    e["shape"] = t.shape;
    e["block"] = t.block_kind;
    e["bytes"] = t.bytes;
    e["scale_entries"] = t.scale_entries;
    e["max_abs_error"] = t.max_abs_error;
    e["relative_l2_error"] = t.relative_l2_error;
    tensors.push_back(std::move(e));
  }
  j["tensors"] = std::move(tensors);
  return j;
}

Status WriteSquizd(const formats::ModelTensors& source, const SquizdWriteOptions& options,
                   const std::string& out_path, SquizdReport* report) {
  if (options.int2) return Unsupported("squizd: INT2 blocks are not implemented by the writer");
  const auto& tensors = source.tensors();
  if (tensors.empty()) return InvalidArgument(source.path() + ": no tensors to write");
  if (tensors.size() > kSquizdMaxLayers) {
    return TooLarge(source.path() + ": " + std::to_string(tensors.size()) +
                    " tensors, SQUIZD holds at most 65535 (layer_count is a u16)");
  }
  {
    std::error_code ec;
    if (!options.overwrite && std::filesystem::symlink_status(out_path, ec).type() !=
                                  std::filesystem::file_type::not_found) {
      return AlreadyExists(out_path + ": already exists (use --force to replace it)");
    }
  }

  // Plan every block, then the SCZT table and the name table.
  std::vector<Planned> plan(tensors.size());
  std::unordered_set<std::string_view> names;
  uint64_t cursor = kSquizdHeaderBytes + kSquizdLayerEntryBytes * tensors.size();
  bool any_int4 = false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ValueTensor& t = tensors[i];
    Planned& p = plan[i];
    p.tensor = &t;
    const std::string what = source.path() + ": tensor '" + t.name + "'";
    if (!t.type.has_value()) {
      return Unsupported(what + ": type " + t.dtype + " cannot be decoded");
    }
    if (t.shape.size() > kSquizdMaxNdim) {
      return TooLarge(what + ": " + std::to_string(t.shape.size()) + " dimensions, SQUIZD NPCL "
                      "holds at most 8 (blz's cap)");
    }
    for (uint64_t d : t.shape) {
      if (d > UINT32_MAX) return TooLarge(what + ": dimension " + std::to_string(d) + " > 2^32-1");
    }
    if (options.write_names) {
      if (!IsValidSquizdName(t.name)) {
        return InvalidArgument(what + ": name is empty, too long or not UTF-8");
      }
      if (!names.insert(t.name).second) return InvalidArgument(what + ": duplicate name");
    }
    p.tensor_id = SquizdTensorId(static_cast<uint32_t>(i), options.write_names ? t.name : "");
    const ValueType vt = *t.type;
    const SquizdNpclDtype npcl = vt == ValueType::kF16    ? SquizdNpclDtype::kF16
                                 : vt == ValueType::kBF16 ? SquizdNpclDtype::kBF16
                                                          : SquizdNpclDtype::kF32;
    bool int4 = options.int4 && t.shape.size() == 2 && t.shape[0] > 0 && t.shape[1] > 0 &&
                IsFloatType(vt);
    if (int4 && !options.int4_always) {
      // INT4 block + SCZT entries vs the NPCL block, in long double (no overflow: dims < 2^32).
      const long double rows = static_cast<long double>(t.shape[0]);
      const long double cols = static_cast<long double>(t.shape[1]);
      const long double q = 12 + rows * std::ceil(cols / 2) + 16 * (rows + 1);
      const long double n = 20 + rows * cols * (npcl == SquizdNpclDtype::kF32 ? 4 : 2);
      int4 = q < n;
    }
    if (int4) {
      p.kind = SquizdBlockKind::kInt4;
      p.header_bytes = 12;
      p.data_bytes = t.shape[0] * (t.shape[1] / 2 + t.shape[1] % 2);  // < 2^64 (dims < 2^32)
      any_int4 = true;
    } else {
      p.kind = SquizdBlockKind::kNpcl;
      p.npcl = npcl;
      p.raw_copy = vt == ValueType::kF32 || vt == ValueType::kF16 || vt == ValueType::kBF16;
      p.header_bytes = 12 + 4 * t.shape.size();
      if (!CheckedMul(t.elements, p.npcl == SquizdNpclDtype::kF32 ? 4 : 2, &p.data_bytes)) {
        return TooLarge(what + ": byte count overflows");
      }
      if (p.raw_copy && t.data.size() != p.data_bytes) {
        return Internal(what + ": " + std::to_string(t.data.size()) + " data bytes, expected " +
                        std::to_string(p.data_bytes));
      }
    }
    p.offset = cursor;
    if (!CheckedAdd(cursor, p.header_bytes + p.data_bytes, &cursor)) {
      return TooLarge(what + ": file size overflows");
    }
  }
  const uint32_t flags = any_int4 ? kSquizdFlagInt4 : 0;
  uint64_t sczt_entries = 0;
  if (any_int4) {
    const uint64_t first = cursor + 8;
    for (Planned& p : plan) {
      if (p.kind != SquizdBlockKind::kInt4) continue;
      p.scale_offset = first + sczt_entries * kSquizdScaleEntryBytes;
      sczt_entries += 1 + p.tensor->shape[0];
    }
    if (sczt_entries > UINT32_MAX) {
      return TooLarge(source.path() + ": " + std::to_string(sczt_entries) +
                      " SCZT entries, more than a u32 counts");
    }
  }

  // Header and layer table.
  std::string head(kSquizdHeaderBytes, '\0');
  std::memcpy(head.data(), "SQZD", 4);
  auto* h = reinterpret_cast<uint8_t*>(head.data());
  h[4] = kSquizdVersion & 0xFF;
  h[5] = kSquizdVersion >> 8;
  StoreLE32(h + 6, flags);
  h[10] = static_cast<uint8_t>(tensors.size() & 0xFF);
  h[11] = static_cast<uint8_t>(tensors.size() >> 8);
  h[12] = static_cast<uint8_t>(options.arch_id & 0xFF);
  h[13] = static_cast<uint8_t>(options.arch_id >> 8);
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    AppendLE32(&head, static_cast<uint32_t>(i));
    AppendLE64(&head, p.offset);
    AppendLE64(&head, p.header_bytes + p.data_bytes);
    AppendLE64(&head, p.scale_offset);
    AppendLE32(&head, 0);
  }

  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(out_path));
  BLZ_RETURN_IF_ERROR(out.Append(head));
  std::string sczt;
  if (any_int4) {
    sczt = "SCZT";
    AppendLE32(&sczt, static_cast<uint32_t>(sczt_entries));
  }
  SquizdReport rep;
  rep.path = out_path;
  rep.flags = flags;
  for (const Planned& p : plan) {
    const ValueTensor& t = *p.tensor;
    CastError err;
    if (p.kind == SquizdBlockKind::kInt4) {
      BLZ_RETURN_IF_ERROR(WriteInt4(p, &out, &sczt, &err));
    } else {
      BLZ_RETURN_IF_ERROR(WriteNpcl(p, &out, &err));
    }
    if (out.size() != p.offset + p.header_bytes + p.data_bytes) {
      return Internal(out_path + ": tensor '" + t.name + "' block ends at " +
                      std::to_string(out.size()) + ", planned " +
                      std::to_string(p.offset + p.header_bytes + p.data_bytes));
    }
    SquizdTensorReport tr;
    tr.name = t.name;
    tr.source_dtype = t.dtype;
    tr.shape = t.shape;
    tr.block_kind = SquizdBlockName(p.kind, p.npcl);
    tr.bytes = p.header_bytes + p.data_bytes;
    tr.scale_entries = p.kind == SquizdBlockKind::kInt4 ? 1 + t.shape[0] : 0;
    tr.max_abs_error = err.max_abs;
    tr.relative_l2_error = err.RelativeL2();
    rep.tensors.push_back(std::move(tr));
  }
  if (any_int4) BLZ_RETURN_IF_ERROR(out.Append(sczt));
  if (options.write_names) {
    std::string table = "BLZN";
    AppendLE32(&table, static_cast<uint32_t>(tensors.size()));
    for (const ValueTensor& t : tensors) {
      AppendLE32(&table, static_cast<uint32_t>(t.name.size()));
      table += t.name;
    }
    BLZ_RETURN_IF_ERROR(out.Append(table));
  }
  rep.file_bytes = out.size();
  BLZ_RETURN_IF_ERROR(out.Commit(/*no_replace=*/!options.overwrite));
  if (report != nullptr) *report = std::move(rep);
  return Status::Ok();
}

}  // namespace blz::exporter
