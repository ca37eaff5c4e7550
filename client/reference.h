// Registry addresses and model references, as written on the blz command line:
//
//   HOST:PORT                        a registry (IPv6 hosts in brackets: [::1]:5000)
//   HOST:PORT/NAME[:TAG]             a model version by tag (TAG defaults to "latest")
//   HOST:PORT/NAME@sha256:<64 hex>   a model version by manifest digest
//
// NAME follows the OCI distribution spec: '/'-separated components, each matching
// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*, at most 255 characters in all. TAG matches
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}. The port is required (blz has no default registry).
#ifndef BLZ_CLIENT_REFERENCE_H_
#define BLZ_CLIENT_REFERENCE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace blz::client {

inline constexpr size_t kMaxRepositoryNameBytes = 255;
inline constexpr std::string_view kDefaultTag = "latest";

struct RegistryAddress {
  std::string host;  // DNS name or IP address; IPv6 without brackets
  uint16_t port = 0;

  // "host:port" ("[v6]:port" for IPv6): the form used in the auth file and the local store.
  std::string ToString() const;
};

struct Reference {
  RegistryAddress registry;
  std::string name;    // repository name
  std::string tag;     // set when the reference names a tag
  std::string digest;  // "sha256:<hex>" when the reference names a manifest digest

  bool by_digest() const { return !digest.empty(); }
  // The <reference> path element: the tag or the digest.
  const std::string& reference() const { return by_digest() ? digest : tag; }
  // Canonical text: "host:port/name:tag" or "host:port/name@sha256:...".
  std::string ToString() const;
};

// Parses "HOST:PORT". Errors (kInvalidArgument) say what is wrong and show the expected form.
Result<RegistryAddress> ParseRegistryAddress(std::string_view text);

// Parses a full reference (see the file comment). Errors: kInvalidArgument.
Result<Reference> ParseReference(std::string_view text);

// OCI repository name and tag rules.
bool IsValidRepositoryName(std::string_view name);
bool IsValidTag(std::string_view tag);

}  // namespace blz::client

#endif  // BLZ_CLIENT_REFERENCE_H_
