#include "core/file_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>

#include "core/digest.h"
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

// AppendFromFd copies a byte range of another file after what was written, in the kernel or
// through a buffer; the source's file position is not used.
TEST(AtomicFileTest, AppendFromFdCopiesARangeAndReportsAShortSource) {
  testing::TempDir dir;
  std::string src_bytes(3 << 20, '\0');  // larger than the fallback's 1 MiB buffer
  for (size_t i = 0; i < src_bytes.size(); ++i) src_bytes[i] = char((i * 131) >> 7);
  testing::WriteFileBytes(dir / "src", src_bytes);
  int fd = ::open((dir / "src").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  {
    auto f = AtomicFile::Create(dir / "out");
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Append(std::string_view("head:")).ok());
    const uint64_t from = 12345, length = src_bytes.size() - from - 7;
    Status s = f->AppendFromFd(fd, from, length, "src");
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(f->size(), 5 + length);
    ASSERT_TRUE(f->Append(std::string_view(":tail")).ok());
    ASSERT_TRUE(f->Commit().ok());
    EXPECT_EQ(testing::ReadFileBytes(dir / "out"),
              "head:" + src_bytes.substr(from, length) + ":tail");
  }
  {
    auto f = AtomicFile::Create(dir / "short");
    ASSERT_TRUE(f.ok());
    Status s = f->AppendFromFd(fd, src_bytes.size() - 10, 20, "src");
    EXPECT_EQ(s.code(), Code::kIOError);
    EXPECT_NE(s.message().find("src: ends at byte " + std::to_string(src_bytes.size())),
              std::string::npos)
        << s.ToString();
  }
  EXPECT_FALSE(fs::exists(dir / "short"));
  ::close(fd);
}

// CopyFileHashed: the copy holds the source's bytes (over ten 1 MiB reads: the hashing
// thread's four buffers are each reused), the returned hash is theirs, progress ends at the
// size; an existing destination is refused and kept; a missing source is an error naming it,
// with nothing left behind; unsynced, then SyncFile; an empty file.
TEST(FileUtilTest, CopyFileHashedCopiesAndHashesWhatItWrote) {
  testing::TempDir dir;
  std::string data((9u << 20) + 12345, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char((i * 131) ^ (i >> 11));
  testing::WriteFileBytes(dir / "src", data);
  uint64_t last_done = 0, last_total = 0;
  Result<std::string> hex = CopyFileHashed(dir / "src", dir / "dst", [&](uint64_t d, uint64_t t) {
    last_done = d;
    last_total = t;
  });
  ASSERT_TRUE(hex.ok()) << hex.status().ToString();
  EXPECT_EQ(*hex, Sha256Hex(data));
  EXPECT_EQ(testing::ReadFileBytes(dir / "dst"), data);
  EXPECT_EQ(last_done, data.size());
  EXPECT_EQ(last_total, data.size());

  testing::WriteFileBytes(dir / "taken", "old");
  Result<std::string> taken = CopyFileHashed(dir / "src", dir / "taken", nullptr);
  EXPECT_EQ(taken.status().code(), Code::kAlreadyExists) << taken.status().ToString();
  EXPECT_EQ(testing::ReadFileBytes(dir / "taken"), "old");

  Result<std::string> missing = CopyFileHashed(dir / "nope", dir / "out", nullptr);
  EXPECT_EQ(missing.status().code(), Code::kIOError);
  EXPECT_NE(missing.status().message().find(dir / "nope"), std::string::npos)
      << missing.status().message();
  EXPECT_EQ(CountEntries(dir.path()), 3u);  // src, dst, taken: nothing half-written

  // Without sync: the same bytes; SyncFile makes them durable later.
  Result<std::string> unsynced = CopyFileHashed(dir / "src", dir / "later", nullptr, false);
  ASSERT_TRUE(unsynced.ok()) << unsynced.status().ToString();
  EXPECT_EQ(*unsynced, *hex);
  EXPECT_EQ(testing::ReadFileBytes(dir / "later"), data);
  EXPECT_TRUE(SyncFile(dir / "later").ok());
  EXPECT_EQ(SyncFile(dir / "nope").code(), Code::kIOError);

  testing::WriteFileBytes(dir / "empty", "");
  Result<std::string> empty = CopyFileHashed(dir / "empty", dir / "empty-copy", nullptr);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(*empty, Sha256Hex(std::string()));
  EXPECT_EQ(testing::ReadFileBytes(dir / "empty-copy"), "");
}

// In a child process: copies `src` to `dest` with a 2 MiB RLIMIT_FSIZE (writes past it fail
// with EFBIG); exits 0 when that is an I/O error naming `dest` and `dest` is gone.
[[noreturn]] void CopyPastFileSizeLimit(const std::string& src, const std::string& dest) {
  std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit limit {2u << 20, 2u << 20};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) std::_Exit(3);
  Result<std::string> r = CopyFileHashed(src, dest, nullptr);
  const bool named = !r.ok() && r.status().code() == Code::kIOError &&
                     r.status().message().find(dest) != std::string::npos &&
                     r.status().message().find("write failed") != std::string::npos;
  std::_Exit(named && !std::filesystem::exists(dest) ? 0 : 1);
}

// A write that fails midway (past RLIMIT_FSIZE) is an error naming the destination, which is
// removed; the hashing thread is joined, not left running.
TEST(FileUtilTest, CopyFileHashedFailingWriteLeavesNothing) {
  testing::TempDir dir;
  std::string data((6u << 20) + 7, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7 + (i >> 9));
  testing::WriteFileBytes(dir / "src", data);
  const std::string dest = dir / "dst";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(CopyPastFileSizeLimit(dir / "src", dest), ::testing::ExitedWithCode(0), "");
  EXPECT_FALSE(std::filesystem::exists(dest));
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
