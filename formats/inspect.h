// Describing a model: what `blz inspect` prints.
//
// Describe() accepts a single .safetensors file, a single GGUF file, a .blz archive (recognized
// by its magic, any file name) or a Hugging Face model directory (see formats/model_dir.h;
// formats/identify.h DetectModelPath decides), parses it strictly (safetensors headers fully
// validated; GGUF files fully validated in GgufMode::kFull, padding included; archive layout
// validated, data hashes NOT checked: use BlzArchive::Verify for that) and lists its files and
// tensors. Tensor data is never read. It also computes the input's structural identity
// (formats/identify.h, the same as `blz id`); when the input has none (e.g. a directory with
// two GGUF files) the summary says why instead of failing.
#ifndef BLZ_FORMATS_INSPECT_H_
#define BLZ_FORMATS_INSPECT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/dtype.h"
#include "formats/structural_hash.h"

namespace blz::formats {

// A safetensors tensor, or a GGUF tensor (ggml_type set). GGUF tensors are listed in GGUF
// terms: shape = the GGUF dims in file order (ne0 first), dtype = the ggml type's DType for the
// plain types (F32, F16, BF16, ...) and U8 for block-quantized ones, bytes = the data size.
struct TensorSummary {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;  // empty = 0-rank
  uint64_t bytes = 0;           // safetensors: product(shape) * DTypeSize(dtype)
  std::string file;             // relative path of the file holding it
  std::string ggml_type;        // GGUF only: ggml's type name ("f16", "q4_K"); else empty

  // The name shown as the dtype: ggml_type for GGUF tensors, else DTypeName(dtype).
  std::string DisplayDType() const;
};

struct FileSummary {
  std::string path;     // relative, '/'-separated (for a single file: its base name)
  std::string kind;     // "safetensors", "gguf" or "file"
  uint64_t size = 0;    // bytes
  uint64_t tensors = 0;
  std::string sha256;   // hex; known only for "blz" (from the archive header), else empty
  // kind "gguf" only (0 otherwise): GGUF version, number of metadata key/value pairs, and the
  // data alignment in bytes (general.alignment or 32).
  uint32_t gguf_version = 0;
  uint64_t metadata_count = 0;
  uint64_t alignment = 0;
};

struct ModelSummary {
  std::string path;    // as given to Describe
  std::string format;  // "safetensors" | "gguf" | "blz" | "hf-dir"
  std::vector<FileSummary> files;      // sorted by path
  std::vector<TensorSummary> tensors;  // files in order, each file's tensors in data order
  uint64_t total_bytes = 0;   // sum of the files' sizes
  uint64_t tensor_bytes = 0;  // sum of the tensors' bytes
  uint64_t parameters = 0;    // sum of the tensors' element counts
  uint64_t archive_bytes = 0;  // "blz" only: size of the archive file
  // The structural identity (formats/identify.h), or, when the input has none, the reason.
  std::optional<StructuralIdentity> identity;
  std::string identity_error;  // set iff !identity
};

// Errors: kNotFound, kUnsupported (a file that is not .safetensors, GGUF or a .blz archive),
// and the parse errors of formats/safetensors.h, formats/gguf.h, formats/blz_archive.h,
// formats/model_dir.h.
Result<ModelSummary> Describe(const std::string& path);

// Human-readable: a few summary lines (path, format, one "gguf:" line per GGUF file, archive
// size, files, tensors, "id:" with the structural ID and "hash:" with the structural hash, or
// "id: n/a (<reason>)"), then a table of files and a table of tensors (name, dtype, shape,
// bytes, file). Ends with a newline. Names, paths and the identity error are escaped with
// core/text.h EscapeForTerminal: the text contains no control character but '\n'.
std::string SummaryText(const ModelSummary& summary);

// Machine-readable (key order is not significant):
// {"schema": 1, "path", "format",
//  weight-inspect's `inspect --json` fields, describing the structural identity:
//  "gguf_version" (number, null unless the identity is GGUF's), "tensor_count",
//  "metadata_count" (null without an identity), "structural_hash" and "structural_id"
//  (strings, null without an identity; then "structural_error" says why),
//  "alignment" (format "gguf" only),
//  "total_bytes", "tensor_bytes", "parameters", "archive_bytes" (blz only),
//  "dtypes": {"F32": <tensor count>, "q4_K": ...} (keyed by DisplayDType),
//  "files": [{"path", "kind", "size", "tensors", "sha256" (blz only),
//             "gguf_version", "metadata_count", "alignment" (gguf files only)}],
//  "tensors": [{"name", "dtype" (DisplayDType), "shape", "bytes", "file"}]}
nlohmann::json SummaryJson(const ModelSummary& summary);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_INSPECT_H_
