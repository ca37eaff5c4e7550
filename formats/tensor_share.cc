#include "formats/tensor_share.h"

#include <string>
#include <unordered_map>
#include <vector>

namespace blz::formats {

bool SameTensorType(const ArchiveTensor& a, const ArchiveTensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.ggml_type == b.ggml_type &&
         a.length == b.length;
}

TensorShare ShareOf(const ArchiveHeader& target, const ArchiveHeader& base) {
  std::unordered_map<std::string, std::vector<const ArchiveTensor*>> by_name, by_content;
  for (const ArchiveTensor& t : base.tensors) {
    by_name[t.name].push_back(&t);
    by_content[t.sha256].push_back(&t);
  }
  auto holds = [](const auto& index, const std::string& key, const ArchiveTensor& t) {
    auto it = index.find(key);
    if (it == index.end()) return false;
    for (const ArchiveTensor* b : it->second) {
      if (SameTensorType(*b, t)) return true;
    }
    return false;
  };
  TensorShare share;
  for (const ArchiveTensor& t : target.tensors) {
    share.target_bytes += t.length;
    if (holds(by_content, t.sha256, t)) {
      share.shared_bytes += t.length;
      share.identical_bytes += t.length;
    } else if (holds(by_name, t.name, t)) {
      share.shared_bytes += t.length;
    }
  }
  return share;
}

}  // namespace blz::formats
