// The web view's handler (web/web_handler.h): paths it owns and does not own, content types,
// caching, ETag/If-None-Match, Accept-Encoding negotiation, the security headers of every
// response; first on a small table of its own, then on the embedded build of web/src.
#include "web/web_handler.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/digest.h"
#include "tests/test_util.h"
#include "web/assets.h"

namespace blz::web {
namespace {

using registry::RequestHead;
using registry::Response;
using ::blz::testing::ReadFileBytes;
using ::blz::testing::TempDir;
using ::blz::testing::WriteFileBytes;

std::string Gzip(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, in.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Inflates a gzip stream; nullopt when it is not one (or has trailing garbage).
std::optional<std::string> Gunzip(std::string_view in) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return std::nullopt;
  std::string out;
  char buf[16384];
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  }
  const bool ok = rc == Z_STREAM_END && z.avail_in == 0;
  inflateEnd(&z);
  if (!ok) return std::nullopt;
  return out;
}

// A table of our own: an index, a hashed script (both with encodings) and a hashed SVG without.
const std::string kHtml = "<!doctype html><title>t</title><p>hello</p>";
const std::string kHtmlGzip = Gzip(kHtml);
const std::string kHtmlBrotli = "(brotli of the page)";
const std::string kJs = "console.log('app');";
const std::string kJsGzip = Gzip(kJs);
const std::string kJsBrotli = "(brotli of the script)";
const std::string kSvg = "<svg xmlns=\"http://www.w3.org/2000/svg\"/>";

const std::vector<Asset>& Table() {
  static const std::vector<Asset> table = {
      {"/", "text/html; charset=utf-8", "\"aaaa\"", false, kHtml, kHtmlGzip, kHtmlBrotli},
      {"/assets/app-ABC123.js", "text/javascript", "\"bbbb\"", true, kJs, kJsGzip, kJsBrotli},
      {"/assets/logo-XYZ.svg", "image/svg+xml", "\"cccc\"", true, kSvg, "", ""},
  };
  return table;
}

RequestHead Head(std::string method, std::string target, std::vector<registry::Header> headers = {}) {
  RequestHead head;
  head.method = std::move(method);
  head.target = std::move(target);
  head.headers = std::move(headers);
  return head;
}

Response Must(const RequestHead& head, std::span<const Asset> assets) {
  std::optional<Response> res = HandleWeb(head, assets);
  EXPECT_TRUE(res.has_value()) << head.method << " " << head.target;
  return res.value_or(Response{});
}

Response Ask(std::string method, std::string target, std::vector<registry::Header> headers = {}) {
  return Must(Head(std::move(method), std::move(target), std::move(headers)), Table());
}

std::string HeaderOr(const Response& res, std::string_view name) {
  return res.Get(name).value_or("(absent)");
}

void ExpectSecurityHeaders(const Response& res, const std::string& what) {
  EXPECT_EQ(HeaderOr(res, "Content-Security-Policy"), kContentSecurityPolicy) << what;
  EXPECT_EQ(HeaderOr(res, "X-Content-Type-Options"), "nosniff") << what;
  EXPECT_EQ(HeaderOr(res, "Referrer-Policy"), "no-referrer") << what;
  EXPECT_EQ(HeaderOr(res, "X-Frame-Options"), "DENY") << what;
}

TEST(WebHandlerTest, IndexIsHtmlRevalidatedEveryTime) {
  for (const char* target : {"/", "/?from=bookmark"}) {
    Response res = Ask("GET", target);
    EXPECT_EQ(res.status, 200) << target;
    EXPECT_EQ(HeaderOr(res, "Content-Type"), "text/html; charset=utf-8");
    EXPECT_EQ(HeaderOr(res, "Cache-Control"), "no-cache");
    EXPECT_EQ(HeaderOr(res, "ETag"), "\"aaaa\"");
    EXPECT_EQ(HeaderOr(res, "Vary"), "Accept-Encoding");
    EXPECT_FALSE(res.Get("Content-Encoding").has_value());
    EXPECT_EQ(res.body, kHtml);
    EXPECT_FALSE(res.head_only);
  }
}

TEST(WebHandlerTest, HashedAssetsAreImmutableWithTheirContentType) {
  Response js = Ask("GET", "/assets/app-ABC123.js");
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(HeaderOr(js, "Content-Type"), "text/javascript");
  EXPECT_EQ(HeaderOr(js, "Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(js.body, kJs);
  Response svg = Ask("GET", "/assets/logo-XYZ.svg");
  EXPECT_EQ(svg.status, 200);
  EXPECT_EQ(HeaderOr(svg, "Content-Type"), "image/svg+xml");
  EXPECT_EQ(HeaderOr(svg, "Cache-Control"), "public, max-age=31536000, immutable");
  EXPECT_EQ(svg.body, kSvg);
}

TEST(WebHandlerTest, HeadSendsTheHeadersOnly) {
  Response res = Ask("HEAD", "/assets/app-ABC123.js", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(res.status, 200);
  EXPECT_TRUE(res.head_only);
  EXPECT_EQ(res.BodySize(), kJsGzip.size());  // the Content-Length of the GET
  EXPECT_EQ(HeaderOr(res, "Content-Encoding"), "gzip");
  EXPECT_EQ(HeaderOr(res, "Content-Type"), "text/javascript");
}

TEST(WebHandlerTest, IfNoneMatchGives304ForAnyRepresentationsETag) {
  for (const char* inm : {"\"bbbb\"", "W/\"bbbb\"", "\"zzzz\", \"bbbb\"", "\"bbbb-gz\"",
                          "\"bbbb-br\"", "*"}) {
    Response res = Ask("GET", "/assets/app-ABC123.js", {{"If-None-Match", inm}});
    EXPECT_EQ(res.status, 304) << inm;
    EXPECT_TRUE(res.body.empty()) << inm;
    EXPECT_EQ(HeaderOr(res, "ETag"), "\"bbbb\"") << inm;  // no Accept-Encoding: identity
    EXPECT_EQ(HeaderOr(res, "Cache-Control"), "public, max-age=31536000, immutable") << inm;
    EXPECT_EQ(HeaderOr(res, "Vary"), "Accept-Encoding") << inm;
    ExpectSecurityHeaders(res, inm);
  }
  // The 304 names the representation the client would get now.
  Response br = Ask("GET", "/", {{"If-None-Match", "\"aaaa\""}, {"Accept-Encoding", "br"}});
  EXPECT_EQ(br.status, 304);
  EXPECT_EQ(HeaderOr(br, "ETag"), "\"aaaa-br\"");
  // Other tags, other files' tags, malformed lists: the full answer.
  for (const char* inm : {"\"zzzz\"", "\"aaaa\"", "bbbb", "\"bbbb", "\"bbbb-xx\"", ""}) {
    Response res = Ask("GET", "/assets/app-ABC123.js", {{"If-None-Match", inm}});
    EXPECT_EQ(res.status, 200) << inm;
    EXPECT_EQ(res.body, kJs) << inm;
  }
}

TEST(WebHandlerTest, NegotiatesBrotliThenGzipRespectingQ) {
  struct Case {
    std::optional<std::string> accept;
    ContentEncoding want;
  };
  const std::vector<Case> cases = {
      {std::nullopt, ContentEncoding::kIdentity},
      {"", ContentEncoding::kIdentity},
      {"identity", ContentEncoding::kIdentity},
      {"gzip, deflate, br, zstd", ContentEncoding::kBrotli},  // what browsers send
      {"gzip", ContentEncoding::kGzip},
      {"x-gzip", ContentEncoding::kGzip},
      {"GZip ; Q=0.5", ContentEncoding::kGzip},
      {"br", ContentEncoding::kBrotli},
      {"br;q=0, gzip", ContentEncoding::kGzip},
      {"br; q=0.000, gzip;q=0.001", ContentEncoding::kGzip},
      {"gzip;q=0", ContentEncoding::kIdentity},
      {"br;q=0.5, gzip;q=0.8", ContentEncoding::kGzip},
      {"br;q=0.8, gzip;q=0.8", ContentEncoding::kBrotli},
      {"*", ContentEncoding::kBrotli},
      {"*;q=0", ContentEncoding::kIdentity},
      {"*;q=0, gzip", ContentEncoding::kGzip},
      {"br;q=0, *", ContentEncoding::kGzip},
      {"gzip;q=2", ContentEncoding::kIdentity},     // out of range: not accepted
      {"gzip;q=bad", ContentEncoding::kIdentity},   // malformed: not accepted
      {"br;q=1.0, gzip;q=1.0001", ContentEncoding::kBrotli},  // too many digits: gzip refused
  };
  for (const Case& c : cases) {
    EXPECT_EQ(NegotiateEncoding(c.accept, true, true), c.want) << c.accept.value_or("(absent)");
  }
  // Only what the asset has.
  EXPECT_EQ(NegotiateEncoding("br, gzip", true, false), ContentEncoding::kGzip);
  EXPECT_EQ(NegotiateEncoding("br", true, false), ContentEncoding::kIdentity);
  EXPECT_EQ(NegotiateEncoding("br, gzip", false, false), ContentEncoding::kIdentity);
}

TEST(WebHandlerTest, EncodedBodiesAreThePrecompressedBytes) {
  Response gz = Ask("GET", "/assets/app-ABC123.js", {{"Accept-Encoding", "gzip"}});
  EXPECT_EQ(HeaderOr(gz, "Content-Encoding"), "gzip");
  EXPECT_EQ(HeaderOr(gz, "ETag"), "\"bbbb-gz\"");
  EXPECT_EQ(HeaderOr(gz, "Vary"), "Accept-Encoding");
  EXPECT_EQ(HeaderOr(gz, "Content-Type"), "text/javascript");
  EXPECT_EQ(Gunzip(gz.body).value_or("(not gzip)"), kJs);

  Response br = Ask("GET", "/assets/app-ABC123.js", {{"Accept-Encoding", "gzip, br"}});
  EXPECT_EQ(HeaderOr(br, "Content-Encoding"), "br");
  EXPECT_EQ(HeaderOr(br, "ETag"), "\"bbbb-br\"");
  EXPECT_EQ(br.body, kJsBrotli);

  Response plain = Ask("GET", "/assets/app-ABC123.js", {{"Accept-Encoding", "br;q=0, gzip;q=0"}});
  EXPECT_FALSE(plain.Get("Content-Encoding").has_value());
  EXPECT_EQ(plain.body, kJs);

  // An asset without encodings: identity, and no Vary (nothing varies).
  Response svg = Ask("GET", "/assets/logo-XYZ.svg", {{"Accept-Encoding", "gzip, br"}});
  EXPECT_FALSE(svg.Get("Content-Encoding").has_value());
  EXPECT_FALSE(svg.Get("Vary").has_value());
  EXPECT_EQ(svg.body, kSvg);
}

TEST(WebHandlerTest, UnknownPathsAre404WithoutEchoingThePath) {
  for (const char* target : {"/nope", "/index.html", "/assets/", "/assets/app-OLD.js",
                             "/assets/app-ABC123.js/x", "/%3Cscript%3Ealert(1)%3C/script%3E",
                             "/<img src=x onerror=alert(1)>", "/v2x", "//"}) {
    for (const char* method : {"GET", "HEAD", "POST"}) {
      Response res = Ask(method, target);
      EXPECT_EQ(res.status, 404) << method << " " << target;
      EXPECT_EQ(HeaderOr(res, "Content-Type"), "application/json") << target;
      EXPECT_EQ(res.body.find("script"), std::string::npos) << res.body;
      EXPECT_EQ(res.body.find("img"), std::string::npos) << res.body;
      EXPECT_NE(res.body.find("NOT_FOUND"), std::string::npos) << res.body;
      EXPECT_EQ(res.head_only, std::string(method) == "HEAD");
      ExpectSecurityHeaders(res, target);
    }
  }
}

TEST(WebHandlerTest, OtherMethodsAre405WithAllow) {
  for (const char* method : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get"}) {
    for (const char* target : {"/", "/assets/app-ABC123.js"}) {
      Response res = Ask(method, target);
      EXPECT_EQ(res.status, 405) << method << " " << target;
      EXPECT_EQ(HeaderOr(res, "Allow"), "GET, HEAD");
      EXPECT_TRUE(res.body.find(kJs) == std::string::npos && res.body.find(kHtml) == std::string::npos);
      ExpectSecurityHeaders(res, method);
    }
  }
}

TEST(WebHandlerTest, EveryResponseCarriesTheSecurityHeadersOnce) {
  const std::vector<RequestHead> heads = {
      Head("GET", "/"), Head("HEAD", "/"), Head("GET", "/assets/app-ABC123.js", {{"Accept-Encoding", "br"}}),
      Head("GET", "/assets/logo-XYZ.svg"), Head("GET", "/", {{"If-None-Match", "*"}}),
      Head("GET", "/missing"), Head("PUT", "/")};
  for (const RequestHead& head : heads) {
    Response res = Must(head, Table());
    ExpectSecurityHeaders(res, head.method + " " + head.target);
    int csp = 0;
    for (const registry::Header& h : res.headers) csp += h.name == "Content-Security-Policy";
    EXPECT_EQ(csp, 1) << head.target;
  }
  // The policy the contract names: nothing inline, nothing foreign.
  EXPECT_EQ(kContentSecurityPolicy,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'");
}

TEST(WebHandlerTest, RegistryPathsAreNotItsBusiness) {
  for (const char* target : {"/v2", "/v2/", "/v2/_catalog", "/v2/org/m/blobs/sha256:00",
                             "/v2/_blz/repositories?n=1", "/v2?x", "/metrics", "/metrics?x=1",
                             "*", "http://example.com/",
                             // The Hugging Face Hub API (registry/hub/hub_api.h).
                             "/api/models/org/m", "/api/models/org/m/tree/main?recursive=1",
                             "/api/whoami-v2", "/org/m/resolve/main/config.json",
                             "/m/resolve/main/sub/model.safetensors"}) {
    for (const char* method : {"GET", "HEAD", "PUT", "DELETE"}) {
      EXPECT_FALSE(HandleWeb(Head(method, target), Table()).has_value()) << method << " " << target;
    }
    EXPECT_FALSE(IsWebTarget(target)) << target;
  }
  EXPECT_TRUE(IsWebTarget("/"));
  EXPECT_TRUE(IsWebTarget("/assets/x.js"));
  EXPECT_TRUE(IsWebTarget("/metricsx"));
  EXPECT_TRUE(IsWebTarget("/v2x"));
  EXPECT_TRUE(IsWebTarget("/api"));
  EXPECT_TRUE(IsWebTarget("/resolve/main/x"));
}

// --- The embedded build of web/src (web/build.mjs, web/tools/embed_assets.mjs) ---

const Asset* Find(std::string_view path) {
  for (const Asset& a : EmbeddedAssets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

// The value of every `attr="..."` in `html` (attributes the build writes, double-quoted).
std::vector<std::string> AttributeValues(const std::string& html, const std::string& attr) {
  std::vector<std::string> out;
  const std::string key = " " + attr + "=\"";
  for (size_t p = html.find(key); p != std::string::npos; p = html.find(key, p + 1)) {
    const size_t start = p + key.size();
    out.push_back(html.substr(start, html.find('"', start) - start));
  }
  return out;
}

TEST(EmbeddedAssetsTest, IndexReferencesHashedBundlesThatAreServed) {
  const Asset* index = Find("/");
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->content_type, "text/html; charset=utf-8");
  EXPECT_FALSE(index->immutable);
  const std::string html(index->identity);
  EXPECT_EQ(html.find("BLZ_JS"), std::string::npos) << "placeholders were replaced";
  EXPECT_EQ(html.find("<style"), std::string::npos);
  EXPECT_EQ(html.find(" style="), std::string::npos);
  size_t scripts = 0;
  for (size_t p = html.find("<script"); p != std::string::npos; p = html.find("<script", p + 1)) {
    const std::string tag = html.substr(p, html.find('>', p) - p);
    EXPECT_NE(tag.find(" src=\"/assets/"), std::string::npos) << "inline script: " << tag;
    EXPECT_NE(tag.find("type=\"module\""), std::string::npos) << tag;
    ++scripts;
  }
  EXPECT_EQ(scripts, 1u);
  bool js = false, css = false;
  std::vector<std::string> refs = AttributeValues(html, "src");
  for (const std::string& href : AttributeValues(html, "href")) {
    if (href.rfind("/assets/", 0) == 0) refs.push_back(href);
  }
  for (const std::string& ref : refs) {
    const Asset* asset = Find(ref);
    ASSERT_NE(asset, nullptr) << ref << " is referenced by index.html but not embedded";
    EXPECT_TRUE(asset->immutable) << ref;
    if (asset->content_type == "text/javascript") js = true;
    if (asset->content_type == "text/css") css = true;
    // Served through the handler with its type and immutable caching.
    Response res = Must(Head("GET", ref), EmbeddedAssets());
    EXPECT_EQ(res.status, 200);
    EXPECT_EQ(HeaderOr(res, "Content-Type"), asset->content_type);
    EXPECT_EQ(HeaderOr(res, "Cache-Control"), kImmutableCacheControl);
  }
  EXPECT_TRUE(js && css) << html;
}

TEST(EmbeddedAssetsTest, EveryFileHasItsETagTypeAndValidEncodings) {
  std::string previous;
  ASSERT_FALSE(EmbeddedAssets().empty());
  for (const Asset& a : EmbeddedAssets()) {
    const std::string path(a.path);
    EXPECT_LT(previous, path) << "sorted, no duplicates";
    previous = path;
    EXPECT_TRUE(path == "/" || path.rfind("/assets/", 0) == 0) << path;
    EXPECT_EQ(a.immutable, path != "/") << path;
    EXPECT_EQ(a.etag, "\"" + Sha256Hex(a.identity).substr(0, 32) + "\"") << path;
    EXPECT_FALSE(a.content_type.empty()) << path;
    // Text files come with both encodings; gzip must inflate to the identity bytes.
    ASSERT_FALSE(a.gzip.empty()) << path;
    ASSERT_FALSE(a.brotli.empty()) << path;
    EXPECT_EQ(Gunzip(a.gzip).value_or("(not gzip)"), a.identity) << path;
    Response br = Must(Head("GET", path, {{"Accept-Encoding", "gzip, deflate, br"}}), EmbeddedAssets());
    EXPECT_EQ(HeaderOr(br, "Content-Encoding"), "br");
    EXPECT_EQ(br.body, a.brotli) << path;
    Response gz = Must(Head("GET", path, {{"Accept-Encoding", "gzip"}}), EmbeddedAssets());
    EXPECT_EQ(Gunzip(gz.body).value_or("(not gzip)"), a.identity) << path;
  }
}

// Brotli has no magic number: decompress each .br with Node's zlib (the build's own tool).
TEST(EmbeddedAssetsTest, BrotliDecompressesToTheIdentityBytes) {
  TempDir dir;
  int n = 0;
  for (const Asset& a : EmbeddedAssets()) {
    const std::string in = dir / ("in" + std::to_string(n));
    const std::string out = dir / ("out" + std::to_string(n));
    ++n;
    WriteFileBytes(in, std::string(a.brotli));
    const std::string cmd = std::string("'") + BLZ_NODE +
                            "' -e \"const z=require('zlib'),f=require('fs');"
                            "f.writeFileSync(process.argv[2],z.brotliDecompressSync(f.readFileSync(process.argv[1])))\" '" +
                            in + "' '" + out + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    EXPECT_EQ(ReadFileBytes(out), a.identity) << a.path;
  }
}

}  // namespace
}  // namespace blz::web
