// HTTPS as LoadServerTlsContext sets it up (registry/server.cc), on a real server on 127.0.0.1
// with an OpenSSL client: Mozilla's "intermediate" suites only (TLS 1.2 without forward secrecy,
// CBC or SHA-1 suites refused; the ECDHE/DHE AEAD suites and TLS 1.3 accepted), the client's
// preference order, and Strict-Transport-Security with nosniff on the responses. Self-signed RSA
// and ECDSA certificates are made in-process.
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ssl.hpp>
#include <boost/beast/ssl.hpp>

#include "registry/net.h"
#include "registry/registry.h"
#include "registry/server.h"
#include "tests/registry/live_registry.h"

namespace blz::registry {
namespace {

constexpr std::chrono::seconds kDeadline{10};

// Writes a self-signed certificate for 127.0.0.1 (RSA 2048 or ECDSA P-256) to <base>.pem and
// its key to <base>.key.
bool MakeSelfSigned(const std::string& base, bool rsa) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (!key || !cert) return false;
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("127.0.0.1"), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return false;
  bool ok = true;
  if (FILE* f = std::fopen((base + ".pem").c_str(), "w")) {
    ok = PEM_write_X509(f, cert.get()) == 1 && ok;
    std::fclose(f);
  } else {
    ok = false;
  }
  if (FILE* f = std::fopen((base + ".key").c_str(), "w")) {
    ok = PEM_write_PrivateKey(f, key.get(), nullptr, nullptr, 0, nullptr, nullptr) == 1 && ok;
    std::fclose(f);
  } else {
    ok = false;
  }
  return ok;
}

struct TlsResult {
  bool handshake = false;
  std::string cipher;    // negotiated suite
  std::string response;  // the raw answer to GET /v2/ (when the handshake succeeded)
};

// Connects with TLS 1.2 only and `suites` (tls12 true) or TLS 1.3 only (tls12 false), sends
// GET /v2/ and reads the answer until the server closes.
TlsResult Connect(uint16_t port, bool tls12, const std::string& suites = "") {
  net::ssl::context ctx(net::ssl::context::tls_client);
  ctx.set_verify_mode(net::ssl::verify_none);
  SSL_CTX* native = ctx.native_handle();
  if (tls12) {
    SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
    SSL_CTX_set_max_proto_version(native, TLS1_2_VERSION);
    // @SECLEVEL=0: the client offers even weak suites; refusing them is the server's job.
    EXPECT_EQ(SSL_CTX_set_cipher_list(native, (suites + ":@SECLEVEL=0").c_str()), 1) << suites;
  } else {
    SSL_CTX_set_min_proto_version(native, TLS1_3_VERSION);
  }
  net::io_context ioc;
  net::ssl::stream<beast::tcp_stream> stream(ioc, ctx);
  TlsResult out;
  beast::get_lowest_layer(stream).expires_after(kDeadline);
  beast::error_code result;
  beast::get_lowest_layer(stream).async_connect(
      tcp::endpoint(net::ip::make_address("127.0.0.1"), port), [&](beast::error_code ec) {
        result = ec;
        if (ec) return;
        stream.async_handshake(net::ssl::stream_base::client,
                               [&](beast::error_code hec) { result = hec; });
      });
  ioc.run();
  if (result) return out;
  out.handshake = true;
  out.cipher = SSL_get_cipher_name(stream.native_handle());
  static const std::string kRequest = "GET /v2/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  char buf[4096];
  ioc.restart();
  net::async_write(stream, net::buffer(kRequest), [&](beast::error_code ec, size_t) {
    result = ec;
  });
  ioc.run();
  for (int i = 0; i < 100 && !result; ++i) {
    ioc.restart();
    beast::get_lowest_layer(stream).expires_after(kDeadline);
    stream.async_read_some(net::buffer(buf), [&](beast::error_code ec, size_t n) {
      result = ec;
      out.response.append(buf, n);
    });
    ioc.run();
  }
  return out;
}

// The parameter: true for an RSA certificate, false for ECDSA.
class ServerTlsTest : public testing::LiveRegistryTest,
                      public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    const std::string base = tmp_ / "srv";
    ASSERT_TRUE(MakeSelfSigned(base, GetParam()));
    auto tls = LoadServerTlsContext(base + ".pem", base + ".key");
    ASSERT_TRUE(tls.ok()) << tls.status().ToString();
    SessionOptions session;
    session.tls = *tls;
    ASSERT_NO_FATAL_FAILURE(Start({}, session));
  }
};

TEST_P(ServerTlsTest, WeakTls12SuitesAreRefused) {
  // RSA key exchange (no forward secrecy), CBC with SHA-1 or SHA-2, for either key type.
  const char* kRsa[] = {"AES128-SHA", "AES256-SHA256", "AES128-GCM-SHA256",
                        "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-SHA"};
  const char* kEc[] = {"ECDHE-ECDSA-AES128-SHA", "ECDHE-ECDSA-AES256-SHA",
                       "ECDHE-ECDSA-AES128-SHA256"};
  for (const char* suite : GetParam() ? std::vector<const char*>(std::begin(kRsa), std::end(kRsa))
                                      : std::vector<const char*>(std::begin(kEc), std::end(kEc))) {
    TlsResult r = Connect(server_->port(), /*tls12=*/true, suite);
    EXPECT_FALSE(r.handshake) << suite << " was accepted (" << r.cipher << ")";
  }
}

TEST_P(ServerTlsTest, IntermediateSuitesAndTls13WorkWithHsts) {
  const char* kRsa[] = {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
                        "ECDHE-RSA-CHACHA20-POLY1305", "DHE-RSA-AES128-GCM-SHA256",
                        "DHE-RSA-AES256-GCM-SHA384", "DHE-RSA-CHACHA20-POLY1305"};
  const char* kEc[] = {"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384",
                       "ECDHE-ECDSA-CHACHA20-POLY1305"};
  for (const char* suite : GetParam() ? std::vector<const char*>(std::begin(kRsa), std::end(kRsa))
                                      : std::vector<const char*>(std::begin(kEc), std::end(kEc))) {
    TlsResult r = Connect(server_->port(), /*tls12=*/true, suite);
    ASSERT_TRUE(r.handshake) << suite;
    EXPECT_EQ(r.cipher, suite);
    EXPECT_EQ(r.response.rfind("HTTP/1.1 401 ", 0), 0u) << r.response;
    EXPECT_NE(r.response.find("\r\nStrict-Transport-Security: max-age=63072000\r\n"),
              std::string::npos)
        << r.response;
    EXPECT_NE(r.response.find("\r\nX-Content-Type-Options: nosniff\r\n"), std::string::npos)
        << r.response;
  }
  TlsResult v13 = Connect(server_->port(), /*tls12=*/false);
  ASSERT_TRUE(v13.handshake);
  EXPECT_EQ(v13.cipher.rfind("TLS_", 0), 0u) << v13.cipher;
  EXPECT_NE(v13.response.find("\r\nStrict-Transport-Security: max-age=63072000\r\n"),
            std::string::npos)
      << v13.response;
}

TEST_P(ServerTlsTest, TheClientsPreferenceWins) {
  const std::string kx = GetParam() ? "ECDHE-RSA-" : "ECDHE-ECDSA-";
  const std::string a = kx + "AES256-GCM-SHA384";
  const std::string b = kx + "CHACHA20-POLY1305";
  EXPECT_EQ(Connect(server_->port(), true, a + ":" + b).cipher, a);
  EXPECT_EQ(Connect(server_->port(), true, b + ":" + a).cipher, b);
}

INSTANTIATE_TEST_SUITE_P(KeyTypes, ServerTlsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Rsa") : std::string("Ecdsa");
                         });

}  // namespace
}  // namespace blz::registry
