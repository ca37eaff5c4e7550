#include "client/pack_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/digest.h"
#include "core/file_lock.h"
#include "core/file_util.h"

namespace blz::client {
namespace {

namespace fs = std::filesystem;

std::string PackedDir(const std::string& store_dir) { return store_dir + "/packed"; }
std::string DirLockPath(const std::string& store_dir) { return store_dir + "/packed.lock"; }

// flock(fd, op), retried on EINTR.
bool Flock(int fd, int op) {
  while (::flock(fd, op) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

// Opens `path` read-only. -1 when it cannot (errno set).
int OpenRead(const std::string& path) { return ::open(path.c_str(), O_RDONLY | O_CLOEXEC); }

// Removes every entry of `dir` that no push holds (an exclusive flock on its .blz, taken
// without waiting, proves it), its .json with it, a .json without its .blz, and temporary files
// of WriteFileAtomic (whose writers held the directory lock, so they are dead).
// REQUIRES: the caller holds packed.lock.
void RemoveUnheld(const std::string& dir) {
  std::set<std::string> stems;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find(".tmp-") != std::string::npos) {
      std::error_code rm;
      fs::remove(it->path(), rm);
      continue;
    }
    const size_t dot = name.rfind('.');
    if (dot != std::string::npos) stems.insert(name.substr(0, dot));
  }
  for (const std::string& stem : stems) {
    const std::string archive = dir + "/" + stem + ".blz";
    const int fd = OpenRead(archive);
    if (fd < 0 && errno != ENOENT) continue;
    if (fd >= 0 && !Flock(fd, LOCK_EX | LOCK_NB)) {  // a running push uses it
      ::close(fd);
      continue;
    }
    ::unlink(archive.c_str());
    ::unlink((dir + "/" + stem + ".json").c_str());
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace

KeptPack::~KeptPack() { Release(); }

KeptPack::KeptPack(KeptPack&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      digest_(std::move(other.digest_)) {}

KeptPack& KeptPack::operator=(KeptPack&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    digest_ = std::move(other.digest_);
  }
  return *this;
}

void KeptPack::Release() {
  if (fd_ >= 0) ::close(fd_);  // drops the shared flock
  fd_ = -1;
}

KeptPack FindKeptPack(const std::string& store_dir, const std::string& fingerprint) {
  const std::string dir = PackedDir(store_dir);
  KeptPack kept;
  std::string want;
  {
    Result<FileLock> lock = FileLock::Wait(DirLockPath(store_dir));
    if (!lock.ok()) return {};
    kept.fd_ = OpenRead(dir + "/" + fingerprint + ".blz");
    // Removers take their exclusive lock only under packed.lock, which this holds: a shared
    // one is never refused here but for an error.
    if (kept.fd_ < 0 || !Flock(kept.fd_, LOCK_SH | LOCK_NB)) return {};
    Result<std::string> meta = ReadSmallFile(dir + "/" + fingerprint + ".json", 4096);
    if (!meta.ok()) return {};
    nlohmann::json j = nlohmann::json::parse(*meta, nullptr, false);
    want = j.is_object() && j.contains("digest") && j["digest"].is_string()
               ? j["digest"].get<std::string>()
               : "";
  }
  // Hashed outside packed.lock (it may take a while): held, the file cannot be removed, and
  // entries are never replaced.
  kept.path_ = dir + "/" + fingerprint + ".blz";
  Result<std::string> hex = Sha256FileHex(kept.path_);
  if (ParseDigest(want).ok() && hex.ok() && MakeDigest(*hex) == want) {
    kept.digest_ = want;
    return kept;
  }
  // Its bytes changed: drop it (unless another push still holds it), and pack again.
  kept.Release();
  if (Result<FileLock> lock = FileLock::Wait(DirLockPath(store_dir)); lock.ok()) {
    RemoveUnheld(dir);
  }
  return {};
}

KeptPack KeepPack(const std::string& store_dir, const std::string& fingerprint,
                  const std::string& packed_path, const std::string& digest) {
  KeptPack kept;
  kept.path_ = packed_path;
  kept.digest_ = digest;
  // Held before it is linked in: the lock belongs to the file, whatever its name.
  kept.fd_ = OpenRead(packed_path);
  if (kept.fd_ < 0 || !Flock(kept.fd_, LOCK_SH)) return kept;
  const std::string dir = PackedDir(store_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return kept;
  Result<FileLock> lock = FileLock::Wait(DirLockPath(store_dir));
  if (!lock.ok()) return kept;
  RemoveUnheld(dir);
  const std::string archive = dir + "/" + fingerprint + ".blz";
  if (::link(packed_path.c_str(), archive.c_str()) != 0) return kept;  // EEXIST: held by another
  if (!WriteFileAtomic(dir + "/" + fingerprint + ".json",
                       nlohmann::json({{"digest", digest}}).dump() + "\n")
           .ok()) {
    ::unlink(archive.c_str());
    return kept;
  }
  kept.path_ = archive;
  return kept;
}

}  // namespace blz::client
