#include "registry/wire.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace blz::registry {
namespace {

TEST(WireTest, RepositoryNames) {
  for (const char* ok : {"a", "model", "org/model", "a.b", "a_b", "a__b", "a-b", "a---b",
                         "a0/b1/c2", "tiny-gpt2", "x.y_z-w"}) {
    EXPECT_TRUE(ValidateRepositoryName(ok).ok()) << ok;
  }
  for (const char* bad : {"", "A", "Model", "a..b", "a._b", "a___b", "-a", "a-", ".a", "a.",
                          "a//b", "/a", "a/", "a b", "a/../b", "..", "a/B", "é", "a:b"}) {
    Status s = ValidateRepositoryName(bad);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(ValidateRepositoryName(std::string(255, 'a')).ok());
  EXPECT_FALSE(ValidateRepositoryName(std::string(256, 'a')).ok());
}

TEST(WireTest, Tags) {
  for (const char* ok : {"v1", "latest", "_x", "V1.0-rc_2", "0"}) EXPECT_TRUE(IsValidTag(ok)) << ok;
  for (const char* bad : {"", ".v1", "-v1", "v/1", "v:1", "v 1"}) EXPECT_FALSE(IsValidTag(bad)) << bad;
  EXPECT_TRUE(IsValidTag(std::string(128, 'a')));
  EXPECT_FALSE(IsValidTag(std::string(129, 'a')));
}

TEST(WireTest, Targets) {
  auto t = ParseTarget("/v2/org/m/blobs/uploads/?digest=sha256%3Aab&x=1&x=2&flag");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->components,
            (std::vector<std::string>{"v2", "org", "m", "blobs", "uploads", ""}));
  EXPECT_EQ(t->query.at("digest"), "sha256:ab");
  EXPECT_EQ(t->query.at("x"), "1");
  EXPECT_EQ(t->query.at("flag"), "");
  // An encoded slash stays inside its component (and then fails name validation).
  auto s = ParseTarget("/v2/a%2Fb/tags/list");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->components[1], "a/b");
  EXPECT_FALSE(ParseTarget("v2/").ok());
  EXPECT_FALSE(ParseTarget("").ok());
  EXPECT_FALSE(ParseTarget("/v2/%zz").ok());
  EXPECT_FALSE(ParseTarget("/v2/%4").ok());
  EXPECT_FALSE(ParseTarget("/v2/a%00b").ok());
}

TEST(WireTest, RangeHeader) {
  using K = RangeRequest::Kind;
  auto r = [](const char* h, uint64_t size) { return ParseRangeHeader(std::string_view(h), size); };
  EXPECT_EQ(ParseRangeHeader(std::nullopt, 10).kind, K::kWhole);
  auto a = r("bytes=500-1499", 2048);
  EXPECT_EQ(a.kind, K::kPartial);
  EXPECT_EQ(a.range.first, 500u);
  EXPECT_EQ(a.range.last, 1499u);
  EXPECT_EQ(a.range.length(), 1000u);
  auto b = r("bytes=500-", 2048);
  EXPECT_EQ(b.range.last, 2047u);
  auto c = r("bytes=-500", 2048);
  EXPECT_EQ(c.kind, K::kPartial);
  EXPECT_EQ(c.range.first, 1548u);
  auto d = r("bytes=2000-5000", 2048);  // clipped
  EXPECT_EQ(d.kind, K::kPartial);
  EXPECT_EQ(d.range.last, 2047u);
  auto e = r("bytes=-5000", 2048);  // whole file
  EXPECT_EQ(e.range.first, 0u);
  EXPECT_EQ(e.range.last, 2047u);
  EXPECT_EQ(r("bytes=500-0", 2048).kind, K::kUnsatisfiable);
  EXPECT_EQ(r("bytes=5000-10000", 2048).kind, K::kUnsatisfiable);
  EXPECT_EQ(r("bytes=2048-", 2048).kind, K::kUnsatisfiable);
  EXPECT_EQ(r("bytes=-0", 2048).kind, K::kUnsatisfiable);
  EXPECT_EQ(r("bytes=0-", 0).kind, K::kUnsatisfiable);
  EXPECT_EQ(r("bytes=0-1,5-6", 2048).kind, K::kWhole);  // multi-range ignored
  EXPECT_EQ(r("items=0-1", 2048).kind, K::kWhole);
  EXPECT_EQ(r("bytes=x-1", 2048).kind, K::kWhole);
  EXPECT_EQ(r("bytes=1", 2048).kind, K::kWhole);
  EXPECT_EQ(r("Bytes=0-0", 2048).kind, K::kPartial);
  EXPECT_EQ(r("bytes=99999999999999999999999-", 2048).kind, K::kWhole);  // overflow: ignored
}

TEST(WireTest, ChunkRange) {
  auto a = ParseChunkRange("0-99");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->first, 0u);
  EXPECT_EQ(a->length(), 100u);
  auto b = ParseChunkRange("bytes 100-199/*");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->first, 100u);
  EXPECT_FALSE(ParseChunkRange("5-4").has_value());
  EXPECT_FALSE(ParseChunkRange("-4").has_value());
  EXPECT_FALSE(ParseChunkRange("a-b").has_value());
  EXPECT_FALSE(ParseChunkRange("").has_value());
}

TEST(WireTest, ParseUint) {
  EXPECT_EQ(ParseUint("0"), 0u);
  EXPECT_EQ(ParseUint("18446744073709551615"), UINT64_MAX);
  EXPECT_FALSE(ParseUint("18446744073709551616").has_value());
  EXPECT_FALSE(ParseUint("-1").has_value());
  EXPECT_FALSE(ParseUint("").has_value());
  EXPECT_FALSE(ParseUint("1 ").has_value());
}

TEST(WireTest, RawComponentsKeepPercentEncoding) {
  auto t = ParseTarget("/v2/org%2fmodel/tags/list?n=1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->components, (std::vector<std::string>{"v2", "org/model", "tags", "list"}));
  EXPECT_EQ(t->raw_components, (std::vector<std::string>{"v2", "org%2fmodel", "tags", "list"}));
  // A name built from the raw components is invalid; the decoded one would have passed.
  EXPECT_FALSE(ValidateRepositoryName(t->raw_components[1]).ok());
  EXPECT_TRUE(ValidateRepositoryName(t->components[1]).ok());
  auto plain = ParseTarget("/v2/org/model/manifests/v1");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->raw_components, plain->components);
}

TEST(WireTest, RedactTargetHidesSecretQueryValues) {
  EXPECT_EQ(RedactTarget("/v2/m/tags/list?token=abc123&n=5"), "/v2/m/tags/list?token=REDACTED&n=5");
  EXPECT_EQ(RedactTarget("/v2/?n=1&Access_Token=x&last=a"), "/v2/?n=1&Access_Token=REDACTED&last=a");
  EXPECT_EQ(RedactTarget("/v2/?PASSWORD=p&sig=s&X-Amz-Signature=z&api-key=k&my_secret=q"),
            "/v2/?PASSWORD=REDACTED&sig=REDACTED&X-Amz-Signature=REDACTED&api-key=REDACTED"
            "&my_secret=REDACTED");
  // An encoded parameter name is recognized too.
  EXPECT_EQ(RedactTarget("/v2/?%74oken=abc"), "/v2/?%74oken=REDACTED");
  // Everything else is kept byte for byte.
  for (const char* same : {"/v2/", "/v2/m/blz/patch?from=sha256:a&to=sha256:b", "/v2/?token",
                           "/v2/?&&n=1&", "/v2/?digest=sha256%3Aab", "/v2/?n=%zz",
                           "/v2/m/blobs/uploads/?mount=x&from=y", "/v2/?monkey=1"}) {
    EXPECT_EQ(RedactTarget(same), same);
  }
  EXPECT_EQ(RedactTarget("/v2/?token=a#frag"), "/v2/?token=REDACTED#frag");
  EXPECT_TRUE(IsSecretParameter("refresh_token"));
  EXPECT_TRUE(IsSecretParameter("Signature"));
  EXPECT_FALSE(IsSecretParameter("digest"));
  EXPECT_FALSE(IsSecretParameter("n"));
  EXPECT_FALSE(IsSecretParameter("last"));
}

// RFC 9112 §6.1/§6.3 framing: only a single "chunked" coding, never with Content-Length, never
// on HTTP/1.0; malformed lists are 400 (kInvalidArgument), unknown codings 501 (kUnsupported).
TEST(WireTest, RequestFraming) {
  using V = std::vector<std::string_view>;
  EXPECT_TRUE(CheckRequestFraming({}, false, false).ok());
  EXPECT_TRUE(CheckRequestFraming({}, true, true).ok());
  EXPECT_TRUE(CheckRequestFraming(V{"chunked"}, false, false).ok());
  EXPECT_TRUE(CheckRequestFraming(V{" Chunked\t"}, false, false).ok());
  struct Case {
    V values;
    bool content_length;
    bool http10;
    Code code;
    const char* message;
  };
  const Case cases[] = {
      {{"xchunked"}, false, false, Code::kUnsupported,
       "Transfer-Encoding 'xchunked': transfer coding 'xchunked' is not implemented"},
      {{"identity"}, false, false, Code::kUnsupported, "transfer coding 'identity'"},
      {{"gzip, chunked"}, false, false, Code::kUnsupported, "transfer coding 'gzip'"},
      {{"gzip", "chunked"}, false, false, Code::kUnsupported,
       "Transfer-Encoding 'gzip, chunked': transfer coding 'gzip'"},
      {{"chunked, identity"}, false, false, Code::kInvalidArgument,
       "chunked must be the final coding"},
      {{"chunked", "chunked"}, false, false, Code::kInvalidArgument,
       "chunked must be the final coding"},
      {{"chunked;x=1"}, false, false, Code::kInvalidArgument, "chunked takes no parameters"},
      {{""}, false, false, Code::kInvalidArgument, "is not a list of transfer codings"},
      {{"chunked,"}, false, false, Code::kInvalidArgument, "is not a list of transfer codings"},
      {{"chu nked"}, false, false, Code::kInvalidArgument, "is not a list of transfer codings"},
      {{"chunked"}, true, false, Code::kInvalidArgument,
       "Transfer-Encoding 'chunked' together with Content-Length"},
      {{"xchunked"}, true, false, Code::kUnsupported, "transfer coding 'xchunked'"},
      {{"chunked"}, false, true, Code::kInvalidArgument,
       "Transfer-Encoding 'chunked' in an HTTP/1.0 request"},
  };
  for (const Case& c : cases) {
    Status s = CheckRequestFraming(c.values, c.content_length, c.http10);
    const std::string what = c.values.empty() ? "" : std::string(c.values[0]);
    EXPECT_EQ(s.code(), c.code) << what << ": " << s.ToString();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << what << ": " << s.ToString();
  }
}

}  // namespace
}  // namespace blz::registry
