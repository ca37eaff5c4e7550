// The JSON document of `blz diff A B --values --json`, which the registry's
// GET /v2/<name>/blz/diff also serves (docs/registry-api.md): both call the functions below, so
// the two documents are the same (only "values"."inputs" differ: the CLI names the paths it was
// given, the registry the archive digests; and the CLI adds its verdict keys "identical",
// "verdict", "differences" and "content", formats/content_diff.h).
//
// The document, keys in this order:
//   {"schema": 1,
//    "structure": <DiffJson(structure)>   (formats/structural_hash.h; weight-inspect's diff)
//    "values": <ModelDiffJson(values)>}   (formats/value_diff.h)
// serialized with 2-space indentation and one final newline. Invalid UTF-8 in tensor names or
// metadata (possible in GGUF files) is replaced by U+FFFD instead of failing.
#ifndef BLZ_FORMATS_VALUE_DIFF_JSON_H_
#define BLZ_FORMATS_VALUE_DIFF_JSON_H_

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/structural_hash.h"
#include "formats/value_diff.h"

namespace blz::formats {

// The document as a JSON value. Errors: kInternal (DiffJson's text did not parse: a bug).
Result<nlohmann::ordered_json> ValueDiffDocument(const StructuralDiff& structure,
                                                 const ModelDiff& values);

// The document's text, as `blz diff --values --json` prints it.
Result<std::string> ValueDiffJson(const StructuralDiff& structure, const ModelDiff& values);

struct ValueDiffJsonOptions {
  unsigned threads = 0;  // DiffOptions::threads (0 = hardware_concurrency)
  ProgressCounters* counters = nullptr;  // DiffOptions::counters
  // When not empty, replace "values"."inputs"."a"/"b"."path" (e.g. archive digests instead of
  // server-side file paths).
  std::string a_label;
  std::string b_label;
};

// Computes the document for two models: the structural diff of their headers
// (StructuralInputFromPath, DiffStructures) and the value diff (DiffModels). `a_path` and
// `b_path` are anything both of those accept (.safetensors, GGUF, .blz archive, model
// directory). Errors: those of StructuralInputFromPath and DiffModels (naming the path).
Result<std::string> ComputeValueDiffJson(const std::string& a_path, const std::string& b_path,
                                         const ValueDiffJsonOptions& options = {});

}  // namespace blz::formats

#endif  // BLZ_FORMATS_VALUE_DIFF_JSON_H_
