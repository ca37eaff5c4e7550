// The source of an export: its tensors (formats/tensor_stats.h ModelTensors) and the other files
// that travel with a Hugging Face model (config.json, tokenizer files, ...), from a model
// directory, a .blz archive of one, or the directory a single .safetensors file sits in.
#ifndef BLZ_FORMATS_EXPORT_SOURCE_MODEL_H_
#define BLZ_FORMATS_EXPORT_SOURCE_MODEL_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "formats/tensor_stats.h"

namespace blz::exporter {

// Cap on one small text file read for planning (config.json, tokenizer.json, ...).
inline constexpr uint64_t kMaxSmallFileBytes = uint64_t{256} << 20;

// A file other than weights that a directory output carries over (byte for byte).
struct AuxFile {
  std::string path;      // relative, '/'-separated
  std::string abs_path;  // a file on disk, or
  ByteSpan bytes;        // bytes inside the opened archive (when abs_path is empty)
};

class SourceModel {
 public:
  // Opens `path` (anything ModelTensors::Open takes). Errors: ModelTensors::Open's.
  static Result<SourceModel> Open(const std::string& path);

  const formats::ModelTensors& tensors() const { return tensors_; }
  // "hf-dir" | "blz" | "safetensors" | "gguf"
  const std::string& format() const { return tensors_.format(); }
  // The model's name: the directory's or file's base name without extension.
  const std::string& name() const { return name_; }
  // Non-weight files (see IsWeightFileName) of a directory / archive; for a single .safetensors
  // file: none. Sorted by path.
  const std::vector<AuxFile>& aux_files() const { return aux_; }
  // A small file at the top level of the model (of the directory holding a single .safetensors
  // file too), e.g. "config.json"; nullopt when absent. Errors: kTooLarge, kIOError.
  Result<std::optional<std::string>> ReadSmallFile(std::string_view name) const;

 private:
  formats::ModelTensors tensors_;
  std::string name_;
  std::string side_dir_;  // where top-level small files are looked up ("" for archives / gguf)
  std::vector<AuxFile> aux_;
  std::optional<formats::BlzArchive> archive_;
};

// Weight files that a converted directory must not carry over: *.safetensors, its index,
// *.gguf, *.bin, *.pt, *.pth, *.ckpt, *.h5, *.msgpack, *.onnx, *.bin.index.json.
bool IsWeightFileName(std::string_view path);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_SOURCE_MODEL_H_
