#include "registry/errors.h"

namespace blz::registry {

std::string_view OciErrorCode(OciError error) {
  switch (error) {
    case OciError::kBlobUnknown: return "BLOB_UNKNOWN";
    case OciError::kBlobUploadInvalid: return "BLOB_UPLOAD_INVALID";
    case OciError::kBlobUploadUnknown: return "BLOB_UPLOAD_UNKNOWN";
    case OciError::kDigestInvalid: return "DIGEST_INVALID";
    case OciError::kManifestBlobUnknown: return "MANIFEST_BLOB_UNKNOWN";
    case OciError::kManifestInvalid: return "MANIFEST_INVALID";
    case OciError::kManifestUnknown: return "MANIFEST_UNKNOWN";
    case OciError::kNameInvalid: return "NAME_INVALID";
    case OciError::kNameUnknown: return "NAME_UNKNOWN";
    case OciError::kSizeInvalid: return "SIZE_INVALID";
    case OciError::kTooLarge: return "SIZE_INVALID";
    case OciError::kUnauthorized: return "UNAUTHORIZED";
    case OciError::kDenied: return "DENIED";
    case OciError::kUnsupported: return "UNSUPPORTED";
    case OciError::kRangeInvalid: return "RANGE_INVALID";
    case OciError::kTooManyRequests: return "TOOMANYREQUESTS";
    case OciError::kBadRequest: return "BAD_REQUEST";
    case OciError::kNotFound: return "NOT_FOUND";
    case OciError::kUnknown: return "UNKNOWN";
    case OciError::kUnavailable: return "UNAVAILABLE";
  }
  return "UNKNOWN";
}

int OciHttpStatus(OciError error) {
  switch (error) {
    case OciError::kBlobUnknown: return 404;
    case OciError::kBlobUploadInvalid: return 400;
    case OciError::kBlobUploadUnknown: return 404;
    case OciError::kDigestInvalid: return 400;
    case OciError::kManifestBlobUnknown: return 400;
    case OciError::kManifestInvalid: return 400;
    case OciError::kManifestUnknown: return 404;
    case OciError::kNameInvalid: return 400;
    case OciError::kNameUnknown: return 404;
    case OciError::kSizeInvalid: return 400;
    case OciError::kTooLarge: return 413;
    case OciError::kUnauthorized: return 401;
    case OciError::kDenied: return 403;
    case OciError::kUnsupported: return 405;
    case OciError::kRangeInvalid: return 416;
    case OciError::kTooManyRequests: return 429;
    case OciError::kBadRequest: return 400;
    case OciError::kNotFound: return 404;
    case OciError::kUnknown: return 500;
    case OciError::kUnavailable: return 503;
  }
  return 500;
}

OciError OciErrorFor(const Status& status, ErrorContext context) {
  switch (status.code()) {
    case Code::kNotFound:
      switch (context) {
        case ErrorContext::kBlob: return OciError::kBlobUnknown;
        case ErrorContext::kUpload: return OciError::kBlobUploadUnknown;
        case ErrorContext::kManifest:
        case ErrorContext::kPatch: return OciError::kManifestUnknown;
        case ErrorContext::kName: return OciError::kNameUnknown;
        case ErrorContext::kGeneral: return OciError::kNotFound;
      }
      return OciError::kNotFound;
    case Code::kInvalidArgument:
      switch (context) {
        case ErrorContext::kManifest: return OciError::kManifestInvalid;
        case ErrorContext::kUpload: return OciError::kBlobUploadInvalid;
        case ErrorContext::kBlob:
        case ErrorContext::kPatch: return OciError::kDigestInvalid;
        case ErrorContext::kName: return OciError::kNameInvalid;
        case ErrorContext::kGeneral: return OciError::kBadRequest;
      }
      return OciError::kBadRequest;
    case Code::kDigestMismatch: return OciError::kDigestInvalid;
    case Code::kCorruption:
      if (context == ErrorContext::kManifest) return OciError::kManifestInvalid;
      if (context == ErrorContext::kUpload) return OciError::kBlobUploadInvalid;
      return OciError::kUnknown;
    case Code::kUnsupported:
      return context == ErrorContext::kManifest ? OciError::kManifestInvalid
                                                : OciError::kUnsupported;
    case Code::kTooLarge: return OciError::kTooLarge;
    case Code::kUnauthorized: return OciError::kUnauthorized;
    case Code::kAlreadyExists:
      // On content a unique violation can only be a concurrent writer's row (PostgreSQL,
      // SQLSTATE 23505): retryable, not a permission problem. Elsewhere (a token's name) the
      // caller's request is refused.
      if (context == ErrorContext::kManifest || context == ErrorContext::kUpload ||
          context == ErrorContext::kBlob) {
        return OciError::kUnavailable;
      }
      return OciError::kDenied;
    case Code::kUnavailable: return OciError::kUnavailable;
    case Code::kIOError:
    case Code::kInternal:
    case Code::kOk: return OciError::kUnknown;
  }
  return OciError::kUnknown;
}

Response ErrorResponse(OciError error, std::string_view message, const nlohmann::json& detail) {
  nlohmann::json entry = {{"code", OciErrorCode(error)},
                          {"message", message},
                          {"detail", detail.is_null() ? nlohmann::json::object() : detail}};
  nlohmann::json body = {{"errors", nlohmann::json::array({entry})}};
  Response res;
  res.status = OciHttpStatus(error);
  // Invalid UTF-8 in a message (e.g. echoing a bad name) must not throw: replace it.
  res.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.Set("Content-Type", "application/json");
  if (error == OciError::kUnauthorized) res.Set("WWW-Authenticate", "Bearer realm=\"blz\"");
  return res;
}

Response ErrorResponse(const Status& status, ErrorContext context) {
  return ErrorResponse(OciErrorFor(status, context), status.message());
}

}  // namespace blz::registry
