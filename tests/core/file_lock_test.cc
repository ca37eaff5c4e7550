#include "core/file_lock.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "tests/test_util.h"

namespace blz {
namespace {

TEST(FileLockTest, SecondLockInTheSameProcessIsRefusedUntilTheFirstIsReleased) {
  blz::testing::TempDir tmp;
  const std::string path = tmp / "blz.lock";
  Result<FileLock> first = FileLock::Acquire(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->held());
  EXPECT_EQ(blz::testing::ReadFileBytes(path), std::to_string(::getpid()) + "\n");

  Result<FileLock> second = FileLock::Acquire(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_EQ(second.status().message(),
            "'" + path + "' is locked by process " + std::to_string(::getpid()));

  // Moving keeps the lock; releasing frees it.
  FileLock moved = std::move(*first);
  EXPECT_TRUE(moved.held());
  EXPECT_FALSE(FileLock::Acquire(path).ok());
  moved.Release();
  EXPECT_FALSE(moved.held());
  Result<FileLock> third = FileLock::Acquire(path);
  EXPECT_TRUE(third.ok()) << third.status().ToString();
}

TEST(FileLockTest, LockHeldByAnotherProcessNamesItsPidAndDiesWithIt) {
  blz::testing::TempDir tmp;
  const std::string path = tmp / "blz.lock";
  int ready[2], quit[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(quit), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::close(quit[1]);
    Result<FileLock> lock = FileLock::Acquire(path);
    const char c = lock.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    char q;
    (void)!::read(quit[0], &q, 1);  // hold the lock until the parent says so (or dies)
    ::_exit(0);                     // no release: the kernel drops the lock with the process
  }
  ::close(ready[1]);
  ::close(quit[0]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');

  Result<FileLock> mine = FileLock::Acquire(path);
  ASSERT_FALSE(mine.ok());
  EXPECT_EQ(mine.status().code(), Code::kUnavailable);
  EXPECT_NE(mine.status().message().find("locked by process " + std::to_string(child)),
            std::string::npos)
      << mine.status().ToString();

  ::close(quit[1]);  // the child exits
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(ready[0]);
  mine = FileLock::Acquire(path);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_EQ(blz::testing::ReadFileBytes(path), std::to_string(::getpid()) + "\n");
}

TEST(FileLockTest, WaitBlocksUntilTheHolderReleases) {
  blz::testing::TempDir tmp;
  const std::string path = tmp / "index.lock";
  Result<FileLock> holder = FileLock::Wait(path);
  ASSERT_TRUE(holder.ok()) << holder.status().ToString();
  EXPECT_TRUE(holder->held());
  EXPECT_EQ(blz::testing::ReadFileBytes(path), "");  // Wait writes nothing
  EXPECT_FALSE(FileLock::Acquire(path).ok());        // it excludes Acquire as well
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    Result<FileLock> second = FileLock::Wait(path);
    EXPECT_TRUE(second.ok()) << second.status().ToString();
    got = true;
  });
  // The waiter cannot have the lock while the holder has it (whenever it got to flock).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  holder->Release();
  waiter.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(FileLock::Wait(tmp / "no/such/dir/x.lock").status().code(), Code::kIOError);
}

TEST(FileLockTest, MissingDirectoryIsAnIOError) {
  blz::testing::TempDir tmp;
  Result<FileLock> lock = FileLock::Acquire(tmp / "no/such/dir/blz.lock");
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), Code::kIOError);
  EXPECT_NE(lock.status().message().find("no/such/dir/blz.lock"), std::string::npos);
}

}  // namespace
}  // namespace blz
