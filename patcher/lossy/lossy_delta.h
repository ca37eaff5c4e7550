// Lossy deltas between two models, in the .wdelta container (formats/wdelta.h): the driver
// behind `blz delta create|apply`, the registry's /blz/delta and `blz pull --lossy`.
//
// A lossy reconstruction is a DIFFERENT model from the target: callers give it its own digest
// and label it lossy everywhere; nothing here pretends otherwise. Every create and apply
// measures the error it introduced (error_metrics.h) against the true target when it has it.
//
// Tensors: base and target are matched by name. Target tensors of float dtypes (F32, F16,
// BF16) are encoded with the chosen strategy on d = float32(target) - float32(base); tensors
// whose values are identical (same dtype, same bytes) are omitted from the file (the
// reference copies them through from the base, and so does ApplyDelta); everything else
// (other dtypes, a dtype or shape that differs from the base, tensors the base lacks,
// 1-D and small tensors under bitdelta/lowrank) is stored "exact": the lossless patch codec
// (patcher/tensor_codec.h) of the target bytes against the base bytes, decoded bit for bit.
// Each such choice is named in the report's "note".
//
// Files blz writes carry a top-level "blz" object (docs/wdelta.md) with the target's layout
// (files, tensor order, dtypes, safetensors metadata) and its small non-tensor files as extra
// records, so ApplyDelta can lay the output out like the target. Files without it (written
// by the reference) are applied with the base's layout and dtypes.
#ifndef BLZ_PATCHER_LOSSY_LOSSY_DELTA_H_
#define BLZ_PATCHER_LOSSY_LOSSY_DELTA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/progress_fn.h"
#include "core/status.h"
#include "formats/tensor_stats.h"
#include "patcher/lossy/error_metrics.h"

namespace blz::lossy {

enum class Strategy { kSparse, kQuantized, kInt4, kBitDelta, kLowRank, kAuto };

// "sparse" | "quantized" | "int4" | "bitdelta" | "lowrank" | "auto".
std::string_view StrategyName(Strategy s);
// kInvalidArgument listing the valid names.
Result<Strategy> ParseStrategy(std::string_view name);

struct CreateOptions {
  Strategy strategy = Strategy::kBitDelta;
  uint32_t version = 1;            // .wdelta format version to write (1 or 2)
  double sparsity = 0.9;           // sparse
  double outlier_fraction = 0.01;  // int4
  double rank_energy = 0.95;       // lowrank (and auto's low-rank step)
  // auto: per tensor, bitdelta if its rel_l2 <= max_error, else lowrank if that meets it,
  // else exact. Under bitdelta, lowrank and auto a tensor whose lossy encoding is no smaller
  // than its exact one is stored exact (noted in the report).
  double max_error = 0.01;
  // Tensors with fewer elements than this are stored exact under bitdelta/lowrank/auto.
  uint64_t min_lossy_elements = 4096;
  unsigned threads = 0;            // 0 = hardware concurrency
  ProgressCounters* counters = nullptr;  // elements done / total
};

struct TensorReport {
  std::string name;
  std::string strategy;   // as stored: a strategy name, "exact", or "identical" (omitted)
  std::string note;       // why a tensor is not stored with the requested strategy ("" if it is)
  std::string dtype;      // the target's dtype ("F32", "BF16", ...)
  std::vector<uint64_t> shape;
  uint64_t elements = 0;
  uint64_t delta_bytes = 0;     // its records' bytes in the .wdelta (0 for identical)
  uint64_t lossless_bytes = 0;  // the lossless patch codec's bytes for the same tensor
  uint64_t full_bytes = 0;      // the target tensor's bytes
  std::optional<ErrorMetrics> error;  // set when the true target was available
};

struct DeltaReport {
  std::string path;          // the .wdelta
  uint32_t version = 1;
  std::string strategy;      // the file's top-level strategy
  std::string parent_hash;
  uint64_t file_bytes = 0;       // the whole .wdelta
  // The tensor records' bytes (sum of TensorReport::delta_bytes): what compares with
  // lossless_bytes and full_bytes (file_bytes adds the header and the non-tensor files stored
  // verbatim, e.g. an unchanged tokenizer.json, which a lossless patch does not count as
  // tensor bytes).
  uint64_t tensor_bytes = 0;
  uint64_t lossless_bytes = 0;   // sum over tensors (create only; 0 when unknown)
  uint64_t full_bytes = 0;       // sum of the target tensors' bytes
  bool lossy = true;             // false only if every tensor is exact or identical
  std::optional<ErrorMetrics> error;  // model-level, over every tensor
  std::vector<TensorReport> tensors;  // target order
  // apply only: digest of the reconstruction (docs/wdelta.md "Reconstruction digest":
  // "sha256:" + SHA-256 over sorted names + output tensor bytes), never the target's.
  std::string output_digest;
  bool base_verified = false;    // apply: the base matched parent_hash
};

// Writes the delta from `base` to `target` at `out_path` (atomically) and measures it.
// Errors: kInvalidArgument (bad options; a target tensor of a dtype that cannot be decoded
// and differs from the base's), the readers' errors, kIOError.
Result<DeltaReport> CreateDelta(const formats::ModelTensors& base,
                                const formats::ModelTensors& target, const std::string& out_path,
                                const CreateOptions& options);

struct ApplyOptions {
  bool verify_base = true;  // check parent_hash (sorted, then legacy order for v1)
  // Measure the error against this model (e.g. the true target, when the caller has it).
  const formats::ModelTensors* target = nullptr;
  unsigned threads = 0;
  ProgressCounters* counters = nullptr;
};

// Reconstructs base + delta into a NEW directory `out_dir` (staged beside it and renamed into
// place; kAlreadyExists if it exists): safetensors files laid out like the target (see
// above), tensors in the target's dtypes (float32 results narrowed with round-to-nearest-even).
// Errors: kDigestMismatch "base does not match the delta's parent_hash" (nothing written),
// kCorruption / kUnsupported from the reader and decoders, kInvalidArgument (a shape that
// does not match the base, naming the tensor), kIOError.
Result<DeltaReport> ApplyDelta(const formats::ModelTensors& base, const std::string& wdelta_path,
                               const std::string& out_dir, const ApplyOptions& options);

// Describes a .wdelta without a base (blz inspect): strategy and bytes per tensor, no error.
Result<DeltaReport> DescribeDelta(const std::string& wdelta_path);

// The delta's tensor bytes: report.tensor_bytes, or the sum of its tensors' delta_bytes.
uint64_t TensorBytesOf(const DeltaReport& report);

// Human-readable report: a summary (bytes, x smaller than lossless / full, model error, the
// word LOSSY) then one row per tensor. Ends with a newline.
std::string DeltaReportText(const DeltaReport& report);
// {"path","version","strategy","parent_hash","lossy","file_bytes","tensor_bytes",
//  "lossless_bytes","full_bytes","ratio_vs_lossless","ratio_vs_full" (both tensor_bytes
//  against tensor bytes),"error":{...}|null,"output_digest",
//  "base_verified","tensors":[{"name","strategy","note","dtype","shape","elements",
//  "delta_bytes","lossless_bytes","full_bytes","error":{rel_l2,delta_rel_l2,cosine,max_abs,
//  nonfinite}|null}]}
nlohmann::ordered_json DeltaReportJson(const DeltaReport& report);

}  // namespace blz::lossy

#endif  // BLZ_PATCHER_LOSSY_LOSSY_DELTA_H_
