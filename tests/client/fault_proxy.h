// A TCP proxy for tests of transfers that survive faults (loopback only): listens on
// 127.0.0.1:<ephemeral>, forwards every connection to 127.0.0.1:<upstream port>, and can
//   - cut a connection (close both sides) after it forwarded `cut_after` bytes downstream
//     (server -> client), or `cut_up_after` bytes upstream (client -> server), for the first
//     `cut_connections` connections or all of them (and with `refuse_after_cut`, close every
//     later connection at once: the network is gone);
//   - stall: once `stall_after_total` bytes went downstream in total (or, with
//     `stall_up_after_total`, upstream: the client's request bodies), forward nothing more
//     that way (connections stay open) until Release() or `stall_for` has passed; the stall
//     happens once. ReleaseByCutting() ends it by closing the stalled connection instead,
//     dropping whatever the server had sent meanwhile (what a crashed server's peer sees;
//     deterministic, where a Release() after the server died forwards an amount that depends
//     on how much the kernel had buffered).
// Counts the bytes read from the upstream (what the server sent), forwarded downstream and
// forwarded upstream, and the connections. One thread per connection, poll() with short
// timeouts; the destructor stops and joins everything.
#ifndef BLZ_TESTS_CLIENT_FAULT_PROXY_H_
#define BLZ_TESTS_CLIENT_FAULT_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace blz::testing {

class FaultProxy {
 public:
  struct Options {
    uint64_t cut_after = 0;        // per connection, downstream bytes; 0 = never cut
    uint64_t cut_up_after = 0;     // per connection, upstream bytes; 0 = never cut
    int cut_connections = -1;      // connections to cut (in accept order); -1 = all
    bool refuse_after_cut = false; // after the first cut, close new connections at once
    uint64_t stall_after_total = 0;  // 0 = never stall
    uint64_t stall_up_after_total = 0;  // 0 = never stall upstream
    std::chrono::milliseconds stall_for{0};  // 0 = until Release()
  };

  // `listen_port` 0 = an ephemeral port; else that one (e.g. a previous proxy's, so that a
  // re-run talks to the "same registry").
  FaultProxy(uint16_t upstream_port, Options options, uint16_t listen_port = 0)
      : upstream_port_(upstream_port), options_(options) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(listen_port);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 64);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FaultProxy() {
    stop_ = true;
    accept_thread_.join();
    ::close(listen_fd_);
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  uint16_t port() const { return port_; }
  uint64_t upstream_bytes_read() const { return upstream_read_; }  // what the server sent
  uint64_t downstream_bytes() const { return downstream_; }       // what the client got
  uint64_t upstream_bytes_sent() const { return upstream_sent_; }  // what the client sent
  int connections() const { return connections_; }
  int cuts() const { return cuts_; }
  bool stalled() const { return stalled_; }

  // Ends a stall (and disarms it).
  void Release() { released_ = true; }
  // Ends a stall by cutting the stalled connection (both sides) without forwarding anything
  // more on it; later connections are forwarded normally.
  void ReleaseByCutting() {
    cut_on_release_ = true;
    released_ = true;
  }
  // Stops cutting connections from now on.
  void StopCutting() { cutting_disabled_ = true; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(upstream_port_);
      if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(server);
        ::close(client);
        continue;
      }
      if (options_.refuse_after_cut && cuts_ > 0) {
        ::close(server);
        ::close(client);
        continue;
      }
      const int index = connections_++;
      std::lock_guard<std::mutex> lock(mu_);
      threads_.emplace_back([this, client, server, index] { Pump(client, server, index); });
    }
  }

  static bool SendAll(int fd, const char* data, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      data += w;
      n -= size_t(w);
    }
    return true;
  }

  // Waits out a stall. False when the proxy stops or the client went away meanwhile.
  bool WaitStall(int client) {
    int64_t start = stall_start_ns_.load();
    if (start == 0) {
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      stall_start_ns_.compare_exchange_strong(start, now);
      start = stall_start_ns_.load();
    }
    while (!stop_ && !released_) {
      const auto since = std::chrono::steady_clock::duration(
          std::chrono::steady_clock::now().time_since_epoch().count() - start);
      if (options_.stall_for.count() > 0 && since >= options_.stall_for) break;
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 20) > 0 && (p.revents & (POLLHUP | POLLERR | POLLIN))) {
        char probe;
        if (::recv(client, &probe, 1, MSG_PEEK | MSG_DONTWAIT) == 0) return false;
        if (p.revents & (POLLHUP | POLLERR)) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // data waits its turn
      }
    }
    released_ = true;
    stalled_ = false;
    if (cut_on_release_) {
      ++cuts_;
      return false;
    }
    return !stop_;
  }

  void Pump(int client, int server, int index) {
    const bool cut_this = options_.cut_connections < 0 || index < options_.cut_connections;
    uint64_t conn_down = 0;
    uint64_t conn_up = 0;
    std::vector<char> buf(64 * 1024);
    bool client_open = true;
    while (!stop_) {
      pollfd fds[2] = {{client, short(client_open ? POLLIN : 0), 0}, {server, POLLIN, 0}};
      int n = ::poll(fds, 2, 50);
      if (n <= 0) continue;
      if (client_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t r = ::recv(client, buf.data(), buf.size(), 0);
        if (r <= 0) break;  // the client went away
        size_t len = size_t(r);
        bool cut = false;
        if (cut_this && options_.cut_up_after > 0 && !cutting_disabled_ &&
            conn_up + len >= options_.cut_up_after) {
          len = size_t(options_.cut_up_after - conn_up);
          cut = true;
        }
        size_t off = 0;
        if (options_.stall_up_after_total > 0 && !released_ &&
            upstream_sent_.load() + len >= options_.stall_up_after_total) {
          // Forward up to the stall point, wait, then the rest.
          size_t before = size_t(std::max<int64_t>(
              0, int64_t(options_.stall_up_after_total) - int64_t(upstream_sent_.load())));
          before = std::min(before, len);
          if (!SendAll(server, buf.data(), before)) break;
          upstream_sent_ += before;
          conn_up += before;
          off = before;
          stalled_ = true;
          if (!WaitStall(client)) break;
        }
        upstream_sent_ += len - off;
        conn_up += len - off;
        if (!SendAll(server, buf.data() + off, len - off)) break;
        if (cut) {
          ++cuts_;
          break;
        }
      }
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t r = ::recv(server, buf.data(), buf.size(), 0);
        if (r <= 0) break;
        upstream_read_ += uint64_t(r);
        size_t len = size_t(r);
        size_t off = 0;
        bool cut = false;
        if (cut_this && options_.cut_after > 0 && !cutting_disabled_ &&
            conn_down + len >= options_.cut_after) {
          len = size_t(options_.cut_after - conn_down);
          cut = true;
        }
        // The stall point may fall inside this chunk: forward up to it, wait, then the rest.
        if (options_.stall_after_total > 0 && !released_) {
          uint64_t total = downstream_.load();
          if (total + len >= options_.stall_after_total) {
            size_t before = size_t(std::max<int64_t>(
                0, int64_t(options_.stall_after_total) - int64_t(total)));
            before = std::min(before, len);
            if (!SendAll(client, buf.data(), before)) break;
            downstream_ += before;
            conn_down += before;
            off = before;
            stalled_ = true;
            if (!WaitStall(client)) break;
          }
        }
        if (!SendAll(client, buf.data() + off, len - off)) break;
        downstream_ += len - off;
        conn_down += len - off;
        if (cut) {
          ++cuts_;
          break;
        }
      }
    }
    ::shutdown(client, SHUT_RDWR);
    ::shutdown(server, SHUT_RDWR);
    ::close(client);
    ::close(server);
  }

  const uint16_t upstream_port_;
  const Options options_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> released_{false};
  std::atomic<bool> cut_on_release_{false};
  std::atomic<bool> stalled_{false};
  std::atomic<int64_t> stall_start_ns_{0};  // when the (one) stall began, steady clock ticks
  std::atomic<bool> cutting_disabled_{false};
  std::atomic<uint64_t> upstream_read_{0};
  std::atomic<uint64_t> downstream_{0};
  std::atomic<uint64_t> upstream_sent_{0};
  std::atomic<int> connections_{0};
  std::atomic<int> cuts_{0};
};

}  // namespace blz::testing

#endif  // BLZ_TESTS_CLIENT_FAULT_PROXY_H_
