#include "client/reference.h"

#include <optional>

#include "core/digest.h"

namespace blz::client {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool IsValidComponent(std::string_view c) {
  size_t i = 0;
  const size_t n = c.size();
  auto alnum_run = [&]() {
    size_t start = i;
    while (i < n && IsLowerAlnum(c[i])) ++i;
    return i > start;
  };
  if (!alnum_run()) return false;
  while (i < n) {
    if (c[i] == '.') {
      ++i;
    } else if (c[i] == '_') {
      ++i;
      if (i < n && c[i] == '_') ++i;
    } else if (c[i] == '-') {
      while (i < n && c[i] == '-') ++i;
    } else {
      return false;
    }
    if (!alnum_run()) return false;
  }
  return true;
}

// A DNS name or IPv4 address: labels of [A-Za-z0-9-], 1..63 bytes, not starting or ending
// with '-'.
bool IsValidHostName(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = host.find('.', start);
    std::string_view label =
        host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63) return false;
    if (label.front() == '-' || label.back() == '-') return false;
    for (char ch : label) {
      if (!IsAlnum(ch) && ch != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool IsValidIpv6(std::string_view host) {
  if (host.size() < 2 || host.size() > 45) return false;
  if (host.find(':') == std::string_view::npos) return false;
  for (char ch : host) {
    if (!IsHexDigit(ch) && ch != ':' && ch != '.') return false;
  }
  return true;
}

constexpr std::string_view kRegistryForm =
    " (expected [https://|http://]HOST[:PORT], e.g. 127.0.0.1:5000 or "
    "https://models.example.com)";

Status BadRegistry(std::string_view text, std::string_view why) {
  return InvalidArgument("registry '" + std::string(text) + "': " + std::string(why) +
                         std::string(kRegistryForm));
}

// A registry error's message without the registry form (inside a reference's error, which
// shows the reference form instead).
std::string WithoutRegistryForm(const Status& s) {
  std::string m = s.message();
  size_t at = m.rfind(kRegistryForm);
  if (at != std::string::npos && at + kRegistryForm.size() == m.size()) m.resize(at);
  return m;
}

Status BadReference(std::string_view text, std::string_view why) {
  return InvalidArgument("reference '" + std::string(text) + "': " + std::string(why) +
                         " (expected [https://|http://]HOST[:PORT]/NAME[:TAG] or "
                         "HOST[:PORT]/NAME@sha256:<hex>)");
}

}  // namespace

bool IsValidRepositoryName(std::string_view name) {
  if (name.empty() || name.size() > kMaxRepositoryNameBytes) return false;
  size_t start = 0;
  while (true) {
    size_t slash = name.find('/', start);
    std::string_view comp = name.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!IsValidComponent(comp)) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

bool IsValidTag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  if (!IsAlnum(tag[0]) && tag[0] != '_') return false;
  for (char ch : tag.substr(1)) {
    if (!IsAlnum(ch) && ch != '_' && ch != '.' && ch != '-') return false;
  }
  return true;
}

bool IsLoopbackHost(std::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  // 127.0.0.0/8 as a dotted quad.
  if (host.rfind("127.", 0) != 0) return false;
  int parts = 0;
  size_t start = 0;
  while (start <= host.size()) {
    size_t dot = host.find('.', start);
    std::string_view p =
        host.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (p.empty() || p.size() > 3) return false;
    int v = 0;
    for (char ch : p) {
      if (ch < '0' || ch > '9') return false;
      v = v * 10 + (ch - '0');
    }
    if (v > 255) return false;
    ++parts;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts == 4;
}

std::string RegistryAddress::ToString() const {
  bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string RegistryAddress::Url() const {
  return std::string(tls ? "https://" : "http://") + ToString();
}

std::string Reference::ToString() const {
  std::string s = registry.ToString() + "/" + name;
  if (by_digest()) return s + "@" + digest;
  return s + ":" + tag;
}

std::string Reference::ToUrl() const {
  return std::string(registry.tls ? "https://" : "http://") + ToString();
}

Result<RegistryAddress> ParseRegistryAddress(std::string_view text,
                                             const AddressDefaults& defaults) {
  const std::string_view original = text;
  if (text.empty()) return BadRegistry(original, "empty");
  int scheme = -1;  // -1 none, 0 http, 1 https
  size_t sep = text.find("://");
  if (sep != std::string_view::npos) {
    std::string_view s = text.substr(0, sep);
    if (s == "https" || s == "HTTPS") {
      scheme = 1;
    } else if (s == "http" || s == "HTTP") {
      scheme = 0;
    } else {
      return BadRegistry(original, "unsupported scheme '" + std::string(s) +
                                       "://' (use https:// or http://)");
    }
    text = text.substr(sep + 3);
  }
  if (!text.empty() && text.back() == '/') text.remove_suffix(1);
  if (text.empty()) return BadRegistry(original, "missing host");
  RegistryAddress addr;
  std::string_view port_text;
  bool has_port = false;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return BadRegistry(original, "unterminated '[' in IPv6 host");
    }
    std::string_view host = text.substr(1, close - 1);
    if (!IsValidIpv6(host)) return BadRegistry(original, "invalid IPv6 address");
    addr.host = std::string(host);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return BadRegistry(original, "unexpected text after ']'");
      has_port = true;
      port_text = rest.substr(1);
    }
  } else {
    size_t colon = text.rfind(':');
    std::string_view host = text.substr(0, colon);
    if (host.find('/') != std::string_view::npos) {
      return BadRegistry(original, "a registry address has no path");
    }
    if (!IsValidHostName(host)) return BadRegistry(original, "invalid host name");
    addr.host = std::string(host);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = text.substr(colon + 1);
    }
  }
  for (char& ch : addr.host) {
    if (ch >= 'A' && ch <= 'Z') ch = char(ch - 'A' + 'a');  // host names are case-insensitive
  }
  addr.tls = scheme >= 0 ? scheme == 1 : !(defaults.plain_http || IsLoopbackHost(addr.host));
  // The scheme `blz login` remembered, when the text and --plain-http leave it open.
  const bool use_remembered = scheme < 0 && !defaults.plain_http &&
                              !defaults.remembered_tls.empty();
  auto remembered = [&](uint16_t port) -> std::optional<bool> {
    RegistryAddress probe{addr.host, port, false};
    auto it = defaults.remembered_tls.find(probe.ToString());
    if (it == defaults.remembered_tls.end()) return std::nullopt;
    return it->second;
  };
  if (!has_port) {
    if (use_remembered) {
      if (remembered(443) == std::optional<bool>(true)) {
        addr.tls = true;
      } else if (remembered(80) == std::optional<bool>(false)) {
        addr.tls = false;
      }
    }
    addr.port = addr.tls ? 443 : 80;
    return addr;
  }
  if (port_text.empty() || port_text.size() > 5) return BadRegistry(original, "invalid port");
  uint32_t port = 0;
  for (char ch : port_text) {
    if (ch < '0' || ch > '9') return BadRegistry(original, "invalid port");
    port = port * 10 + uint32_t(ch - '0');
  }
  if (port == 0 || port > 65535) return BadRegistry(original, "port must be 1..65535");
  addr.port = uint16_t(port);
  if (use_remembered) {
    if (std::optional<bool> tls = remembered(addr.port); tls.has_value()) addr.tls = *tls;
  }
  return addr;
}

Result<Reference> ParseReference(std::string_view text, const AddressDefaults& defaults) {
  if (text.empty()) return BadReference(text, "empty");
  // Is the first component a registry host? (See the file comment.)
  const bool has_scheme = text.find("://") != std::string_view::npos;
  size_t slash = text.find('/', has_scheme ? text.find("://") + 3 : 0);
  std::string_view first = text.substr(0, slash);
  const bool names_host =
      has_scheme || (slash != std::string_view::npos &&
                     (first.find('.') != std::string_view::npos ||
                      first.find(':') != std::string_view::npos ||
                      (!first.empty() && first.front() == '[') ||
                      first == "localhost"));
  Result<RegistryAddress> reg = RegistryAddress{};
  std::string_view rest;
  if (names_host) {
    if (slash == std::string_view::npos) return BadReference(text, "missing /NAME");
    reg = ParseRegistryAddress(first, defaults);
    rest = text.substr(slash + 1);
  } else {
    if (defaults.registry.empty()) {
      return BadReference(text, "no registry host (write HOST[:PORT]/NAME, or set BLZ_REGISTRY "
                                "to the default registry)");
    }
    reg = ParseRegistryAddress(defaults.registry, defaults);
    if (!reg.ok()) {
      return BadReference(text, "the default registry (BLZ_REGISTRY) is invalid: " +
                                    WithoutRegistryForm(reg.status()));
    }
    rest = text;
  }
  if (!reg.ok()) return BadReference(text, WithoutRegistryForm(reg.status()));
  Reference ref;
  ref.registry = std::move(reg).value();

  size_t at = rest.find('@');
  std::string_view name;
  if (at != std::string_view::npos) {
    name = rest.substr(0, at);
    std::string_view digest = rest.substr(at + 1);
    Result<std::string> hex = ParseDigest(digest);
    if (!hex.ok()) {
      return BadReference(text, "digest must be sha256: followed by 64 lower-case hex digits");
    }
    ref.digest = std::string(digest);
  } else {
    size_t colon = rest.rfind(':');
    if (colon != std::string_view::npos) {
      name = rest.substr(0, colon);
      std::string_view tag = rest.substr(colon + 1);
      if (!IsValidTag(tag)) {
        return BadReference(text, "invalid tag '" + std::string(tag) +
                                      "' (tags match [a-zA-Z0-9_][a-zA-Z0-9._-]{0,127})");
      }
      ref.tag = std::string(tag);
    } else {
      name = rest;
      ref.tag = std::string(kDefaultTag);
    }
  }
  if (name.empty()) return BadReference(text, "missing repository name");
  if (!IsValidRepositoryName(name)) {
    std::string why = "invalid repository name '" + std::string(name) + "'";
    bool upper = false;
    for (char ch : name) upper = upper || (ch >= 'A' && ch <= 'Z');
    if (upper) {
      why += ": names are lower case";
    } else if (name.size() > kMaxRepositoryNameBytes) {
      why += ": longer than 255 characters";
    } else {
      why += ": components match [a-z0-9]+((.|_|__|-+)[a-z0-9]+)* separated by '/'";
    }
    return BadReference(text, why);
  }
  ref.name = std::string(name);
  return ref;
}

}  // namespace blz::client
