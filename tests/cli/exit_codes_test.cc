#include "cli/exit_codes.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace blz::cli {
namespace {

const Code kAllCodes[] = {
    Code::kOk,          Code::kInvalidArgument, Code::kNotFound,     Code::kCorruption,
    Code::kDigestMismatch, Code::kTooLarge,     Code::kUnsupported,  Code::kIOError,
    Code::kAlreadyExists,  Code::kUnauthorized, Code::kUnavailable,  Code::kInternal,
};

TEST(ExitCodesTest, DocumentedMapping) {
  EXPECT_EQ(ExitCodeFor(Code::kOk), 0);
  EXPECT_EQ(ExitCodeFor(Code::kInternal), 1);
  EXPECT_EQ(ExitCodeFor(Code::kInvalidArgument), 2);
  EXPECT_EQ(ExitCodeFor(Code::kUnsupported), 2);
  EXPECT_EQ(ExitCodeFor(Code::kNotFound), 3);
  EXPECT_EQ(ExitCodeFor(Code::kCorruption), 4);
  EXPECT_EQ(ExitCodeFor(Code::kDigestMismatch), 4);
  EXPECT_EQ(ExitCodeFor(Code::kTooLarge), 4);
  EXPECT_EQ(ExitCodeFor(Code::kUnauthorized), 5);
  EXPECT_EQ(ExitCodeFor(Code::kUnavailable), 6);
  EXPECT_EQ(ExitCodeFor(Code::kAlreadyExists), 7);
  EXPECT_EQ(ExitCodeFor(Code::kIOError), 8);
}

TEST(ExitCodesTest, OnlyOkIsZeroAndHelpListsEveryCodeUsed) {
  const std::string help = ExitCodeHelp();
  std::set<int> used;
  for (Code c : kAllCodes) {
    int e = ExitCodeFor(c);
    EXPECT_EQ(e == 0, c == Code::kOk) << CodeName(c);
    EXPECT_GE(e, 0);
    EXPECT_LT(e, 126);  // shells reserve 126+
    used.insert(e);
  }
  for (int e : used) {
    EXPECT_NE(help.find("  " + std::to_string(e) + "  "), std::string::npos) << e;
  }
}

TEST(ExitCodesTest, ReportErrorReturnsMappedCode) {
  ::testing::internal::CaptureStderr();
  int code = ReportError(NotFound("org/model:v9: manifest unknown"));
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, kExitNotFound);
  EXPECT_EQ(err, "blz: error: not found: org/model:v9: manifest unknown\n");
}

}  // namespace
}  // namespace blz::cli
