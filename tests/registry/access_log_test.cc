#include "registry/access_log.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

namespace blz::registry {
namespace {

using std::chrono::milliseconds;
using std::chrono::system_clock;

// 2026-11-24T10:28:50.123Z
system_clock::time_point When() {
  return system_clock::time_point(milliseconds(1795516130123LL));
}

AccessLogEntry Entry() {
  AccessLogEntry e;
  e.time = When();
  e.client = "127.0.0.1:51234";
  e.user = "ci-bot";
  e.method = "GET";
  e.target = "/v2/org/m/blobs/sha256:ab?token=hunter2&n=1";
  e.status = 200;
  e.bytes_in = 0;
  e.bytes_out = 4096;
  e.duration_ms = 12.345;
  return e;
}

TEST(AccessLogTest, TextLineHasEveryFieldInOrderAndRedactsSecrets) {
  EXPECT_EQ(FormatAccessLog(Entry(), LogFormat::kText),
            "2026-11-24T10:28:50.123Z 127.0.0.1:51234 ci-bot GET "
            "/v2/org/m/blobs/sha256:ab?token=REDACTED&n=1 200 0 4096 12.3ms\n");
}

TEST(AccessLogTest, TextLineOfAnAnonymousAbortedRequestWithoutStatus) {
  AccessLogEntry e = Entry();
  e.user.clear();
  e.method = "PUT";
  e.target = "/v2/m/blobs/uploads/u1";
  e.status = 0;
  e.bytes_in = 10;
  e.bytes_out = 0;
  e.duration_ms = 30000.04;
  e.aborted = true;
  e.note = "client closed the connection\nwhile sending";
  EXPECT_EQ(FormatAccessLog(e, LogFormat::kText),
            "2026-11-24T10:28:50.123Z 127.0.0.1:51234 - PUT /v2/m/blobs/uploads/u1 - 10 0 "
            "30000.0ms aborted (client closed the connection\\nwhile sending)\n");
}

TEST(AccessLogTest, TextFieldsNeverSplitOrBreakTheLine) {
  AccessLogEntry e = Entry();
  e.user = "a user\x1b[31m";
  e.method = "";
  e.target = "";
  const std::string line = FormatAccessLog(e, LogFormat::kText);
  EXPECT_EQ(line, "2026-11-24T10:28:50.123Z 127.0.0.1:51234 a\\x20user\\x1b[31m - - 200 0 4096 "
                  "12.3ms\n");
  EXPECT_EQ(line.find('\n'), line.size() - 1);
}

TEST(AccessLogTest, JsonLineHasTheSameFields) {
  const std::string line = FormatAccessLog(Entry(), LogFormat::kJson);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);
  EXPECT_EQ(line,
            "{\"time\":\"2026-11-24T10:28:50.123Z\",\"client\":\"127.0.0.1:51234\","
            "\"user\":\"ci-bot\",\"method\":\"GET\","
            "\"path\":\"/v2/org/m/blobs/sha256:ab?token=REDACTED&n=1\",\"status\":200,"
            "\"bytes_in\":0,\"bytes_out\":4096,\"duration_ms\":12.3,\"aborted\":false}\n");

  AccessLogEntry e = Entry();
  e.user.clear();
  e.status = 0;
  e.aborted = true;
  e.note = "timeout\n\xff";  // a newline and invalid UTF-8 stay inside the string
  const std::string aborted = FormatAccessLog(e, LogFormat::kJson);
  EXPECT_EQ(aborted.find('\n'), aborted.size() - 1);
  nlohmann::json j = nlohmann::json::parse(aborted);
  EXPECT_EQ(j["user"], "-");
  EXPECT_TRUE(j["status"].is_null());
  EXPECT_EQ(j["aborted"], true);
  EXPECT_EQ(j["note"], "timeout\n\xef\xbf\xbd");
}

TEST(AccessLogTest, ParseLogFormat) {
  EXPECT_EQ(*ParseLogFormat("text"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json"), LogFormat::kJson);
  Result<LogFormat> bad = ParseLogFormat("xml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("text or json"), std::string::npos);
  EXPECT_EQ(LogFormatName(LogFormat::kJson), "json");
}

}  // namespace
}  // namespace blz::registry
