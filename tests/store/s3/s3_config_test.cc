#include "store/s3/s3_config.h"

#include <gtest/gtest.h>

#include <map>

namespace blz::store::s3 {
namespace {

EnvReader FakeEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(S3ConfigTest, ParsesBucketPrefixAndParameters) {
  auto c = ParseS3Url("s3://my-bucket/blobs/v1?endpoint=http%3A%2F%2F127.0.0.1%3A7480&region=eu-central-1&path_style=1");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->bucket, "my-bucket");
  EXPECT_EQ(c->prefix, "blobs/v1");
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:7480");
  EXPECT_EQ(c->region, "eu-central-1");
  EXPECT_TRUE(c->path_style);

  auto plain = ParseS3Url("s3://bucket1?endpoint=https://minio.example:9000");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->prefix, "");
  EXPECT_FALSE(plain->path_style);
}

TEST(S3ConfigTest, RejectsBadUrls) {
  for (const char* url : {"file:/tmp", "s3://", "s3://UPPER", "s3://ab", "s3://b-1?colour=red",
                          "s3://b-1?path_style=yes", "s3://b-1?endpoint=ftp://h",
                          "s3://b-1?endpoint=http://h/path", "s3://b-1?endpoint=http://h:99999"}) {
    EXPECT_EQ(ParseS3Url(url).status().code(), Code::kInvalidArgument) << url;
  }
}

TEST(S3ConfigTest, EndpointParts) {
  auto e = ParseS3Endpoint("https://s3.us-east-1.amazonaws.com");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->tls);
  EXPECT_EQ(e->host, "s3.us-east-1.amazonaws.com");
  EXPECT_EQ(e->port, 443);
  auto l = ParseS3Endpoint("http://127.0.0.1:27813/");
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->tls);
  EXPECT_EQ(l->host, "127.0.0.1");
  EXPECT_EQ(l->port, 27813);
}

TEST(S3ConfigTest, EnvironmentFillsCredentialsRegionEndpoint) {
  auto c = ParseS3Url("s3://bucket1/p");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(ApplyS3Environment(&*c, FakeEnv({{"AWS_ACCESS_KEY_ID", "AKID"},
                                               {"AWS_SECRET_ACCESS_KEY", "SECRET"},
                                               {"AWS_SESSION_TOKEN", "TOK"},
                                               {"AWS_REGION", "eu-west-3"},
                                               {"AWS_ENDPOINT_URL_S3", "http://10.0.0.1:9000"}}))
                  .ok());
  EXPECT_EQ(c->credentials.access_key_id, "AKID");
  EXPECT_EQ(c->credentials.secret_access_key, "SECRET");
  EXPECT_EQ(c->credentials.session_token, "TOK");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint, "http://10.0.0.1:9000");

  // The URL wins over the environment; AWS's endpoint is the default.
  auto u = ParseS3Url("s3://bucket1?region=us-west-2");
  ASSERT_TRUE(u.ok());
  ASSERT_TRUE(ApplyS3Environment(&*u, FakeEnv({{"AWS_ACCESS_KEY_ID", "AKID"},
                                               {"AWS_SECRET_ACCESS_KEY", "SECRET"},
                                               {"AWS_REGION", "eu-west-3"}}))
                  .ok());
  EXPECT_EQ(u->region, "us-west-2");
  EXPECT_EQ(u->endpoint, "https://s3.us-west-2.amazonaws.com");
}

TEST(S3ConfigTest, MissingCredentialsNameTheVariableNotTheValue) {
  auto c = ParseS3Url("s3://bucket1");
  ASSERT_TRUE(c.ok());
  Status no_secret = ApplyS3Environment(&*c, FakeEnv({{"AWS_ACCESS_KEY_ID", "AKIDVALUE"}}));
  EXPECT_EQ(no_secret.code(), Code::kUnauthorized);
  EXPECT_NE(no_secret.message().find("AWS_SECRET_ACCESS_KEY"), std::string::npos);
  EXPECT_EQ(no_secret.message().find("AKIDVALUE"), std::string::npos);
  Status none = ApplyS3Environment(&*c, FakeEnv({}));
  EXPECT_EQ(none.code(), Code::kUnauthorized);
  EXPECT_NE(none.message().find("AWS_ACCESS_KEY_ID"), std::string::npos);
}

}  // namespace
}  // namespace blz::store::s3
