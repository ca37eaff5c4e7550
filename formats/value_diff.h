// Value diffs between two models (what `blz diff --values` prints): how much each tensor
// changed, per tensor, per layer and for the whole model.
//
// Inputs are anything ModelTensors::Open accepts (formats/tensor_stats.h): .safetensors,
// .blz archives, model directories, GGUF files; the two sides may be of different kinds.
// Tensors are matched by name. A name on one side only is "added" (in b only) or "removed" (in
// a only). A pair whose dtype or shape differs, or whose type the decoder cannot read (GGUF
// Q4_K, ...), is "not comparable" (with whether the bytes are identical). A name that occurs
// twice in one model is an error (kInvalidArgument).
//
// Per comparable tensor pair a, b (n elements each), computed in double:
//   changed        elements whose encoding differs bitwise: the element's own bytes for plain
//                  types; for Q8_0 / Q4_0 the element's int8 / nibble or its block's fp16 scale
//   fraction       changed / n (0 when n = 0)
//   NaN / +Inf / -Inf counts of a's and of b's decoded values
//   The sums below run over the positions where both a[i] and b[i] are finite ("finite pairs"):
//   sum_aa = sum a^2, sum_bb = sum b^2, sum_ab = sum a*b, sum_dd = sum (b-a)^2,
//   max_abs = max |b - a| (0 when there are none).
//   rel_l2         ||b-a|| / ||a|| = sqrt(sum_dd / sum_aa). When ||a|| = 0: 0 if also
//                  ||b-a|| = 0, else +infinity (JSON: null, with the norms given alongside).
//   cosine         sum_ab / (||a|| ||b||), clamped to [-1, 1]. Both vectors zero (or no finite
//                  pair): 1 (they are equal). Exactly one zero: 0.
// Layers and the model aggregate the sums (not the ratios), so their rel_l2 and cosine are
// exactly those of the concatenated tensors. Only comparable pairs contribute.
//
// Layers: a tensor belongs to the group named by its name up to and including the first
// '.'-separated component pair "<key>.<n>" followed by a '.', where key is one of layers, h,
// blk, layer, block and n is decimal digits: "model.layers.3.mlp.up.weight" ->
// "model.layers.3", "transformer.h.0.attn.c_attn.weight" -> "transformer.h.0",
// "blk.12.ffn_up.weight" -> "blk.12". Keeping the prefix keeps e.g. an encoder's and a
// decoder's layer n apart. Anything else goes to the group "other".
//
// Work: tensors are cut into fixed segments of kDiffSegmentElements that a thread pool takes in
// any order; each segment streams aligned 64 Ki-element chunks of both sides (memory is
// O(threads x chunk)), and partial sums are merged in index order, so results do not depend on
// the number of threads.
#ifndef BLZ_FORMATS_VALUE_DIFF_H_
#define BLZ_FORMATS_VALUE_DIFF_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bytes.h"
#include "core/progress_fn.h"
#include "core/status.h"
#include "formats/float_convert.h"
#include "formats/tensor_stats.h"

namespace blz::formats {

inline constexpr uint64_t kDiffSegmentElements = uint64_t{16} * kDecodeChunkElements;

// Sums over one or more comparable tensor pairs (see the file comment).
struct DiffSums {
  uint64_t elements = 0;
  uint64_t changed = 0;
  uint64_t finite_pairs = 0;
  double sum_aa = 0;
  double sum_bb = 0;
  double sum_ab = 0;
  double sum_dd = 0;
  double max_abs = 0;
  uint64_t a_nan = 0, a_pos_inf = 0, a_neg_inf = 0;
  uint64_t b_nan = 0, b_pos_inf = 0, b_neg_inf = 0;

  void Merge(const DiffSums& other);
  double FractionChanged() const;
  double RelativeL2() const;  // may be +infinity (||a|| = 0, ||b-a|| > 0)
  double Cosine() const;
  double NormA() const;       // sqrt(sum_aa)
  double NormB() const;
  double NormDiff() const;    // sqrt(sum_dd)
};

// Adds elements [begin, end) of two tensors of type `t` with `elements` elements each (bytes
// `a` and `b`, each exactly ValueBytes(t, elements) long) to *sums, in chunks of
// kDecodeChunkElements. For Q8_0 / Q4_0, `begin` must be a multiple of 32. Errors: those of
// DecodeElements (kInvalidArgument).
Status AccumulateDiff(ValueType t, ByteSpan a, ByteSpan b, uint64_t elements, uint64_t begin,
                      uint64_t end, DiffSums* sums);

// The diff of two whole tensors.
Result<DiffSums> DiffTensorValues(ValueType t, ByteSpan a, ByteSpan b, uint64_t elements);

// The layer group of a tensor name (see the file comment): "model.layers.3" or "other".
std::string LayerOf(std::string_view tensor_name);

struct TensorDiff {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::string layer;  // LayerOf(name)
  DiffSums sums;
};

struct LayerDiff {
  std::string name;   // "model.layers.3" or "other"
  uint64_t tensors = 0;
  DiffSums sums;
};

struct TensorRef {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::string file;
};

struct NotComparable {
  std::string name;
  std::string reason;  // "dtype differs (F32 vs F16)", "shape differs ([2, 3] vs [3, 2])",
                       // "unsupported type Q4_K"
  TensorRef a;
  TensorRef b;
  bool bytes_identical = false;
};

struct ModelDiff {
  std::string a_path, a_format;
  std::string b_path, b_format;
  std::vector<TensorDiff> tensors;   // comparable pairs, in a's tensor order
  // Sorted by prefix, then by the layer number numerically ("h.2" before "h.10"); "other" last.
  std::vector<LayerDiff> layers;
  DiffSums model;                    // all comparable pairs
  std::vector<TensorRef> added;      // in b only, in b's order
  std::vector<TensorRef> removed;    // in a only, in a's order
  std::vector<NotComparable> not_comparable;  // in a's order
};

struct DiffOptions {
  unsigned threads = 0;  // 0 = hardware_concurrency
  // Optional (core/progress_fn.h): elements of comparable tensor pairs compared so far, of all.
  ProgressCounters* counters = nullptr;
};

// Opens both models (ModelTensors::Open) and diffs them. Errors: those of Open, a duplicate
// tensor name (kInvalidArgument), and decode errors naming the tensor.
Result<ModelDiff> DiffModels(const std::string& a_path, const std::string& b_path,
                             const DiffOptions& options = {});
Result<ModelDiff> DiffModels(const ModelTensors& a, const ModelTensors& b,
                             const DiffOptions& options = {});

// Human-readable: the two paths, a summary line per category, the model line, a tensor table
// (TENSOR DTYPE SHAPE CHANGED% REL_L2 MAX_ABS COSINE NAN_A INF_A NAN_B INF_B), a layer table
// (LAYER TENSORS CHANGED% REL_L2 MAX_ABS COSINE), then "added:", "removed:" and
// "not comparable:" lists when not empty. Ends with a newline.
std::string ModelDiffText(const ModelDiff& diff);

// Machine-readable, keys in this order:
// {"schema": 1,
//  "tensors": [{"name", "dtype", "shape", "layer", <sums>}],
//  "layers": [{"name", "tensors", <sums>}],
//  "model": {"tensors", <sums>},
//  "added": [{"name", "dtype", "shape", "file"}], "removed": [same],
//  "not_comparable": [{"name", "reason", "bytes_identical", "a": {"dtype", "shape", "file"},
//                      "b": {...}}],
//  "inputs": {"a": {"path", "format"}, "b": {"path", "format"}}}
// where <sums> = "elements", "changed", "fraction_changed", "finite_pairs", "rel_l2" (null when
// infinite), "max_abs_change", "cosine", "l2_a", "l2_b", "l2_diff",
// "a": {"nan", "pos_inf", "neg_inf"}, "b": {"nan", "pos_inf", "neg_inf"}.
nlohmann::ordered_json ModelDiffJson(const ModelDiff& diff);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_VALUE_DIFF_H_
