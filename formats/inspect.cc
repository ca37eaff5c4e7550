#include "formats/inspect.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"

namespace blz::formats {
namespace {

constexpr char kArchiveMagic[8] = {'B', 'L', 'Z', 'A', 'R', 'C', 'H', '\n'};

std::string BaseName(const std::string& path) {
  auto pos = path.find_last_of('/');
  return pos == std::string::npos ? path : path.substr(pos + 1);
}

void AddSafetensors(const SafetensorsFile& sf, const std::string& rel, ModelSummary* out) {
  FileSummary f;
  f.path = rel;
  f.kind = "safetensors";
  f.size = sf.file().size();
  f.tensors = sf.tensors().size();
  out->files.push_back(f);
  for (const SafetensorsTensor& t : sf.tensors()) {
    out->tensors.push_back({t.name, t.dtype, t.shape, t.bytes(), rel});
  }
}

void Finish(ModelSummary* s) {
  for (const auto& f : s->files) s->total_bytes += f.size;
  for (const auto& t : s->tensors) {
    s->tensor_bytes += t.bytes;
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;  // validated by the parsers not to overflow
    s->parameters += n;
  }
}

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// Left-aligned columns except those flagged right-aligned; two spaces between columns.
std::string Table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right) {
  std::vector<size_t> width(rows.empty() ? 0 : rows[0].size(), 0);
  for (const auto& r : rows) {
    for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      const std::string pad(width[c] - r[c].size(), ' ');
      if (c > 0) line += "  ";
      line += right[c] ? pad + r[c] : r[c] + (c + 1 < r.size() ? pad : "");
    }
    out += line + "\n";
  }
  return out;
}

std::map<std::string, uint64_t> DTypeCounts(const ModelSummary& s) {
  std::map<std::string, uint64_t> counts;
  for (const auto& t : s.tensors) ++counts[std::string(DTypeName(t.dtype))];
  return counts;
}

}  // namespace

Result<ModelSummary> Describe(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file or directory");
    return IOError(path + ": cannot stat: " + std::strerror(errno));
  }
  ModelSummary s;
  s.path = path;
  if (S_ISDIR(st.st_mode)) {
    s.format = "hf-dir";
    BLZ_ASSIGN_OR_RETURN(std::vector<ModelFile> files, ListModelFiles(path));
    for (const ModelFile& f : files) {
      if (f.is_safetensors) {
        BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(f.abs_path));
        AddSafetensors(sf, f.path, &s);
      } else {
        s.files.push_back({f.path, "file", f.size, 0, ""});
      }
    }
    Finish(&s);
    return s;
  }
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file or directory");

  bool is_archive = false;
  {
    BLZ_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
    is_archive = m.size() >= sizeof(kArchiveMagic) &&
                 std::memcmp(m.data(), kArchiveMagic, sizeof(kArchiveMagic)) == 0;
  }
  if (is_archive) {
    s.format = "blz";
    BLZ_ASSIGN_OR_RETURN(BlzArchive a, BlzArchive::Open(path));
    const ArchiveHeader& h = a.header();
    s.archive_bytes = h.total_size;
    for (const ArchiveFile& f : h.files) {
      FileSummary fs{f.path, f.kind, f.size, 0, f.sha256};
      for (const ArchivePiece& p : f.pieces) {
        if (p.kind != ArchivePiece::Kind::kTensor) continue;
        const ArchiveTensor& t = h.tensors[p.index];
        s.tensors.push_back({t.name, t.dtype, t.shape, t.length, f.path});
        ++fs.tensors;
      }
      s.files.push_back(std::move(fs));
    }
    Finish(&s);
    return s;
  }
  if (IsSafetensorsName(path)) {
    s.format = "safetensors";
    BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(path));
    AddSafetensors(sf, BaseName(path), &s);
    Finish(&s);
    return s;
  }
  return Unsupported(path + ": not a .safetensors file, a .blz archive or a model directory");
}

std::string SummaryText(const ModelSummary& s) {
  std::string dtypes;
  for (const auto& [name, count] : DTypeCounts(s)) {
    dtypes += (dtypes.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  }
  std::string out;
  out += "path:     " + s.path + "\n";
  out += "format:   " + s.format + "\n";
  if (s.format == "blz") out += "archive:  " + std::to_string(s.archive_bytes) + " bytes\n";
  out += "files:    " + std::to_string(s.files.size()) + " (" + std::to_string(s.total_bytes) +
         " bytes)\n";
  out += "tensors:  " + std::to_string(s.tensors.size()) + " (" + std::to_string(s.parameters) +
         " parameters, " + std::to_string(s.tensor_bytes) + " bytes" +
         (dtypes.empty() ? "" : "; " + dtypes) + ")\n";

  std::vector<std::vector<std::string>> files = {{"FILE", "KIND", "BYTES", "TENSORS"}};
  for (const auto& f : s.files) {
    files.push_back({f.path, f.kind, std::to_string(f.size),
                     f.kind == "safetensors" ? std::to_string(f.tensors) : "-"});
  }
  out += "\n" + Table(files, {false, false, true, true});

  if (!s.tensors.empty()) {
    std::vector<std::vector<std::string>> tensors = {{"TENSOR", "DTYPE", "SHAPE", "BYTES", "FILE"}};
    for (const auto& t : s.tensors) {
      tensors.push_back({t.name, std::string(DTypeName(t.dtype)), ShapeText(t.shape),
                         std::to_string(t.bytes), t.file});
    }
    out += "\n" + Table(tensors, {false, false, false, true, false});
  }
  return out;
}

nlohmann::json SummaryJson(const ModelSummary& s) {
  nlohmann::json j = nlohmann::json::object();
  j["path"] = s.path;
  j["format"] = s.format;
  j["total_bytes"] = s.total_bytes;
  j["tensor_bytes"] = s.tensor_bytes;
  j["parameters"] = s.parameters;
  if (s.format == "blz") j["archive_bytes"] = s.archive_bytes;
  nlohmann::json dtypes = nlohmann::json::object();
  for (const auto& [name, count] : DTypeCounts(s)) dtypes[name] = count;
  j["dtypes"] = std::move(dtypes);
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : s.files) {
    nlohmann::json fj = {{"path", f.path}, {"kind", f.kind}, {"size", f.size},
                         {"tensors", f.tensors}};
    if (!f.sha256.empty()) fj["sha256"] = f.sha256;
    files.push_back(std::move(fj));
  }
  j["files"] = std::move(files);
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : s.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(DTypeName(t.dtype))},
                       {"shape", t.shape},
                       {"bytes", t.bytes},
                       {"file", t.file}});
  }
  j["tensors"] = std::move(tensors);
  return j;
}

}  // namespace blz::formats
