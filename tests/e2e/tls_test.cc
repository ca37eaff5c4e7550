// End-to-end HTTPS: a test CA and server certificate made with the `openssl` CLI, a real
// `blz serve --tls-cert --tls-key`, and the `blz` client pushing and pulling over
// https://127.0.0.1:PORT with --ca-cert / $BLZ_CA_BUNDLE / --insecure; wrong or missing trust,
// a certificate for another name and http:// to the TLS port fail clearly and write nothing;
// a pull through an HTTP CONNECT proxy ($HTTPS_PROXY) and its NO_PROXY bypass.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/connect_proxy.h"
#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kCaConfig[] =
    "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = v3_ca\n"
    "[dn]\nCN = blz test CA\n"
    "[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier = hash\n";

// A server certificate request config with subjectAltName `san`.
std::string ServerConfig(const std::string& san) {
  return "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = blz test server\n"
         "[v3_srv]\nbasicConstraints = CA:FALSE\n"
         "keyUsage = critical,digitalSignature,keyEncipherment\n"
         "extendedKeyUsage = serverAuth\nsubjectAltName = " + san + "\n";
}

class TlsE2ETest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    work_ = new TempDir();
    const std::string w = work_->path();
    // Two CAs (the second is "wrong"), a server certificate for 127.0.0.1 and localhost, and
    // one for another name only.
    WriteFileBytes(w + "/ca.cnf", kCaConfig);
    WriteFileBytes(w + "/srv.cnf", ServerConfig("IP:127.0.0.1,DNS:localhost"));
    WriteFileBytes(w + "/other.cnf", ServerConfig("DNS:registry.example.com"));
    for (const char* ca : {"ca", "wrong-ca"}) {
      ASSERT_TRUE(OpenSsl({"req", "-x509", "-config", w + "/ca.cnf", "-newkey", "ec",
                           "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
                           w + "/" + ca + ".key", "-out", w + "/" + ca + ".pem", "-days", "2"}));
    }
    for (const char* srv : {"srv", "other"}) {
      const std::string base = w + "/" + srv;
      ASSERT_TRUE(OpenSsl({"req", "-new", "-config", base + ".cnf", "-newkey", "ec", "-pkeyopt",
                           "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", base + ".key",
                           "-out", base + ".csr"}));
      ASSERT_TRUE(OpenSsl({"x509", "-req", "-in", base + ".csr", "-CA", w + "/ca.pem", "-CAkey",
                           w + "/ca.key", "-CAcreateserial", "-out", base + ".pem", "-days", "2",
                           "-extfile", base + ".cnf", "-extensions", "v3_srv"}));
    }
    server_pid_ = StartServer("registry", {"--tls-cert", w + "/srv.pem", "--tls-key",
                                           w + "/srv.key"},
                              &addr_, &token_);
    ASSERT_FALSE(addr_.empty()) << ReadFileBytes(w + "/registry.err");
  }

  static void TearDownTestSuite() {
    StopServer(server_pid_);
    delete work_;
    work_ = nullptr;
  }

  static bool OpenSsl(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    ProcessResult r = RunProcess(args, {}, work_->path(), 60);
    EXPECT_EQ(r.exit_code, 0) << "openssl failed: " << r.err;
    return r.exit_code == 0;
  }

  // Starts `blz serve` with `extra` flags; sets *addr ("127.0.0.1:PORT", empty on failure).
  static pid_t StartServer(const std::string& name, const std::vector<std::string>& extra,
                           std::string* addr, std::string* token) {
    const std::string out = *work_ / (name + ".out");
    std::vector<std::string> argv = {BLZ_BINARY, "serve", "--data", *work_ / (name + "-data"),
                                     "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_t pid = StartServeProcess(argv, {}, out, *work_ / (name + ".err"));
    const std::string marker = "listening on https://";
    for (int i = 0; i < 300 && addr->empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string text = ReadFileBytes(out);
      auto l = text.find(marker);
      if (l == std::string::npos || text.find('\n', l) == std::string::npos) continue;
      auto t = text.find("admin token: ");
      if (t != std::string::npos) *token = text.substr(t + 13, 64);
      *addr = text.substr(l + marker.size(), text.find('\n', l) - l - marker.size());
    }
    return pid;
  }

  static void StopServer(pid_t pid) {
    if (pid <= 0) return;
    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
  }

  ProcessResult Blz(std::vector<std::string> args, std::map<std::string, std::string> env) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args, env, work_->path());
  }

  // A client environment of its own (config and cache), without any proxy.
  std::map<std::string, std::string> Env(const std::string& name) {
    return {{"BLZ_CONFIG_DIR", *work_ / ("config-" + name)},
            {"BLZ_CACHE_DIR", *work_ / ("cache-" + name)},
            {"https_proxy", ""}, {"HTTPS_PROXY", ""}, {"http_proxy", ""}, {"HTTP_PROXY", ""},
            {"BLZ_CA_BUNDLE", ""}};
  }

  std::string Url(const std::string& repo) { return "https://" + addr_ + "/" + repo; }
  std::string Ca() { return *work_ / "ca.pem"; }

  // Pushes the corpus model to `repo` (logged in with the admin token) once per test suite.
  void PushOnce(const std::string& corpus) {
    if (pushed_) return;
    auto env = Env("pusher");
    ProcessResult l = Blz({"login", "https://" + addr_, "--token", token_, "--ca-cert", Ca()},
                          env);
    ASSERT_EQ(l.exit_code, 0) << l.err;
    ProcessResult p = Blz({"push", corpus + "/tiny-gpt2/base", Url("tls/m:v1"), "--ca-cert",
                           Ca()},
                          env);
    ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
    pushed_ = true;
  }

  static TempDir* work_;
  static pid_t server_pid_;
  static std::string addr_, token_;
  static bool pushed_;
};

TempDir* TlsE2ETest::work_ = nullptr;
pid_t TlsE2ETest::server_pid_ = -1;
std::string TlsE2ETest::addr_;
std::string TlsE2ETest::token_;
bool TlsE2ETest::pushed_ = false;

TEST_F(TlsE2ETest, PushAndPullOverHttpsWithTheTestCa) {
  BLZ_REQUIRE_CORPUS(corpus);
  PushOnce(corpus);
  // --ca-cert, then $BLZ_CA_BUNDLE.
  auto env = Env("puller");
  const std::string out = *work_ / "pulled";
  const size_t log_before = ReadFileBytes(*work_ / "registry.err").size();
  ProcessResult r = Blz({"pull", Url("tls/m:v1"), "-o", out, "--ca-cert", Ca()}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Keep-alive over TLS: the registry requests share one connection and a small download
  // (one Range part) has one of its own (client/blob_download.h), i.e. at most two client
  // addresses in the access log, however many requests.
  std::set<std::string> clients;
  int requests = 0;
  // The access-log line is written once the reply is sent: wait (bounded) for both lines.
  for (int attempt = 0; attempt < 100 && requests < 2; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    clients.clear();
    requests = 0;
    std::istringstream log(ReadFileBytes(*work_ / "registry.err").substr(log_before));
    for (std::string line; std::getline(log, line);) {
      std::istringstream fields(line);
      std::string time, client;
      if (!(fields >> time >> client) || line.find(" GET /v2/tls/m/") == std::string::npos) {
        continue;
      }
      clients.insert(client);
      ++requests;
    }
  }
  EXPECT_GE(requests, 2);
  EXPECT_LE(clients.size(), 2u) << "the pull opened more than two TLS connections";
  for (const auto& e : fs::recursive_directory_iterator(corpus + "/tiny-gpt2/base")) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), corpus + "/tiny-gpt2/base").string();
    EXPECT_EQ(ReadFileBytes(out + "/" + rel), ReadFileBytes(e.path().string())) << rel;
  }
  auto env2 = Env("puller2");
  env2["BLZ_CA_BUNDLE"] = Ca();
  ProcessResult t = Blz({"tags", Url("tls/m")}, env2);
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out, "v1\n");
  // "localhost" is in the certificate too.
  ProcessResult lh = Blz({"tags", "https://localhost:" + addr_.substr(addr_.rfind(':') + 1) +
                                      "/tls/m"},
                         env2);
  EXPECT_EQ(lh.exit_code, 0) << lh.err;
}

TEST_F(TlsE2ETest, WithoutTheCaThePullFailsClearlyAndWritesNothing) {
  BLZ_REQUIRE_CORPUS(corpus);
  PushOnce(corpus);
  auto env = Env("untrusting");
  const std::string out = *work_ / "not-pulled";
  ProcessResult r = Blz({"pull", Url("tls/m:v1"), "-o", out, "--verbose"}, env);
  // Untrusted: the registry is unavailable to us (exit 6), not retried, and the message names
  // the host, OpenSSL's reason and the trust that was used (issue 24).
  EXPECT_EQ(r.exit_code, 6) << r.err;
  EXPECT_EQ(r.err.find("retry"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TLS handshake with 127.0.0.1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("certificate verify failed ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(") against the system trust store"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--ca-cert"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("token"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));

  // A CA that did not sign the server's certificate, from --ca-cert and from BLZ_CA_BUNDLE.
  const std::string wrong = *work_ / "wrong-ca.pem";
  ProcessResult w = Blz({"pull", Url("tls/m:v1"), "-o", out, "--ca-cert", wrong}, env);
  EXPECT_EQ(w.exit_code, 6) << w.err;
  EXPECT_NE(w.err.find("certificate verify failed"), std::string::npos) << w.err;
  EXPECT_NE(w.err.find("against the CA bundle " + wrong + " (--ca-cert)"), std::string::npos)
      << w.err;
  EXPECT_FALSE(fs::exists(out));
  auto env_wrong = env;
  env_wrong["BLZ_CA_BUNDLE"] = wrong;
  ProcessResult we = Blz({"tags", Url("tls/m")}, env_wrong);
  EXPECT_EQ(we.exit_code, 6) << we.err;
  EXPECT_NE(we.err.find("against the CA bundle " + wrong + " (BLZ_CA_BUNDLE)"), std::string::npos)
      << we.err;

  // login is not "the registry rejected the token", and stores nothing.
  ProcessResult l = Blz({"login", "https://" + addr_, "--token", token_}, env);
  EXPECT_EQ(l.exit_code, 6) << l.err;
  EXPECT_EQ(l.err.find("rejected the token"), std::string::npos) << l.err;
  EXPECT_NE(l.err.find("certificate is not trusted (nothing stored)"), std::string::npos)
      << l.err;
  EXPECT_FALSE(fs::exists(*work_ / "config-untrusting/auth.json"));

  // A CA file that does not exist.
  ProcessResult m = Blz({"tags", Url("tls/m"), "--ca-cert", "/nope"}, env);
  EXPECT_EQ(m.exit_code, 3) << m.err;
  EXPECT_NE(m.err.find("no such file: /nope"), std::string::npos) << m.err;

  // --insecure skips verification.
  ProcessResult i = Blz({"pull", Url("tls/m:v1"), "-o", out, "--insecure"}, env);
  EXPECT_EQ(i.exit_code, 0) << i.err;
  EXPECT_TRUE(fs::exists(out));
}

// `blz login https://HOST:PORT --ca-cert FILE` once; then push, pull (by the printed
// reference), tags and export with neither https:// nor the CA (issue 24).
TEST_F(TlsE2ETest, LoginRemembersTheSchemeAndTheCa) {
  BLZ_REQUIRE_CORPUS(corpus);
  auto env = Env("remembering");
  const std::string config = env["BLZ_CONFIG_DIR"];
  ProcessResult l =
      Blz({"login", "https://" + addr_, "--token", token_, "--ca-cert", Ca()}, env);
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_EQ(ReadFileBytes(config + "/certs.d/" + addr_ + "/ca.crt"), ReadFileBytes(Ca()));
  nlohmann::json client = nlohmann::json::parse(ReadFileBytes(config + "/client.json"));
  EXPECT_EQ(client["registries"][addr_]["scheme"], "https") << client.dump();

  // 127.0.0.1 defaults to plain HTTP: without the remembered scheme this would fail.
  ProcessResult p = Blz({"push", corpus + "/tiny-gpt2/base", addr_ + "/remembered/m:v1"}, env);
  ASSERT_EQ(p.exit_code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("pushed https://" + addr_ + "/remembered/m:v1\n"), std::string::npos)
      << p.out;
  const std::string marker = "  by digest ";
  const size_t at = p.out.find(marker);
  ASSERT_NE(at, std::string::npos) << p.out;
  const std::string by_digest =
      p.out.substr(at + marker.size(), p.out.find('\n', at) - at - marker.size());
  EXPECT_EQ(by_digest.rfind("https://" + addr_ + "/remembered/m@sha256:", 0), 0u) << by_digest;

  // The printed reference pastes back into pull; -q leaves nothing on stderr.
  auto puller = env;
  puller["BLZ_CACHE_DIR"] = *work_ / "cache-remembering-2";
  ProcessResult r = Blz({"pull", by_digest, "-o", *work_ / "remembered-out", "-q"}, puller);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(fs::exists(*work_ / "remembered-out/config.json"));

  ProcessResult t = Blz({"tags", addr_ + "/remembered/m"}, env);
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(t.out, "v1\n");
  ProcessResult e = Blz({"export", addr_ + "/remembered/m:v1", "--format", "safetensors", "-o",
                         *work_ / "remembered-export"},
                        puller);
  EXPECT_EQ(e.exit_code, 0) << e.err;

  // An explicit CA still wins over the remembered one.
  ProcessResult w =
      Blz({"tags", addr_ + "/remembered/m", "--ca-cert", *work_ / "wrong-ca.pem"}, env);
  EXPECT_EQ(w.exit_code, 6) << w.err;
  EXPECT_NE(w.err.find("wrong-ca.pem (--ca-cert)"), std::string::npos) << w.err;
}

// `blz export REF` takes the CA as every other registry command does (issue 24).
TEST_F(TlsE2ETest, ExportOfAReferenceTakesTheCa) {
  BLZ_REQUIRE_CORPUS(corpus);
  PushOnce(corpus);
  auto env = Env("exporter");
  ProcessResult c = Blz({"export", Url("tls/m:v1"), "--format", "safetensors", "-o",
                         *work_ / "export-flag", "--ca-cert", Ca()},
                        env);
  EXPECT_EQ(c.exit_code, 0) << c.err;
  env["BLZ_CA_BUNDLE"] = Ca();
  ProcessResult b = Blz({"export", Url("tls/m:v1"), "--format", "safetensors", "-o",
                         *work_ / "export-env"},
                        env);
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(fs::exists(*work_ / "export-env"));
}

TEST_F(TlsE2ETest, CertificateForAnotherNameIsRefused) {
  std::string addr, token;
  pid_t pid = StartServer("other", {"--tls-cert", *work_ / "other.pem", "--tls-key",
                                    *work_ / "other.key"},
                          &addr, &token);
  ASSERT_FALSE(addr.empty()) << ReadFileBytes(*work_ / "other.err");
  auto env = Env("other");
  ProcessResult r = Blz({"login", "https://" + addr, "--token", token, "--ca-cert", Ca()}, env);
  StopServer(pid);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("certificate verify failed"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mismatch"), std::string::npos) << r.err;
}

TEST_F(TlsE2ETest, PlainHttpToTheTlsPortFailsClearly) {
  auto env = Env("plain");
  ProcessResult r = Blz({"tags", "http://" + addr_ + "/tls/m"}, env);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("HTTPS server"), std::string::npos) << r.err;
  // And the loopback default (plain HTTP) is the same mistake.
  ProcessResult d = Blz({"tags", addr_ + "/tls/m"}, env);
  EXPECT_NE(d.exit_code, 0);
  EXPECT_NE(d.err.find("HTTPS server"), std::string::npos) << d.err;
}

TEST_F(TlsE2ETest, BadCertificateOrKeyFailsTheStart) {
  const std::string w = work_->path();
  struct Case {
    std::vector<std::string> flags;
    std::string expect;
  } cases[] = {
      {{"--tls-cert", w + "/missing.pem", "--tls-key", w + "/srv.key"}, "missing.pem"},
      {{"--tls-cert", w + "/srv.cnf", "--tls-key", w + "/srv.key"}, "srv.cnf"},
      {{"--tls-cert", w + "/srv.pem", "--tls-key", w + "/other.key"}, "does not match"},
      {{"--tls-cert", w + "/srv.pem"}, "--tls-key"},
      {{"--trusted-proxy", "10.0.0.0/99"}, "--trusted-proxy"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"serve", "--data", w + "/bad-data", "--listen",
                                     "127.0.0.1:0"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    ProcessResult r = Blz(args, {});
    EXPECT_EQ(r.exit_code, 2) << c.expect << ": " << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
  }
}

TEST_F(TlsE2ETest, PullThroughConnectProxyAndNoProxyBypass) {
  BLZ_REQUIRE_CORPUS(corpus);
  PushOnce(corpus);
  ConnectProxy proxy;
  ASSERT_NE(proxy.port(), 0);
  auto env = Env("proxied");
  env["HTTPS_PROXY"] = proxy.url();
  env["NO_PROXY"] = "";
  env["no_proxy"] = "";
  ProcessResult r =
      Blz({"pull", Url("tls/m:v1"), "-o", *work_ / "via-proxy", "--ca-cert", Ca()}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> seen = proxy.targets();
  ASSERT_FALSE(seen.empty());
  for (const std::string& t : seen) EXPECT_EQ(t, addr_);

  env["NO_PROXY"] = "example.com,127.0.0.1";
  ProcessResult d = Blz({"tags", Url("tls/m"), "--ca-cert", Ca()}, env);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(proxy.targets().size(), seen.size()) << "NO_PROXY must bypass the proxy";

  // A proxy that is not there: the error names it.
  env["NO_PROXY"] = "";
  env["HTTPS_PROXY"] = "http://127.0.0.1:1";
  ProcessResult f = Blz({"tags", Url("tls/m"), "--ca-cert", Ca()}, env);
  EXPECT_NE(f.exit_code, 0);
  EXPECT_NE(f.err.find("proxy 127.0.0.1:1"), std::string::npos) << f.err;
}

}  // namespace
}  // namespace blz::testing
