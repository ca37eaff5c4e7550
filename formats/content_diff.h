// "Did anything change?" between two models: what `blz diff A B` decides (cli/commands_model.cc)
// on top of the structural diff (formats/structural_hash.h). Three questions, each answered
// without holding either model in memory:
//
//   structure  the structural hashes differ (DiffStructures; headers only);
//   values     a tensor present in both models, whose structure did not change, has different
//              bytes. Two .blz archives are compared by the digests their headers carry
//              (xxh3-64, SHA-256 and length per tensor: no tensor data is read); any other pair
//              of inputs is compared byte for byte, one tensor at a time, straight from the
//              memory-mapped files (ModelTensors, formats/tensor_stats.h);
//   files      the non-tensor files (config.json, tokenizer files, a shard index, ...: every
//              file that is not *.safetensors or *.gguf) differ by path or content (SHA-256;
//              an archive's header carries it, a directory's files are hashed). A single
//              .safetensors or GGUF file has no such files.
//
// Two models are IDENTICAL when none of the three differs. Which shard holds a tensor, tensor
// order and the byte layout of the model files are not compared.
#ifndef BLZ_FORMATS_CONTENT_DIFF_H_
#define BLZ_FORMATS_CONTENT_DIFF_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/structural_hash.h"

namespace blz::formats {

struct ContentDiff {
  bool by_digest = false;  // both inputs are archives: tensors compared by header digests
  uint64_t tensors_compared = 0;             // in both models, structure unchanged
  std::vector<std::string> tensors_changed;  // of those, bytes differ; in a's order
  uint64_t files_compared = 0;               // non-tensor files present in both
  std::vector<std::string> files_added;      // in b only (sorted)
  std::vector<std::string> files_removed;    // in a only (sorted)
  std::vector<std::string> files_changed;    // in both, content differs (sorted)

  bool FilesDiffer() const {
    return !files_added.empty() || !files_removed.empty() || !files_changed.empty();
  }
  bool identical() const { return tensors_changed.empty() && !FilesDiffer(); }
};

// Compares the tensor values and non-tensor files of `a` and `b` (anything
// StructuralInputFromPath accepts: .safetensors, GGUF, .blz archive, model directory).
// Tensors named in `skip` (those whose dtype or shape changed: the structural diff reports
// them) are not compared. Errors: those of the readers (naming the path), kIOError while
// hashing a file.
Result<ContentDiff> DiffContent(const std::string& a, const std::string& b,
                                const std::set<std::string>& skip = {});

// The names of the tensors whose structure changed (StructuralDiff::tensor_changes): the
// `skip` set of DiffContent.
std::set<std::string> StructurallyChangedTensors(const StructuralDiff& structure);

// The verdict line that `blz diff` prints first, without a newline:
//   "IDENTICAL: same structure, tensor values (<n> tensors) and files (<m>)"
//   "DIFFERENT: structure (<what>), values of <k> of <n> tensors, files <p1>, <p2>, ..."
// listing only the parts that differ; at most 3 file names, then "and <r> more".
std::string DiffVerdictLine(const StructuralDiff& structure, const ContentDiff& content);

// The value and file sections of `blz diff`'s text (after the structural part):
//   "Tensor values:    <k> of <n> tensors changed (compared by digest|bytes)" then the
//   changed names (all with `verbose`, else the first 10 and "... <r> more (-v lists all)");
//   "Files:            <c> changed, <a> added, <r> removed (<n> in both)" then "  ~ path",
//   "  + path", "  - path". Ends with a newline.
std::string ContentDiffText(const ContentDiff& content, bool verbose);

// {"compared_by": "digest"|"bytes", "tensors_compared", "tensors_changed": [names],
//  "files_compared", "files_added", "files_removed", "files_changed"}
nlohmann::ordered_json ContentDiffJson(const ContentDiff& content);

// The verdict keys of `blz diff --json`, in this order:
//   "identical": bool, "verdict": DiffVerdictLine(...),
//   "differences": {"structure": bool, "tensor_values": <k>, "files": <added+removed+changed>}
// appended to `out`.
void AddDiffVerdictJson(const StructuralDiff& structure, const ContentDiff& content,
                        nlohmann::ordered_json* out);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_CONTENT_DIFF_H_
