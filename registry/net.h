// Namespace aliases for Boost.Asio / Boost.Beast; only registry/ (and client/) use them.
#ifndef BLZ_REGISTRY_NET_H_
#define BLZ_REGISTRY_NET_H_

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility> (C++20).
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace blz::registry {
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = boost::asio::ip::tcp;
}  // namespace blz::registry

#endif  // BLZ_REGISTRY_NET_H_
