#include "formats/inspect.h"


#include <algorithm>
#include <cstring>
#include <map>

#include "core/mmap_file.h"
#include "core/text.h"
#include "formats/blz_archive.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/identify.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"

namespace blz::formats {

std::string TensorSummary::DisplayDType() const {
  return ggml_type.empty() ? std::string(DTypeName(dtype)) : ggml_type;
}

namespace {

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

// A GGUF file's entry and its tensors, in GGUF order.
FileSummary GgufFileSummary(const GgufFile& g, const std::string& rel, uint64_t size) {
  FileSummary f;
  f.path = rel;
  f.kind = "gguf";
  f.size = size;
  f.tensors = g.header.tensors.size();
  f.gguf_version = g.header.version;
  f.metadata_count = g.header.metadata.size();
  f.alignment = g.alignment;
  return f;
}

TensorSummary GgufTensorSummary(const GgufTensorInfo& t, const std::string& rel) {
  TensorSummary ts;
  ts.name = t.name;
  ts.dtype = GgmlToDType(t.type).value_or(DType::kU8);
  ts.shape = t.dims;
  ts.bytes = t.n_bytes;
  ts.file = rel;
  ts.ggml_type = std::string(GgmlTypeName(t.type));
  return ts;
}

void AddGguf(const GgufFile& g, const std::string& rel, uint64_t size, ModelSummary* out) {
  out->files.push_back(GgufFileSummary(g, rel, size));
  for (const GgufTensorInfo& t : g.header.tensors) out->tensors.push_back(GgufTensorSummary(t, rel));
}

void SetIdentity(Result<StructuralInput> in, ModelSummary* s) {
  if (in.ok()) {
    s->identity = Identify(*in);
  } else {
    s->identity_error = in.status().ToString();
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
  for (const auto& t : s.tensors) ++counts[t.DisplayDType()];
  return counts;
}

}  // namespace

Result<ModelSummary> Describe(const std::string& path) {
  BLZ_ASSIGN_OR_RETURN(ModelPathKind kind, DetectModelPath(path));
  ModelSummary s;
  s.path = path;
  switch (kind) {
    case ModelPathKind::kDirectory: {
      s.format = "hf-dir";
      BLZ_ASSIGN_OR_RETURN(std::vector<ModelFile> files, ListModelFiles(path));
      for (const ModelFile& f : files) {
        if (f.is_safetensors) {
          BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(f.abs_path));
          AddSafetensors(sf, f.path, &s);
        } else if (f.is_gguf) {
          BLZ_ASSIGN_OR_RETURN(GgufReader g, GgufReader::Open(f.abs_path, GgufMode::kFull));
          AddGguf(g.file(), f.path, g.bytes().size(), &s);
        } else {
          FileSummary fs;
          fs.path = f.path;
          fs.kind = "file";
          fs.size = f.size;
          s.files.push_back(std::move(fs));
        }
      }
      SetIdentity(StructuralInputFromPath(path), &s);
      break;
    }
    case ModelPathKind::kArchive: {
      s.format = "blz";
      BLZ_ASSIGN_OR_RETURN(BlzArchive a, BlzArchive::Open(path));
      const ArchiveHeader& h = a.header();
      s.archive_bytes = h.total_size;
      for (const ArchiveFile& f : h.files) {
        if (f.kind == "gguf") {
          // List the tensors in GGUF terms from the stored GGUF header (its first raw piece).
          auto g = ParseGguf(a.RawData(f.pieces[0].index), GgufMode::kHeaderOnly,
                             path + ": " + f.path);
          if (!g.ok()) return g.status();
          FileSummary fs = GgufFileSummary(*g, f.path, f.size);
          fs.sha256 = f.sha256;
          size_t k = 0;
          for (const ArchivePiece& p : f.pieces) {
            if (p.kind != ArchivePiece::Kind::kTensor) continue;
            const std::vector<GgufTensorInfo>& ts = g->header.tensors;
            if (k >= ts.size() || ts[k].name != h.tensors[p.index].name) {
              return Corruption(path + ": file '" + f.path + "': its GGUF header does not list "
                                "the archive's tensors (run verify)");
            }
            s.tensors.push_back(GgufTensorSummary(ts[k++], f.path));
          }
          if (k != g->header.tensors.size()) {
            return Corruption(path + ": file '" + f.path + "': its GGUF header does not list "
                              "the archive's tensors (run verify)");
          }
          s.files.push_back(std::move(fs));
          continue;
        }
        FileSummary fs;
        fs.path = f.path;
        fs.kind = f.kind;
        fs.size = f.size;
        fs.sha256 = f.sha256;
        for (const ArchivePiece& p : f.pieces) {
          if (p.kind != ArchivePiece::Kind::kTensor) continue;
          const ArchiveTensor& t = h.tensors[p.index];
          s.tensors.push_back({t.name, t.dtype, t.shape, t.length, f.path, ""});
          ++fs.tensors;
        }
        s.files.push_back(std::move(fs));
      }
      SetIdentity(StructuralInputFromArchive(a), &s);
      break;
    }
    case ModelPathKind::kGguf: {
      s.format = "gguf";
      BLZ_ASSIGN_OR_RETURN(GgufReader g, GgufReader::Open(path, GgufMode::kFull));
      AddGguf(g.file(), BaseName(path), g.bytes().size(), &s);
      SetIdentity(StructuralInputFromGguf(g.header()), &s);
      break;
    }
    case ModelPathKind::kSafetensors: {
      s.format = "safetensors";
      BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(path));
      AddSafetensors(sf, BaseName(path), &s);
      SetIdentity(StructuralInputFromSafetensors(sf.header()), &s);
      break;
    }
  }
  Finish(&s);
  return s;
}

std::string SummaryText(const ModelSummary& s) {
  std::string dtypes;
  for (const auto& [name, count] : DTypeCounts(s)) {
    dtypes += (dtypes.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  }
  std::string out;
  // Names come from the files: every one is escaped (core/text.h) so that a tensor named
  // "a\x1b[2Jb" can neither drive the terminal nor, with a newline, forge a table row.
  out += "path:     " + EscapeForTerminal(s.path) + "\n";
  out += "format:   " + s.format + "\n";
  for (const auto& f : s.files) {
    if (f.kind != "gguf") continue;
    out += "gguf:     version " + std::to_string(f.gguf_version) + ", " +
           std::to_string(f.metadata_count) + " metadata keys, alignment " +
           std::to_string(f.alignment) +
           (s.format == "gguf" ? "" : " (" + EscapeForTerminal(f.path) + ")") + "\n";
  }
  if (s.format == "blz") out += "archive:  " + std::to_string(s.archive_bytes) + " bytes\n";
  out += "files:    " + std::to_string(s.files.size()) + " (" + std::to_string(s.total_bytes) +
         " bytes)\n";
  out += "tensors:  " + std::to_string(s.tensors.size()) + " (" + std::to_string(s.parameters) +
         " parameters, " + std::to_string(s.tensor_bytes) + " bytes" +
         (dtypes.empty() ? "" : "; " + dtypes) + ")\n";
  if (s.identity) {
    out += "id:       " + s.identity->id + "\n";
    out += "hash:     " + s.identity->structural_hash + " (structural)\n";
  } else {
    out += "id:       n/a (" + EscapeForTerminal(s.identity_error) + ")\n";
  }

  std::vector<std::vector<std::string>> files = {{"FILE", "KIND", "BYTES", "TENSORS"}};
  for (const auto& f : s.files) {
    files.push_back({EscapeForTerminal(f.path), f.kind, std::to_string(f.size),
                     f.kind != "file" ? std::to_string(f.tensors) : "-"});
  }
  out += "\n" + Table(files, {false, false, true, true});

  if (!s.tensors.empty()) {
    std::vector<std::vector<std::string>> tensors = {{"TENSOR", "DTYPE", "SHAPE", "BYTES", "FILE"}};
    for (const auto& t : s.tensors) {
      tensors.push_back({EscapeForTerminal(t.name), t.DisplayDType(), ShapeText(t.shape),
                         std::to_string(t.bytes), EscapeForTerminal(t.file)});
    }
    out += "\n" + Table(tensors, {false, false, false, true, false});
  }
  return out;
}

nlohmann::json SummaryJson(const ModelSummary& s) {
  nlohmann::json j = nlohmann::json::object();
  j["schema"] = 1;
  j["path"] = s.path;
  j["format"] = s.format;
  j["gguf_version"] = nullptr;
  j["tensor_count"] = s.tensors.size();
  j["metadata_count"] = nullptr;
  j["structural_hash"] = nullptr;
  j["structural_id"] = nullptr;
  if (s.identity) {
    if (s.identity->gguf_version) j["gguf_version"] = *s.identity->gguf_version;
    j["tensor_count"] = s.identity->tensor_count;
    j["metadata_count"] = s.identity->metadata_count;
    j["structural_hash"] = s.identity->structural_hash;
    j["structural_id"] = s.identity->id;
  } else {
    j["structural_error"] = s.identity_error;
  }
  if (s.format == "gguf" && !s.files.empty()) j["alignment"] = s.files[0].alignment;
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
    if (f.kind == "gguf") {
      fj["gguf_version"] = f.gguf_version;
      fj["metadata_count"] = f.metadata_count;
      fj["alignment"] = f.alignment;
    }
    files.push_back(std::move(fj));
  }
  j["files"] = std::move(files);
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : s.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", t.DisplayDType()},
                       {"shape", t.shape},
                       {"bytes", t.bytes},
                       {"file", t.file}});
  }
  j["tensors"] = std::move(tensors);
  return j;
}

}  // namespace blz::formats
