// The S3 blob driver (store/s3/s3_blob_store.h).
#include "store/s3/s3_blob_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "core/text.h"

namespace blz::store::s3 {
namespace {

using Clock = std::chrono::system_clock;

std::string Hex(std::string_view digest) { return std::string(digest.substr(7)); }
std::string Algorithm(std::string_view digest) {
  return std::string(digest.substr(0, digest.find(':')));
}

Status CheckDigest(std::string_view digest) {
  if (!IsValidOciDigest(digest)) {
    return InvalidArgument("invalid blob digest '" + std::string(digest) + "'");
  }
  return Status::Ok();
}

}  // namespace

Result<Clock::time_point> ParseS3Time(std::string_view text) {
  const std::string s(text);
  std::tm tm{};
  const char* end = ::strptime(s.c_str(), "%a, %d %b %Y %H:%M:%S", &tm);
  if (end == nullptr) {
    tm = std::tm{};
    end = ::strptime(s.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  }
  if (end == nullptr) return InvalidArgument("S3: unparsable time '" + s + "'");
  const time_t t = ::timegm(&tm);
  if (t == time_t(-1)) return InvalidArgument("S3: time out of range '" + s + "'");
  return Clock::from_time_t(t);
}

S3BlobStore::S3BlobStore(std::string root, S3Config config, S3BlobStoreOptions options)
    : BlobStore(root),
      config_(std::move(config)),
      options_(options),
      cache_dir_(root + "/cache/blobs") {}

Result<std::unique_ptr<S3BlobStore>> S3BlobStore::Open(const std::string& root,
                                                       S3Config config,
                                                       S3BlobStoreOptions options) {
  if (options.part_size < kMinMultipartPartSize) {
    return InvalidArgument("S3 blob store: part size below 5 MiB");
  }
  if (options.multipart_threshold < options.part_size) options.multipart_threshold = options.part_size;
  std::unique_ptr<S3BlobStore> s(new S3BlobStore(root, std::move(config), options));
  BLZ_RETURN_IF_ERROR(s->InitLocalDirs());
  BLZ_RETURN_IF_ERROR(MakePrivateDir(root + "/cache"));
  BLZ_RETURN_IF_ERROR(MakePrivateDir(s->cache_dir_));
  // Keep what an earlier run cached (verified when fetched), oldest first in LRU order.
  std::vector<std::pair<Clock::time_point, std::pair<std::string, uint64_t>>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(s->cache_dir_, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::string digest = name;
    const size_t dash = digest.find('-');
    if (dash != std::string::npos) digest[dash] = ':';
    std::error_code fec;
    const uint64_t size = it->file_size(fec);
    Result<Clock::time_point> mtime = FileModifiedTime(it->path().string());
    if (!IsValidOciDigest(digest) || fec || !mtime.ok()) {
      std::filesystem::remove(it->path(), fec);
      continue;
    }
    found.push_back({*mtime, {digest, size}});
  }
  std::sort(found.begin(), found.end());
  for (const auto& f : found) s->CacheInsert(f.second.first, f.second.second);
  return s;
}

std::string S3BlobStore::Describe() const {
  return "s3://" + config_.bucket + (config_.prefix.empty() ? "" : "/" + config_.prefix);
}

std::string S3BlobStore::BlobsPrefix() const {
  std::string p = config_.prefix;
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p.empty() ? "blobs/" : p + "/blobs/";
}

std::string S3BlobStore::UploadsPrefix() const {
  std::string p = config_.prefix;
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p.empty() ? "uploads/" : p + "/uploads/";
}

Result<std::string> S3BlobStore::KeyFor(std::string_view digest) const {
  BLZ_RETURN_IF_ERROR(CheckDigest(digest));
  return BlobsPrefix() + Algorithm(digest) + "/" + Hex(digest);
}

std::string S3BlobStore::CachePath(std::string_view digest) const {
  return cache_dir_ + "/" + Algorithm(digest) + "-" + Hex(digest);
}

uint64_t S3BlobStore::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cache_total_;
}

void S3BlobStore::CacheInsert(const std::string& digest, uint64_t size) const {
  std::vector<std::string> evict;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = cache_[digest];
    cache_total_ = cache_total_ - e.size + size;
    e.size = size;
    e.last_use = ++clock_;
    while (cache_total_ > options_.cache_bytes && cache_.size() > 1) {
      auto oldest = cache_.end();
      for (auto it = cache_.begin(); it != cache_.end(); ++it) {
        if (it->first == digest) continue;
        if (oldest == cache_.end() || it->second.last_use < oldest->second.last_use) oldest = it;
      }
      if (oldest == cache_.end()) break;
      cache_total_ -= oldest->second.size;
      evict.push_back(oldest->first);
      cache_.erase(oldest);
    }
  }
  // Unlinked outside the lock; an open or mmapped copy stays readable.
  for (const std::string& d : evict) ::unlink(CachePath(d).c_str());
}

void S3BlobStore::CacheDrop(const std::string& digest) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(digest);
    if (it != cache_.end()) {
      cache_total_ -= it->second.size;
      cache_.erase(it);
    }
  }
  ::unlink(CachePath(digest).c_str());
}

Status S3BlobStore::CheckReachable() const {
  S3Client client(config_);
  Result<ListObjectsResult> listed = client.ListObjectsV2(BlobsPrefix(), {}, 1);
  if (!listed.ok()) {
    return Status(listed.status().code(),
                  "storage " + Describe() + " (endpoint " + config_.endpoint +
                      ") is not usable: " + listed.status().message());
  }
  return Status::Ok();
}

Result<BlobInfo> S3BlobStore::Stat(std::string_view digest) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  S3Client client(config_);
  Result<ObjectInfo> head = client.HeadObject(key);
  if (!head.ok()) {
    if (head.status().code() == Code::kNotFound) {
      return NotFound("blob " + std::string(digest) + " is not in the store (" + Describe() + ")");
    }
    return head.status();
  }
  BlobInfo info{std::string(digest), head->size, "", {}};
  if (Result<Clock::time_point> t = ParseS3Time(head->last_modified); t.ok()) info.modified = *t;
  return info;
}

Result<StoredHash> S3BlobStore::Download(std::string_view digest, const std::string& path) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  S3Client client(config_);
  Status got = client.GetObjectToFile(key, path);
  if (!got.ok()) {
    ::unlink(path.c_str());
    if (got.code() == Code::kNotFound) {
      return NotFound("blob " + std::string(digest) + " is not in the store (" + Describe() + ")");
    }
    return got;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return IOError(path + ": cannot stat: " + std::strerror(errno));
  Result<std::string> actual = FileDigestLike(path, digest);
  if (!actual.ok()) {
    ::unlink(path.c_str());
    return actual.status();
  }
  return StoredHash{*actual, uint64_t(st.st_size), 0};
}

Result<BlobInfo> S3BlobStore::LocalFile(std::string_view digest) const {
  BLZ_RETURN_IF_ERROR(CheckDigest(digest));
  const std::string d(digest);
  const std::string cached = CachePath(d);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(d);
    struct stat st {};
    if (it != cache_.end() && ::stat(cached.c_str(), &st) == 0 &&
        uint64_t(st.st_size) == it->second.size) {
      it->second.last_use = ++clock_;
      return BlobInfo{d, it->second.size, cached, Clock::from_time_t(st.st_mtime)};
    }
  }
  const std::string temp = NewTempPath("fetch");
  BLZ_ASSIGN_OR_RETURN(StoredHash got, Download(d, temp));
  if (got.actual != d) {
    ::unlink(temp.c_str());
    return DigestMismatch(Describe() + ": stored blob " + d + " now hashes to " + got.actual);
  }
  if (::rename(temp.c_str(), cached.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(temp.c_str());
    return IOError(cached + ": cannot move the fetched blob into the cache: " + err);
  }
  CacheInsert(d, got.size);
  return BlobInfo{d, got.size, cached, Clock::now()};
}

namespace {

// One ranged GET's body, handed out as it arrives (at most 256 KiB per piece).
class S3RangeReader final : public BlobReader {
 public:
  S3RangeReader(std::string digest, std::unique_ptr<ObjectStream> body, uint64_t length)
      : digest_(std::move(digest)), body_(std::move(body)),
        buf_(size_t(std::min<uint64_t>(length, 256 << 10))) {}

  Result<ByteSpan> Next() override {
    if (body_ == nullptr) return ByteSpan();
    Result<size_t> got = body_->Read(reinterpret_cast<char*>(buf_.data()), buf_.size());
    if (!got.ok()) {
      body_.reset();
      return got.status().WithContext("streaming blob " + digest_);
    }
    if (*got == 0) {
      body_.reset();  // done: the connection goes now
      return ByteSpan();
    }
    return ByteSpan(buf_.data(), *got);
  }

 private:
  std::string digest_;
  std::unique_ptr<ObjectStream> body_;  // null when done or failed
  std::vector<uint8_t> buf_;
};

}  // namespace

Result<std::unique_ptr<BlobReader>> S3BlobStore::OpenRange(std::string_view digest,
                                                           uint64_t offset,
                                                           uint64_t length) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  const std::string d(digest);
  if (length == 0) {  // nothing to GET (S3 has no empty range): the blob must exist
    BLZ_ASSIGN_OR_RETURN(BlobInfo info, Stat(d));
    if (offset > info.size) {
      return InvalidArgument("blob " + d + ": offset " + std::to_string(offset) +
                             " is past its end (" + std::to_string(info.size) + " bytes)");
    }
    return std::unique_ptr<BlobReader>(new S3RangeReader(d, nullptr, 0));
  }
  S3Client client(config_);
  Result<std::unique_ptr<ObjectStream>> body =
      client.OpenObject(key, ByteRange{offset, offset + length - 1});
  if (!body.ok()) {
    if (body.status().code() == Code::kNotFound) {
      return NotFound("blob " + d + " is not in the store (" + Describe() + ")");
    }
    return body.status();
  }
  return std::unique_ptr<BlobReader>(new S3RangeReader(d, std::move(*body), length));
}

Status S3BlobStore::Upload(const std::string& key, const std::string& path, uint64_t size) const {
  S3Client client(config_);
  if (size < options_.multipart_threshold) return client.PutObjectFromFile(key, path);
  BLZ_ASSIGN_OR_RETURN(std::string upload_id, client.CreateMultipartUpload(key));
  std::vector<CompletedPart> parts;
  Status s = [&]() -> Status {
    std::ifstream in(path, std::ios::binary);
    if (!in) return IOError(path + ": cannot open");
    std::string buffer;
    for (uint64_t offset = 0; offset < size; offset += options_.part_size) {
      const uint64_t n = std::min(options_.part_size, size - offset);
      buffer.resize(n);
      if (!in.read(buffer.data(), std::streamsize(n))) return IOError(path + ": short read");
      const int number = int(parts.size()) + 1;
      BLZ_ASSIGN_OR_RETURN(std::string etag, client.UploadPart(key, upload_id, number, buffer));
      parts.push_back({number, std::move(etag)});
    }
    return client.CompleteMultipartUpload(key, upload_id, parts);
  }();
  if (!s.ok()) (void)client.AbortMultipartUpload(key, upload_id);
  return s;
}

Result<BlobInfo> S3BlobStore::PublishVerified(const std::string& temp_path,
                                              const std::string& digest, uint64_t size,
                                              bool /*synced*/) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  BLZ_RETURN_IF_ERROR(Upload(key, temp_path, size));
  // The verified upload becomes the cached copy (a rename: the bytes are not copied again).
  const std::string cached = CachePath(digest);
  if (::rename(temp_path.c_str(), cached.c_str()) != 0) {
    ::unlink(temp_path.c_str());
    return BlobInfo{digest, size, "", Clock::now()};
  }
  CacheInsert(digest, size);
  return BlobInfo{digest, size, cached, Clock::now()};
}

Result<StoredHash> S3BlobStore::HashStored(std::string_view digest) const {
  const std::string temp = NewTempPath("verify");
  Result<StoredHash> got = Download(digest, temp);
  ::unlink(temp.c_str());
  return got;
}

Result<std::string> S3BlobStore::Quarantine(std::string_view digest, uint64_t) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  const std::string d(digest);
  const std::string temp = NewTempPath("quarantine");
  Result<StoredHash> got = Download(d, temp);
  CacheDrop(d);  // whatever the object holds, the local copy was judged bad
  if (!got.ok()) return got.status();
  if (got->actual == d) {
    ::unlink(temp.c_str());
    return NotFound("blob " + d + ": the object in " + Describe() +
                    " is intact; only the local cached copy was damaged (dropped)");
  }
  BLZ_RETURN_IF_ERROR(MakePrivateDir(quarantine_dir()));
  std::string dest = quarantine_dir() + "/" + Hex(d);
  struct stat st {};
  if (::lstat(dest.c_str(), &st) == 0) dest += "." + RandomHex(6);
  if (::rename(temp.c_str(), dest.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    ::unlink(temp.c_str());
    return IOError(dest + ": cannot quarantine: " + err);
  }
  S3Client client(config_);
  BLZ_RETURN_IF_ERROR(client.DeleteObject(key));
  return dest;
}

Result<std::vector<std::string>> S3BlobStore::ListDigests() const {
  std::vector<std::string> digests;
  const std::string prefix = BlobsPrefix();
  S3Client client(config_);
  std::string token;
  do {
    BLZ_ASSIGN_OR_RETURN(ListObjectsResult page, client.ListObjectsV2(prefix, token));
    for (const ListedObject& o : page.objects) {
      if (o.key.rfind(prefix, 0) != 0) continue;
      std::string rest = o.key.substr(prefix.size());
      const size_t slash = rest.find('/');
      if (slash == std::string::npos) continue;
      rest[slash] = ':';
      if (IsValidOciDigest(rest)) digests.push_back(rest);
    }
    token = page.next_continuation_token;
  } while (!token.empty());
  return digests;
}

Result<uint64_t> S3BlobStore::RemoveIfOlder(std::string_view digest,
                                            Clock::time_point cutoff) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  Result<BlobInfo> info = Stat(digest);
  if (!info.ok()) {
    if (info.status().code() == Code::kNotFound) return uint64_t(0);
    return info.status();
  }
  if (info->modified == Clock::time_point{}) {
    return Unavailable("blob " + std::string(digest) + ": no Last-Modified from " + Describe() +
                       "; kept");
  }
  if (info->modified >= cutoff) {
    return Unavailable("blob " + std::string(digest) + " is younger than the grace period");
  }
  S3Client client(config_);
  BLZ_RETURN_IF_ERROR(client.DeleteObject(key));
  CacheDrop(std::string(digest));
  return info->size;
}

Result<std::string> S3BlobStore::PresignGet(std::string_view digest,
                                            std::chrono::seconds expiry) const {
  BLZ_ASSIGN_OR_RETURN(std::string key, KeyFor(digest));
  S3Client client(config_);
  return client.PresignUrl("GET", key, expiry.count(),
                           std::chrono::duration_cast<std::chrono::seconds>(
                               Clock::now().time_since_epoch())
                               .count());
}

// -- upload parts: objects <prefix>/uploads/<session>/<name>, shared by every replica; the
//    replica that received a part keeps it in <root>/uploads/parts-<session>/ too, so finishing
//    on the same replica (the usual case) downloads nothing. --

std::string S3BlobStore::LocalPartsDir(std::string_view session) const {
  return uploads_dir() + "/parts-" + std::string(session);
}

Status S3BlobStore::PutUploadPart(std::string_view session, std::string_view name,
                                  const std::string& path) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("part", name));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return IOError(path + ": cannot stat: " + std::strerror(errno));
  // Multipart from the threshold on: a single PUT is limited to 5 GiB, a chunk is not.
  BLZ_RETURN_IF_ERROR(
      Upload(UploadsPrefix() + std::string(session) + "/" + std::string(name), path,
             uint64_t(st.st_size)));
  const std::string dir = LocalPartsDir(session);
  const std::string local = dir + "/" + std::string(name);
  if ((::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) ||
      ::rename(path.c_str(), local.c_str()) != 0) {
    ::unlink(path.c_str());  // the local copy is only a shortcut
  }
  return Status::Ok();
}

Status S3BlobStore::ConcatUploadParts(std::string_view session,
                                      const std::vector<std::string>& names,
                                      const std::string& dest,
                                      const UploadSessionFile* /*held*/) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  for (const std::string& name : names) BLZ_RETURN_IF_ERROR(CheckUploadPartId("part", name));
  const std::string dir = LocalPartsDir(session);
  if (names.size() == 1 && ::link((dir + "/" + names[0]).c_str(), dest.c_str()) == 0) {
    return Status::Ok();  // received here: linked, neither copied nor downloaded
  }
  S3Client client(config_);
  int fd = ::open(dest.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return IOError(dest + ": cannot create: " + std::strerror(errno));
  ::close(fd);
  for (const std::string& name : names) {
    const std::string local = dir + "/" + name;
    if (::access(local.c_str(), R_OK) == 0) {
      BLZ_RETURN_IF_ERROR(AppendFileTo(local, dest));
      continue;
    }
    const std::string temp = NewTempPath("part");
    Status got = client.GetObjectToFile(UploadsPrefix() + std::string(session) + "/" + name, temp);
    if (got.code() == Code::kNotFound) {
      got = NotFound("upload part " + std::string(session) + "/" + name + " is missing from " +
                     Describe());
    }
    if (got.ok()) got = AppendFileTo(temp, dest);
    ::unlink(temp.c_str());
    BLZ_RETURN_IF_ERROR(got);
  }
  return Status::Ok();
}

Status S3BlobStore::DeleteUploadParts(std::string_view session) const {
  BLZ_RETURN_IF_ERROR(CheckUploadPartId("session", session));
  S3Client client(config_);
  RemoveAll(LocalPartsDir(session));
  const std::string prefix = UploadsPrefix() + std::string(session) + "/";
  std::string token;
  do {
    BLZ_ASSIGN_OR_RETURN(ListObjectsResult listed, client.ListObjectsV2(prefix, token));
    for (const ListedObject& object : listed.objects) {
      BLZ_RETURN_IF_ERROR(client.DeleteObject(object.key));
    }
    token = listed.next_continuation_token;
  } while (!token.empty());
  return Status::Ok();
}

Result<std::vector<std::string>> S3BlobStore::ListUploadPartSessions() const {
  S3Client client(config_);
  const std::string prefix = UploadsPrefix();
  std::vector<std::string> out;
  std::string token;
  do {
    BLZ_ASSIGN_OR_RETURN(ListObjectsResult listed, client.ListObjectsV2(prefix, token));
    for (const ListedObject& object : listed.objects) {
      std::string rest = object.key.substr(prefix.size());
      std::string session = rest.substr(0, rest.find('/'));
      if (out.empty() || out.back() != session) out.push_back(session);
    }
    token = listed.next_continuation_token;
  } while (!token.empty());
  return out;
}

}  // namespace blz::store::s3
