// fuzz_reference: what the client parses from the command line and from registry headers
// (client/reference.h, client/retry.h, client/http_client.h). Properties: an accepted reference
// printed with ToUrl() parses back to the same reference whatever the defaults, and ToString()
// is its "host:port" key; an accepted registry address likewise; Retry-After never yields a
// negative delay; NO_PROXY matching does not crash on any list or host.
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "client/http_client.h"
#include "client/reference.h"
#include "client/retry.h"
#include "fuzz/fuzz_util.h"

namespace {

void WriteSeeds() {
  const char* seeds[] = {
      "127.0.0.1:5000/org/model:v1",
      ("https://models.example.com/org/team/model@sha256:"
       "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"),
      "http://[::1]:8080/m",
      "localhost/a/b:latest",
      "org/model:v2",
      "registry.example.com:443/x__y/z-1:Tag_1.0",
      "120",
      "Wed, 21 Oct 2015 07:28:00 GMT",
      "*.example.com,localhost,.corp,10.0.0.1:5000",
  };
  int i = 0;
  for (const char* s : seeds) blz::fuzz::WriteSeed("crafted_" + std::to_string(i++), s);
}

}  // namespace

BLZ_FUZZ_INITIALIZE_WITH_SEEDS(WriteSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using blz::client::AddressDefaults;
  for (const AddressDefaults& defaults :
       {AddressDefaults{}, AddressDefaults{true, "registry.example.com", {}}}) {
    auto ref = blz::client::ParseReference(text, defaults);
    if (ref.ok()) {
      auto again = blz::client::ParseReference(ref->ToUrl(), AddressDefaults{true, "", {}});
      blz::fuzz::Check(again.ok(), "ToUrl() of an accepted reference parses");
      blz::fuzz::Check(again->ToUrl() == ref->ToUrl() && again->registry.tls == ref->registry.tls &&
                           again->name == ref->name && again->tag == ref->tag &&
                           again->digest == ref->digest,
                       "ToUrl() round-trips");
      blz::fuzz::Check(blz::client::IsValidRepositoryName(ref->name), "the name is valid");
      blz::fuzz::Check(ref->by_digest() || blz::client::IsValidTag(ref->tag), "the tag is valid");
    }
    auto addr = blz::client::ParseRegistryAddress(text, defaults);
    if (addr.ok()) {
      auto again = blz::client::ParseRegistryAddress(addr->Url());
      blz::fuzz::Check(again.ok() && again->ToString() == addr->ToString() &&
                           again->tls == addr->tls,
                       "Url() of an accepted address round-trips");
    }
  }
  auto delay = blz::client::ParseRetryAfter(text, std::chrono::system_clock::now());
  if (delay.has_value()) blz::fuzz::Check(delay->count() >= 0, "Retry-After is not negative");
  const size_t comma = text.find('|');
  if (comma != std::string_view::npos) {
    (void)blz::client::NoProxyMatches(text.substr(0, comma), text.substr(comma + 1), 5000);
  }
  return 0;
}
