#include "client/reference.h"

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

Status BadRegistry(std::string_view text, std::string_view why) {
  return InvalidArgument("registry '" + std::string(text) + "': " + std::string(why) +
                         " (expected HOST:PORT, e.g. 127.0.0.1:5000)");
}

Status BadReference(std::string_view text, std::string_view why) {
  return InvalidArgument("reference '" + std::string(text) + "': " + std::string(why) +
                         " (expected HOST:PORT/NAME:TAG or HOST:PORT/NAME@sha256:<hex>)");
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

std::string RegistryAddress::ToString() const {
  bool ipv6 = host.find(':') != std::string::npos;
  return (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string Reference::ToString() const {
  std::string s = registry.ToString() + "/" + name;
  if (by_digest()) return s + "@" + digest;
  return s + ":" + tag;
}

Result<RegistryAddress> ParseRegistryAddress(std::string_view text) {
  if (text.empty()) return BadRegistry(text, "empty");
  if (text.find("://") != std::string_view::npos) {
    return BadRegistry(text, "give the address without a URL scheme");
  }
  RegistryAddress addr;
  std::string_view port_text;
  if (text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return BadRegistry(text, "unterminated '[' in IPv6 host");
    std::string_view host = text.substr(1, close - 1);
    if (!IsValidIpv6(host)) return BadRegistry(text, "invalid IPv6 address");
    addr.host = std::string(host);
    std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return BadRegistry(text, "missing :PORT");
    port_text = rest.substr(1);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return BadRegistry(text, "missing :PORT");
    std::string_view host = text.substr(0, colon);
    if (!IsValidHostName(host)) return BadRegistry(text, "invalid host name");
    addr.host = std::string(host);
    port_text = text.substr(colon + 1);
  }
  if (port_text.empty() || port_text.size() > 5) return BadRegistry(text, "invalid port");
  uint32_t port = 0;
  for (char ch : port_text) {
    if (ch < '0' || ch > '9') return BadRegistry(text, "invalid port");
    port = port * 10 + uint32_t(ch - '0');
  }
  if (port == 0 || port > 65535) return BadRegistry(text, "port must be 1..65535");
  addr.port = uint16_t(port);
  return addr;
}

Result<Reference> ParseReference(std::string_view text) {
  size_t slash = text.find('/');
  if (slash == std::string_view::npos) return BadReference(text, "missing /NAME");
  Result<RegistryAddress> reg = ParseRegistryAddress(text.substr(0, slash));
  if (!reg.ok()) return BadReference(text, reg.status().message());
  Reference ref;
  ref.registry = std::move(reg).value();
  std::string_view rest = text.substr(slash + 1);

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
