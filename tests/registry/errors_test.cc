#include "registry/errors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace blz::registry {
namespace {

TEST(ErrorsTest, BodyFollowsTheSpec) {
  Response r = ErrorResponse(OciError::kBlobUnknown, "no such blob", {{"digest", "sha256:x"}});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.Get("Content-Type"), "application/json");
  auto j = nlohmann::json::parse(r.body);
  ASSERT_EQ(j["errors"].size(), 1u);
  EXPECT_EQ(j["errors"][0]["code"], "BLOB_UNKNOWN");
  EXPECT_EQ(j["errors"][0]["message"], "no such blob");
  EXPECT_EQ(j["errors"][0]["detail"]["digest"], "sha256:x");
  EXPECT_FALSE(r.Get("WWW-Authenticate").has_value());

  auto empty = nlohmann::json::parse(ErrorResponse(OciError::kNameInvalid, "x").body);
  EXPECT_TRUE(empty["errors"][0]["detail"].is_object());
}

TEST(ErrorsTest, UnauthorizedCarriesChallenge) {
  Response r = ErrorResponse(OciError::kUnauthorized, "no");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Get("WWW-Authenticate"), "Bearer realm=\"blz\"");
}

TEST(ErrorsTest, InvalidUtf8InMessagesDoesNotThrow) {
  Response r = ErrorResponse(OciError::kNameInvalid, std::string("bad \xff name"));
  EXPECT_EQ(r.status, 400);
  EXPECT_FALSE(nlohmann::json::parse(r.body, nullptr, false).is_discarded());
}

TEST(ErrorsTest, StatusMappingByContext) {
  const Status nf = NotFound("x");
  EXPECT_EQ(OciErrorFor(nf, ErrorContext::kBlob), OciError::kBlobUnknown);
  EXPECT_EQ(OciErrorFor(nf, ErrorContext::kUpload), OciError::kBlobUploadUnknown);
  EXPECT_EQ(OciErrorFor(nf, ErrorContext::kManifest), OciError::kManifestUnknown);
  EXPECT_EQ(OciErrorFor(nf, ErrorContext::kPatch), OciError::kManifestUnknown);
  EXPECT_EQ(OciErrorFor(nf, ErrorContext::kName), OciError::kNameUnknown);
  EXPECT_EQ(OciErrorFor(nf, ErrorContext::kGeneral), OciError::kNotFound);
  EXPECT_EQ(OciErrorFor(DigestMismatch("x"), ErrorContext::kUpload), OciError::kDigestInvalid);
  EXPECT_EQ(OciErrorFor(InvalidArgument("x"), ErrorContext::kManifest),
            OciError::kManifestInvalid);
  EXPECT_EQ(OciErrorFor(InvalidArgument("x"), ErrorContext::kName), OciError::kNameInvalid);
  EXPECT_EQ(OciErrorFor(TooLarge("x"), ErrorContext::kManifest), OciError::kTooLarge);
  EXPECT_EQ(OciErrorFor(IOError("x"), ErrorContext::kBlob), OciError::kUnknown);
  EXPECT_EQ(OciErrorFor(Unavailable("x"), ErrorContext::kBlob), OciError::kUnavailable);
  EXPECT_EQ(OciErrorFor(Unauthorized("x"), ErrorContext::kBlob), OciError::kUnauthorized);
  // A unique violation on content is a concurrent writer (PostgreSQL 23505): retryable, not
  // DENIED; a token name that exists is refused.
  EXPECT_EQ(OciErrorFor(AlreadyExists("x"), ErrorContext::kManifest), OciError::kUnavailable);
  EXPECT_EQ(OciErrorFor(AlreadyExists("x"), ErrorContext::kUpload), OciError::kUnavailable);
  EXPECT_EQ(OciErrorFor(AlreadyExists("x"), ErrorContext::kGeneral), OciError::kDenied);

  EXPECT_EQ(ErrorResponse(DigestMismatch("m"), ErrorContext::kUpload).status, 400);
  EXPECT_EQ(ErrorResponse(TooLarge("m"), ErrorContext::kManifest).status, 413);
  EXPECT_EQ(ErrorResponse(Internal("m"), ErrorContext::kGeneral).status, 500);
  EXPECT_EQ(OciHttpStatus(OciError::kManifestBlobUnknown), 400);
  EXPECT_EQ(OciHttpStatus(OciError::kRangeInvalid), 416);
  EXPECT_EQ(OciErrorCode(OciError::kTooLarge), "SIZE_INVALID");
}

}  // namespace
}  // namespace blz::registry
