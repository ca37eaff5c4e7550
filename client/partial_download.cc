#include "client/partial_download.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/digest.h"
#include "core/file_util.h"

namespace blz::client {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxSidecarBytes = 1 << 20;
constexpr size_t kMaxParts = 100'000;

bool IsKey(std::string_view key) {
  if (key.size() != 64) return false;
  for (char c : key) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

uint64_t PartialState::Done() const {
  uint64_t n = 0;
  for (const PartState& p : parts) n += p.done;
  return n;
}

std::string PatchKey(std::string_view from_digest, std::string_view to_digest) {
  return Sha256Hex("blz-patch\n" + std::string(from_digest) + "\n" + std::string(to_digest));
}

std::string FullPatchKey(std::string_view to_digest) {
  return Sha256Hex("blz-full-patch\n" + std::string(to_digest));
}

PartialStore::PartialStore(std::string store_dir) : dir_(std::move(store_dir) + "/partial/sha256") {}

Status PartialStore::Init() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return IOError(dir_ + ": cannot create directory: " + ec.message());
  return Status::Ok();
}

std::string PartialStore::DataPath(std::string_view key) const {
  return dir_ + "/" + std::string(key);
}

std::string PartialStore::SidecarPath(std::string_view key) const {
  return DataPath(key) + ".json";
}

std::optional<PartialState> PartialStore::Load(std::string_view key) const {
  if (!IsKey(key)) return std::nullopt;
  Result<std::string> text = ReadSmallFile(SidecarPath(key), kMaxSidecarBytes);
  if (!text.ok()) return std::nullopt;
  PartialState st;
  nlohmann::json doc = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  bool ok = doc.is_object();
  try {
    if (ok) {
      st.kind = doc.at("kind").get<std::string>();
      st.what = doc.value("what", std::string());
      st.for_digest = doc.value("for", std::string());
      st.digest = doc.at("digest").get<std::string>();
      st.size = doc.at("size").get<uint64_t>();
      const nlohmann::json& parts = doc.at("parts");
      ok = parts.is_array() && parts.size() <= kMaxParts;
      uint64_t next = 0;
      for (size_t i = 0; ok && i < parts.size(); ++i) {
        PartState p;
        p.begin = parts[i].at("begin").get<uint64_t>();
        p.end = parts[i].at("end").get<uint64_t>();
        p.done = parts[i].at("done").get<uint64_t>();
        // Parts are contiguous, in order, within the size.
        ok = p.begin == next && p.end > p.begin && p.end <= st.size && p.done <= p.end - p.begin;
        next = p.end;
        st.parts.push_back(p);
      }
      ok = ok && (st.digest.empty() || ParseDigest(st.digest).ok());
    }
  } catch (const nlohmann::json::exception&) {
    ok = false;
  }
  if (!ok) {
    Remove(key);
    return std::nullopt;
  }
  return st;
}

Status PartialStore::Save(std::string_view key, const PartialState& state) const {
  if (!IsKey(key)) return InvalidArgument("invalid partial download key '" + std::string(key) + "'");
  nlohmann::ordered_json doc;
  doc["kind"] = state.kind;
  doc["what"] = state.what;
  doc["for"] = state.for_digest;
  doc["digest"] = state.digest;
  doc["size"] = state.size;
  doc["parts"] = nlohmann::ordered_json::array();
  for (const PartState& p : state.parts) {
    doc["parts"].push_back({{"begin", p.begin}, {"end", p.end}, {"done", p.done}});
  }
  const std::string text = doc.dump() + "\n";
  const std::string path = SidecarPath(key);
  const std::string next = path + ".new";
  int fd = ::open(next.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IOError(next + ": cannot create: " + std::strerror(errno));
  size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      return IOError(next + ": write failed: " + std::strerror(err));
    }
    off += size_t(n);
  }
  if (::close(fd) != 0) return IOError(next + ": close failed: " + std::strerror(errno));
  if (::rename(next.c_str(), path.c_str()) != 0) {
    return IOError("cannot rename " + next + " to " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

void PartialStore::Remove(std::string_view key) const {
  if (!IsKey(key)) return;
  ::unlink(SidecarPath(key).c_str());
  ::unlink((SidecarPath(key) + ".new").c_str());
  ::unlink(DataPath(key).c_str());
}

int PartialStore::RemoveFor(std::string_view archive_digest) const {
  std::vector<std::string> doomed;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() != 69 || name.substr(64) != ".json") continue;
    const std::string key = name.substr(0, 64);
    std::optional<PartialState> st = Load(key);
    if (st.has_value() && st->for_digest == archive_digest) doomed.push_back(key);
  }
  for (const std::string& key : doomed) Remove(key);
  return int(doomed.size());
}

std::pair<int, uint64_t> PartialStore::RemoveIdle(int64_t max_age, int64_t now) const {
  int removed = 0;
  uint64_t bytes = 0;
  std::vector<std::string> keys;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() == 69 && name.substr(64) == ".json") keys.push_back(name.substr(0, 64));
  }
  for (const std::string& key : keys) {
    struct stat st {};
    if (::stat(SidecarPath(key).c_str(), &st) != 0 || now - int64_t(st.st_mtime) <= max_age) {
      continue;
    }
    std::optional<PartialState> state = Load(key);
    int lock_fd = -1;
    if (state.has_value()) {
      Result<std::string> hex = ParseDigest(state->for_digest);
      if (hex.ok()) {
        const std::string lock_path = DataPath(*hex) + ".lock";
        lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CLOEXEC);
        if (lock_fd >= 0 && ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
          ::close(lock_fd);  // a pull is resuming it
          continue;
        }
      }
    }
    struct stat data {};
    if (::stat(DataPath(key).c_str(), &data) == 0) bytes += uint64_t(data.st_blocks) * 512;
    Remove(key);
    ++removed;
    if (lock_fd >= 0) ::close(lock_fd);
  }
  return {removed, bytes};
}

Result<FetchLock> FetchLock::Acquire(const std::string& store_dir,
                                     std::string_view archive_digest, bool* waited) {
  BLZ_ASSIGN_OR_RETURN(std::string hex, ParseDigest(archive_digest));
  PartialStore partial(store_dir);
  BLZ_RETURN_IF_ERROR(partial.Init());
  const std::string path = partial.DataPath(hex) + ".lock";
  *waited = false;
  for (;;) {
    FetchLock lock;
    lock.fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock.fd_ < 0) return IOError(path + ": cannot open lock file: " + std::strerror(errno));
    if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return IOError(path + ": cannot lock: " + std::strerror(errno));
      *waited = true;
      while (::flock(lock.fd_, LOCK_EX) != 0) {
        if (errno != EINTR) return IOError(path + ": cannot lock: " + std::strerror(errno));
      }
    }
    // The previous holder may have unlinked the file we locked (see the class comment): only
    // the file still at `path` is the lock.
    struct stat held {}, at_path {};
    if (::fstat(lock.fd_, &held) != 0) {
      return IOError(path + ": cannot stat lock file: " + std::strerror(errno));
    }
    if (::stat(path.c_str(), &at_path) == 0 && at_path.st_ino == held.st_ino &&
        at_path.st_dev == held.st_dev) {
      lock.path_ = path;
      return lock;
    }
    // `lock` closes its descriptor; try again on the current file.
  }
}

void FetchLock::Release() {
  if (fd_ < 0) return;
  // Unlinked while still held, so that no other process can lock this inode and believe it
  // holds the lock (Acquire re-checks the inode).
  if (!path_.empty()) ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
  path_.clear();
}

FetchLock::~FetchLock() { Release(); }

FetchLock::FetchLock(FetchLock&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
  other.path_.clear();
}

FetchLock& FetchLock::operator=(FetchLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
    other.path_.clear();
  }
  return *this;
}

}  // namespace blz::client
