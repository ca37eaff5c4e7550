#include "formats/blz_archive.h"
#include "formats/blz_archive_check.h"
#include "formats/blz_archive_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/json_strict.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"

namespace blz::formats {
namespace archive_internal {

std::string Num(uint64_t v) { return std::to_string(v); }

std::string Quote(std::string_view s) {
  constexpr size_t kMax = 200;
  if (s.size() <= kMax) return "'" + std::string(s) + "'";
  return "'" + std::string(s.substr(0, kMax)) + "...'";
}

void GgufTensorDTypeShape(const GgufTensorInfo& t, DType* dtype, std::vector<uint64_t>* shape) {
  if (auto d = GgmlToDType(t.type)) {
    *dtype = *d;
    shape->assign(t.dims.rbegin(), t.dims.rend());
  } else {
    *dtype = DType::kU8;
    *shape = {t.n_bytes};
  }
}

std::string PieceLabel(const ArchiveHeader& h, size_t fi, const ArchivePiece& p) {
  if (p.kind == ArchivePiece::Kind::kTensor) {
    return "tensor " + Quote(h.tensors[p.index].name) + " of file " + Quote(h.files[fi].path);
  }
  return "raw piece " + Num(p.index) + " of file " + Quote(h.files[fi].path);
}

using ojson = nlohmann::ordered_json;

namespace {

const char* PieceKindName(ArchivePiece::Kind k) {
  return k == ArchivePiece::Kind::kRaw ? "raw" : "tensor";
}

}  // namespace

std::string HeaderJson(const ArchiveHeader& h) {
  ojson files = ojson::array();
  for (const ArchiveFile& f : h.files) {
    ojson pieces = ojson::array();
    for (const ArchivePiece& p : f.pieces) {
      ojson pj = ojson::object();
      pj["kind"] = PieceKindName(p.kind);
      pj["index"] = p.index;
      pieces.push_back(std::move(pj));
    }
    ojson fj = ojson::object();
    fj["path"] = f.path;
    fj["kind"] = f.kind;
    fj["size"] = f.size;
    fj["sha256"] = f.sha256;
    fj["pieces"] = std::move(pieces);
    files.push_back(std::move(fj));
  }
  ojson raws = ojson::array();
  for (const ArchiveRaw& r : h.raws) {
    ojson rj = ojson::object();
    rj["offset"] = r.offset;
    rj["length"] = r.length;
    rj["xxh3"] = Hex64(r.xxh3);
    rj["file"] = r.file_index;
    raws.push_back(std::move(rj));
  }
  ojson tensors = ojson::array();
  for (const ArchiveTensor& t : h.tensors) {
    ojson tj = ojson::object();
    tj["name"] = t.name;
    tj["dtype"] = DTypeName(t.dtype);
    if (!t.ggml_type.empty()) tj["ggml_type"] = t.ggml_type;
    tj["shape"] = t.shape;
    tj["offset"] = t.offset;
    tj["length"] = t.length;
    tj["xxh3"] = Hex64(t.xxh3);
    tj["sha256"] = t.sha256;
    tj["file"] = t.file_index;
    tensors.push_back(std::move(tj));
  }
  ojson root = ojson::object();
  root["files"] = std::move(files);
  root["raws"] = std::move(raws);
  root["tensors"] = std::move(tensors);
  return root.dump();
}

std::string PrefixBytes(const std::string& json, uint64_t data_start) {
  std::string out(reinterpret_cast<const char*>(kMagic), sizeof(kMagic));
  AppendLE32(&out, kArchiveVersion);
  AppendLE32(&out, 0);
  AppendLE64(&out, json.size());
  out += json;
  out.resize(data_start, '\0');
  return out;
}

std::string BaseName(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto pos = p.find_last_of('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace archive_internal

using archive_internal::BaseName;
using archive_internal::GgufTensorDTypeShape;
using archive_internal::HeaderJson;
using archive_internal::kCopyChunk;
using archive_internal::kFixedHeaderBytes;
using archive_internal::kMagic;
using archive_internal::Num;
using archive_internal::PathExists;
using archive_internal::Quote;
using archive_internal::WorkCounter;

namespace {

// ---- Strict field access for the header JSON. `where` is a JSON path like "files[2]". ----

Status FieldError(const std::string& where, const std::string& what) {
  return Corruption("archive header (byte offset 24): " + where + ": " + what);
}

Status ExpectObject(const nlohmann::json& j, std::initializer_list<const char*> keys,
                    const std::string& where) {
  if (!j.is_object()) return FieldError(where, std::string("is ") + j.type_name() + ", not an object");
  for (const char* k : keys) {
    if (!j.contains(k)) return FieldError(where, std::string("missing field \"") + k + "\"");
  }
  if (j.size() != keys.size()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::find_if(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; }) ==
          keys.end()) {
        return FieldError(where, "unknown field " + Quote(it.key()));
      }
    }
  }
  return Status::Ok();
}

Status GetU64(const nlohmann::json& j, const char* key, const std::string& where, uint64_t* out) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_unsigned()) {
    return FieldError(where + "." + key, "is not a non-negative integer");
  }
  *out = v.get<uint64_t>();
  return Status::Ok();
}

Status GetU32(const nlohmann::json& j, const char* key, const std::string& where, uint32_t* out) {
  uint64_t v;
  BLZ_RETURN_IF_ERROR(GetU64(j, key, where, &v));
  if (v > UINT32_MAX) return FieldError(where + "." + key, "exceeds 2^32-1");
  *out = uint32_t(v);
  return Status::Ok();
}

Status GetString(const nlohmann::json& j, const char* key, const std::string& where,
                 std::string* out) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_string()) return FieldError(where + "." + key, "is not a string");
  *out = v.get<std::string>();
  return Status::Ok();
}

Status GetHex(const nlohmann::json& j, const char* key, const std::string& where, size_t digits,
              std::string* out) {
  BLZ_RETURN_IF_ERROR(GetString(j, key, where, out));
  if (!IsLowerHex(*out, digits)) {
    return FieldError(where + "." + key, "is not " + Num(digits) + " lower-case hex digits");
  }
  return Status::Ok();
}

Status GetXxh3(const nlohmann::json& j, const std::string& where, uint64_t* out) {
  std::string hex;
  BLZ_RETURN_IF_ERROR(GetHex(j, "xxh3", where, 16, &hex));
  BLZ_ASSIGN_OR_RETURN(*out, ParseHex64(hex));
  return Status::Ok();
}

Status GetArray(const nlohmann::json& j, const char* key, const std::string& where,
                const nlohmann::json** out) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_array()) return FieldError(where + "." + key, "is not an array");
  *out = &v;
  return Status::Ok();
}

// The ggml type named `name` (ggml's exact spelling, e.g. "q4_K"), or nullptr.
const GgmlTypeInfo* FindGgmlTypeByName(std::string_view name) {
  for (const GgmlTypeInfo& info : AllGgmlTypes()) {
    if (info.name == name) return &info;
  }
  return nullptr;
}




std::string ParentOf(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

Result<ArchiveHeader> ParseArchivePrefix(ByteSpan prefix, uint64_t file_size) {
  if (file_size < kFixedHeaderBytes) {
    return Corruption("archive: file is " + Num(file_size) +
                      " bytes, smaller than the 24-byte fixed header");
  }
  if (prefix.size() < kFixedHeaderBytes) {
    return InvalidArgument("archive: need the first 24 bytes, got " + Num(prefix.size()));
  }
  if (std::memcmp(prefix.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corruption("archive: bad magic at byte offset 0 (expected \"BLZARCH\\n\")");
  }
  const uint32_t version = LoadLE32(prefix.data() + 8);
  if (version != kArchiveVersion) {
    return Unsupported("archive: format version " + Num(version) +
                       " (u32 at byte offset 8) is not supported; this reader knows version " +
                       Num(kArchiveVersion));
  }
  const uint32_t flags = LoadLE32(prefix.data() + 12);
  if (flags != 0) {
    return Unsupported("archive: unknown flags 0x" + Hex64(flags).substr(8) +
                       " (u32 at byte offset 12); version 1 requires 0");
  }
  const uint64_t n = LoadLE64(prefix.data() + 16);
  if (n > kMaxArchiveHeaderBytes) {
    return TooLarge("archive: header length " + Num(n) + " (u64 at byte offset 16) exceeds the cap of " +
                    Num(kMaxArchiveHeaderBytes) + " bytes");
  }
  if (n > file_size - kFixedHeaderBytes) {
    return Corruption("archive: header length " + Num(n) +
                      " (u64 at byte offset 16) runs past the end of the " + Num(file_size) +
                      "-byte file");
  }
  uint64_t data_start;
  if (!CheckedAlignUp(kFixedHeaderBytes + n, kArchiveAlignment, &data_start) ||
      data_start > file_size) {
    return Corruption("archive: the header padding (to byte offset " +
                      Num(kFixedHeaderBytes + n) + " rounded up to 64) runs past the end of the " +
                      Num(file_size) + "-byte file");
  }
  if (prefix.size() < data_start) {
    return InvalidArgument("archive: need the first " + Num(data_start) + " bytes, got " +
                           Num(prefix.size()));
  }
  for (uint64_t i = kFixedHeaderBytes + n; i < data_start; ++i) {
    if (prefix[i] != 0) {
      return Corruption("archive: non-zero header padding at byte offset " + Num(i));
    }
  }
  const std::string_view text = AsChars(prefix.subspan(kFixedHeaderBytes, n));
  BLZ_ASSIGN_OR_RETURN(nlohmann::json j,
                       ParseJsonStrict(text, "archive header (bytes 24.." +
                                                 Num(kFixedHeaderBytes + n) + ")",
                                       kFixedHeaderBytes));
  BLZ_RETURN_IF_ERROR(ExpectObject(j, {"files", "raws", "tensors"}, "header"));
  const nlohmann::json *jfiles, *jraws, *jtensors;
  BLZ_RETURN_IF_ERROR(GetArray(j, "files", "header", &jfiles));
  BLZ_RETURN_IF_ERROR(GetArray(j, "raws", "header", &jraws));
  BLZ_RETURN_IF_ERROR(GetArray(j, "tensors", "header", &jtensors));
  if (jfiles->size() > UINT32_MAX || jraws->size() > UINT32_MAX || jtensors->size() > UINT32_MAX) {
    return FieldError("header", "more than 2^32-1 entries");
  }

  ArchiveHeader h;
  h.data_start = data_start;
  h.total_size = file_size;

  h.raws.resize(jraws->size());
  for (size_t i = 0; i < jraws->size(); ++i) {
    const std::string where = "raws[" + Num(i) + "]";
    const nlohmann::json& r = (*jraws)[i];
    BLZ_RETURN_IF_ERROR(ExpectObject(r, {"offset", "length", "xxh3", "file"}, where));
    ArchiveRaw& raw = h.raws[i];
    BLZ_RETURN_IF_ERROR(GetU64(r, "offset", where, &raw.offset));
    BLZ_RETURN_IF_ERROR(GetU64(r, "length", where, &raw.length));
    BLZ_RETURN_IF_ERROR(GetXxh3(r, where, &raw.xxh3));
    BLZ_RETURN_IF_ERROR(GetU32(r, "file", where, &raw.file_index));
  }

  h.tensors.resize(jtensors->size());
  for (size_t i = 0; i < jtensors->size(); ++i) {
    const nlohmann::json& t = (*jtensors)[i];
    std::string where = "tensors[" + Num(i) + "]";
    const bool has_ggml = t.is_object() && t.contains("ggml_type");
    if (has_ggml) {
      BLZ_RETURN_IF_ERROR(ExpectObject(
          t, {"name", "dtype", "ggml_type", "shape", "offset", "length", "xxh3", "sha256", "file"},
          where));
    } else {
      BLZ_RETURN_IF_ERROR(ExpectObject(
          t, {"name", "dtype", "shape", "offset", "length", "xxh3", "sha256", "file"}, where));
    }
    ArchiveTensor& tensor = h.tensors[i];
    BLZ_RETURN_IF_ERROR(GetString(t, "name", where, &tensor.name));
    where += " (" + Quote(tensor.name) + ")";
    std::string dtype;
    BLZ_RETURN_IF_ERROR(GetString(t, "dtype", where, &dtype));
    auto parsed = ParseDType(dtype);
    if (!parsed.ok()) return parsed.status().WithContext("archive header: " + where + ".dtype");
    tensor.dtype = *parsed;
    const GgmlTypeInfo* ggml = nullptr;
    if (has_ggml) {
      BLZ_RETURN_IF_ERROR(GetString(t, "ggml_type", where, &tensor.ggml_type));
      ggml = FindGgmlTypeByName(tensor.ggml_type);
      if (ggml == nullptr) {
        return Unsupported("archive header: " + where + ".ggml_type: unknown ggml type " +
                           Quote(tensor.ggml_type));
      }
    }
    const nlohmann::json* shape;
    BLZ_RETURN_IF_ERROR(GetArray(t, "shape", where, &shape));
    uint64_t bytes = DTypeSize(tensor.dtype);
    for (size_t d = 0; d < shape->size(); ++d) {
      const nlohmann::json& dim = (*shape)[d];
      if (!dim.is_number_unsigned()) {
        return FieldError(where + ".shape[" + Num(d) + "]", "is not a non-negative integer");
      }
      tensor.shape.push_back(dim.get<uint64_t>());
      if (!CheckedMul(bytes, tensor.shape.back(), &bytes)) {
        return FieldError(where + ".shape", "product(shape) x dtype size overflows 64 bits");
      }
    }
    BLZ_RETURN_IF_ERROR(GetU64(t, "offset", where, &tensor.offset));
    BLZ_RETURN_IF_ERROR(GetU64(t, "length", where, &tensor.length));
    if (tensor.length != bytes) {
      return FieldError(where + ".length", "is " + Num(tensor.length) +
                                               " but product(shape) x dtype size is " + Num(bytes));
    }
    if (ggml != nullptr) {
      // The dtype and shape follow from the ggml type (section 2.3).
      if (IsQuantized(ggml->type)) {
        if (tensor.dtype != DType::kU8 || tensor.shape.size() != 1) {
          return FieldError(where, "ggml type " + Quote(ggml->name) +
                                       " is block-quantized: dtype must be \"U8\" and shape "
                                       "[length]");
        }
      } else {
        if (tensor.dtype != *GgmlToDType(ggml->type)) {
          return FieldError(where + ".dtype", "is " + Quote(DTypeName(tensor.dtype)) +
                                                  " but ggml type " + Quote(ggml->name) +
                                                  " has dtype " +
                                                  Quote(DTypeName(*GgmlToDType(ggml->type))));
        }
        if (tensor.shape.size() > kMaxGgufDims ||
            std::find(tensor.shape.begin(), tensor.shape.end(), 0) != tensor.shape.end()) {
          return FieldError(where + ".shape", "a GGUF tensor has at most 4 dimensions, none 0");
        }
      }
    }
    BLZ_RETURN_IF_ERROR(GetXxh3(t, where, &tensor.xxh3));
    BLZ_RETURN_IF_ERROR(GetHex(t, "sha256", where, 64, &tensor.sha256));
    BLZ_RETURN_IF_ERROR(GetU32(t, "file", where, &tensor.file_index));
  }

  h.files.resize(jfiles->size());
  std::set<std::string_view> paths;
  for (size_t i = 0; i < jfiles->size(); ++i) {
    const nlohmann::json& f = (*jfiles)[i];
    std::string where = "files[" + Num(i) + "]";
    BLZ_RETURN_IF_ERROR(ExpectObject(f, {"path", "kind", "size", "sha256", "pieces"}, where));
    ArchiveFile& file = h.files[i];
    BLZ_RETURN_IF_ERROR(GetString(f, "path", where, &file.path));
    if (!IsSafeRelativePath(file.path)) {
      return FieldError(where + ".path", Quote(file.path) + " is not a safe relative path");
    }
    if (i > 0 && !(h.files[i - 1].path < file.path)) {
      return FieldError(where + ".path", Quote(file.path) +
                                             " is not after the previous path (files must be "
                                             "sorted bytewise by path, without duplicates)");
    }
    where += " (" + Quote(file.path) + ")";
    BLZ_RETURN_IF_ERROR(GetString(f, "kind", where, &file.kind));
    if (file.kind != "file" && file.kind != "safetensors" && file.kind != "gguf") {
      return Unsupported("archive header: " + where + ".kind: unknown file kind " +
                         Quote(file.kind));
    }
    BLZ_RETURN_IF_ERROR(GetU64(f, "size", where, &file.size));
    BLZ_RETURN_IF_ERROR(GetHex(f, "sha256", where, 64, &file.sha256));
    const nlohmann::json* pieces;
    BLZ_RETURN_IF_ERROR(GetArray(f, "pieces", where, &pieces));
    file.pieces.resize(pieces->size());
    for (size_t k = 0; k < pieces->size(); ++k) {
      const std::string pw = where + ".pieces[" + Num(k) + "]";
      const nlohmann::json& p = (*pieces)[k];
      BLZ_RETURN_IF_ERROR(ExpectObject(p, {"kind", "index"}, pw));
      std::string kind;
      BLZ_RETURN_IF_ERROR(GetString(p, "kind", pw, &kind));
      if (kind == "raw") {
        file.pieces[k].kind = ArchivePiece::Kind::kRaw;
      } else if (kind == "tensor") {
        file.pieces[k].kind = ArchivePiece::Kind::kTensor;
      } else {
        return FieldError(pw + ".kind", "is " + Quote(kind) + ", not \"raw\" or \"tensor\"");
      }
      BLZ_RETURN_IF_ERROR(GetU32(p, "index", pw, &file.pieces[k].index));
    }
    paths.insert(file.path);
  }
  // A path may not also be a directory of another path ("a" and "a/b").
  for (const ArchiveFile& file : h.files) {
    for (size_t pos = file.path.find('/'); pos != std::string::npos;
         pos = file.path.find('/', pos + 1)) {
      if (paths.count(std::string_view(file.path).substr(0, pos)) != 0) {
        return FieldError("files", "path " + Quote(file.path) + " lies below " +
                                       Quote(file.path.substr(0, pos)) + ", which is a file");
      }
    }
  }

  // The layout: walking files in order and each file's pieces in order visits raws[0], raws[1],
  // ... and tensors[0], tensors[1], ... in turn (so each is used exactly once), and each piece
  // starts at the previous piece's end rounded up to 64.
  uint32_t next_raw = 0, next_tensor = 0;
  uint64_t pos = 0;
  for (size_t fi = 0; fi < h.files.size(); ++fi) {
    const ArchiveFile& file = h.files[fi];
    const std::string where = "files[" + Num(fi) + "] (" + Quote(file.path) + ")";
    if (file.kind == "file" &&
        (file.pieces.size() != 1 || file.pieces[0].kind != ArchivePiece::Kind::kRaw)) {
      return FieldError(where + ".pieces", "a file of kind \"file\" is exactly one raw piece");
    }
    if (file.kind == "safetensors" &&
        (file.pieces.empty() || file.pieces[0].kind != ArchivePiece::Kind::kRaw)) {
      return FieldError(where + ".pieces",
                        "a safetensors file starts with one raw piece (its header)");
    }
    if (file.kind == "gguf" &&
        (file.pieces.empty() || file.pieces[0].kind != ArchivePiece::Kind::kRaw)) {
      return FieldError(where + ".pieces", "a gguf file starts with one raw piece (its header)");
    }
    std::set<std::string_view> names;
    uint64_t size = 0;
    for (size_t k = 0; k < file.pieces.size(); ++k) {
      const ArchivePiece& p = file.pieces[k];
      const std::string pw = where + ".pieces[" + Num(k) + "]";
      if (k > 0 && file.kind == "safetensors" && p.kind != ArchivePiece::Kind::kTensor) {
        return FieldError(pw, "a safetensors file has one raw piece, then only tensors");
      }
      if (k > 0 && file.kind == "gguf" && p.kind == ArchivePiece::Kind::kRaw &&
          file.pieces[k - 1].kind != ArchivePiece::Kind::kTensor) {
        return FieldError(pw, "in a gguf file a raw piece after the header is padding and "
                              "follows a tensor");
      }
      uint64_t off, len;
      uint32_t owner;
      std::string label;
      if (p.kind == ArchivePiece::Kind::kRaw) {
        if (p.index != next_raw || p.index >= h.raws.size()) {
          return FieldError(pw + ".index", "is raw " + Num(p.index) + ", expected raw " +
                                               Num(next_raw) +
                                               " (raws are used once each, in data order)");
        }
        ++next_raw;
        off = h.raws[p.index].offset;
        len = h.raws[p.index].length;
        owner = h.raws[p.index].file_index;
        label = "raws[" + Num(p.index) + "]";
      } else {
        if (p.index != next_tensor || p.index >= h.tensors.size()) {
          return FieldError(pw + ".index", "is tensor " + Num(p.index) + ", expected tensor " +
                                               Num(next_tensor) +
                                               " (tensors are used once each, in data order)");
        }
        ++next_tensor;
        const ArchiveTensor& t = h.tensors[p.index];
        off = t.offset;
        len = t.length;
        owner = t.file_index;
        label = "tensors[" + Num(p.index) + "] (" + Quote(t.name) + ")";
        if (!names.insert(t.name).second) {
          return FieldError(label, "duplicate tensor name in file " + Quote(file.path));
        }
        if (t.ggml_type.empty() == (file.kind == "gguf")) {
          return FieldError(label, file.kind == "gguf"
                                       ? "a tensor of a gguf file needs a \"ggml_type\""
                                       : "only tensors of gguf files have a \"ggml_type\"");
        }
      }
      if (owner != fi) {
        return FieldError(label + ".file", "is " + Num(owner) + " but the piece belongs to files[" +
                                               Num(fi) + "]");
      }
      uint64_t expected;
      if (!CheckedAlignUp(pos, kArchiveAlignment, &expected)) {
        return FieldError(label + ".offset", "overflows 64 bits");
      }
      if (off != expected) {
        return FieldError(label + ".offset",
                          "is " + Num(off) + " but must be " + Num(expected) +
                              " (the previous piece's end rounded up to a multiple of 64; "
                              "pieces are 64-aligned, in order, without overlap or extra gap)");
      }
      uint64_t end, abs_end;
      if (!CheckedAdd(off, len, &end) || !CheckedAdd(data_start, end, &abs_end) ||
          abs_end > file_size) {
        return Corruption("archive: " + label + " at byte offset " + Num(data_start + off) +
                          " with length " + Num(len) + " runs past the end of the " +
                          Num(file_size) + "-byte file");
      }
      pos = end;
      if (!CheckedAdd(size, len, &size)) return FieldError(where, "size overflows 64 bits");
    }
    if (size != file.size) {
      return FieldError(where + ".size", "is " + Num(file.size) + " but its pieces hold " +
                                            Num(size) + " bytes");
    }
  }
  if (next_raw != h.raws.size()) {
    return FieldError("raws[" + Num(next_raw) + "]", "is not used by any file");
  }
  if (next_tensor != h.tensors.size()) {
    return FieldError("tensors[" + Num(next_tensor) + "] (" + Quote(h.tensors[next_tensor].name) + ")",
                      "is not used by any file");
  }
  if (data_start + pos != file_size) {
    return Corruption("archive: the last piece ends at byte offset " + Num(data_start + pos) +
                      " but the file has " + Num(file_size) + " bytes (" +
                      (data_start + pos < file_size ? "trailing bytes" : "truncated") + ")");
  }
  // Determinism: only one byte string encodes a given header.
  if (HeaderJson(h) != text) {
    return Corruption(
        "archive header (byte offset 24): not in canonical form (blz writes compact JSON with "
        "fixed key order and no extra whitespace)");
  }
  return h;
}

// ---------------------------------------------------------------------------------------------

Result<BlzArchive> BlzArchive::Open(const std::string& path) {
  BlzArchive a;
  BLZ_ASSIGN_OR_RETURN(a.file_, MappedFile::Open(path));
  auto h = ParseArchivePrefix(a.file_.bytes(), a.file_.size());
  if (!h.ok()) return h.status().WithContext(path);
  a.header_ = std::move(h).value();
  return a;
}

ByteSpan BlzArchive::TensorData(size_t i) const {
  const ArchiveTensor& t = header_.tensors[i];
  return file_.bytes().subspan(header_.data_start + t.offset, t.length);
}

ByteSpan BlzArchive::RawData(size_t i) const {
  const ArchiveRaw& r = header_.raws[i];
  return file_.bytes().subspan(header_.data_start + r.offset, r.length);
}


// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------

Status Unpack(const BlzArchive& archive, const std::string& out_dir,
              const ProgressCallback& progress) {
  const ArchiveHeader& h = archive.header();
  WorkCounter work{progress, 0};
  for (const ArchiveFile& f : h.files) work.total += f.size;
  // Refuse unsafe paths before touching the disk (Open already checked; this keeps Unpack safe
  // on its own).
  for (const ArchiveFile& f : h.files) {
    if (!IsSafeRelativePath(f.path)) {
      return Corruption(archive.path() + ": file path " + Quote(f.path) +
                        " is not a safe relative path");
    }
  }
  if (PathExists(out_dir)) return AlreadyExists(out_dir + ": already exists");
  std::string dir = out_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string parent = ParentOf(dir);
  struct stat st {};
  if (::stat(parent.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return NotFound(out_dir + ": parent directory " + parent + " does not exist");
  }
  BLZ_ASSIGN_OR_RETURN(std::string tmp, MakeTempDir(parent, "." + BaseName(dir) + ".unpack-"));
  ScopedRemoveAll cleanup(tmp);
  if (::chmod(tmp.c_str(), 0755) != 0) {
    return IOError(tmp + ": cannot chmod: " + std::strerror(errno));
  }

  archive.file().AdviseSequential();
  for (size_t fi = 0; fi < h.files.size(); ++fi) {
    const ArchiveFile& f = h.files[fi];
    const std::string dest = tmp + "/" + f.path;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(dest).parent_path(), ec);
    if (ec) return IOError(dest + ": cannot create directory: " + ec.message());
    BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(dest));
    Sha256 sha;
    for (const ArchivePiece& p : f.pieces) {
      const ByteSpan data =
          p.kind == ArchivePiece::Kind::kRaw ? archive.RawData(p.index) : archive.TensorData(p.index);
      for (size_t done = 0; done < data.size(); done += kCopyChunk) {
        const ByteSpan chunk = data.subspan(done, std::min(kCopyChunk, data.size() - done));
        sha.Update(chunk);
        BLZ_RETURN_IF_ERROR(out.Append(chunk));
        archive.file().DropRange(size_t(chunk.data() - archive.file().data()), chunk.size());
        work.Add(chunk.size());
      }
    }
    const std::string got = sha.FinishHex();
    if (got != f.sha256 || out.size() != f.size) {
      return Corruption(archive.path() + ": file " + Quote(f.path) + ": rebuilt bytes have SHA-256 " +
                        got + ", header says " + f.sha256);
    }
    BLZ_RETURN_IF_ERROR(out.Commit());
  }
  BLZ_RETURN_IF_ERROR(SyncDir(tmp));
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) return AlreadyExists(out_dir + ": already exists");
    return IOError(out_dir + ": cannot rename " + tmp + " into place: " + std::strerror(errno));
  }
  cleanup.Release();
  BLZ_RETURN_IF_ERROR(SyncDir(parent));
  if (progress) progress(work.total, work.total);
  return Status::Ok();
}

}  // namespace blz::formats
