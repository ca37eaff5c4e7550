// X-Forwarded-* from trusted reverse proxies (`blz serve --trusted-proxy CIDR_OR_IP`).
//
// Behind nginx or Caddy every connection comes from the proxy; the client's address, the scheme
// it used and the host it asked for arrive in X-Forwarded-For, X-Forwarded-Proto and
// X-Forwarded-Host. Anyone can send those headers, so they are honoured only when the peer of
// the connection is in the trusted set; otherwise they are ignored.
//
// - client: X-Forwarded-For is read from the right; addresses of trusted proxies are skipped and
//   the first other one is the client (the left-most one when all are trusted). An unparsable
//   entry stops the walk and the last good address is kept (at worst the peer itself).
// - scheme: the first element of X-Forwarded-Proto when it is "http" or "https".
// - host: the first element of X-Forwarded-Host when it is a plain host[:port].
#ifndef BLZ_REGISTRY_FORWARDED_H_
#define BLZ_REGISTRY_FORWARDED_H_

#include <array>
#include <string>
#include <vector>

#include "core/status.h"
#include "registry/http_message.h"
#include "registry/net.h"

namespace blz::registry {

class TrustedProxies {
 public:
  // Each entry is an IP address ("10.0.0.5", "::1") or a CIDR block ("10.0.0.0/8",
  // "fd00::/8"). Errors: kInvalidArgument naming the bad entry.
  static Result<TrustedProxies> Parse(const std::vector<std::string>& entries);

  bool empty() const { return nets_.empty(); }
  // Is `addr` (an IPv4-mapped IPv6 address counts as IPv4) in one of the blocks?
  bool Contains(const net::ip::address& addr) const;

 private:
  struct Block {
    bool v6 = false;
    std::array<unsigned char, 16> bytes{};
    int prefix = 0;
  };
  std::vector<Block> nets_;
};

struct ForwardedInfo {
  std::string client;          // for the access log: "ip:port" of the peer, or the forwarded IP
  std::string scheme;          // "https" or "http"
  std::string forwarded_host;  // "" = none honoured
};

// What the request tells about the client (see the file comment). `tls`: the connection is TLS.
ForwardedInfo ResolveForwarded(const TrustedProxies& trusted, const tcp::endpoint& peer,
                               const std::vector<Header>& headers, bool tls);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_FORWARDED_H_
