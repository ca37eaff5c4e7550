// End-to-end: the web view of a real `blz serve` (web/web_handler.h, docs/operating.md "Web
// view"), fetched with curl: / is the embedded page with the Content-Security-Policy, its
// script is served compressed and immutable, the requests are logged and counted under the
// route "web", the registry still answers /v2/; `--no-web` turns / back into a 404.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

struct Fetched {
  int exit_code = -1;
  std::string headers;  // lower-cased names and values, as received
  std::string body;
};

Fetched Fetch(const TempDir& work, const std::string& url, std::vector<std::string> extra = {}) {
  const std::string headers = work / "fetch.headers";
  const std::string body = work / "fetch.body";
  std::vector<std::string> argv = {"/usr/bin/curl", "-sS", "-D", headers, "-o", body};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  ProcessResult r = RunProcess(argv, {}, work.path());
  Fetched f;
  f.exit_code = r.exit_code;
  f.headers = ReadFileBytes(headers);
  for (char& c : f.headers) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  f.body = ReadFileBytes(body);
  return f;
}

bool HasHeader(const Fetched& f, const std::string& lower_line) {
  return f.headers.find("\r\n" + lower_line + "\r\n") != std::string::npos;
}

const char kCsp[] =
    "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'";

TEST(WebE2ETest, ServeAnswersThePageAndItsAssetsAndNoWebTurnsItOff) {
  TempDir work;
  ServeProcess server = StartServe(BLZ_BINARY, work / "data", {}, work / "serve");
  ASSERT_FALSE(server.addr.empty()) << ReadFileBytes(work / "serve.err");
  const std::string base = "http://" + server.addr;

  Fetched page = Fetch(work, base + "/");
  ASSERT_EQ(page.exit_code, 0);
  EXPECT_EQ(page.headers.rfind("http/1.1 200", 0), 0u) << page.headers;
  EXPECT_TRUE(HasHeader(page, "content-type: text/html; charset=utf-8")) << page.headers;
  EXPECT_TRUE(HasHeader(page, kCsp)) << page.headers;
  EXPECT_TRUE(HasHeader(page, "x-content-type-options: nosniff")) << page.headers;
  EXPECT_TRUE(HasHeader(page, "cache-control: no-cache")) << page.headers;
  const std::string marker = "<script type=\"module\" src=\"";
  const size_t s = page.body.find(marker);
  ASSERT_NE(s, std::string::npos) << page.body;
  const size_t start = s + marker.size();
  const std::string script = page.body.substr(start, page.body.find('"', start) - start);
  EXPECT_EQ(script.rfind("/assets/", 0), 0u) << script;

  // The script, gzip-compressed as curl asks, immutable, decoded by curl to JavaScript.
  Fetched js = Fetch(work, base + script, {"--compressed", "-H", "Accept-Encoding: gzip"});
  ASSERT_EQ(js.exit_code, 0);
  EXPECT_EQ(js.headers.rfind("http/1.1 200", 0), 0u) << js.headers;
  EXPECT_TRUE(HasHeader(js, "content-type: text/javascript")) << js.headers;
  EXPECT_TRUE(HasHeader(js, "content-encoding: gzip")) << js.headers;
  EXPECT_TRUE(HasHeader(js, "vary: accept-encoding")) << js.headers;
  EXPECT_TRUE(HasHeader(js, "cache-control: public, max-age=31536000, immutable")) << js.headers;
  EXPECT_TRUE(HasHeader(js, kCsp)) << js.headers;
  EXPECT_FALSE(js.body.empty());

  // An unknown page: the web view's 404; the registry keeps its paths.
  Fetched missing = Fetch(work, base + "/no-such-page");
  EXPECT_EQ(missing.headers.rfind("http/1.1 404", 0), 0u) << missing.headers;
  EXPECT_TRUE(HasHeader(missing, kCsp)) << missing.headers;
  Fetched v2 = Fetch(work, base + "/v2/");
  EXPECT_EQ(v2.headers.rfind("http/1.1 401", 0), 0u) << v2.headers;  // no token: the challenge
  EXPECT_FALSE(HasHeader(v2, kCsp)) << v2.headers;

  // Counted and logged like any request, under the route "web".
  Fetched metrics = Fetch(work, base + "/metrics");
  EXPECT_NE(metrics.body.find("blz_http_requests_total{route=\"web\",method=\"GET\",code=\"200\"} 2"),
            std::string::npos)
      << metrics.body;
  EXPECT_NE(metrics.body.find("blz_http_requests_total{route=\"web\",method=\"GET\",code=\"404\"} 1"),
            std::string::npos)
      << metrics.body;
  StopServe(&server);
  const std::string log = ReadFileBytes(work / "serve.err");
  EXPECT_NE(log.find(" GET / 200 "), std::string::npos) << log;
  EXPECT_NE(log.find(" GET " + script + " 200 "), std::string::npos) << log;

  // --no-web: / is the registry's 404 JSON, without the web view's headers.
  ServeProcess off = StartServe(BLZ_BINARY, work / "data", {"--no-web"}, work / "serve-off");
  ASSERT_FALSE(off.addr.empty()) << ReadFileBytes(work / "serve-off.err");
  Fetched none = Fetch(work, "http://" + off.addr + "/");
  EXPECT_EQ(none.headers.rfind("http/1.1 404", 0), 0u) << none.headers;
  EXPECT_TRUE(HasHeader(none, "content-type: application/json")) << none.headers;
  EXPECT_FALSE(HasHeader(none, kCsp)) << none.headers;
  EXPECT_EQ(none.body.find("<script"), std::string::npos) << none.body;
  Fetched none_js = Fetch(work, "http://" + off.addr + script);
  EXPECT_EQ(none_js.headers.rfind("http/1.1 404", 0), 0u) << none_js.headers;
  StopServe(&off);
}

}  // namespace
}  // namespace blz::testing
