#include "registry/byte_ranges.h"

#include <string>

#include "registry/wire.h"

namespace blz::registry {

std::optional<RangeSpan> SelectRange(std::optional<std::string_view> range_header, uint64_t size,
                                    Response* res) {
  const RangeRequest range = ParseRangeHeader(range_header, size);
  if (range.kind == RangeRequest::Kind::kUnsatisfiable) return std::nullopt;
  res->Set("Accept-Ranges", "bytes");
  if (range.kind == RangeRequest::Kind::kWhole) {
    res->status = 200;
    return RangeSpan{0, size};
  }
  res->status = 206;
  res->Set("Content-Range", "bytes " + std::to_string(range.range.first) + "-" +
                                std::to_string(range.range.last) + "/" + std::to_string(size));
  return RangeSpan{range.range.first, range.range.length()};
}

void SetUnsatisfiableRange(uint64_t size, Response* err) {
  err->Set("Content-Range", "bytes */" + std::to_string(size));
  err->Set("Accept-Ranges", "bytes");
}

}  // namespace blz::registry
