// Registry addresses and model references, as written on the blz command line:
//
//   [SCHEME://]HOST[:PORT]                        a registry (IPv6 hosts in brackets: [::1]:5000)
//   [SCHEME://]HOST[:PORT]/NAME[:TAG]             a model version by tag (TAG defaults to "latest")
//   [SCHEME://]HOST[:PORT]/NAME@sha256:<64 hex>   a model version by manifest digest
//   NAME[:TAG], NAME@sha256:<hex>                 the same on the default registry (BLZ_REGISTRY)
//
// Docker's conventions:
// - SCHEME is https or http. Without one, a registry is spoken to over HTTPS, except loopback
//   hosts (localhost, 127.0.0.0/8, ::1), which get plain HTTP, and all hosts when
//   AddressDefaults::plain_http (--plain-http) is set. An explicit scheme always wins.
//   Between the two: the scheme `blz login` remembered for the registry
//   (AddressDefaults::remembered_tls; for a host written without a port, HOST:443 remembered as
//   https, else HOST:80 remembered as http).
// - PORT defaults to 443 for https and 80 for http.
// - Without a scheme, the first '/'-component is the registry host only when it contains '.'
//   or ':', is in brackets, or is "localhost"; otherwise the whole text is NAME[:TAG] and the
//   host is AddressDefaults::registry (BLZ_REGISTRY), which is an error when unset.
//
// NAME follows the OCI distribution spec: '/'-separated components, each matching
// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*, at most 255 characters in all. TAG matches
// [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}.
#ifndef BLZ_CLIENT_REFERENCE_H_
#define BLZ_CLIENT_REFERENCE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "core/status.h"

namespace blz::client {

inline constexpr size_t kMaxRepositoryNameBytes = 255;
inline constexpr std::string_view kDefaultTag = "latest";

struct RegistryAddress {
  std::string host;  // DNS name or IP address; IPv6 without brackets
  uint16_t port = 0;
  bool tls = false;  // https (true) or plain http

  // "host:port" ("[v6]:port" for IPv6): the form used in the auth file and the local store
  // (the scheme is not part of it).
  std::string ToString() const;
  // "https://host:port" or "http://host:port".
  std::string Url() const;
};

// Defaults for what a reference leaves out (see the file comment).
struct AddressDefaults {
  bool plain_http = false;  // http:// for hosts written without a scheme (--plain-http)
  std::string registry;     // the registry of references without a host ($BLZ_REGISTRY)
  // "HOST:PORT" (RegistryAddress::ToString) -> https (true) or http, as `blz login` remembered
  // them (client/client_config.h LoadRememberedSchemes).
  std::map<std::string, bool> remembered_tls;
};

// localhost, 127.0.0.0/8, ::1 (the hosts that default to plain HTTP).
bool IsLoopbackHost(std::string_view host);

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
  // The same with the scheme, "https://host:port/name:tag": parses back to this reference
  // whatever the defaults.
  std::string ToUrl() const;
};

// Parses "[SCHEME://]HOST[:PORT]" (one trailing '/' allowed). Errors (kInvalidArgument) say
// what is wrong and show the expected form.
Result<RegistryAddress> ParseRegistryAddress(std::string_view text,
                                             const AddressDefaults& defaults = {});

// Parses a full reference (see the file comment). Errors: kInvalidArgument.
Result<Reference> ParseReference(std::string_view text, const AddressDefaults& defaults = {});

// OCI repository name and tag rules.
bool IsValidRepositoryName(std::string_view name);
bool IsValidTag(std::string_view tag);

}  // namespace blz::client

#endif  // BLZ_CLIENT_REFERENCE_H_
