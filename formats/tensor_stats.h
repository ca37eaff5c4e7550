// Numeric statistics of tensor values (what `blz stats` prints), and the model reader shared
// with formats/value_diff.h.
//
// A model is a single .safetensors file, a .blz archive (recognized by its magic, any name; data
// hashes are NOT checked: use BlzArchive::Verify), a Hugging Face model directory (every
// *.safetensors shard and *.gguf file below it, formats/model_dir.h) or a GGUF file (recognized by its magic,
// read in GgufMode::kFull). Tensor values are decoded in bounded chunks (formats/float_convert.h)
// straight from memory maps: memory is O(threads x chunk), whatever the model size.
//
// Per tensor: element count; NaN, +Inf and -Inf counts; the number of zeros (+0 and -0); and
// min, max, mean and standard deviation over the FINITE values only. The standard deviation is
// the population one (divide by the number of finite values). Everything is computed in double:
// each 64 Ki-element chunk is reduced with a two-pass sum / sum of squared deviations, and
// chunks are merged with Chan et al.'s pairwise update (numerically stable, no catastrophic
// cancellation). Tensors are split into fixed segments of kStatsSegmentElements that worker
// threads take in any order, then merged in index order, so the result does not depend on the
// number of threads.
#ifndef BLZ_FORMATS_TENSOR_STATS_H_
#define BLZ_FORMATS_TENSOR_STATS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bytes.h"
#include "core/progress_fn.h"
#include "core/status.h"
#include "formats/float_convert.h"

namespace blz::formats {

// --- Threads --------------------------------------------------------------------------------

// Runs fn(0) .. fn(n - 1), each exactly once, on up to `threads` threads (0 = the hardware's
// std::thread::hardware_concurrency(), at least 1); the calling thread takes part. fn must be
// safe to call concurrently for different indices. If a thread cannot be started the others
// (at least the calling thread) do its share. Returns when every call has returned.
void ParallelFor(size_t n, unsigned threads, const std::function<void(size_t)>& fn);

// The number of threads ParallelFor uses for `threads` (0 -> hardware_concurrency, >= 1).
unsigned EffectiveThreads(unsigned threads);

// --- Reading a model's tensors --------------------------------------------------------------

// One tensor of an opened model: a view into a memory map held by its ModelTensors.
struct ValueTensor {
  std::string name;
  std::string file;    // relative path of the file holding it (single file: its base name)
  std::string dtype;   // "F32", "BF16", ... (GGUF: ggml's type name in upper case, "Q4_K")
  std::vector<uint64_t> shape;  // C order, outermost first (GGUF dims are reversed: ne0 last)
  uint64_t elements = 0;        // product(shape), 1 for a 0-rank tensor
  std::optional<ValueType> type;  // nullopt: values of this type cannot be decoded
  ByteSpan data;                  // the tensor's bytes
};

// An opened model. Movable; the tensors' data stay valid while the object lives.
class ModelTensors {
 public:
  // Opens `path` (see the file comment). Errors: kNotFound, kIOError, kUnsupported (neither a
  // .safetensors file, a .blz archive, a GGUF file nor a directory), and the parse errors of
  // formats/safetensors.h, blz_archive.h, model_dir.h and gguf.h.
  static Result<ModelTensors> Open(const std::string& path);

  const std::string& path() const { return path_; }
  // "safetensors" | "blz" | "hf-dir" | "gguf"
  const std::string& format() const { return format_; }
  // In file order (files sorted by path; each file's tensors in data order).
  const std::vector<ValueTensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::string format_;
  std::vector<ValueTensor> tensors_;
  std::vector<std::shared_ptr<const void>> keep_alive_;  // the opened files
};

// --- Statistics -----------------------------------------------------------------------------

struct TensorStats {
  uint64_t count = 0;    // elements
  uint64_t finite = 0;   // elements that are neither NaN nor infinite
  uint64_t nan = 0;
  uint64_t pos_inf = 0;
  uint64_t neg_inf = 0;
  uint64_t zeros = 0;    // elements equal to 0 (+0 or -0)
  // Over the finite values; all 0 when finite == 0.
  double min = 0;
  double max = 0;
  double mean = 0;
  double stddev = 0;     // population standard deviation ("std" in JSON)
  // count > 0 and every element is NaN or infinite.
  bool all_non_finite = false;

  // zeros / count (0 for an empty tensor).
  double ZeroFraction() const;
};

// Streaming accumulator: Add() chunks in any sizes, Merge() accumulators of consecutive ranges.
class StatsAccumulator {
 public:
  void Add(std::span<const double> values);
  // Adds `count` values of which `nan`, `pos_inf` and `neg_inf` are not finite and the rest
  // were not read (StatsOptions::non_finite_only): they count as finite, without zeros, min,
  // max or moments.
  void AddCountsOnly(uint64_t count, uint64_t nan, uint64_t pos_inf, uint64_t neg_inf);
  // Folds `other` (the statistics of values after this one's) into this.
  void Merge(const StatsAccumulator& other);
  TensorStats Finish() const;

 private:
  uint64_t count_ = 0, finite_ = 0, nan_ = 0, pos_inf_ = 0, neg_inf_ = 0, zeros_ = 0;
  double min_ = 0, max_ = 0, mean_ = 0, m2_ = 0;  // over finite values; m2 = sum (x - mean)^2
};

// Statistics of one tensor's values (bytes `data`, `elements` values of type `t`).
// Errors: those of DecodeElements.
Result<TensorStats> ComputeTensorStats(ValueType t, ByteSpan data, uint64_t elements);

// Segment length for splitting one tensor across threads (a multiple of kDecodeChunkElements).
inline constexpr uint64_t kStatsSegmentElements = uint64_t{16} * kDecodeChunkElements;

struct StatsOptions {
  unsigned threads = 0;  // 0 = hardware_concurrency
  // Optional (core/progress_fn.h): elements of supported tensors read so far, of all of them.
  ProgressCounters* counters = nullptr;
  // Only NaN and infinite values are wanted (`blz push`'s check): F32, F16, BF16 and F64
  // tensors are then scanned as raw IEEE 754 bits (an exponent of all ones) instead of being
  // decoded, and their zeros, min, max, mean and stddev are left 0. Integer and bool tensors,
  // which hold no NaN, are only checked for their byte length. F8 and Q8_0 / Q4_0 tensors are
  // decoded as usual (all their statistics are filled in).
  bool non_finite_only = false;
};

struct TensorStatsEntry {
  std::string name;
  std::string file;
  std::string dtype;
  std::vector<uint64_t> shape;
  bool supported = true;  // false: "unsupported type <dtype>", stats left empty
  TensorStats stats;
};

struct ModelStats {
  std::string path;
  std::string format;  // as ModelTensors::format()
  std::vector<TensorStatsEntry> tensors;  // in ModelTensors order
  // Summary.
  uint64_t elements = 0;        // over supported tensors
  uint64_t nan = 0;
  uint64_t pos_inf = 0;
  uint64_t neg_inf = 0;
  uint64_t unsupported = 0;     // tensors whose type cannot be decoded
  uint64_t all_non_finite = 0;  // tensors with all_non_finite
  uint64_t some_non_finite = 0; // tensors with at least one NaN/Inf but not all
};

// Opens `path` (ModelTensors::Open) and computes every tensor's statistics on a thread pool.
// Tensors of types the decoder does not read (GGUF Q4_K, ...) are listed with
// supported = false instead of failing.
Result<ModelStats> ComputeModelStats(const std::string& path, const StatsOptions& options = {});
Result<ModelStats> ComputeModelStats(const ModelTensors& model, const StatsOptions& options = {});

// Human-readable: a few summary lines, a table (TENSOR DTYPE SHAPE COUNT MIN MAX MEAN STD NAN
// +INF -INF ZERO%), then one line per tensor that is entirely NaN/Inf
//   "warning: tensor <name> is all NaN/Inf (<n> NaN, <p> +Inf, <m> -Inf of <count> values)"
// one per tensor with some NaN/Inf
//   "warning: tensor <name> has <k> NaN/Inf values (<n> NaN, <p> +Inf, <m> -Inf of <count>)"
// and, when any of those occurred, one summary line
//   "warning: <a> of <t> tensors are all NaN/Inf, <s> more contain NaN/Inf values"
// Unsupported tensors show "unsupported type <dtype>" in the table. Ends with a newline.
std::string ModelStatsText(const ModelStats& stats);

// Machine-readable, keys in this order:
// {"path", "format",
//  "summary": {"tensors", "elements", "nan", "pos_inf", "neg_inf", "unsupported",
//              "all_non_finite", "some_non_finite"},
//  "tensors": [{"name", "file", "dtype", "shape", "supported",
//               and when supported: "count", "finite", "nan", "pos_inf", "neg_inf", "zeros",
//               "zero_fraction", "min", "max", "mean", "std" (null when finite == 0),
//               "all_non_finite";
//               when not: "error": "unsupported type <dtype>"}],
//  "warnings": ["tensor <name> is all NaN/Inf ...", ...]}   (the text warnings, no prefix)
nlohmann::ordered_json ModelStatsJson(const ModelStats& stats);

// --- Text helpers (shared with formats/value_diff.cc) ----------------------------------------
namespace stats_text {
// Rows of cells; columns separated by two spaces, left-aligned unless right[c]. Each row ends
// with a newline; no trailing spaces.
std::string Table(const std::vector<std::vector<std::string>>& rows,
                  const std::vector<bool>& right);
// printf "%.6g"; "nan", "inf", "-inf" for non-finite values.
std::string Number(double v);
// "[2, 3]"; "[]" for a 0-rank tensor.
std::string Shape(const std::vector<uint64_t>& shape);
}  // namespace stats_text

}  // namespace blz::formats

#endif  // BLZ_FORMATS_TENSOR_STATS_H_
