// `blz export`: any model blz reads (a Hugging Face directory, a .safetensors file, a GGUF file,
// a .blz archive) written as GGUF, safetensors, a PyTorch checkpoint or SQUIZD, optionally cast.
//
// Type policy (docs/gguf-export.md, "Types"):
//   - GGUF from a Hugging Face model: what llama.cpp's convert_hf_to_gguf.py writes. Tensors the
//     converter keeps in F32 (1-D tensors, norms, biases, position embeddings) stay F32; the
//     cast applies to the other (2-D) weights; without --cast they keep their source type
//     (F32, F16 or BF16). A Q8_0 / Q4_0 cast on rows that are not a multiple of 32 elements
//     falls back to F16, as the converter does, and the report says so.
//   - GGUF from GGUF: metadata kept (general.file_type updated), the same rules per tensor.
//   - safetensors / PyTorch: the cast applies to every floating-point tensor (F32, F16, BF16,
//     and GGUF Q8_0 / Q4_0, which are dequantized); integer tensors are copied. Q8_0 / Q4_0
//     casts cannot be expressed there (kInvalidArgument). A GGUF source of a known architecture
//     becomes a Hugging Face directory (names mapped back, permutation undone, config.json).
//
// Output appears atomically: a file through AtomicFile, a directory built next to OUT under a
// temporary name and renamed into place. An existing OUT is refused unless `overwrite`.
#ifndef BLZ_FORMATS_EXPORT_EXPORT_H_
#define BLZ_FORMATS_EXPORT_EXPORT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/export/cast.h"

namespace blz::exporter {

enum class ExportFormat : uint8_t { kGguf, kSafetensors, kPytorch, kSquizd };

// "gguf", "safetensors", "pytorch", "squizd".
std::string_view ExportFormatName(ExportFormat f);
// Errors: kInvalidArgument naming the known formats.
Result<ExportFormat> ParseExportFormat(std::string_view name);

// transformers' default max_shard_size ("5GB" = 5 * 10^9 bytes).
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ull;

struct ExportOptions {
  ExportFormat format = ExportFormat::kSafetensors;
  std::optional<CastType> cast;   // nullopt: keep the source types (see the policy above)
  unsigned threads = 0;           // 0: one per core
  uint64_t max_shard_bytes = kDefaultMaxShardBytes;  // safetensors: shard above this
  bool overwrite = false;
  // GGUF general.name; "" = the source's directory or file name.
  std::string model_name;
  // Called on the exporting thread: output bytes written so far of `total`.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct ExportTensorReport {
  std::string name;            // output name
  std::string source_name;
  std::string source_dtype;    // "F32", "BF16", "Q8_0", ...
  std::string output_dtype;
  uint64_t source_bytes = 0;
  uint64_t output_bytes = 0;
  bool lossy = false;          // the cast can change values
  CastError error;             // when lossy
  std::string note;            // e.g. the F16 fallback of a quantized cast
};

struct ExportReport {
  std::string source;
  std::string source_format;   // "hf-dir", "safetensors", "gguf", "blz"
  std::string format;          // ExportFormatName
  std::string cast;            // "" when none
  std::string arch;            // GGUF architecture when known
  std::vector<std::string> outputs;  // files written, relative to OUT's parent ("" = OUT)
  uint64_t output_bytes = 0;
  std::vector<ExportTensorReport> tensors;
};

// Exports `source` to `out`. Errors: kNotFound / kIOError, kInvalidArgument (a cast the format
// cannot hold, an unknown architecture for GGUF, a missing config or tokenizer: messages name
// what is missing and what is known), kUnsupported (a tensor type that cannot be decoded for a
// cast), kAlreadyExists (OUT exists), and the errors of the readers; nothing is left at OUT on
// error.
Result<ExportReport> ExportModel(const std::string& source, const std::string& out,
                                 const ExportOptions& options);

// The --json report: {"source", "format", "cast", "outputs", "output_bytes", "tensors": [{
// "name", "source_name", "source_dtype", "dtype", "source_bytes", "bytes", and for lossy casts
// "max_abs_error", "relative_l2_error", "note"}]}.
nlohmann::ordered_json ExportReportJson(const ExportReport& report);

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_EXPORT_H_
