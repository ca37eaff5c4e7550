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
      "org/model:v1",                      // no port
      "127.0.0.1/org/model:v1",            // no port
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
      "http://127.0.0.1:5000/m:v1",        // URL scheme
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
  EXPECT_FALSE(ParseRegistryAddress("my-host.local").ok());
  EXPECT_FALSE(ParseRegistryAddress(":5000").ok());
  EXPECT_FALSE(ParseRegistryAddress("host:5000/x").ok());
}

}  // namespace
}  // namespace blz::client
