// The target's layout carried in a blz-written .wdelta (top-level "blz" object, docs/wdelta.md):
// which files the reconstruction has, which tensors each safetensors file holds in which dtype
// and shape, its "__metadata__", and the target's small non-tensor files (config.json,
// tokenizer files, a shard index), stored as extra records so the output is laid out like the
// target. Internal to patcher/lossy.
#ifndef BLZ_PATCHER_LOSSY_LAYOUT_H_
#define BLZ_PATCHER_LOSSY_LAYOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/tensor_stats.h"
#include "formats/wdelta.h"

namespace blz::lossy {

// Non-tensor files larger than this are not carried (named in the notes instead).
inline constexpr uint64_t kMaxCarriedFileBytes = 64ull << 20;
// The record tensor name under which carried files are stored (field = the file's path).
inline constexpr const char* kFileRecordTensor = "blz:file";

struct LayoutTensor {
  std::string name;
  std::string dtype;  // safetensors dtype name ("F32", "BF16", ...)
  std::vector<uint64_t> shape;
};

struct LayoutFile {
  std::string path;  // relative, '/'-separated
  std::string kind;  // "safetensors" | "file"
  std::map<std::string, std::string> metadata;  // safetensors "__metadata__"
  std::vector<LayoutTensor> tensors;            // safetensors: in the target's file order
  std::vector<uint8_t> bytes;                   // file: its bytes (when read)
  uint64_t size = 0;                            // file: its size
};

struct TargetLayout {
  std::string format;  // the target's ModelTensors::format()
  std::vector<LayoutFile> files;
  std::vector<std::string> notes;  // e.g. "file x (90 MiB) not carried: over 64 MiB"
};

// The layout of `target` (ModelTensors::Open of its path), reading its small files. GGUF files
// become "<stem>.safetensors". kInvalidArgument for a tensor whose dtype safetensors cannot
// hold (GGUF block types), naming it.
Result<TargetLayout> ReadTargetLayout(const formats::ModelTensors& target);

// A layout from the base alone (files written by the reference carry none): the base's
// safetensors files, tensors and dtypes; no other files.
Result<TargetLayout> LayoutFromBase(const formats::ModelTensors& base);

// {"format", "files": [{"path","kind":"safetensors","metadata":{..},"tensors":[[name,dtype,
// [shape]],..]} | {"path","kind":"file","size":N}], "notes":[..]}
nlohmann::ordered_json LayoutJson(const TargetLayout& layout);
// Parses LayoutJson output; file bytes are left empty. kCorruption naming `what`.
Result<TargetLayout> LayoutFromJson(const nlohmann::ordered_json& j, const std::string& what);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_LAYOUT_H_
