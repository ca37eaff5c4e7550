#include "registry/forwarded.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace blz::registry {
namespace {

tcp::endpoint Peer(const std::string& ip, uint16_t port = 40000) {
  return tcp::endpoint(net::ip::make_address(ip), port);
}

TrustedProxies Trust(const std::vector<std::string>& entries) {
  Result<TrustedProxies> t = TrustedProxies::Parse(entries);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : TrustedProxies();
}

TEST(TrustedProxiesTest, ParsesAddressesAndBlocks) {
  TrustedProxies t = Trust({"10.0.0.0/8", "192.168.1.7", "fd00::/8", "::1"});
  EXPECT_TRUE(t.Contains(net::ip::make_address("10.1.2.3")));
  EXPECT_FALSE(t.Contains(net::ip::make_address("11.0.0.1")));
  EXPECT_TRUE(t.Contains(net::ip::make_address("192.168.1.7")));
  EXPECT_FALSE(t.Contains(net::ip::make_address("192.168.1.8")));
  EXPECT_TRUE(t.Contains(net::ip::make_address("fd12::1")));
  EXPECT_FALSE(t.Contains(net::ip::make_address("fe80::1")));
  EXPECT_TRUE(t.Contains(net::ip::make_address("::1")));
  // An IPv4 client of a dual-stack socket.
  EXPECT_TRUE(t.Contains(net::ip::make_address("::ffff:10.9.9.9")));
  TrustedProxies odd = Trust({"172.16.0.0/12", "0.0.0.0/0"});
  EXPECT_TRUE(odd.Contains(net::ip::make_address("8.8.8.8")));
  TrustedProxies twelve = Trust({"172.16.0.0/12"});
  EXPECT_TRUE(twelve.Contains(net::ip::make_address("172.31.255.255")));
  EXPECT_FALSE(twelve.Contains(net::ip::make_address("172.32.0.0")));
}

TEST(TrustedProxiesTest, RejectsBadEntries) {
  for (const char* bad : {"", "proxy.lan", "10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x",
                          "::1/129", "10.0.0.300"}) {
    Result<TrustedProxies> t = TrustedProxies::Parse({bad});
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
    EXPECT_NE(t.status().message().find("--trusted-proxy"), std::string::npos);
  }
}

const std::vector<Header> kForwarded = {{"X-Forwarded-For", "203.0.113.9, 10.0.0.2"},
                                        {"X-Forwarded-Proto", "https"},
                                        {"X-Forwarded-Host", "models.example.com"}};

TEST(ResolveForwardedTest, IgnoredWithoutTrust) {
  ForwardedInfo f = ResolveForwarded(TrustedProxies(), Peer("10.0.0.1"), kForwarded, false);
  EXPECT_EQ(f.client, "10.0.0.1:40000");
  EXPECT_EQ(f.scheme, "http");
  EXPECT_EQ(f.forwarded_host, "");
  // From a peer that is not a trusted proxy: ignored too.
  ForwardedInfo g =
      ResolveForwarded(Trust({"10.0.0.0/24"}), Peer("198.51.100.1"), kForwarded, true);
  EXPECT_EQ(g.client, "198.51.100.1:40000");
  EXPECT_EQ(g.scheme, "https");  // the listener's own scheme
  EXPECT_EQ(g.forwarded_host, "");
}

TEST(ResolveForwardedTest, HonouredFromTrustedProxies) {
  // The right-most entries are our own proxies (10.0.0.0/24): the client is the first other.
  ForwardedInfo f = ResolveForwarded(Trust({"10.0.0.0/24"}), Peer("10.0.0.1"), kForwarded, false);
  EXPECT_EQ(f.client, "203.0.113.9");
  EXPECT_EQ(f.scheme, "https");
  EXPECT_EQ(f.forwarded_host, "models.example.com");
  // A spoofed left part does not matter: walking from the right stops at the first untrusted.
  ForwardedInfo g = ResolveForwarded(Trust({"10.0.0.1"}), Peer("10.0.0.1"),
                                     {{"X-Forwarded-For", "1.1.1.1, 198.51.100.7"}}, false);
  EXPECT_EQ(g.client, "198.51.100.7");
  EXPECT_EQ(g.scheme, "http");
  // All trusted: the left-most. Ports and IPv6 brackets are accepted.
  ForwardedInfo h = ResolveForwarded(Trust({"10.0.0.0/8", "fd00::/8"}), Peer("10.0.0.1"),
                                     {{"X-Forwarded-For", "10.1.1.1:5555, [fd00::1]:1"}}, false);
  EXPECT_EQ(h.client, "10.1.1.1");
  ForwardedInfo v6 = ResolveForwarded(Trust({"10.0.0.0/8"}), Peer("10.0.0.1"),
                                      {{"X-Forwarded-For", "10.1.1.1, [fd00::1]:1"}}, false);
  EXPECT_EQ(v6.client, "fd00::1");
  // Garbage is not taken: the last good address (here the peer) stays.
  ForwardedInfo i = ResolveForwarded(Trust({"10.0.0.1"}), Peer("10.0.0.1"),
                                     {{"X-Forwarded-For", "<script>"},
                                      {"X-Forwarded-Proto", "gopher"},
                                      {"X-Forwarded-Host", "evil\"host"}},
                                     false);
  EXPECT_EQ(i.client, "10.0.0.1:40000");
  EXPECT_EQ(i.scheme, "http");
  EXPECT_EQ(i.forwarded_host, "");
}

}  // namespace
}  // namespace blz::registry
