// The files of blz's web view, embedded into the binary at build time (web/CMakeLists.txt:
// web/build.mjs builds web/src/ with esbuild, web/tools/embed_assets.mjs writes the definition
// of EmbeddedAssets() into the build directory's web_assets.cc). web/README.md.
#ifndef BLZ_WEB_ASSETS_H_
#define BLZ_WEB_ASSETS_H_

#include <span>
#include <string_view>

namespace blz::web {

// One servable file. All views point into static storage.
struct Asset {
  std::string_view path;          // URL path: "/" (index.html) or "/assets/<name>-<hash>.<ext>"
  std::string_view content_type;  // "text/html; charset=utf-8", "text/javascript", ...
  // Strong validator of the identity bytes, quoted: "\"<first 32 hex digits of SHA-256>\"".
  std::string_view etag;
  // A content-hashed name (everything under /assets/): its bytes never change, so clients may
  // cache it for a year without revalidating.
  bool immutable = false;
  std::string_view identity;  // the file's bytes
  std::string_view gzip;      // gzip (level 9) of `identity`; empty when not precompressed
  std::string_view brotli;    // brotli (quality 11) of `identity`; empty when not precompressed
};

// The embedded files, sorted by path; always contains "/".
std::span<const Asset> EmbeddedAssets();

}  // namespace blz::web

#endif  // BLZ_WEB_ASSETS_H_
