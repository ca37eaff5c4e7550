// SigV4 against AWS's published S3 examples (S3 API reference, "Signature Calculations for the
// Authorization Header: Transferring Payload in a Single Chunk" and "Authenticating Requests:
// Using Query Parameters"): same keys, time, region and bucket; the expected canonical
// requests, strings to sign and signatures are the ones printed there.
#include "store/s3/sigv4.h"

#include <gtest/gtest.h>

#include "core/digest.h"

namespace blz::store::s3 {
namespace {

const Credentials kAwsExampleCreds{"AKIAIOSFODNN7EXAMPLE",
                                   "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr int64_t k20130524 = 1369353600;  // 2013-05-24T00:00:00Z
constexpr char kHost[] = "examplebucket.s3.amazonaws.com";
constexpr char kEmpty[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

std::string StringToSign(const std::string& canonical_request_hash) {
  return "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n" +
         canonical_request_hash;
}

TEST(SigV4Test, AmzDateIsIso8601BasicUtc) {
  EXPECT_EQ(AmzDate(k20130524), "20130524T000000Z");
  EXPECT_EQ(AmzDate(0), "19700101T000000Z");
}

TEST(SigV4Test, UriEncodeFollowsS3Rules) {
  EXPECT_EQ(UriEncode("/test$file.text", false), "/test%24file.text");
  EXPECT_EQ(UriEncode("a b/c~d-e_f.g", false), "a%20b/c~d-e_f.g");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
  EXPECT_EQ(UriEncode("+=&\xc3\xa9", true), "%2B%3D%26%C3%A9");
}

TEST(SigV4Test, CanonicalQueryStringSortsAndEncodes) {
  EXPECT_EQ(CanonicalQueryString({{"prefix", "J"}, {"max-keys", "2"}}), "max-keys=2&prefix=J");
  EXPECT_EQ(CanonicalQueryString({{"uploads", ""}}), "uploads=");
  EXPECT_EQ(CanonicalQueryString({{"continuation-token", "a/b+c"}}),
            "continuation-token=a%2Fb%2Bc");
}

TEST(SigV4Test, AwsExampleGetObjectWithRange) {
  SigV4Request req;
  req.method = "GET";
  req.path = "/test.txt";
  req.headers = {{"Host", kHost}, {"Range", "bytes=0-9"}};
  req.payload_hash = kEmpty;
  auto s = SignRequest(req, kAwsExampleCreds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->canonical_request,
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:" + std::string(kEmpty) + "\nx-amz-date:20130524T000000Z\n\n"
            "host;range;x-amz-content-sha256;x-amz-date\n" + kEmpty);
  EXPECT_EQ(s->string_to_sign,
            StringToSign("7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972"));
  EXPECT_EQ(s->signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s->authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  // The added headers are returned for sending.
  bool has_date = false;
  for (const auto& h : s->headers) has_date |= (h.first == "x-amz-date" && h.second == "20130524T000000Z");
  EXPECT_TRUE(has_date);
}

TEST(SigV4Test, AwsExamplePutObject) {
  const std::string body = "Welcome to Amazon S3.";
  const std::string hash = Sha256Hex(body);
  ASSERT_EQ(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SigV4Request req;
  req.method = "PUT";
  req.path = "/test$file.text";
  req.headers = {{"Host", kHost},
                 {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
                 {"x-amz-date", "20130524T000000Z"},
                 {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                 {"x-amz-content-sha256", hash}};
  req.payload_hash = hash;
  auto s = SignRequest(req, kAwsExampleCreds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->canonical_request,
            "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
            "host:examplebucket.s3.amazonaws.com\nx-amz-content-sha256:" + hash +
            "\nx-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n" + hash);
  EXPECT_EQ(s->string_to_sign,
            StringToSign("9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"));
  EXPECT_EQ(s->signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(SigV4Test, AwsExampleGetBucketLifecycle) {
  SigV4Request req;
  req.method = "GET";
  req.path = "/";
  req.query = {{"lifecycle", ""}};
  req.headers = {{"Host", kHost}};
  req.payload_hash = kEmpty;
  auto s = SignRequest(req, kAwsExampleCreds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->canonical_request,
            "GET\n/\nlifecycle=\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:" + std::string(kEmpty) + "\nx-amz-date:20130524T000000Z\n\n"
            "host;x-amz-content-sha256;x-amz-date\n" + kEmpty);
  EXPECT_EQ(s->string_to_sign,
            StringToSign("9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca"));
  EXPECT_EQ(s->signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(SigV4Test, AwsExampleGetBucketListObjects) {
  SigV4Request req;
  req.method = "GET";
  req.path = "/";
  req.query = {{"max-keys", "2"}, {"prefix", "J"}};
  req.headers = {{"Host", kHost}};
  req.payload_hash = kEmpty;
  auto s = SignRequest(req, kAwsExampleCreds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->canonical_request,
            "GET\n/\nmax-keys=2&prefix=J\nhost:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:" + std::string(kEmpty) + "\nx-amz-date:20130524T000000Z\n\n"
            "host;x-amz-content-sha256;x-amz-date\n" + kEmpty);
  EXPECT_EQ(s->string_to_sign,
            StringToSign("df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"));
  EXPECT_EQ(s->signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(SigV4Test, AwsExamplePresignedGet) {
  PresignRequest req;
  req.method = "GET";
  req.host = kHost;
  req.path = "/test.txt";
  req.expires_seconds = 86400;
  auto p = PresignUrl(req, kAwsExampleCreds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const std::string query =
      "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2F"
      "us-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&"
      "X-Amz-SignedHeaders=host";
  EXPECT_EQ(p->canonical_request, "GET\n/test.txt\n" + query +
                                      "\nhost:examplebucket.s3.amazonaws.com\n\nhost\n"
                                      "UNSIGNED-PAYLOAD");
  EXPECT_EQ(p->string_to_sign,
            StringToSign("3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04"));
  EXPECT_EQ(p->signature, "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
  EXPECT_EQ(p->path_and_query, "/test.txt?" + query +
                                   "&X-Amz-Signature="
                                   "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
}

TEST(SigV4Test, SessionTokenIsSignedAndSecretNeverAppears) {
  Credentials creds = kAwsExampleCreds;
  creds.session_token = "TOKEN/with+chars";
  SigV4Request req{"GET", "/k", {}, {{"host", kHost}}, std::string(kUnsignedPayload)};
  auto s = SignRequest(req, creds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->canonical_request.find("x-amz-security-token:TOKEN/with+chars\n"), std::string::npos);
  EXPECT_NE(s->signed_headers.find("x-amz-security-token"), std::string::npos);
  PresignRequest preq;
  preq.host = kHost;
  preq.path = "/k";
  auto p = PresignUrl(preq, creds, "us-east-1", "s3", k20130524);
  ASSERT_TRUE(p.ok());
  EXPECT_NE(p->path_and_query.find("X-Amz-Security-Token=TOKEN%2Fwith%2Bchars"), std::string::npos);
  for (const std::string& text : {s->canonical_request, s->string_to_sign, s->authorization,
                                  p->canonical_request, p->path_and_query}) {
    EXPECT_EQ(text.find(creds.secret_access_key), std::string::npos);
  }
}

TEST(SigV4Test, RejectsBadInput) {
  SigV4Request no_host{"GET", "/", {}, {{"range", "bytes=0-1"}}, std::string(kEmpty)};
  EXPECT_EQ(SignRequest(no_host, kAwsExampleCreds, "us-east-1", "s3", 0).status().code(),
            Code::kInvalidArgument);
  SigV4Request crlf{"GET", "/", {}, {{"host", "h"}, {"x-a", "1\r\nx: y"}}, std::string(kEmpty)};
  EXPECT_EQ(SignRequest(crlf, kAwsExampleCreds, "us-east-1", "s3", 0).status().code(),
            Code::kInvalidArgument);
  PresignRequest p;
  p.host = kHost;
  p.path = "/k";
  p.expires_seconds = kMaxPresignExpiresSeconds + 1;
  EXPECT_EQ(PresignUrl(p, kAwsExampleCreds, "us-east-1", "s3", 0).status().code(),
            Code::kInvalidArgument);
  p.expires_seconds = 0;
  EXPECT_EQ(PresignUrl(p, kAwsExampleCreds, "us-east-1", "s3", 0).status().code(),
            Code::kInvalidArgument);
}

}  // namespace
}  // namespace blz::store::s3
