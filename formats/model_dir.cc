#include "formats/model_dir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <unordered_map>

#include "core/file_util.h"
#include "formats/json_strict.h"
#include "formats/safetensors.h"

namespace blz::formats {
namespace fs = std::filesystem;
namespace {

constexpr uint64_t kMaxIndexFileBytes = 64ull << 20;
constexpr size_t kMaxModelFiles = 1'000'000;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string Dirname(std::string_view rel) {
  auto pos = rel.rfind('/');
  return pos == std::string_view::npos ? std::string() : std::string(rel.substr(0, pos));
}

}  // namespace

bool IsSafetensorsName(std::string_view path) { return EndsWith(path, ".safetensors"); }
bool IsShardIndexName(std::string_view path) { return EndsWith(path, ".safetensors.index.json"); }
bool IsGgufName(std::string_view path) { return EndsWith(path, ".gguf"); }
bool IsSkippedDirName(std::string_view name) { return name == ".git" || name == ".cache"; }

Result<std::vector<ModelFile>> ListModelFiles(const std::string& root) {
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(root + ": no such directory");
    return IOError(root + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgument(root + ": not a directory");

  std::vector<ModelFile> files;
  try {
    // Does not follow directory symlinks (the default), so the walk stays below root.
    fs::path base = fs::path(root).lexically_normal();
    if (base.filename().empty() && base.has_parent_path()) base = base.parent_path();
    fs::recursive_directory_iterator it(base), end;
    for (; it != end; ++it) {
      const fs::directory_entry& e = *it;
      // Lexical, not fs::relative: that would resolve symlinks to their targets.
      const std::string rel = e.path().lexically_relative(base).generic_string();
      const std::string abs = root + "/" + rel;
      if (FindInvalidUtf8(rel).has_value()) {
        return InvalidArgument(abs + ": file name is not valid UTF-8");
      }
      if (!IsSafeRelativePath(rel)) {
        return InvalidArgument(abs + ": not a safe relative path inside " + root);
      }
      const fs::file_status link = e.symlink_status();
      const bool skipped_name = IsSkippedDirName(e.path().filename().string());
      if (fs::is_directory(link)) {
        if (skipped_name) it.disable_recursion_pending();  // VCS / cache clutter
        continue;
      }
      if (fs::is_symlink(link)) {
        std::error_code ec;
        const fs::file_status target = fs::status(e.path(), ec);
        if (ec || !fs::exists(target)) {
          return InvalidArgument(abs + ": dangling symbolic link");
        }
        if (fs::is_directory(target)) {
          if (skipped_name) continue;  // a linked .git / .cache directory: skipped too
          return InvalidArgument(abs +
                                 ": symbolic link to a directory (only links to regular files "
                                 "are followed)");
        }
        if (!fs::is_regular_file(target)) {
          return InvalidArgument(abs + ": symbolic link to a special file");
        }
      } else if (!fs::is_regular_file(link)) {
        return InvalidArgument(abs + ": not a regular file (FIFO, socket or device)");
      }
      if (files.size() >= kMaxModelFiles) {
        return TooLarge(root + ": more than " + std::to_string(kMaxModelFiles) + " files");
      }
      ModelFile f;
      f.path = rel;
      f.abs_path = abs;
      f.size = uint64_t(fs::file_size(e.path()));  // follows the link
      f.is_safetensors = IsSafetensorsName(rel);
      f.is_gguf = IsGgufName(rel);
      files.push_back(std::move(f));
    }
  } catch (const fs::filesystem_error& e) {
    return IOError(root + ": cannot list: " + e.what());
  }
  std::sort(files.begin(), files.end(),
            [](const ModelFile& a, const ModelFile& b) { return a.path < b.path; });
  return files;
}

Result<ShardIndex> ParseShardIndex(std::string_view text, std::string_view file_name) {
  const std::string f(file_name);
  BLZ_ASSIGN_OR_RETURN(nlohmann::json j, ParseJsonStrict(text, f, 0));
  if (!j.is_object()) return Corruption(f + ": not a JSON object");
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) {
    return Corruption(f + ": field \"weight_map\" is missing or not an object");
  }
  ShardIndex index;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it.value().is_string()) {
      return Corruption(f + ": \"weight_map\" entry '" + it.key() + "' is not a string");
    }
    index.weight_map.emplace(it.key(), it.value().get<std::string>());
  }
  return index;
}

Status CheckShardIndexes(const std::vector<ModelFile>& files) {
  std::unordered_map<std::string, const ModelFile*> by_path;
  for (const auto& f : files) by_path.emplace(f.path, &f);
  for (const auto& idx_file : files) {
    if (!IsShardIndexName(idx_file.path)) continue;
    BLZ_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(idx_file.abs_path, kMaxIndexFileBytes));
    BLZ_ASSIGN_OR_RETURN(ShardIndex index, ParseShardIndex(text, idx_file.abs_path));
    const std::string dir = Dirname(idx_file.path);
    // Group by shard so each shard is opened once.
    std::map<std::string, std::vector<std::string>> by_shard;
    for (const auto& [tensor, shard] : index.weight_map) by_shard[shard].push_back(tensor);
    for (const auto& [shard, tensors] : by_shard) {
      const std::string rel = dir.empty() ? shard : dir + "/" + shard;
      auto it = by_path.find(rel);
      if (!IsSafeRelativePath(shard) || it == by_path.end() || !it->second->is_safetensors) {
        return Corruption(idx_file.abs_path + ": tensor '" + tensors.front() +
                          "' is mapped to shard '" + shard +
                          "', which is not a .safetensors file in the model directory");
      }
      BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(it->second->abs_path));
      std::set<std::string_view> present;
      for (const auto& t : sf.tensors()) present.insert(t.name);
      for (const auto& t : tensors) {
        if (present.count(t) == 0) {
          return Corruption(idx_file.abs_path + ": tensor '" + t + "' is mapped to shard '" +
                            shard + "', which does not contain it");
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace blz::formats
