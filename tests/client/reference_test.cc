#include "client/reference.h"

#include <gtest/gtest.h>

#include <string>

namespace blz::client {
namespace {

const std::string kHex(64, 'a');

TEST(ReferenceTest, ParsesTagReference) {
  Result<Reference> r = ParseReference("127.0.0.1:5000/org/model:v1.2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry.host, "127.0.0.1");
  EXPECT_EQ(r->registry.port, 5000);
  EXPECT_EQ(r->name, "org/model");
  EXPECT_EQ(r->tag, "v1.2");
  EXPECT_FALSE(r->by_digest());
  EXPECT_EQ(r->reference(), "v1.2");
  EXPECT_EQ(r->ToString(), "127.0.0.1:5000/org/model:v1.2");
}

// The scheme `blz login` remembered applies to references without one (issue 24); an explicit
// scheme and --plain-http win; printed URLs parse back, by digest too.
TEST(ReferenceTest, RememberedSchemeAppliesWithoutAnExplicitOne) {
  AddressDefaults d;
  d.remembered_tls = {{"reg.example.com:5000", false}, {"127.0.0.1:5443", true},
                      {"plain.example.com:80", false}};
  Result<Reference> http = ParseReference("reg.example.com:5000/org/m:v1", d);
  ASSERT_TRUE(http.ok()) << http.status().ToString();
  EXPECT_FALSE(http->registry.tls);
  Result<Reference> loop = ParseReference("127.0.0.1:5443/org/m", d);
  ASSERT_TRUE(loop.ok());
  EXPECT_TRUE(loop->registry.tls);  // loopback, but remembered as https
  Result<Reference> explicit_https = ParseReference("https://reg.example.com:5000/org/m", d);
  ASSERT_TRUE(explicit_https.ok());
  EXPECT_TRUE(explicit_https->registry.tls);
  Result<RegistryAddress> no_port = ParseRegistryAddress("plain.example.com", d);
  ASSERT_TRUE(no_port.ok());
  EXPECT_FALSE(no_port->tls);
  EXPECT_EQ(no_port->port, 80);
  Result<RegistryAddress> other = ParseRegistryAddress("other.example.com:5000", d);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->tls);

  const std::string digest = "sha256:" + std::string(64, 'a');
  Result<Reference> pasted = ParseReference("https://127.0.0.1:5443/org/m@" + digest);
  ASSERT_TRUE(pasted.ok()) << pasted.status().ToString();
  EXPECT_TRUE(pasted->registry.tls);
  EXPECT_EQ(pasted->digest, digest);
  EXPECT_EQ(pasted->ToUrl(), "https://127.0.0.1:5443/org/m@" + digest);
}

TEST(ReferenceTest, TagDefaultsToLatest) {
  Result<Reference> r = ParseReference("localhost:5000/gpt2");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry.host, "localhost");
  EXPECT_EQ(r->name, "gpt2");
  EXPECT_EQ(r->tag, "latest");
}

TEST(ReferenceTest, ParsesDigestReference) {
  Result<Reference> r = ParseReference("registry.example.com:443/a/b/c@sha256:" + kHex);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry.host, "registry.example.com");
  EXPECT_EQ(r->registry.port, 443);
  EXPECT_EQ(r->name, "a/b/c");
  EXPECT_TRUE(r->by_digest());
  EXPECT_EQ(r->digest, "sha256:" + kHex);
  EXPECT_EQ(r->reference(), "sha256:" + kHex);
  EXPECT_EQ(r->ToString(), "registry.example.com:443/a/b/c@sha256:" + kHex);
}

TEST(ReferenceTest, ParsesIpv6Registry) {
  Result<Reference> r = ParseReference("[::1]:5000/m:t");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->registry.host, "::1");
  EXPECT_EQ(r->registry.port, 5000);
  EXPECT_EQ(r->registry.ToString(), "[::1]:5000");
}

TEST(ReferenceTest, AcceptsOciNameSeparators) {
  for (const char* name : {"a", "a0", "a.b", "a_b", "a__b", "a-b", "a---b", "a/b.c_d__e-f",
                           "0/1/2", "library/tiny-gpt2"}) {
    EXPECT_TRUE(IsValidRepositoryName(name)) << name;
  }
  EXPECT_TRUE(IsValidRepositoryName(std::string(255, 'a')));
}

TEST(ReferenceTest, RejectsBadNames) {
  for (const char* name : {"", "A", "Org/model", "a..b", "a___b", "a._b", ".a", "a.", "-a", "a-",
                           "_a", "a_", "a//b", "/a", "a/", "a b", "a/../b", "a:b", "ä"}) {
    EXPECT_FALSE(IsValidRepositoryName(name)) << name;
  }
  EXPECT_FALSE(IsValidRepositoryName(std::string(256, 'a')));
}

TEST(ReferenceTest, TagRules) {
  EXPECT_TRUE(IsValidTag("v1"));
  EXPECT_TRUE(IsValidTag("_x"));
  EXPECT_TRUE(IsValidTag("V1.0-rc_2"));
  EXPECT_TRUE(IsValidTag(std::string(128, 'a')));
  EXPECT_FALSE(IsValidTag(""));
  EXPECT_FALSE(IsValidTag(".v1"));
  EXPECT_FALSE(IsValidTag("-v1"));
  EXPECT_FALSE(IsValidTag("v/1"));
  EXPECT_FALSE(IsValidTag(std::string(129, 'a')));
}

TEST(ReferenceTest, RejectsBadReferences) {
  const char* bad[] = {
      "",                                  // empty
      "org/model:v1",                      // no registry host and no BLZ_REGISTRY
      "model",                             // no registry host and no BLZ_REGISTRY
      "127.0.0.1:0/m:v1",                  // port 0
      "127.0.0.1:65536/m:v1",              // port too large
      "127.0.0.1:50a0/m:v1",               // port not a number
      "127.0.0.1:5000",                    // no name
      "127.0.0.1:5000/",                   // empty name
      "127.0.0.1:5000/:v1",                // empty name
      "127.0.0.1:5000/Org/Model:v1",       // upper case
      "127.0.0.1:5000/a..b:v1",            // bad separator
      "127.0.0.1:5000/m:",                 // empty tag
      "127.0.0.1:5000/m:-v1",              // bad tag
      "127.0.0.1:5000/m@sha256:abc",       // short digest
      "127.0.0.1:5000/m@md5:0123",         // other algorithm
      "ftp://127.0.0.1:5000/m:v1",         // unsupported scheme
      "https://",                          // no host
      "https:///m:v1",                     // no host
      "https://h.example.com",             // no name
      "https://h.example.com:99999/m",     // port too large
      "127.0.0.1:/m:v1",                   // empty port
      "/m:v1",                             // empty first component
      "//m:v1",                            // empty components
      "-bad-.com:5000/m:v1",               // bad host label
      "[::1/m:v1",                         // unterminated IPv6
      "[zz::1]:5000/m:v1",                 // not an IPv6 address
  };
  for (const char* text : bad) {
    Result<Reference> r = ParseReference(text);
    EXPECT_FALSE(r.ok()) << text;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << text;
      EXPECT_NE(r.status().message().find("expected"), std::string::npos)
          << text << ": " << r.status().message();
    }
  }
  Result<Reference> upper = ParseReference("h:1/Model:v1");
  ASSERT_FALSE(upper.ok());
  EXPECT_NE(upper.status().message().find("lower case"), std::string::npos);
  Result<Reference> digest_upper = ParseReference("h:1/m@sha256:" + std::string(64, 'A'));
  EXPECT_FALSE(digest_upper.ok());
}

TEST(ReferenceTest, RegistryAddress) {
  Result<RegistryAddress> a = ParseRegistryAddress("my-host.local:8080");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "my-host.local");
  EXPECT_EQ(a->port, 8080);
  EXPECT_EQ(a->ToString(), "my-host.local:8080");
  EXPECT_TRUE(a->tls);  // not loopback: https by default
  EXPECT_FALSE(ParseRegistryAddress(":5000").ok());
  EXPECT_FALSE(ParseRegistryAddress("host:5000/x").ok());
  EXPECT_FALSE(ParseRegistryAddress("https://host/x").ok());
  EXPECT_FALSE(ParseRegistryAddress("gopher://host").ok());
  EXPECT_FALSE(ParseRegistryAddress("").ok());
  EXPECT_FALSE(ParseRegistryAddress("https://").ok());
}

TEST(ReferenceTest, RegistryAddressDefaultsPortPerScheme) {
  Result<RegistryAddress> a = ParseRegistryAddress("models.example.com");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->tls);
  EXPECT_EQ(a->port, 443);
  EXPECT_EQ(a->ToString(), "models.example.com:443");
  EXPECT_EQ(a->Url(), "https://models.example.com:443");

  Result<RegistryAddress> b = ParseRegistryAddress("http://models.example.com/");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->tls);
  EXPECT_EQ(b->port, 80);

  Result<RegistryAddress> c = ParseRegistryAddress("HTTPS://Models.Example.COM:8443");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->tls);
  EXPECT_EQ(c->host, "models.example.com");
  EXPECT_EQ(c->port, 8443);

  Result<RegistryAddress> d = ParseRegistryAddress("[::1]");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->tls);
  EXPECT_EQ(d->port, 80);
  EXPECT_EQ(d->ToString(), "[::1]:80");
}

TEST(ReferenceTest, LoopbackHostsDefaultToPlainHttp) {
  for (const char* text : {"127.0.0.1:5000", "127.1.2.3:5000", "localhost:5000", "[::1]:5000",
                           "localhost"}) {
    Result<RegistryAddress> a = ParseRegistryAddress(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.status().ToString();
    EXPECT_FALSE(a->tls) << text;
  }
  for (const char* text : {"10.0.0.1:5000", "128.0.0.1:5000", "127.0.0.1.example.com:5000",
                           "localhost.example.com:5000", "[::2]:5000", "myhost:5000"}) {
    Result<RegistryAddress> a = ParseRegistryAddress(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.status().ToString();
    EXPECT_TRUE(a->tls) << text;
  }
  EXPECT_TRUE(IsLoopbackHost("127.255.255.254"));
  EXPECT_FALSE(IsLoopbackHost("127.0.0"));
  EXPECT_FALSE(IsLoopbackHost("127.0.0.256"));
  EXPECT_FALSE(IsLoopbackHost("::2"));
}

TEST(ReferenceTest, ExplicitSchemeWins) {
  Result<Reference> r = ParseReference("https://127.0.0.1:5000/org/m:v1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->registry.tls);
  EXPECT_EQ(r->registry.port, 5000);
  EXPECT_EQ(r->ToString(), "127.0.0.1:5000/org/m:v1");
  EXPECT_EQ(r->ToUrl(), "https://127.0.0.1:5000/org/m:v1");

  Result<Reference> p = ParseReference("http://models.example.com/org/m");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(p->registry.tls);
  EXPECT_EQ(p->registry.port, 80);
  EXPECT_EQ(p->tag, "latest");

  AddressDefaults plain;
  plain.plain_http = true;
  Result<Reference> q = ParseReference("https://models.example.com/org/m", plain);
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(q->registry.tls);  // --plain-http only applies without a scheme
}

TEST(ReferenceTest, PlainHttpFlag) {
  AddressDefaults plain;
  plain.plain_http = true;
  Result<Reference> r = ParseReference("models.example.com/org/m:v1", plain);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->registry.tls);
  EXPECT_EQ(r->registry.port, 80);
  Result<Reference> t = ParseReference("models.example.com/org/m:v1");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->registry.tls);
  EXPECT_EQ(t->registry.port, 443);
  EXPECT_EQ(t->ToString(), "models.example.com:443/org/m:v1");
}

TEST(ReferenceTest, HostOrNamespace) {
  // Docker's rule: the first component is a host when it has '.' or ':' or is "localhost".
  AddressDefaults d;
  d.registry = "registry.example.com";
  struct Case {
    const char* text;
    const char* registry;
    const char* name;
  } cases[] = {
      {"org/model:v1", "registry.example.com:443", "org/model"},
      {"model", "registry.example.com:443", "model"},
      {"a/b/c@sha256:" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
       "registry.example.com:443", "a/b/c"},
      {"localhost/model", "localhost:80", "model"},
      {"host.lan/org/model", "host.lan:443", "org/model"},
      {"myhost:5000/org/model", "myhost:5000", "org/model"},
      {"[::1]/m", "[::1]:80", "m"},
  };
  for (const Case& c : cases) {
    Result<Reference> r = ParseReference(c.text, d);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(r->registry.ToString(), c.registry) << c.text;
    EXPECT_EQ(r->name, c.name) << c.text;
  }
  // The default registry may carry a scheme and a port.
  d.registry = "http://models.internal:8080";
  Result<Reference> r = ParseReference("org/model:v2", d);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->registry.tls);
  EXPECT_EQ(r->registry.ToString(), "models.internal:8080");
  EXPECT_EQ(r->tag, "v2");
  // ... and an invalid one is reported as such.
  d.registry = "bad host";
  Result<Reference> bad = ParseReference("org/model", d);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("BLZ_REGISTRY"), std::string::npos);
  // Without a default the error says how to fix it.
  Result<Reference> none = ParseReference("org/model");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("BLZ_REGISTRY"), std::string::npos);
}

TEST(ReferenceTest, ToUrlRoundTrips) {
  AddressDefaults plain;
  plain.plain_http = true;
  for (const char* text : {"127.0.0.1:5000/org/m:v1", "models.example.com/a/b:c",
                           "http://models.example.com/x", "https://[::1]:9/m@sha256:"
                           "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}) {
    Result<Reference> r = ParseReference(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    Result<Reference> back = ParseReference(r->ToUrl(), plain);  // defaults do not matter
    ASSERT_TRUE(back.ok()) << r->ToUrl();
    EXPECT_EQ(back->ToString(), r->ToString());
    EXPECT_EQ(back->registry.tls, r->registry.tls) << text;
  }
}

}  // namespace
}  // namespace blz::client
