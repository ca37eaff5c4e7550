// fuzz_wire: the registry's pure wire parsers (registry/wire.h) on the whole input:
// ValidateRepositoryName, IsValidTag, ParseTarget, PercentDecode, ParseRangeHeader (against
// several resource sizes), ParseChunkRange and ParseUint. Properties: a partial range lies
// inside the resource; a chunk range has first <= last; ParseUint accepts only digits; a valid
// name is at most 255 bytes; ParseTarget's query values and components are NUL-free.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "registry/wire.h"

namespace {

void WriteSeeds() {
  const char* seeds[] = {
      "org/model",
      "a/b-c/d__e/f.g",
      "v1.0_rc-1",
      "/v2/org/model/blobs/uploads/?digest=sha256%3Aab&n=10&last=x",
      "/v2/org/model/manifests/sha256:" "0123456789abcdef0123456789abcdef"
      "0123456789abcdef0123456789abcdef",
      "/v2/org/model/blz/patch?from=sha256%3A00&to=sha256%3A11",
      "/v2/_catalog?n=5&last=a%2Fb",
      "bytes=0-99",
      "bytes=-500",
      "bytes=100-",
      "bytes=0-0,5-9",
      "0-1023",
      "bytes 0-1023/2048",
      "bytes 10-20/*",
      "18446744073709551615",
      "%2e%2E/%00",
  };
  blz::fuzz::WriteSeedList(seeds);
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace blz::registry;
  std::string_view s(reinterpret_cast<const char*>(data), size);
  if (ValidateRepositoryName(s).ok()) {
    blz::fuzz::Check(!s.empty() && s.size() <= kMaxNameLength, "valid names are 1..255 bytes");
  }
  if (IsValidTag(s)) blz::fuzz::Check(!s.empty() && s.size() <= 128, "valid tags are 1..128");
  auto target = ParseTarget(s);
  if (target.ok()) {
    for (const auto& c : target->components) {
      blz::fuzz::Check(c.find('\0') == std::string::npos, "no NUL in a path component");
      if (ValidateRepositoryName(c).ok()) (void)IsValidTag(c);
    }
    for (const auto& [k, v] : target->query) {
      blz::fuzz::Check(k.find('\0') == std::string::npos && v.find('\0') == std::string::npos,
                       "no NUL in a query parameter");
      (void)ParseUint(v);
    }
  }
  (void)PercentDecode(s);
  for (uint64_t resource : {uint64_t(0), uint64_t(1), uint64_t(1000), UINT64_MAX}) {
    RangeRequest r = ParseRangeHeader(s, resource);
    if (r.kind == RangeRequest::Kind::kPartial) {
      blz::fuzz::Check(r.range.first <= r.range.last && r.range.last < resource,
                       "a partial range lies inside the resource");
    }
  }
  (void)ParseRangeHeader(std::nullopt, 10);
  auto chunk = ParseChunkRange(s);
  if (chunk) blz::fuzz::Check(chunk->first <= chunk->last, "chunk range first <= last");
  auto n = ParseUint(s);
  if (n) {
    blz::fuzz::Check(!s.empty(), "ParseUint rejects the empty string");
    for (char c : s) blz::fuzz::Check(c >= '0' && c <= '9', "ParseUint accepts only digits");
  }
  return 0;
}
