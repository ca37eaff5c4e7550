// The byte stream of one server connection: plain TCP or TLS over TCP, chosen when the
// connection is accepted. It models Asio's AsyncReadStream / AsyncWriteStream (run-time
// dispatch to beast::tcp_stream or beast::ssl_stream<beast::tcp_stream>) so that HttpSession
// has one code path for both. Timeouts (expires_after) apply to the TCP layer either way.
#ifndef BLZ_REGISTRY_SESSION_STREAM_H_
#define BLZ_REGISTRY_SESSION_STREAM_H_

#include <optional>
#include <utility>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include "registry/net.h"

namespace blz::registry {

class SessionStream {
 public:
  using executor_type = beast::tcp_stream::executor_type;
  using TlsStream = beast::ssl_stream<beast::tcp_stream>;

  // A plain connection, or (when `tls` is not null) a TLS one whose handshake is still to do.
  SessionStream(tcp::socket&& socket, net::ssl::context* tls) {
    if (tls != nullptr) {
      tls_.emplace(beast::tcp_stream(std::move(socket)), *tls);
    } else {
      plain_.emplace(std::move(socket));
    }
  }

  bool is_tls() const { return tls_.has_value(); }
  TlsStream& tls() { return *tls_; }
  beast::tcp_stream& lowest_layer() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }
  tcp::socket& socket() { return lowest_layer().socket(); }
  executor_type get_executor() { return lowest_layer().get_executor(); }
  template <class Duration>
  void expires_after(Duration d) {
    lowest_layer().expires_after(d);
  }

  template <class MutableBufferSequence, class ReadHandler>
  void async_read_some(const MutableBufferSequence& buffers, ReadHandler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffers, std::forward<ReadHandler>(handler));
    } else {
      plain_->async_read_some(buffers, std::forward<ReadHandler>(handler));
    }
  }

  template <class ConstBufferSequence, class WriteHandler>
  void async_write_some(const ConstBufferSequence& buffers, WriteHandler&& handler) {
    if (tls_) {
      tls_->async_write_some(buffers, std::forward<WriteHandler>(handler));
    } else {
      plain_->async_write_some(buffers, std::forward<WriteHandler>(handler));
    }
  }

 private:
  std::optional<beast::tcp_stream> plain_;
  std::optional<TlsStream> tls_;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_SESSION_STREAM_H_
