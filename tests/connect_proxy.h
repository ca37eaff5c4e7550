// A tiny HTTP CONNECT proxy for tests (loopback only): accepts on 127.0.0.1 (ephemeral port),
// reads one "CONNECT host:port HTTP/1.1" head per connection, connects to that target when it
// is a loopback address (else answers 403), answers "200 Connection established" and relays
// bytes both ways until either side closes. It records every CONNECT target it was asked for.
// Plain POSIX sockets and one thread per connection; the destructor stops and joins them.
#ifndef BLZ_TESTS_CONNECT_PROXY_H_
#define BLZ_TESTS_CONNECT_PROXY_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace blz::testing {

class ConnectProxy {
 public:
  ConnectProxy() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      return;
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~ConnectProxy() {
    stop_ = true;
    if (accept_thread_.joinable()) accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }

  ConnectProxy(const ConnectProxy&) = delete;
  ConnectProxy& operator=(const ConnectProxy&) = delete;

  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The CONNECT targets ("host:port") asked for so far, in order.
  std::vector<std::string> targets() const {
    std::lock_guard<std::mutex> lock(mu_);
    return targets_;
  }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  static bool SendAll(int fd, const char* data, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      data += w;
      n -= size_t(w);
    }
    return true;
  }

  void Serve(int client) {
    std::string head;
    char buf[16384];
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 8192 && !stop_) {
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      ssize_t n = ::recv(client, buf, sizeof buf, 0);
      if (n <= 0) break;
      head.append(buf, size_t(n));
    }
    size_t end = head.find("\r\n\r\n");
    if (end == std::string::npos || head.rfind("CONNECT ", 0) != 0) {
      ::close(client);
      return;
    }
    std::string target = head.substr(8, head.find(' ', 8) - 8);
    {
      std::lock_guard<std::mutex> lock(mu_);
      targets_.push_back(target);
    }
    size_t colon = target.rfind(':');
    std::string host = target.substr(0, colon);
    int port = colon == std::string::npos ? 0 : std::atoi(target.c_str() + colon + 1);
    if (host == "localhost") host = "127.0.0.1";
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(uint16_t(port));
    int upstream = -1;
    if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1 &&
        (ntohl(addr.sin_addr.s_addr) >> 24) == 127) {
      upstream = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        ::close(upstream);
        upstream = -1;
      }
    }
    if (upstream < 0) {
      static const char kRefused[] = "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n";
      SendAll(client, kRefused, sizeof kRefused - 1);
      ::close(client);
      return;
    }
    static const char kOk[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    SendAll(client, kOk, sizeof kOk - 1);
    // Bytes that came after the head belong to the tunnel.
    if (head.size() > end + 4) SendAll(upstream, head.data() + end + 4, head.size() - end - 4);
    pollfd fds[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
    while (!stop_) {
      if (::poll(fds, 2, 50) <= 0) continue;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        ssize_t n = ::recv(fds[i].fd, buf, sizeof buf, 0);
        if (n <= 0 || !SendAll(fds[1 - i].fd, buf, size_t(n))) closed = true;
      }
      if (closed) break;
    }
    ::close(upstream);
    ::close(client);
  }

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;
  mutable std::mutex mu_;
  std::vector<std::thread> threads_;
  std::vector<std::string> targets_;
};

}  // namespace blz::testing

#endif  // BLZ_TESTS_CONNECT_PROXY_H_
