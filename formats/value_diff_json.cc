#include "formats/value_diff_json.h"

#include <exception>
#include <utility>

#include "formats/identify.h"

namespace blz::formats {

Result<nlohmann::ordered_json> ValueDiffDocument(const StructuralDiff& structure,
                                                 const ModelDiff& values) {
  nlohmann::ordered_json out;
  out["schema"] = 1;
  try {
    out["structure"] = nlohmann::ordered_json::parse(DiffJson(structure));
  } catch (const std::exception& e) {
    return Internal(std::string("diff: structural JSON: ") + e.what());
  }
  out["values"] = ModelDiffJson(values);
  return out;
}

Result<std::string> ValueDiffJson(const StructuralDiff& structure, const ModelDiff& values) {
  BLZ_ASSIGN_OR_RETURN(nlohmann::ordered_json doc, ValueDiffDocument(structure, values));
  try {
    return doc.dump(2, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace) +
           "\n";
  } catch (const std::exception& e) {
    return Internal(std::string("diff: serializing JSON: ") + e.what());
  }
}

Result<std::string> ComputeValueDiffJson(const std::string& a_path, const std::string& b_path,
                                         const ValueDiffJsonOptions& options) {
  BLZ_ASSIGN_OR_RETURN(StructuralInput sa, StructuralInputFromPath(a_path));
  BLZ_ASSIGN_OR_RETURN(StructuralInput sb, StructuralInputFromPath(b_path));
  const StructuralDiff structure = DiffStructures(sa, sb);
  DiffOptions diff_options;
  diff_options.threads = options.threads;
  diff_options.counters = options.counters;
  BLZ_ASSIGN_OR_RETURN(ModelDiff values, DiffModels(a_path, b_path, diff_options));
  if (!options.a_label.empty()) values.a_path = options.a_label;
  if (!options.b_label.empty()) values.b_path = options.b_label;
  return ValueDiffJson(structure, values);
}

}  // namespace blz::formats
