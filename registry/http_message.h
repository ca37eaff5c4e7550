// Transport-free descriptions of an HTTP request and response. The registry's handlers
// (registry/registry.h) map a Request to a Response with no I/O; the Beast session
// (registry/http_session.h) translates between these and the wire.
#ifndef BLZ_REGISTRY_HTTP_MESSAGE_H_
#define BLZ_REGISTRY_HTTP_MESSAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/digest.h"
#include "registry/body_producer.h"

namespace blz::store {
class UploadSessionFile;  // store/blob_store.h
}  // namespace blz::store

namespace blz::registry {

// A SHA-256 computed while a blob's bytes arrive (issue 28: no second read to hash them).
// `bytes` counts every byte fed to `sha` since it started, which for an upload session is
// byte 0 of the blob: the state may continue one kept from the session's earlier chunks.
struct BodyHash {
  Sha256 sha;
  uint64_t bytes = 0;
};

struct Header {
  std::string name;
  std::string value;
};

// Case-insensitive header lookup; the first match wins. nullopt when absent.
std::optional<std::string> FindHeader(const std::vector<Header>& headers, std::string_view name);

// What is known once the request line and headers are read.
struct RequestHead {
  std::string method;  // "GET", "PUT", ... (upper case as sent)
  std::string target;  // origin-form: "/v2/<name>/blobs/uploads/?digest=sha256:..."
  std::vector<Header> headers;
  // Content-Length when sent; nullopt for chunked bodies or when absent (then no body unless
  // chunked).
  std::optional<uint64_t> content_length;
  bool chunked = false;
  // How the client reached the registry, as far as the server knows (the session sets them:
  // "https" on a TLS listener; X-Forwarded-Proto / X-Forwarded-Host only from a trusted proxy,
  // registry/forwarded.h). Used to build absolute URLs (the auth challenge's realm).
  std::string scheme = "http";
  std::string forwarded_host;  // "" = the Host header
  // The client as the access log names it (registry/forwarded.h ForwardedInfo::client: the
  // peer's "ip:port", or the address a trusted proxy forwarded); "" when unknown. Rate limits
  // key anonymous callers by its address part.
  std::string client_address;

  std::optional<std::string> Get(std::string_view name) const { return FindHeader(headers, name); }
  // Does a body follow the header?
  bool HasBody() const { return chunked || (content_length.has_value() && *content_length > 0); }
};

// A whole request. The body is either in memory (`body`), streamed into `body_file`, or
// written in place into an upload's session file (`session_file`; see BodyPlan); never two.
struct Request {
  RequestHead head;
  std::string body;
  std::string body_file;  // path of the file holding the body, "" when the body is in memory
  // BodyPlan::hash after every byte of `body_file` went through it, in order; null when the
  // plan had none or the session could not hash the body as it arrived (a chunked body).
  std::shared_ptr<BodyHash> body_hash;
  // BodyPlan::session_file, still locked: the body is its bytes [session_offset,
  // session_offset + session_length) (body_hash as for body_file). The lock is released when
  // the last copy of the pointer goes, after the handler.
  std::shared_ptr<store::UploadSessionFile> session_file;
  uint64_t session_offset = 0;
  uint64_t session_length = 0;
};

struct Response {
  int status = 200;
  std::vector<Header> headers;
  // The body: either `body` (in memory) or, when `file_path` is not empty, the bytes
  // [file_offset, file_offset + file_length) of that file, streamed by the session.
  std::string body;
  std::string file_path;
  uint64_t file_offset = 0;
  uint64_t file_length = 0;
  // When not empty (file_path set): the body is these byte segments of file_path, in order,
  // instead of [file_offset, file_offset + file_length); file_length must be their total. A
  // file of a model version spread over an archive's pieces (registry/hub/version_files.h).
  struct Segment {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  std::vector<Segment> file_segments;
  // When set (file_path empty): the body is the file_length bytes this produces, pulled by the
  // session as it sends them (registry/body_producer.h).
  std::shared_ptr<BodyProducer> producer;
  // A HEAD response: the session sends the headers with Content-Length = BodySize() and no body.
  bool head_only = false;
  // A HEAD response of a resource not opened to answer it (a file of a model version whose
  // archive would have to be rebuilt): its size, which BodySize() then returns.
  std::optional<uint64_t> head_size;
  // Close the connection after this response.
  bool close = false;
  // Who made the request, for the access log's "user" field (registry/access_log.h;
  // registry/auth.h Principal::Describe): the token's name, "<Basic user>@<token name>", or ""
  // for anonymous requests and refused ones (logged as "-").
  std::string principal;

  uint64_t BodySize() const {
    if (head_size.has_value()) return *head_size;
    return file_path.empty() && producer == nullptr ? body.size() : file_length;
  }
  std::optional<std::string> Get(std::string_view name) const { return FindHeader(headers, name); }
  void Set(std::string name, std::string value) {
    headers.push_back({std::move(name), std::move(value)});
  }
};

// How the session should read the body of a request, decided from its head alone.
struct BodyPlan {
  enum class Kind : uint8_t {
    kMemory,  // read into Request::body, at most `limit` bytes
    kFile,    // stream into a new file at `file_path`, at most `limit` bytes
  };
  Kind kind = Kind::kMemory;
  uint64_t limit = 64 * 1024;
  std::string file_path;
  // When set, answer this without reading (or after discarding) the body.
  std::optional<Response> reject;
  // Where the handler runs (registry/handler_pools.h): CPU- or disk-heavy requests (manifest
  // PUTs, which verify the archive; finished uploads, which hash the blob; blob GETs, which may
  // rebuild an archive; patches and diffs) go to the bounded heavy pool, everything else to the
  // light pool, so that slow work never starves pings, tags and chunk appends.
  bool heavy = false;
  // kFile only: when set, the session feeds every body byte to it as the byte arrives and hands
  // it on in Request::body_hash (a blob upload: the digest is then known without reading the
  // file again).
  std::shared_ptr<BodyHash> hash;
  // kFile with a Content-Length only: instead of a new file at `file_path`, the body is written
  // into this locked session file (store/blob_store.h) from byte `session_offset` on, the
  // upload's recorded size (a chunk of a blob upload on a driver that has session files: the
  // closing PUT then links one file instead of copying every chunk). A body that fails midway
  // is cut off again; the file is never removed by the session.
  std::shared_ptr<store::UploadSessionFile> session_file;
  uint64_t session_offset = 0;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_HTTP_MESSAGE_H_
