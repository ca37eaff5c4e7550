#include "formats/tensor_share.h"

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace blz::formats {
namespace {

// dtype, shape and ggml type: what a patch base must have in common with the tensor.
std::string TypeKey(const ArchiveTensor& t) {
  std::string key = std::to_string(int(t.dtype)) + "/" + t.ggml_type;
  for (uint64_t d : t.shape) key += "/" + std::to_string(d);
  return key;
}

}  // namespace

TensorShare ShareOf(const ArchiveHeader& target, const ArchiveHeader& base) {
  std::unordered_map<std::string, std::unordered_set<std::string>> types_by_name;
  std::unordered_set<std::string> contents;  // SHA-256 + type
  for (const ArchiveTensor& t : base.tensors) {
    const std::string type = TypeKey(t);
    types_by_name[t.name].insert(type);
    contents.insert(t.sha256 + "|" + type);
  }
  TensorShare share;
  for (const ArchiveTensor& t : target.tensors) {
    share.target_bytes += t.length;
    const std::string type = TypeKey(t);
    if (contents.count(t.sha256 + "|" + type) > 0) {
      share.shared_bytes += t.length;
      share.identical_bytes += t.length;
      continue;
    }
    auto named = types_by_name.find(t.name);
    if (named != types_by_name.end() && named->second.count(type) > 0) {
      share.shared_bytes += t.length;
    }
  }
  return share;
}

}  // namespace blz::formats
