#include "formats/content_diff.h"

#include <cstring>
#include <map>
#include <unordered_map>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/identify.h"
#include "formats/model_dir.h"
#include "formats/tensor_stats.h"

namespace blz::formats {
namespace {

// Non-tensor file path -> hex SHA-256 of its content.
using FileDigests = std::map<std::string, std::string>;

Result<FileDigests> NonTensorFiles(const std::string& path, ModelPathKind kind) {
  FileDigests out;
  if (kind == ModelPathKind::kArchive) {
    BLZ_ASSIGN_OR_RETURN(BlzArchive archive, BlzArchive::Open(path));
    for (const ArchiveFile& f : archive.header().files) {
      if (f.kind == "file") out[f.path] = f.sha256;
    }
  } else if (kind == ModelPathKind::kDirectory) {
    BLZ_ASSIGN_OR_RETURN(std::vector<ModelFile> files, ListModelFiles(path));
    for (const ModelFile& f : files) {
      if (f.is_safetensors || f.is_gguf) continue;
      BLZ_ASSIGN_OR_RETURN(out[f.path], Sha256FileHex(f.abs_path));
    }
  }
  return out;
}

// Two archives: every tensor's length, xxh3-64 and SHA-256 from the headers.
Status CompareArchiveTensors(const std::string& a_path, const std::string& b_path,
                             const std::set<std::string>& skip, ContentDiff* out) {
  BLZ_ASSIGN_OR_RETURN(BlzArchive a, BlzArchive::Open(a_path));
  BLZ_ASSIGN_OR_RETURN(BlzArchive b, BlzArchive::Open(b_path));
  std::unordered_map<std::string, const ArchiveTensor*> b_index;
  for (const ArchiveTensor& t : b.header().tensors) b_index[t.name] = &t;
  for (const ArchiveTensor& t : a.header().tensors) {
    auto it = b_index.find(t.name);
    if (it == b_index.end() || skip.count(t.name) > 0) continue;
    const ArchiveTensor& u = *it->second;
    ++out->tensors_compared;
    if (t.length != u.length || t.xxh3 != u.xxh3 || t.sha256 != u.sha256) {
      out->tensors_changed.push_back(t.name);
    }
  }
  out->by_digest = true;
  return Status::Ok();
}

// Any other pair: the tensors' bytes, one tensor at a time from the memory maps.
Status CompareTensorBytes(const std::string& a_path, const std::string& b_path,
                          const std::set<std::string>& skip, ContentDiff* out) {
  BLZ_ASSIGN_OR_RETURN(ModelTensors a, ModelTensors::Open(a_path));
  BLZ_ASSIGN_OR_RETURN(ModelTensors b, ModelTensors::Open(b_path));
  std::unordered_map<std::string, const ValueTensor*> b_index;
  for (const ValueTensor& t : b.tensors()) b_index[t.name] = &t;
  for (const ValueTensor& t : a.tensors()) {
    auto it = b_index.find(t.name);
    if (it == b_index.end() || skip.count(t.name) > 0) continue;
    const ValueTensor& u = *it->second;
    ++out->tensors_compared;
    const bool same = t.data.size() == u.data.size() &&
                      (t.data.empty() ||
                       std::memcmp(t.data.data(), u.data.data(), t.data.size()) == 0);
    if (!same) out->tensors_changed.push_back(t.name);
  }
  return Status::Ok();
}

std::string Plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

std::set<std::string> StructurallyChangedTensors(const StructuralDiff& structure) {
  std::set<std::string> out;
  for (const TensorChange& c : structure.tensor_changes) out.insert(c.name);
  return out;
}

Result<ContentDiff> DiffContent(const std::string& a, const std::string& b,
                                const std::set<std::string>& skip) {
  BLZ_ASSIGN_OR_RETURN(ModelPathKind ka, DetectModelPath(a));
  BLZ_ASSIGN_OR_RETURN(ModelPathKind kb, DetectModelPath(b));
  ContentDiff out;
  if (ka == ModelPathKind::kArchive && kb == ModelPathKind::kArchive) {
    BLZ_RETURN_IF_ERROR(CompareArchiveTensors(a, b, skip, &out));
  } else {
    BLZ_RETURN_IF_ERROR(CompareTensorBytes(a, b, skip, &out));
  }
  BLZ_ASSIGN_OR_RETURN(FileDigests fa, NonTensorFiles(a, ka));
  BLZ_ASSIGN_OR_RETURN(FileDigests fb, NonTensorFiles(b, kb));
  for (const auto& [path, digest] : fa) {
    auto it = fb.find(path);
    if (it == fb.end()) {
      out.files_removed.push_back(path);
      continue;
    }
    ++out.files_compared;
    if (it->second != digest) out.files_changed.push_back(path);
  }
  for (const auto& [path, digest] : fb) {
    if (fa.count(path) == 0) out.files_added.push_back(path);
  }
  return out;
}

std::string DiffVerdictLine(const StructuralDiff& s, const ContentDiff& c) {
  const uint64_t n = c.tensors_compared;
  if (s.identical() && c.identical()) {
    return "IDENTICAL: same structure, tensor values (" + Plural(n, "tensor", "tensors") +
           ") and files (" + std::to_string(c.files_compared) + ")";
  }
  std::vector<std::string> parts;
  if (!s.identical()) {
    std::vector<std::string> what;
    if (!s.format_equal) what.push_back("format " + s.format_old + " -> " + s.format_new);
    if (!s.tensors_added.empty()) {
      what.push_back(Plural(s.tensors_added.size(), "tensor", "tensors") + " added");
    }
    if (!s.tensors_removed.empty()) {
      what.push_back(Plural(s.tensors_removed.size(), "tensor", "tensors") + " removed");
    }
    if (!s.tensor_changes.empty()) {
      what.push_back(Plural(s.tensor_changes.size(), "tensor", "tensors") +
                     " with a new dtype or shape");
    }
    const size_t meta =
        s.metadata_added.size() + s.metadata_removed.size() + s.metadata_changed.size();
    if (meta > 0) what.push_back(Plural(meta, "metadata change", "metadata changes"));
    std::string p = "structure";
    for (size_t i = 0; i < what.size(); ++i) p += (i == 0 ? " (" : ", ") + what[i];
    if (!what.empty()) p += ")";
    parts.push_back(p);
  }
  if (!c.tensors_changed.empty()) {
    parts.push_back("values of " + std::to_string(c.tensors_changed.size()) + " of " +
                    Plural(n, "tensor", "tensors"));
  }
  if (c.FilesDiffer()) {
    std::vector<std::string> names = c.files_changed;
    names.insert(names.end(), c.files_added.begin(), c.files_added.end());
    names.insert(names.end(), c.files_removed.begin(), c.files_removed.end());
    std::string p = names.size() == 1 ? "file " : "files ";
    for (size_t i = 0; i < names.size() && i < 3; ++i) p += (i == 0 ? "" : ", ") + names[i];
    if (names.size() > 3) p += " and " + std::to_string(names.size() - 3) + " more";
    parts.push_back(p);
  }
  std::string line = "DIFFERENT: ";
  for (size_t i = 0; i < parts.size(); ++i) line += (i == 0 ? "" : ", ") + parts[i];
  return line;
}

std::string ContentDiffText(const ContentDiff& c, bool verbose) {
  constexpr size_t kShown = 10;
  std::string s;
  s += "Tensor values:    " + std::to_string(c.tensors_changed.size()) + " of " +
       Plural(c.tensors_compared, "tensor", "tensors") + " changed (compared by " +
       (c.by_digest ? "digest" : "bytes") + ")\n";
  for (size_t i = 0; i < c.tensors_changed.size(); ++i) {
    if (!verbose && i == kShown) {
      s += "  ... " + std::to_string(c.tensors_changed.size() - kShown) +
           " more (-v lists all)\n";
      break;
    }
    s += "  ~ " + c.tensors_changed[i] + "\n";
  }
  s += "Files:            " + std::to_string(c.files_changed.size()) + " changed, " +
       std::to_string(c.files_added.size()) + " added, " +
       std::to_string(c.files_removed.size()) + " removed (" +
       std::to_string(c.files_compared) + " in both)\n";
  for (const std::string& p : c.files_changed) s += "  ~ " + p + "\n";
  for (const std::string& p : c.files_added) s += "  + " + p + "\n";
  for (const std::string& p : c.files_removed) s += "  - " + p + "\n";
  return s;
}

nlohmann::ordered_json ContentDiffJson(const ContentDiff& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["compared_by"] = c.by_digest ? "digest" : "bytes";
  j["tensors_compared"] = c.tensors_compared;
  j["tensors_changed"] = c.tensors_changed;
  j["files_compared"] = c.files_compared;
  j["files_added"] = c.files_added;
  j["files_removed"] = c.files_removed;
  j["files_changed"] = c.files_changed;
  return j;
}

void AddDiffVerdictJson(const StructuralDiff& s, const ContentDiff& c,
                        nlohmann::ordered_json* out) {
  (*out)["identical"] = s.identical() && c.identical();
  (*out)["verdict"] = DiffVerdictLine(s, c);
  (*out)["differences"] = {
      {"structure", !s.identical()},
      {"tensor_values", c.tensors_changed.size()},
      {"files", c.files_added.size() + c.files_removed.size() + c.files_changed.size()}};
}

}  // namespace blz::formats
