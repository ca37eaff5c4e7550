#include "formats/json_strict.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace blz::formats {
namespace {

using ::testing::HasSubstr;

TEST(JsonStrictTest, ParsesNestedValues) {
  auto j = ParseJsonStrict(R"( {"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": []} )",
                           "doc", 0);
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->at("a").size(), 7u);
  EXPECT_EQ(j->at("a")[1].get<int>(), -2);
  EXPECT_DOUBLE_EQ(j->at("a")[2].get<double>(), 3.5);
  EXPECT_TRUE(j->at("a")[6].at("b").is_object());
  EXPECT_TRUE(j->at("c").is_array());
  EXPECT_TRUE(ParseJsonStrict("7", "doc", 0).ok());
}

TEST(JsonStrictTest, RejectsDuplicateKeysAtAnyDepth) {
  for (const char* text : {R"({"a": 1, "a": 2})", R"({"x": [{"b": 1, "c": 2, "b": 3}]})"}) {
    auto j = ParseJsonStrict(text, "doc", 0);
    ASSERT_FALSE(j.ok()) << text;
    EXPECT_THAT(j.status().message(), HasSubstr("duplicate key"));
  }
  // The same key in two sibling objects is fine.
  EXPECT_TRUE(ParseJsonStrict(R"([{"a": 1}, {"a": 2}])", "doc", 0).ok());
}

TEST(JsonStrictTest, OrderedKeepsDocumentOrderAndRejectsDuplicates) {
  auto j = ParseJsonStrictOrdered(R"({"z": 1, "a": {"y": [true, {"c": 2, "b": 3}], "x": null}})",
                                  "doc", 0);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->dump(), R"({"z":1,"a":{"y":[true,{"c":2,"b":3}],"x":null}})");
  for (const char* text : {R"({"a": 1, "a": 2})", R"({"x": [{"b": 1, "c": 2, "b": 3}]})"}) {
    auto d = ParseJsonStrictOrdered(text, "doc", 10);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), Code::kCorruption);
    EXPECT_THAT(d.status().message(), HasSubstr("doc: duplicate key \""));
  }
  EXPECT_TRUE(ParseJsonStrictOrdered(R"([{"a": 1}, {"a": 2}])", "doc", 0).ok());
  auto bad = ParseJsonStrictOrdered("{\"a\": }", "doc", 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("doc: not valid JSON at byte offset 10"));
}

TEST(JsonStrictTest, AppendMemberAddsAtTheEnd) {
  nlohmann::ordered_json o = nlohmann::ordered_json::object();
  AppendMember(&o, "b", 1);
  AppendMember(&o, "a", {{"k", "v"}});
  EXPECT_EQ(o.dump(), R"({"b":1,"a":{"k":"v"}})");
  EXPECT_EQ(o["a"]["k"], "v");
}

TEST(JsonStrictTest, RejectsDeepNesting) {
  std::string ok_text(size_t(kMaxJsonDepth), '[');
  ok_text += std::string(size_t(kMaxJsonDepth), ']');
  EXPECT_TRUE(ParseJsonStrict(ok_text, "doc", 0).ok());
  std::string deep(size_t(kMaxJsonDepth) + 1, '[');
  deep += std::string(size_t(kMaxJsonDepth) + 1, ']');
  auto j = ParseJsonStrict(deep, "doc", 0);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("nest deeper"));
}

// nlohmann's lexer ends the input at a NUL byte: "{}\0junk" used to parse as "{}".
TEST(JsonStrictTest, RejectsNulAndNamesItsOffset) {
  const std::string text("{\"a\": 1}\0junk", 13);
  auto j = ParseJsonStrict(text, "hdr", 100);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Code::kCorruption);
  EXPECT_THAT(j.status().message(), HasSubstr("hdr: NUL byte at byte offset 108"));
  const std::string inside("{\"a\": \"x\0y\"}", 12);
  EXPECT_FALSE(ParseJsonStrict(inside, "hdr", 0).ok());
}

TEST(JsonStrictTest, RejectsTrailingJunkWithOffset) {
  auto j = ParseJsonStrict(R"({"a": 1} x)", "hdr", 8);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("not valid JSON at byte offset 17"));
  EXPECT_FALSE(ParseJsonStrict("", "hdr", 0).ok());
  EXPECT_FALSE(ParseJsonStrict(R"({"a": })", "hdr", 0).ok());
}

TEST(JsonStrictTest, RejectsBadUtf8AndBom) {
  auto j = ParseJsonStrict("{\"a\": \"\xC0\xAF\"}", "hdr", 0);
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("not valid UTF-8 at byte offset 7"));
  EXPECT_FALSE(ParseJsonStrict("\xEF\xBB\xBF{}", "hdr", 0).ok());
}

// Regression (issue 9, defect 1): the old callback parse re-scanned the parent object at the end
// of every member object, so a safetensors-like header with n tensors cost O(n^2): 40k tensors
// took 46 s, this 200k-tensor header would take about 20 minutes and run into the test's
// timeout. Parsed linearly it takes a moment even under sanitizers.
TEST(JsonStrictTest, ManyTensorObjectsParse) {
  constexpr int kTensors = 200000;
  std::string text = "{\"__metadata__\": {\"format\": \"pt\"}";
  text.reserve(size_t(kTensors) * 80);
  for (int i = 0; i < kTensors; ++i) {
    text += ", \"layers." + std::to_string(i) +
            ".weight\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [" +
            std::to_string(4 * i) + ", " + std::to_string(4 * i + 4) + "]}";
  }
  text += "}";
  auto j = ParseJsonStrict(text, "hdr", 8);
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ(j->size(), size_t(kTensors) + 1);
  EXPECT_EQ(j->at("layers.199999.weight").at("data_offsets")[1].get<int>(), 800000);
}

}  // namespace
}  // namespace blz::formats
