#include "patcher/lossy/layout.h"

#include <cstring>
#include <set>

#include "core/file_util.h"
#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "formats/dtype.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"

namespace blz::lossy {
namespace {

std::string OutputPath(const std::string& file) {
  if (formats::IsGgufName(file)) return file.substr(0, file.size() - 5) + ".safetensors";
  return file;
}

// Groups the model's tensors by output file, in the model's order.
Result<std::vector<LayoutFile>> TensorFiles(const formats::ModelTensors& m) {
  std::vector<LayoutFile> files;
  std::map<std::string, size_t> index;
  for (const formats::ValueTensor& t : m.tensors()) {
    if (!formats::ParseDType(t.dtype).ok()) {
      return InvalidArgument(m.path() + ": tensor '" + t.name + "' has dtype " + t.dtype +
                             ", which a safetensors file cannot hold (lossy deltas rebuild "
                             "safetensors files)");
    }
    const std::string path = OutputPath(t.file);
    auto [it, added] = index.emplace(path, files.size());
    if (added) {
      LayoutFile f;
      f.path = path;
      f.kind = "safetensors";
      files.push_back(std::move(f));
    }
    files[it->second].tensors.push_back({t.name, t.dtype, t.shape});
  }
  return files;
}

Status AddSmallFile(const std::string& path, const std::string& abs_path, uint64_t size,
                    TargetLayout* layout) {
  LayoutFile f;
  f.path = path;
  f.kind = "file";
  f.size = size;
  if (size > kMaxCarriedFileBytes) {
    layout->notes.push_back("file " + path + " (" + std::to_string(size) +
                            " bytes) not carried: over " +
                            std::to_string(kMaxCarriedFileBytes >> 20) + " MiB");
    return Status::Ok();
  }
  BLZ_ASSIGN_OR_RETURN(MappedFile mf, MappedFile::Open(abs_path));
  f.bytes.assign(mf.bytes().begin(), mf.bytes().end());
  layout->files.push_back(std::move(f));
  return Status::Ok();
}

}  // namespace

Result<TargetLayout> ReadTargetLayout(const formats::ModelTensors& target) {
  TargetLayout layout;
  layout.format = target.format();
  BLZ_ASSIGN_OR_RETURN(layout.files, TensorFiles(target));
  std::map<std::string, LayoutFile*> by_path;
  for (LayoutFile& f : layout.files) by_path[f.path] = &f;
  std::vector<LayoutFile> extra;
  if (target.format() == "hf-dir") {
    BLZ_ASSIGN_OR_RETURN(std::vector<formats::ModelFile> listed,
                         formats::ListModelFiles(target.path()));
    for (const formats::ModelFile& f : listed) {
      if (f.is_safetensors) {
        BLZ_ASSIGN_OR_RETURN(formats::SafetensorsFile sf, formats::SafetensorsFile::Open(f.abs_path));
        auto it = by_path.find(f.path);
        if (it != by_path.end()) it->second->metadata = sf.header().metadata;
        continue;
      }
      if (f.is_gguf) continue;
      BLZ_RETURN_IF_ERROR(AddSmallFile(f.path, f.abs_path, f.size, &layout));
    }
  } else if (target.format() == "safetensors") {
    BLZ_ASSIGN_OR_RETURN(formats::SafetensorsFile sf, formats::SafetensorsFile::Open(target.path()));
    if (!layout.files.empty()) layout.files[0].metadata = sf.header().metadata;
  } else if (target.format() == "blz") {
    BLZ_ASSIGN_OR_RETURN(formats::BlzArchive a, formats::BlzArchive::Open(target.path()));
    const formats::ArchiveHeader& h = a.header();
    for (const formats::ArchiveFile& f : h.files) {
      if (f.kind == "safetensors") {
        // The first piece is the 8-byte length and the JSON header.
        if (f.pieces.empty() || f.pieces[0].kind != formats::ArchivePiece::Kind::kRaw) continue;
        BLZ_ASSIGN_OR_RETURN(formats::SafetensorsHeader sh,
                             formats::ParseSafetensorsHeader(a.RawData(f.pieces[0].index),
                                                             f.size, f.path));
        auto it = by_path.find(f.path);
        if (it != by_path.end()) it->second->metadata = sh.metadata;
        continue;
      }
      if (f.kind != "file") continue;
      LayoutFile out;
      out.path = f.path;
      out.kind = "file";
      out.size = f.size;
      if (f.size > kMaxCarriedFileBytes) {
        layout.notes.push_back("file " + f.path + " (" + std::to_string(f.size) +
                               " bytes) not carried: over " +
                               std::to_string(kMaxCarriedFileBytes >> 20) + " MiB");
        continue;
      }
      for (const formats::ArchivePiece& p : f.pieces) {
        ByteSpan b = a.RawData(p.index);
        out.bytes.insert(out.bytes.end(), b.begin(), b.end());
      }
      layout.files.push_back(std::move(out));
    }
  }
  return layout;
}

Result<TargetLayout> LayoutFromBase(const formats::ModelTensors& base) {
  TargetLayout layout;
  layout.format = base.format();
  BLZ_ASSIGN_OR_RETURN(layout.files, TensorFiles(base));
  return layout;
}

nlohmann::ordered_json LayoutJson(const TargetLayout& layout) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  j["format"] = layout.format;
  j["files"] = nlohmann::ordered_json::array();
  for (const LayoutFile& f : layout.files) {
    nlohmann::ordered_json o = nlohmann::ordered_json::object();
    o["path"] = f.path;
    o["kind"] = f.kind;
    if (f.kind == "safetensors") {
      o["metadata"] = nlohmann::ordered_json::object();
      for (const auto& [k, v] : f.metadata) o["metadata"][k] = v;
      o["tensors"] = nlohmann::ordered_json::array();
      for (const LayoutTensor& t : f.tensors) {
        o["tensors"].push_back(nlohmann::ordered_json::array({t.name, t.dtype, t.shape}));
      }
    } else {
      o["size"] = f.size;
    }
    j["files"].push_back(std::move(o));
  }
  j["notes"] = layout.notes;
  return j;
}

Result<TargetLayout> LayoutFromJson(const nlohmann::ordered_json& j, const std::string& what) {
  auto bad = [&](const std::string& m) { return Corruption(what + ": \"blz\".\"target\": " + m); };
  if (!j.is_object() || !j.contains("files") || !j["files"].is_array()) {
    return bad("expected an object with a \"files\" array");
  }
  TargetLayout layout;
  if (j.contains("format") && j["format"].is_string()) layout.format = j["format"];
  std::set<std::string> paths, names;
  for (const auto& o : j["files"]) {
    if (!o.is_object() || !o.contains("path") || !o["path"].is_string() || !o.contains("kind") ||
        !o["kind"].is_string()) {
      return bad("a file entry lacks \"path\" or \"kind\"");
    }
    LayoutFile f;
    f.path = o["path"];
    f.kind = o["kind"];
    if (!IsSafeRelativePath(f.path)) return bad("unsafe file path '" + f.path + "'");
    if (!paths.insert(f.path).second) return bad("file '" + f.path + "' listed twice");
    if (f.kind == "safetensors") {
      if (o.contains("metadata")) {
        if (!o["metadata"].is_object()) return bad(f.path + ": \"metadata\" is not an object");
        for (const auto& [k, v] : o["metadata"].items()) {
          if (!v.is_string()) return bad(f.path + ": metadata value of '" + k + "' not a string");
          f.metadata[k] = v.get<std::string>();
        }
      }
      if (!o.contains("tensors") || !o["tensors"].is_array()) {
        return bad(f.path + ": \"tensors\" missing");
      }
      for (const auto& t : o["tensors"]) {
        if (!t.is_array() || t.size() != 3 || !t[0].is_string() || !t[1].is_string() ||
            !t[2].is_array()) {
          return bad(f.path + ": a tensor entry is not [name, dtype, shape]");
        }
        LayoutTensor lt;
        lt.name = t[0];
        lt.dtype = t[1];
        if (!formats::ParseDType(lt.dtype).ok()) {
          return bad("tensor '" + lt.name + "': unknown dtype " + lt.dtype);
        }
        if (t[2].size() > 8) return bad("tensor '" + lt.name + "': more than 8 dimensions");
        for (const auto& d : t[2]) {
          if (!d.is_number_unsigned()) return bad("tensor '" + lt.name + "': bad shape");
          lt.shape.push_back(d.get<uint64_t>());
        }
        if (!names.insert(lt.name).second) return bad("tensor '" + lt.name + "' listed twice");
        f.tensors.push_back(std::move(lt));
      }
    } else if (f.kind == "file") {
      if (!o.contains("size") || !o["size"].is_number_unsigned()) {
        return bad(f.path + ": \"size\" missing");
      }
      f.size = o["size"];
    } else {
      return bad(f.path + ": unknown kind '" + f.kind + "'");
    }
    layout.files.push_back(std::move(f));
  }
  if (j.contains("notes") && j["notes"].is_array()) {
    for (const auto& n : j["notes"]) {
      if (n.is_string()) layout.notes.push_back(n);
    }
  }
  return layout;
}

}  // namespace blz::lossy
