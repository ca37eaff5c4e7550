#include "web/web_handler.h"

#include <string>
#include <utility>

#include "registry/errors.h"
#include "registry/hub/hub_api.h"

namespace blz::web {
namespace {

using registry::RequestHead;
using registry::Response;

char Lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string_view PathOf(std::string_view target) {
  const size_t q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

// A qvalue (RFC 9110 §12.4.2): "0", "1", "0.5", "1.000"; nullopt when malformed.
std::optional<double> ParseQ(std::string_view s) {
  if (s.empty() || (s[0] != '0' && s[0] != '1')) return std::nullopt;
  double q = s[0] - '0';
  if (s.size() == 1) return q;
  if (s[1] != '.' || s.size() > 5) return std::nullopt;
  double scale = 0.1;
  for (size_t i = 2; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    q += (s[i] - '0') * scale;
    scale /= 10;
  }
  if (q > 1) return std::nullopt;
  return q;
}

// Does an If-None-Match header name one of `tags` (or "*")? Weak comparison (RFC 9110
// §13.1.2): a W/ prefix is ignored.
bool NoneMatchHits(std::string_view header, std::initializer_list<std::string_view> tags) {
  size_t i = 0;
  while (i < header.size()) {
    const char c = header[i];
    if (c == ' ' || c == '\t' || c == ',') {
      ++i;
      continue;
    }
    if (c == '*') return true;
    if (header.compare(i, 2, "W/") == 0) i += 2;
    if (i >= header.size() || header[i] != '"') return false;  // malformed: no match
    const size_t end = header.find('"', i + 1);
    if (end == std::string_view::npos) return false;
    const std::string_view tag = header.substr(i, end - i + 1);
    for (std::string_view t : tags) {
      if (tag == t) return true;
    }
    i = end + 1;
  }
  return false;
}

// "\"abc\"" + "-br" -> "\"abc-br\"".
std::string SuffixedTag(std::string_view etag, std::string_view suffix) {
  if (etag.size() < 2 || etag.back() != '"') return std::string(etag);
  std::string out(etag.substr(0, etag.size() - 1));
  out += suffix;
  out += '"';
  return out;
}

void AddSecurityHeaders(Response& res) {
  res.Set("Content-Security-Policy", std::string(kContentSecurityPolicy));
  res.Set("X-Content-Type-Options", "nosniff");
  res.Set("Referrer-Policy", "no-referrer");
  res.Set("X-Frame-Options", "DENY");
}

Response Finish(Response res, const RequestHead& head) {
  AddSecurityHeaders(res);
  if (head.method == "HEAD") res.head_only = true;
  return res;
}

}  // namespace

bool IsWebTarget(std::string_view target) {
  if (target.empty() || target[0] != '/') return false;
  const std::string_view path = PathOf(target);
  if (path == "/v2" || path.substr(0, 4) == "/v2/") return false;
  // The Hugging Face Hub API (/api/..., /<repo>/resolve/...) is the registry's.
  if (registry::hub::IsHubTarget(target)) return false;
  return path != "/metrics";
}

ContentEncoding NegotiateEncoding(const std::optional<std::string>& accept_encoding,
                                  bool has_gzip, bool has_brotli) {
  if (!accept_encoding.has_value()) return ContentEncoding::kIdentity;
  std::optional<double> q_gzip, q_br, q_any;
  std::string_view rest = *accept_encoding;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const size_t semi = item.find(';');
    const std::string_view coding = Trim(item.substr(0, semi));
    if (coding.empty()) continue;
    double q = 1;
    if (semi != std::string_view::npos) {
      std::string_view params = item.substr(semi + 1);
      while (!params.empty()) {
        const size_t next = params.find(';');
        const std::string_view param = params.substr(0, next);
        params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
        const size_t eq = param.find('=');
        if (eq != std::string_view::npos && EqualsIgnoreCase(Trim(param.substr(0, eq)), "q")) {
          q = ParseQ(Trim(param.substr(eq + 1))).value_or(0);
        }
      }
    }
    if (EqualsIgnoreCase(coding, "gzip") || EqualsIgnoreCase(coding, "x-gzip")) {
      q_gzip = q;
    } else if (EqualsIgnoreCase(coding, "br")) {
      q_br = q;
    } else if (coding == "*") {
      q_any = q;
    }
  }
  const double gzip = has_gzip ? q_gzip.value_or(q_any.value_or(0)) : 0;
  const double br = has_brotli ? q_br.value_or(q_any.value_or(0)) : 0;
  if (br > 0 && br >= gzip) return ContentEncoding::kBrotli;
  if (gzip > 0) return ContentEncoding::kGzip;
  return ContentEncoding::kIdentity;
}

std::optional<Response> HandleWeb(const RequestHead& head, std::span<const Asset> assets) {
  if (!IsWebTarget(head.target)) return std::nullopt;
  const std::string_view path = PathOf(head.target);
  const Asset* asset = nullptr;
  for (const Asset& a : assets) {
    if (a.path == path) {
      asset = &a;
      break;
    }
  }
  if (asset == nullptr) {
    return Finish(registry::ErrorResponse(registry::OciError::kNotFound,
                                          "no such page (the web view serves / and /assets/)"),
                  head);
  }
  if (head.method != "GET" && head.method != "HEAD") {
    Response res = registry::ErrorResponse(registry::OciError::kUnsupported,
                                           "only GET and HEAD are allowed here");
    res.Set("Allow", "GET, HEAD");
    return Finish(std::move(res), head);
  }

  const bool has_gzip = !asset->gzip.empty();
  const bool has_brotli = !asset->brotli.empty();
  const ContentEncoding encoding =
      NegotiateEncoding(head.Get("Accept-Encoding"), has_gzip, has_brotli);
  const std::string etag_gzip = SuffixedTag(asset->etag, "-gz");
  const std::string etag_brotli = SuffixedTag(asset->etag, "-br");
  std::string_view etag = asset->etag;
  std::string_view body = asset->identity;
  if (encoding == ContentEncoding::kGzip) {
    etag = etag_gzip;
    body = asset->gzip;
  } else if (encoding == ContentEncoding::kBrotli) {
    etag = etag_brotli;
    body = asset->brotli;
  }

  Response res;
  res.Set("ETag", std::string(etag));
  res.Set("Cache-Control", std::string(asset->immutable ? kImmutableCacheControl
                                                        : kRevalidateCacheControl));
  if (has_gzip || has_brotli) res.Set("Vary", "Accept-Encoding");
  if (std::optional<std::string> inm = head.Get("If-None-Match");
      inm.has_value() && NoneMatchHits(*inm, {asset->etag, etag_gzip, etag_brotli})) {
    res.status = 304;
    return Finish(std::move(res), head);
  }
  res.Set("Content-Type", std::string(asset->content_type));
  if (encoding == ContentEncoding::kGzip) res.Set("Content-Encoding", "gzip");
  if (encoding == ContentEncoding::kBrotli) res.Set("Content-Encoding", "br");
  res.body.assign(body.data(), body.size());
  return Finish(std::move(res), head);
}

std::optional<Response> HandleWeb(const RequestHead& head) {
  return HandleWeb(head, EmbeddedAssets());
}

}  // namespace blz::web
