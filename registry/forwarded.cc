#include "registry/forwarded.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

namespace blz::registry {
namespace {

net::ip::address Unmapped(const net::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return net::ip::make_address_v4(net::ip::v4_mapped, a.to_v6());
  }
  return a;
}

std::string_view Trim(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// A forwarded address: "1.2.3.4", "1.2.3.4:5678", "[::1]", "[::1]:5678", "::1".
std::optional<net::ip::address> ParseForwardedAddress(std::string_view text) {
  std::string s(Trim(text));
  if (!s.empty() && s.front() == '[') {
    size_t close = s.find(']');
    if (close == std::string::npos) return std::nullopt;
    s = s.substr(1, close - 1);
  } else if (std::count(s.begin(), s.end(), ':') == 1) {
    s = s.substr(0, s.find(':'));
  }
  beast::error_code ec;
  net::ip::address a = net::ip::make_address(s, ec);
  if (ec) return std::nullopt;
  return Unmapped(a);
}

std::string FirstElement(const std::string& v) {
  return std::string(Trim(std::string_view(v).substr(0, v.find(','))));
}

bool IsPlainHost(std::string_view host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == ':' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Result<TrustedProxies> TrustedProxies::Parse(const std::vector<std::string>& entries) {
  TrustedProxies out;
  for (const std::string& entry : entries) {
    auto bad = [&](const std::string& why) {
      return InvalidArgument("--trusted-proxy '" + entry + "': " + why +
                             " (expected an IP address or a CIDR block such as 10.0.0.0/8)");
    };
    std::string addr_text = entry;
    int prefix = -1;
    size_t slash = entry.find('/');
    if (slash != std::string::npos) {
      addr_text = entry.substr(0, slash);
      std::string p = entry.substr(slash + 1);
      if (p.empty() || p.size() > 3 || p.find_first_not_of("0123456789") != std::string::npos) {
        return bad("invalid prefix length");
      }
      prefix = std::stoi(p);
    }
    beast::error_code ec;
    net::ip::address a = net::ip::make_address(addr_text, ec);
    if (ec) return bad("not an IP address");
    a = Unmapped(a);
    Block b;
    b.v6 = a.is_v6();
    const int max = b.v6 ? 128 : 32;
    if (prefix < 0) prefix = max;
    if (prefix > max) return bad("prefix length over " + std::to_string(max));
    b.prefix = prefix;
    if (b.v6) {
      auto bytes = a.to_v6().to_bytes();
      std::copy(bytes.begin(), bytes.end(), b.bytes.begin());
    } else {
      auto bytes = a.to_v4().to_bytes();
      std::copy(bytes.begin(), bytes.end(), b.bytes.begin());
    }
    out.nets_.push_back(b);
  }
  return out;
}

bool TrustedProxies::Contains(const net::ip::address& addr_in) const {
  const net::ip::address addr = Unmapped(addr_in);
  std::array<unsigned char, 16> bytes{};
  if (addr.is_v6()) {
    auto b = addr.to_v6().to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
  } else {
    auto b = addr.to_v4().to_bytes();
    std::copy(b.begin(), b.end(), bytes.begin());
  }
  for (const Block& n : nets_) {
    if (n.v6 != addr.is_v6()) continue;
    int bits = n.prefix;
    bool match = true;
    for (size_t i = 0; bits > 0 && match; ++i, bits -= 8) {
      const unsigned mask = bits >= 8 ? 0xffu : (0xffu << (8 - bits)) & 0xffu;
      match = (bytes[i] & mask) == (n.bytes[i] & mask);
    }
    if (match) return true;
  }
  return false;
}

ForwardedInfo ResolveForwarded(const TrustedProxies& trusted, const tcp::endpoint& peer,
                               const std::vector<Header>& headers, bool tls) {
  ForwardedInfo out;
  out.scheme = tls ? "https" : "http";
  const net::ip::address peer_addr = Unmapped(peer.address());
  out.client = peer_addr.is_v6() ? "[" + peer_addr.to_string() + "]:" + std::to_string(peer.port())
                                 : peer_addr.to_string() + ":" + std::to_string(peer.port());
  if (trusted.empty() || !trusted.Contains(peer_addr)) return out;

  if (std::optional<std::string> xff = FindHeader(headers, "X-Forwarded-For"); xff.has_value()) {
    // Right to left: skip our own proxies; the first other address is the client.
    std::optional<net::ip::address> client;
    std::string_view rest = *xff;
    while (true) {
      size_t comma = rest.rfind(',');
      std::string_view item = comma == std::string_view::npos ? rest : rest.substr(comma + 1);
      std::optional<net::ip::address> a = ParseForwardedAddress(item);
      if (!a.has_value()) break;
      client = a;
      if (!trusted.Contains(*a)) break;
      if (comma == std::string_view::npos) break;
      rest = rest.substr(0, comma);
    }
    if (client.has_value()) out.client = client->to_string();
  }
  if (std::optional<std::string> proto = FindHeader(headers, "X-Forwarded-Proto");
      proto.has_value()) {
    std::string p = FirstElement(*proto);
    for (char& c : p) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (p == "http" || p == "https") out.scheme = p;
  }
  if (std::optional<std::string> host = FindHeader(headers, "X-Forwarded-Host");
      host.has_value()) {
    std::string h = FirstElement(*host);
    if (IsPlainHost(h)) out.forwarded_host = h;
  }
  return out;
}

}  // namespace blz::registry
