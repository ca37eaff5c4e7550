// Answering Range requests (RFC 9110 §14) the same way for every ranged resource: blobs
// (registry_internal.h ServeFile), Hugging Face Hub files (hub/hub_api.cc) and Ollama layers
// (ollama/ollama_handlers.cc). Which ranges are honoured is wire.h ParseRangeHeader's rule.
#ifndef BLZ_REGISTRY_BYTE_RANGES_H_
#define BLZ_REGISTRY_BYTE_RANGES_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "registry/http_message.h"

namespace blz::registry {

// The bytes of a `size`-byte representation to send.
struct RangeSpan {
  uint64_t offset = 0;
  uint64_t length = 0;
};

// For a satisfiable or absent (or ignored) Range: sets on *res status 200, or 206 with
// Content-Range "bytes first-last/size", and Accept-Ranges: bytes; returns the span to send.
// For an unsatisfiable Range: returns nullopt and leaves *res alone; the caller answers its own
// 416 error and passes it to SetUnsatisfiableRange.
std::optional<RangeSpan> SelectRange(std::optional<std::string_view> range_header, uint64_t size,
                                    Response* res);

// The headers of a 416 answer for a `size`-byte representation: Content-Range "bytes */size"
// and Accept-Ranges: bytes.
void SetUnsatisfiableRange(uint64_t size, Response* err);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_BYTE_RANGES_H_
