// Hugging Face model directories.
//
// A model directory is every regular file below a root directory: config.json,
// generation_config.json, tokenizer files, one or many *.safetensors shards, an optional
// "<name>.safetensors.index.json" shard index, and any other file, in sub-directories too.
// Symbolic links to regular files are followed (the link's own path is used, the target's bytes
// are read); links to directories, dangling links and special files (FIFOs, sockets, devices)
// are refused, so a listing never leaves the root through a directory link or loops.
// Version-control and cache clutter is skipped: a directory named ".git" or ".cache" (or a
// symbolic link to one) at any level is not entered, so nothing below it is listed (HF
// downloads create ".cache/huggingface/"; a clone has ".git/"). Files with those names are
// listed as usual.
#ifndef BLZ_FORMATS_MODEL_DIR_H_
#define BLZ_FORMATS_MODEL_DIR_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace blz::formats {

struct ModelFile {
  std::string path;      // relative to the root, '/'-separated; passes IsSafeRelativePath
  std::string abs_path;  // root + "/" + path: the path to open
  uint64_t size = 0;     // bytes
  bool is_safetensors = false;  // the name ends with ".safetensors"
  bool is_gguf = false;         // the name ends with ".gguf"
};

// Is `path` a safetensors file name (ends with ".safetensors")?
bool IsSafetensorsName(std::string_view path);
// Is `path` a GGUF file name (ends with ".gguf")?
bool IsGgufName(std::string_view path);
// Is `name` (one path component) a directory ListModelFiles skips (".git", ".cache")?
bool IsSkippedDirName(std::string_view name);

// Lists every regular file below `root` (except below skipped directories, see above), sorted
// bytewise by relative path. Errors:
// kNotFound (no such directory), kInvalidArgument (not a directory; a symlink to a directory,
// a dangling symlink or a special file below it; a name that is not valid UTF-8 or not a safe
// relative path), kIOError.
Result<std::vector<ModelFile>> ListModelFiles(const std::string& root);

// A parsed shard index ("model.safetensors.index.json"): tensor name -> shard file name
// (relative to the index file's directory).
struct ShardIndex {
  std::map<std::string, std::string> weight_map;
};

// Parses a shard index file's text. Requires a JSON object with an object "weight_map" whose
// values are strings; other keys ("metadata") are ignored. Errors: kCorruption.
Result<ShardIndex> ParseShardIndex(std::string_view text, std::string_view file_name);

// Is `path` a shard index file name (ends with ".safetensors.index.json")?
bool IsShardIndexName(std::string_view path);

// Checks every shard index among `files` (a ListModelFiles result below `root`): each tensor
// it names must be in the shard it points to, which must be one of `files`. Shards are opened
// and their headers validated. Errors: kCorruption naming the index file, tensor and shard.
Status CheckShardIndexes(const std::vector<ModelFile>& files);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_MODEL_DIR_H_
