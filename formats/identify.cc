#include "formats/identify.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/mmap_file.h"
#include "formats/gguf.h"
#include "formats/json_strict.h"
#include "formats/model_dir.h"

namespace blz::formats {
namespace {

constexpr char kArchiveMagic[8] = {'B', 'L', 'Z', 'A', 'R', 'C', 'H', '\n'};
constexpr char kGgufMagic[4] = {'G', 'G', 'U', 'F'};

std::string Clip(const std::string& s) {
  constexpr size_t kMax = 200;
  return s.size() <= kMax ? s : s.substr(0, kMax) + "...";
}

bool StartsWith(ByteSpan b, const char* magic, size_t n) {
  return b.size() >= n && std::memcmp(b.data(), magic, n) == 0;
}

// One model file of a directory or an archive, with its structural input.
struct ModelPart {
  std::string path;  // relative path (directory) or archive path (archive)
  bool is_gguf = false;
  StructuralInput input;
};

// The rule of formats/identify.h over a directory's or an archive's model files. `where` names
// the directory or archive in errors.
Result<StructuralInput> Combine(std::vector<ModelPart> parts, const std::string& where) {
  if (parts.empty()) {
    return InvalidArgument(where + ": holds no .safetensors or .gguf file, so it has no "
                                   "structural identity");
  }
  if (parts.size() == 1) return std::move(parts[0].input);
  for (const ModelPart& p : parts) {
    if (p.is_gguf) {
      return Unsupported(where + ": holds " + std::to_string(parts.size()) +
                         " model files, among them the GGUF file '" + p.path +
                         "'; a structural identity is defined for one GGUF file or for a set of "
                         "safetensors shards (docs/structural-hash.md)");
    }
  }
  StructuralInput out;
  out.format = "safetensors";
  std::map<std::string, std::pair<std::string, const ModelPart*>> meta;  // key -> value, file
  std::map<std::string, const ModelPart*> names;
  for (const ModelPart& p : parts) {
    for (const auto& [key, value] : p.input.metadata) {
      auto [it, fresh] = meta.emplace(key, std::make_pair(value.str, &p));
      if (!fresh && it->second.first != value.str) {
        return Unsupported(where + ": metadata key '" + Clip(key) + "' is '" +
                           Clip(it->second.first) + "' in '" + it->second.second->path +
                           "' but '" + Clip(value.str) +
                           "' in '" + p.path +
                           "'; safetensors shards must agree on their __metadata__");
      }
    }
    for (const StructuralTensor& t : p.input.tensors) {
      auto [it, fresh] = names.emplace(t.name, &p);
      if (!fresh) {
        return Unsupported(where + ": tensor '" + Clip(t.name) + "' is in both '" + it->second->path +
                           "' and '" + p.path +
                           "'; the safetensors files of a model must hold distinct tensors");
      }
      out.tensors.push_back(t);
    }
  }
  for (auto& [key, value] : meta) {
    out.metadata.emplace_back(key, StructuralValue::String(std::move(value.first)));
  }
  return out;
}

Result<StructuralInput> FromGgufBytes(ByteSpan bytes, std::string_view source) {
  BLZ_ASSIGN_OR_RETURN(GgufFile g, ParseGguf(bytes, GgufMode::kHeaderOnly, source));
  return StructuralInputFromGguf(std::move(g.header));  // arrays' buffers move, not copy
}

Result<StructuralInput> FromSafetensorsBytes(ByteSpan bytes, std::string_view source) {
  BLZ_ASSIGN_OR_RETURN(SafetensorsHeader h, ParseSafetensorsHeaderOnly(bytes, source));
  return StructuralInputFromSafetensors(h);
}

Result<StructuralInput> FromDirectory(const std::string& dir) {
  BLZ_ASSIGN_OR_RETURN(std::vector<ModelFile> files, ListModelFiles(dir));
  std::vector<ModelPart> parts;
  for (const ModelFile& f : files) {
    if (!f.is_safetensors && !f.is_gguf) continue;
    BLZ_ASSIGN_OR_RETURN(MappedFile map, MappedFile::Open(f.abs_path));
    ModelPart part;
    part.path = f.path;
    part.is_gguf = f.is_gguf;
    if (f.is_gguf) {
      BLZ_ASSIGN_OR_RETURN(part.input, FromGgufBytes(map.bytes(), f.abs_path));
    } else {
      BLZ_ASSIGN_OR_RETURN(part.input, FromSafetensorsBytes(map.bytes(), f.abs_path));
    }
    parts.push_back(std::move(part));
  }
  return Combine(std::move(parts), dir);
}

}  // namespace

Result<ModelPathKind> DetectModelPath(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file or directory");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return ModelPathKind::kDirectory;
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file or directory");
  BLZ_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
  if (StartsWith(m.bytes(), kArchiveMagic, sizeof(kArchiveMagic))) return ModelPathKind::kArchive;
  if (StartsWith(m.bytes(), kGgufMagic, sizeof(kGgufMagic)) || IsGgufName(path)) {
    return ModelPathKind::kGguf;
  }
  if (IsSafetensorsName(path)) return ModelPathKind::kSafetensors;
  return Unsupported(path + ": not a .safetensors file, a .gguf file, a .blz archive or a "
                            "model directory");
}

Result<SafetensorsHeader> ParseSafetensorsHeaderOnly(ByteSpan bytes, std::string_view file_name) {
  // Anything wrong before the JSON is reported by the strict parser itself.
  if (bytes.size() < 8) return ParseSafetensorsHeader(bytes, bytes.size(), file_name);
  const uint64_t n = LoadLE64(bytes.data());
  if (n > kSafetensorsMaxHeaderBytes || n > bytes.size() - 8) {
    return ParseSafetensorsHeader(bytes, bytes.size(), file_name);
  }
  const uint64_t header_end = 8 + n;
  const ByteSpan prefix = bytes.subspan(0, header_end);
  // The data size the header declares: the largest well-formed data_offsets end. A header
  // whose offsets are malformed gets the strict parser's error below either way.
  uint64_t max_end = 0;
  auto j = ParseJsonStrict(AsChars(prefix.subspan(8)), file_name, 8);
  if (j.ok() && j->is_object()) {
    for (auto it = j->begin(); it != j->end(); ++it) {
      if (it.key() == "__metadata__" || !it.value().is_object()) continue;
      auto off = it.value().find("data_offsets");
      if (off == it.value().end() || !off->is_array() || off->size() != 2) continue;
      const nlohmann::json& end = (*off)[1];
      if (end.is_number_unsigned()) max_end = std::max(max_end, end.get<uint64_t>());
    }
  }
  uint64_t declared_size;
  if (!CheckedAdd(header_end, max_end, &declared_size)) declared_size = header_end;
  return ParseSafetensorsHeader(prefix, declared_size, file_name);
}

StructuralInput StructuralInputFromSafetensors(const SafetensorsHeader& header) {
  StructuralInput in;
  in.format = "safetensors";
  for (const auto& [key, value] : header.metadata) {
    in.metadata.emplace_back(key, StructuralValue::String(value));
  }
  in.tensors.reserve(header.tensors.size());
  for (const SafetensorsTensor& t : header.tensors) {
    StructuralTensor st;
    st.name = t.name;
    st.dtype = std::string(DTypeName(t.dtype));
    for (char& c : st.dtype) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    st.shape = t.shape;
    st.byte_length = t.bytes();
    in.tensors.push_back(std::move(st));
  }
  return in;
}

Result<StructuralInput> StructuralInputFromArchive(const BlzArchive& archive) {
  const ArchiveHeader& h = archive.header();
  std::vector<ModelPart> parts;
  for (const ArchiveFile& f : h.files) {
    if (f.kind != "safetensors" && f.kind != "gguf") continue;
    // Both kinds start with a raw piece holding the file's header (ParseArchivePrefix checked).
    const ByteSpan head = archive.RawData(f.pieces[0].index);
    const std::string source = archive.path() + ": " + f.path;
    ModelPart part;
    part.path = f.path;
    part.is_gguf = f.kind == "gguf";
    if (part.is_gguf) {
      BLZ_ASSIGN_OR_RETURN(part.input, FromGgufBytes(head, source));
    } else {
      BLZ_ASSIGN_OR_RETURN(part.input, FromSafetensorsBytes(head, source));
    }
    parts.push_back(std::move(part));
  }
  return Combine(std::move(parts), archive.path());
}

Result<StructuralInput> StructuralInputFromPath(const std::string& path) {
  BLZ_ASSIGN_OR_RETURN(ModelPathKind kind, DetectModelPath(path));
  switch (kind) {
    case ModelPathKind::kDirectory: return FromDirectory(path);
    case ModelPathKind::kArchive: {
      BLZ_ASSIGN_OR_RETURN(BlzArchive a, BlzArchive::Open(path));
      return StructuralInputFromArchive(a);
    }
    case ModelPathKind::kGguf: {
      BLZ_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
      return FromGgufBytes(m.bytes(), path);
    }
    case ModelPathKind::kSafetensors: {
      BLZ_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
      return FromSafetensorsBytes(m.bytes(), path);
    }
  }
  return Internal(path + ": unknown path kind");
}

Result<StructuralIdentity> IdentifyPath(const std::string& path) {
  BLZ_ASSIGN_OR_RETURN(StructuralInput in, StructuralInputFromPath(path));
  return Identify(in);
}

}  // namespace blz::formats
