// The web view's HTTP handler: serves the embedded app (web/assets.h) at / and /assets/ for
// `blz serve` (hooked in through registry::SessionOptions::web, so registry/ does not depend on
// web/). Pure: a request head in, a response out, no I/O. docs/operating.md, "Web view".
#ifndef BLZ_WEB_WEB_HANDLER_H_
#define BLZ_WEB_WEB_HANDLER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "registry/http_message.h"
#include "web/assets.h"

namespace blz::web {

// The Content-Security-Policy of every web response: only this origin's scripts, styles,
// fetches and fonts (images also as data: URLs); no inline script or style, no eval, no
// framing, no <base>, no form submission.
inline constexpr std::string_view kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

// Cache-Control of content-hashed assets (Asset::immutable) and of the page itself.
inline constexpr std::string_view kImmutableCacheControl = "public, max-age=31536000, immutable";
inline constexpr std::string_view kRevalidateCacheControl = "no-cache";

// Does the web view answer this request target? Every origin-form target ("/...") except the
// registry's: /v2, /v2/..., /metrics and the Hugging Face Hub API (registry/hub/hub_api.h
// IsHubTarget: /api/..., /<repo>/resolve/...); the query is ignored. Not "*" or absolute-form
// targets.
bool IsWebTarget(std::string_view target);

enum class ContentEncoding : uint8_t { kIdentity, kGzip, kBrotli };

// Picks the response's content coding from an Accept-Encoding header (RFC 9110 §12.5.3):
// among the codings the asset has (`has_gzip`, `has_brotli`) and the client accepts with q > 0
// (by name, "x-gzip" for gzip, or "*"), the one with the higher q; br on a tie. kIdentity when
// the header is absent or accepts neither. Malformed q values count as q=0.
ContentEncoding NegotiateEncoding(const std::optional<std::string>& accept_encoding,
                                  bool has_gzip, bool has_brotli);

// Answers a request for the web view from `assets` (sorted by path or not; looked up exactly):
//   nullopt for targets that are not IsWebTarget (the registry answers them);
//   GET/HEAD "/" and "/assets/<name>": 200 with Content-Type, ETag, Cache-Control
//     (kImmutableCacheControl for Asset::immutable, else kRevalidateCacheControl), the body in
//     the negotiated Content-Encoding (ETag suffixed "-br"/"-gz" inside the quotes for the
//     encoded representations) and `Vary: Accept-Encoding` when the asset has encodings;
//     304 with no body when If-None-Match names any representation's ETag (or is "*");
//     HEAD: the same headers, head_only;
//   other methods on those paths: 405 UNSUPPORTED with `Allow: GET, HEAD`;
//   any other path: 404 NOT_FOUND (the registry's JSON error body; the path is not echoed).
// Every response carries Content-Security-Policy (kContentSecurityPolicy),
// X-Content-Type-Options: nosniff, Referrer-Policy: no-referrer and X-Frame-Options: DENY.
std::optional<registry::Response> HandleWeb(const registry::RequestHead& head,
                                            std::span<const Asset> assets);
// The same with EmbeddedAssets().
std::optional<registry::Response> HandleWeb(const registry::RequestHead& head);

}  // namespace blz::web

#endif  // BLZ_WEB_WEB_HANDLER_H_
