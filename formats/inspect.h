// Describing a model: what `blz inspect` prints.
//
// Describe() accepts a single .safetensors file, a .blz archive (recognized by its magic, any
// file name) or a Hugging Face model directory (see formats/model_dir.h), parses it strictly
// (safetensors headers fully validated; archive layout validated, data hashes NOT checked: use
// BlzArchive::Verify for that) and lists its files and tensors. Tensor data is never read.
#ifndef BLZ_FORMATS_INSPECT_H_
#define BLZ_FORMATS_INSPECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/dtype.h"

namespace blz::formats {

struct TensorSummary {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // empty = 0-rank
  uint64_t bytes = 0;           // product(shape) * DTypeSize(dtype)
  std::string file;             // relative path of the file holding it
};

struct FileSummary {
  std::string path;     // relative, '/'-separated (for a single file: its base name)
  std::string kind;     // "safetensors" or "file"
  uint64_t size = 0;    // bytes
  uint64_t tensors = 0;
  std::string sha256;   // hex; known only for "blz" (from the archive header), else empty
};

struct ModelSummary {
  std::string path;    // as given to Describe
  std::string format;  // "safetensors" | "blz" | "hf-dir"
  std::vector<FileSummary> files;      // sorted by path
  std::vector<TensorSummary> tensors;  // files in order, each file's tensors in data order
  uint64_t total_bytes = 0;   // sum of the files' sizes
  uint64_t tensor_bytes = 0;  // sum of the tensors' bytes
  uint64_t parameters = 0;    // sum of the tensors' element counts
  uint64_t archive_bytes = 0;  // "blz" only: size of the archive file
};

// Errors: kNotFound, kUnsupported (a file that is neither .safetensors nor a .blz archive),
// and the parse errors of formats/safetensors.h, formats/blz_archive.h, formats/model_dir.h.
Result<ModelSummary> Describe(const std::string& path);

// Human-readable: a few summary lines, then a table of files and a table of tensors
// (name, dtype, shape, bytes, file). Ends with a newline.
std::string SummaryText(const ModelSummary& summary);

// Machine-readable:
// {"path", "format", "total_bytes", "tensor_bytes", "parameters", "archive_bytes" (blz only),
//  "dtypes": {"F32": <tensor count>, ...},
//  "files": [{"path", "kind", "size", "tensors", "sha256" (blz only)}],
//  "tensors": [{"name", "dtype", "shape", "bytes", "file"}]}
nlohmann::json SummaryJson(const ModelSummary& summary);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_INSPECT_H_
