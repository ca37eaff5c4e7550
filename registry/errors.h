// The registry's error catalogue: OCI distribution-spec error codes, their HTTP statuses, and
// the mapping from blz::Status codes. This is the ONE place where Status codes become HTTP
// statuses and wire error codes.
//
// Error bodies follow the OCI spec: {"errors":[{"code":"…","message":"…","detail":{…}}]}.
#ifndef BLZ_REGISTRY_ERRORS_H_
#define BLZ_REGISTRY_ERRORS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "registry/http_message.h"

namespace blz::registry {

enum class OciError : uint8_t {
  kBlobUnknown,          // BLOB_UNKNOWN 404
  kBlobUploadInvalid,    // BLOB_UPLOAD_INVALID 400
  kBlobUploadUnknown,    // BLOB_UPLOAD_UNKNOWN 404
  kDigestInvalid,        // DIGEST_INVALID 400
  kManifestBlobUnknown,  // MANIFEST_BLOB_UNKNOWN 400
  kManifestInvalid,      // MANIFEST_INVALID 400
  kManifestUnknown,      // MANIFEST_UNKNOWN 404
  kNameInvalid,          // NAME_INVALID 400
  kNameUnknown,          // NAME_UNKNOWN 404
  kSizeInvalid,          // SIZE_INVALID 400 (a length does not match the content)
  kTooLarge,             // SIZE_INVALID 413 (a body exceeds its cap)
  kUnauthorized,         // UNAUTHORIZED 401 (+ WWW-Authenticate)
  kDenied,               // DENIED 403
  kUnsupported,          // UNSUPPORTED 405 (method not allowed on this path)
  kRangeInvalid,         // RANGE_INVALID 416
  kTooManyRequests,      // TOOMANYREQUESTS 429
  // blz additions (not in the OCI catalogue):
  kBadRequest,   // BAD_REQUEST 400: a malformed query parameter
  kNotFound,     // NOT_FOUND 404: no such endpoint
  kUnknown,      // UNKNOWN 500: a server-side failure (I/O, internal error)
  kUnavailable,  // UNAVAILABLE 503: busy (e.g. the metadata DB is locked)
};

// "BLOB_UNKNOWN", ...
std::string_view OciErrorCode(OciError error);
// 404, 400, ...
int OciHttpStatus(OciError error);

// What a request was about, to pick the right code for a kNotFound / kInvalidArgument Status.
enum class ErrorContext : uint8_t {
  kGeneral,
  kName,      // the repository name
  kBlob,      // a blob (GET/HEAD blobs)
  kUpload,    // an upload session
  kManifest,  // a manifest
  kPatch,     // the blz patch and value diff endpoints (two versions of a repository)
};

// Status code -> OCI error, by context:
//   kNotFound        blob: BLOB_UNKNOWN, upload: BLOB_UPLOAD_UNKNOWN, manifest/patch:
//                    MANIFEST_UNKNOWN, name: NAME_UNKNOWN, general: NOT_FOUND
//   kInvalidArgument manifest: MANIFEST_INVALID, upload: BLOB_UPLOAD_INVALID, blob/patch:
//                    DIGEST_INVALID, name: NAME_INVALID, general: BAD_REQUEST
//   kDigestMismatch  DIGEST_INVALID
//   kCorruption      manifest: MANIFEST_INVALID, upload: BLOB_UPLOAD_INVALID, else UNKNOWN
//   kUnsupported     manifest: MANIFEST_INVALID, else UNSUPPORTED
//   kTooLarge        SIZE_INVALID (413)
//   kUnauthorized    UNAUTHORIZED
//   kAlreadyExists   DENIED
//   kUnavailable     UNAVAILABLE
//   kIOError, kInternal, kOk (a bug)  UNKNOWN
OciError OciErrorFor(const Status& status, ErrorContext context);

// A complete error response: status from OciHttpStatus, JSON body, Content-Type; for
// kUnauthorized also `WWW-Authenticate: Bearer realm="blz"`. `detail` is an object (or null
// for {}).
Response ErrorResponse(OciError error, std::string_view message,
                       const nlohmann::json& detail = nullptr);
// ErrorResponse(OciErrorFor(status, context), status.message()).
Response ErrorResponse(const Status& status, ErrorContext context);

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_ERRORS_H_
