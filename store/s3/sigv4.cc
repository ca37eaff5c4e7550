#include "store/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <ctime>
#include <map>

#include "core/digest.h"

namespace blz::store::s3 {
namespace {

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Trims leading/trailing spaces and tabs and collapses inner runs of them to one space.
std::string CanonicalHeaderValue(std::string_view v) {
  std::string out;
  bool pending_space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out.push_back(' ');
    pending_space = false;
    out.push_back(c);
  }
  return out;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string Hex(std::string_view raw) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string Scope(std::string_view date, std::string_view region, std::string_view service) {
  std::string s(date);
  s += '/';
  s += region;
  s += '/';
  s += service;
  s += "/aws4_request";
  return s;
}

std::string StringToSign(std::string_view amz_date, std::string_view scope,
                         std::string_view canonical_request) {
  std::string s = "AWS4-HMAC-SHA256\n";
  s += amz_date;
  s += '\n';
  s += scope;
  s += '\n';
  s += Sha256Hex(canonical_request);
  return s;
}

std::string Signature(const Credentials& creds, std::string_view date, std::string_view region,
                      std::string_view service, std::string_view string_to_sign) {
  std::string k = HmacSha256("AWS4" + creds.secret_access_key, date);
  k = HmacSha256(k, region);
  k = HmacSha256(k, service);
  k = HmacSha256(k, "aws4_request");
  return Hex(HmacSha256(k, string_to_sign));
}

bool HasCrLf(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

}  // namespace

std::string UriEncode(std::string_view s, bool encode_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    bool keep = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                c == '-' || c == '.' || c == '_' || c == '~' || (c == '/' && !encode_slash);
    if (keep) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

std::string AmzDate(int64_t unix_seconds) {
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string CanonicalQueryString(const QueryParams& query) {
  std::vector<std::pair<std::string, std::string>> enc;
  enc.reserve(query.size());
  for (const auto& [k, v] : query) enc.emplace_back(UriEncode(k, true), UriEncode(v, true));
  std::sort(enc.begin(), enc.end());
  std::string out;
  for (const auto& [k, v] : enc) {
    if (!out.empty()) out += '&';
    out += k;
    out += '=';
    out += v;
  }
  return out;
}

Result<SigV4Signed> SignRequest(const SigV4Request& request, const Credentials& credentials,
                                std::string_view region, std::string_view service,
                                int64_t unix_seconds) {
  if (request.method.empty() || region.empty() || service.empty()) {
    return InvalidArgument("sigv4: method, region and service must not be empty");
  }
  if (credentials.access_key_id.empty()) return InvalidArgument("sigv4: empty access key id");
  const std::string amz_date = AmzDate(unix_seconds);
  const std::string date = amz_date.substr(0, 8);

  HeaderList headers = request.headers;
  auto has = [&](std::string_view name) {
    return std::any_of(headers.begin(), headers.end(),
                       [&](const auto& h) { return ToLower(h.first) == name; });
  };
  if (!has("host")) return InvalidArgument("sigv4: the request has no host header");
  if (!has("x-amz-date")) headers.emplace_back("x-amz-date", amz_date);
  if (!has("x-amz-content-sha256")) headers.emplace_back("x-amz-content-sha256", request.payload_hash);
  if (!credentials.session_token.empty() && !has("x-amz-security-token")) {
    headers.emplace_back("x-amz-security-token", credentials.session_token);
  }
  // lower-case name -> canonical values, joined with ',' when a name repeats.
  std::map<std::string, std::string> canon;
  for (const auto& [name, value] : headers) {
    if (HasCrLf(name) || HasCrLf(value)) {
      return InvalidArgument("sigv4: header '" + name + "' contains CR or LF");
    }
    std::string& slot = canon[ToLower(name)];
    if (!slot.empty()) slot += ',';
    slot += CanonicalHeaderValue(value);
  }
  std::stable_sort(headers.begin(), headers.end(), [](const auto& a, const auto& b) {
    return ToLower(a.first) < ToLower(b.first);
  });

  SigV4Signed out;
  std::string canonical_headers;
  for (const auto& [name, value] : canon) {
    canonical_headers += name + ':' + value + '\n';
    if (!out.signed_headers.empty()) out.signed_headers += ';';
    out.signed_headers += name;
  }
  out.canonical_request = request.method + '\n' + UriEncode(request.path, false) + '\n' +
                          CanonicalQueryString(request.query) + '\n' + canonical_headers + '\n' +
                          out.signed_headers + '\n' + request.payload_hash;
  const std::string scope = Scope(date, region, service);
  out.string_to_sign = StringToSign(amz_date, scope, out.canonical_request);
  out.signature = Signature(credentials, date, region, service, out.string_to_sign);
  out.authorization = "AWS4-HMAC-SHA256 Credential=" + credentials.access_key_id + '/' + scope +
                      ",SignedHeaders=" + out.signed_headers + ",Signature=" + out.signature;
  out.headers = std::move(headers);
  return out;
}

Result<Presigned> PresignUrl(const PresignRequest& request, const Credentials& credentials,
                             std::string_view region, std::string_view service,
                             int64_t unix_seconds) {
  if (request.expires_seconds < 1 || request.expires_seconds > kMaxPresignExpiresSeconds) {
    return InvalidArgument("sigv4: presign expiry " + std::to_string(request.expires_seconds) +
                           " s is outside 1..604800");
  }
  if (request.host.empty() || request.method.empty() || region.empty() || service.empty()) {
    return InvalidArgument("sigv4: presign needs a host, a method, a region and a service");
  }
  if (credentials.access_key_id.empty()) return InvalidArgument("sigv4: empty access key id");
  const std::string amz_date = AmzDate(unix_seconds);
  const std::string date = amz_date.substr(0, 8);
  const std::string scope = Scope(date, region, service);

  QueryParams query = request.query;
  query.emplace_back("X-Amz-Algorithm", "AWS4-HMAC-SHA256");
  query.emplace_back("X-Amz-Credential", credentials.access_key_id + '/' + scope);
  query.emplace_back("X-Amz-Date", amz_date);
  query.emplace_back("X-Amz-Expires", std::to_string(request.expires_seconds));
  if (!credentials.session_token.empty()) {
    query.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  query.emplace_back("X-Amz-SignedHeaders", "host");
  const std::string canonical_query = CanonicalQueryString(query);

  Presigned out;
  const std::string encoded_path = UriEncode(request.path, false);
  out.canonical_request = request.method + '\n' + encoded_path + '\n' + canonical_query + '\n' +
                          "host:" + CanonicalHeaderValue(request.host) + "\n\nhost\n" +
                          std::string(kUnsignedPayload);
  out.string_to_sign = StringToSign(amz_date, scope, out.canonical_request);
  out.signature = Signature(credentials, date, region, service, out.string_to_sign);
  out.path_and_query = encoded_path + '?' + canonical_query + "&X-Amz-Signature=" + out.signature;
  return out;
}

}  // namespace blz::store::s3
