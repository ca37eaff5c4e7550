// The store's partial downloads (client/partial_download.h): idle ones are pruned, ones a pull
// holds the fetch lock for are kept.
#include "client/partial_download.h"

#include <gtest/gtest.h>
#include <sys/time.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <string>
#include <thread>

#include "core/digest.h"
#include "tests/test_util.h"

namespace blz::client {
namespace {

// Makes a partial download of `size` bytes for `archive`, last written `age` seconds ago.
std::string MakePartial(const PartialStore& p, const std::string& archive, uint64_t size,
                        int64_t age) {
  const std::string key = PatchKey("sha256:" + std::string(64, 'a'), archive);
  PartialState st;
  st.kind = "patch";
  st.what = "patch";
  st.for_digest = archive;
  st.size = size;
  st.parts.push_back({0, size, size / 2});
  EXPECT_TRUE(p.Save(key, st).ok());
  blz::testing::WriteFileBytes(p.DataPath(key), std::string(size, 'x'));
  const time_t when = std::time(nullptr) - age;
  struct timeval times[2] = {{when, 0}, {when, 0}};
  EXPECT_EQ(::utimes(p.SidecarPath(key).c_str(), times), 0);
  return key;
}

TEST(PartialDownloadTest, RemoveIdleKeepsRecentAndLockedDownloads) {
  blz::testing::TempDir tmp;
  PartialStore p(tmp / "store");
  ASSERT_TRUE(p.Init().ok());
  const std::string idle_archive = MakeDigest(Sha256Hex("idle"));
  const std::string busy_archive = MakeDigest(Sha256Hex("busy"));
  const std::string fresh_archive = MakeDigest(Sha256Hex("fresh"));
  const std::string idle = MakePartial(p, idle_archive, 8192, 3600);
  const std::string busy = MakePartial(p, busy_archive, 4096, 3600);
  const std::string fresh = MakePartial(p, fresh_archive, 4096, 10);

  bool waited = false;
  Result<FetchLock> lock = FetchLock::Acquire(tmp / "store", busy_archive, &waited);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  auto [removed, bytes] = p.RemoveIdle(/*max_age=*/600, int64_t(std::time(nullptr)));
  EXPECT_EQ(removed, 1);
  EXPECT_GE(bytes, 8192u);
  EXPECT_FALSE(std::filesystem::exists(p.DataPath(idle)));
  EXPECT_FALSE(std::filesystem::exists(p.SidecarPath(idle)));
  EXPECT_TRUE(p.Load(busy).has_value());   // a pull holds its lock
  EXPECT_TRUE(p.Load(fresh).has_value());  // written 10 s ago

  *lock = FetchLock();  // the pull ends
  auto [removed_later, bytes_later] = p.RemoveIdle(600, int64_t(std::time(nullptr)));
  EXPECT_EQ(removed_later, 1);
  EXPECT_GE(bytes_later, 4096u);
  EXPECT_FALSE(p.Load(busy).has_value());
  EXPECT_TRUE(p.Load(fresh).has_value());
}

// The .lock file lives only while a fetch holds it (issue 24: a 0-byte .lock was left in
// partial/ for every version ever pulled); one left by a killed pull is reused and removed.
TEST(PartialDownloadTest, FetchLockFileIsRemovedWhenReleased) {
  blz::testing::TempDir tmp;
  const std::string archive = MakeDigest(Sha256Hex("locked"));
  PartialStore p(tmp / "store");
  const std::string lock_path = p.DataPath(Sha256Hex("locked")) + ".lock";
  bool waited = true;
  {
    Result<FetchLock> lock = FetchLock::Acquire(tmp / "store", archive, &waited);
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
    EXPECT_FALSE(waited);
    EXPECT_EQ(lock->path(), lock_path);
    EXPECT_TRUE(std::filesystem::exists(lock_path));
  }
  EXPECT_FALSE(std::filesystem::exists(lock_path));

  blz::testing::WriteFileBytes(lock_path, "");  // left by a pull that was killed
  {
    Result<FetchLock> lock = FetchLock::Acquire(tmp / "store", archive, &waited);
    ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(lock_path));

  // A second fetch waiting for the first gets the lock after it (on a fresh file, as the first
  // unlinked its own), and nothing is left when both are done.
  Result<FetchLock> first = FetchLock::Acquire(tmp / "store", archive, &waited);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  bool second_waited = false;
  bool second_ok = false;
  bool second_saw_file = false;
  std::thread second([&] {
    Result<FetchLock> lock = FetchLock::Acquire(tmp / "store", archive, &second_waited);
    second_ok = lock.ok();
    second_saw_file = std::filesystem::exists(lock_path);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // (not needed for correctness)
  *first = FetchLock();
  second.join();
  EXPECT_TRUE(second_ok);
  EXPECT_TRUE(second_saw_file);  // its own lock file, while it held it
  EXPECT_FALSE(std::filesystem::exists(lock_path));
}

}  // namespace
}  // namespace blz::client
