#include "registry/http_message.h"

namespace blz::registry {

std::optional<std::string> FindHeader(const std::vector<Header>& headers, std::string_view name) {
  for (const Header& h : headers) {
    if (h.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      char a = h.name[i], b = name[i];
      if (a >= 'A' && a <= 'Z') a = char(a - 'A' + 'a');
      if (b >= 'A' && b <= 'Z') b = char(b - 'A' + 'a');
      same = a == b;
    }
    if (same) return h.value;
  }
  return std::nullopt;
}

}  // namespace blz::registry
