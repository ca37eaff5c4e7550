#include "formats/export/source_model.h"

#include <filesystem>
#include <utility>

#include "core/file_util.h"
#include "formats/identify.h"
#include "formats/model_dir.h"

namespace blz::exporter {

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string StemOf(const std::string& path) {
  std::filesystem::path p(path);
  std::string s = p.filename().string();
  if (s.empty()) s = p.parent_path().filename().string();  // "dir/"
  auto dot = s.find('.');
  if (dot != std::string::npos && dot > 0) s = s.substr(0, dot);
  return s.empty() ? "model" : s;
}

}  // namespace

bool IsWeightFileName(std::string_view path) {
  for (std::string_view ext : {".safetensors", ".safetensors.index.json", ".gguf", ".bin",
                               ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx",
                               ".bin.index.json"}) {
    if (EndsWith(path, ext)) return true;
  }
  return false;
}

Result<SourceModel> SourceModel::Open(const std::string& path) {
  SourceModel m;
  BLZ_ASSIGN_OR_RETURN(m.tensors_, formats::ModelTensors::Open(path));
  m.name_ = StemOf(path);
  const std::string& format = m.tensors_.format();
  if (format == "hf-dir") {
    m.side_dir_ = path;
    BLZ_ASSIGN_OR_RETURN(std::vector<formats::ModelFile> files, formats::ListModelFiles(path));
    for (const formats::ModelFile& f : files) {
      if (!IsWeightFileName(f.path)) m.aux_.push_back({f.path, f.abs_path, {}});
    }
  } else if (format == "safetensors") {
    m.side_dir_ = std::filesystem::path(path).parent_path().string();
    if (m.side_dir_.empty()) m.side_dir_ = ".";
  } else if (format == "blz") {
    BLZ_ASSIGN_OR_RETURN(formats::BlzArchive archive, formats::BlzArchive::Open(path));
    m.archive_.emplace(std::move(archive));
    const formats::ArchiveHeader& h = m.archive_->header();
    for (const formats::ArchiveFile& f : h.files) {
      if (f.kind != "file" || IsWeightFileName(f.path)) continue;
      // A plain file is stored as one raw piece (or none when empty).
      ByteSpan bytes;
      if (f.pieces.size() == 1 && f.pieces[0].kind == formats::ArchivePiece::Kind::kRaw) {
        bytes = m.archive_->RawData(f.pieces[0].index);
      } else if (!f.pieces.empty()) {
        return Corruption(path + ": file '" + f.path + "' is not stored as one raw piece");
      }
      m.aux_.push_back({f.path, "", bytes});
    }
  }
  return m;
}

Result<std::optional<std::string>> SourceModel::ReadSmallFile(std::string_view name) const {
  if (!side_dir_.empty()) {
    std::string p = side_dir_ + "/" + std::string(name);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(p, ec)) return std::optional<std::string>();
    BLZ_ASSIGN_OR_RETURN(std::string text, blz::ReadSmallFile(p, kMaxSmallFileBytes));
    return std::optional<std::string>(std::move(text));
  }
  for (const AuxFile& f : aux_) {
    if (f.path != name) continue;
    if (f.bytes.size() > kMaxSmallFileBytes) {
      return TooLarge("'" + f.path + "' is " + std::to_string(f.bytes.size()) +
                      " bytes, more than the cap of " + std::to_string(kMaxSmallFileBytes));
    }
    return std::optional<std::string>(
        std::string(reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size()));
  }
  return std::optional<std::string>();
}

}  // namespace blz::exporter
