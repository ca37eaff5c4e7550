#include "core/file_util.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/mmap_file.h"
#include "tests/test_util.h"

namespace blz {
namespace {

namespace fs = std::filesystem;

size_t CountEntries(const std::string& dir) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(AtomicFileTest, CommitPublishesAndAbandonLeavesNothing) {
  testing::TempDir dir;
  {
    auto f = AtomicFile::Create(dir / "out");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Append(std::string_view("hello ")).ok());
    ASSERT_TRUE(f->WriteAt(6, AsBytes(std::string_view("world"))).ok());
    EXPECT_FALSE(fs::exists(dir / "out"));  // invisible until Commit
    ASSERT_TRUE(f->Commit().ok());
  }
  EXPECT_EQ(testing::ReadFileBytes(dir / "out"), "hello world");
  {
    auto f = AtomicFile::Create(dir / "other");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Append(std::string_view("partial")).ok());
  }  // destroyed without Commit
  EXPECT_FALSE(fs::exists(dir / "other"));
  EXPECT_EQ(CountEntries(dir.path()), 1u);
}

TEST(AtomicFileTest, NoReplaceRefusesExisting) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir / "out", "old");
  auto f = AtomicFile::Create(dir / "out");
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Append(std::string_view("new")).ok());
  Status s = f->Commit(/*no_replace=*/true);
  EXPECT_EQ(s.code(), Code::kAlreadyExists);
  EXPECT_EQ(testing::ReadFileBytes(dir / "out"), "old");
  EXPECT_EQ(CountEntries(dir.path()), 1u);
}

TEST(FileUtilTest, ReadSmallFileCap) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir / "f", std::string(100, 'a'));
  EXPECT_EQ(ReadSmallFile(dir / "f", 100).value().size(), 100u);
  EXPECT_EQ(ReadSmallFile(dir / "f", 99).status().code(), Code::kTooLarge);
  EXPECT_EQ(ReadSmallFile(dir / "nope", 99).status().code(), Code::kNotFound);
}

TEST(FileUtilTest, SafeRelativePaths) {
  EXPECT_TRUE(IsSafeRelativePath("config.json"));
  EXPECT_TRUE(IsSafeRelativePath("tokenizer/vocab.txt"));
  EXPECT_FALSE(IsSafeRelativePath(""));
  EXPECT_FALSE(IsSafeRelativePath("/etc/passwd"));
  EXPECT_FALSE(IsSafeRelativePath("../x"));
  EXPECT_FALSE(IsSafeRelativePath("a/../../x"));
  EXPECT_FALSE(IsSafeRelativePath("a//b"));
  EXPECT_FALSE(IsSafeRelativePath("a/./b"));
  EXPECT_FALSE(IsSafeRelativePath("a\\b"));
  EXPECT_FALSE(IsSafeRelativePath("a/"));
}

TEST(MappedFileTest, MapsBytesAndEmptyFiles) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir / "f", "abc");
  testing::WriteFileBytes(dir / "empty", "");
  auto m = MappedFile::Open(dir / "f");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(AsChars(m->bytes()), "abc");
  auto e = MappedFile::Open(dir / "empty");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->size(), 0u);
  EXPECT_EQ(MappedFile::Open(dir / "missing").status().code(), Code::kNotFound);
  EXPECT_EQ(MappedFile::Open(dir.path()).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace blz
