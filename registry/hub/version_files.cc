#include "registry/hub/version_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "core/digest.h"
#include "core/unique_fd.h"
#include "patcher/patch_reader.h"

namespace blz::registry::hub {
namespace {

constexpr uint64_t kReadBuffer = 1ull << 20;

std::string Hex(const unsigned char* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Reads exactly `n` bytes at `offset` of `fd` into `out`. kIOError on a short read.
Status PreadAll(int fd, uint64_t offset, uint8_t* out, uint64_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t r = ::pread(fd, out, size_t(std::min<uint64_t>(n, kReadBuffer)), off_t(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return IOError(what + ": read failed at byte " + std::to_string(offset) + ": " +
                     std::strerror(errno));
    }
    if (r == 0) return IOError(what + ": unexpected end of file at byte " + std::to_string(offset));
    out += r;
    offset += uint64_t(r);
    n -= uint64_t(r);
  }
  return Status::Ok();
}

// Streams `segments` of the file at `path` to `sink` in pieces of at most kReadBuffer bytes.
Status ReadSegments(const std::string& path, const std::vector<FileSegment>& segments,
                    const std::string& what, const std::function<Status(ByteSpan)>& sink) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return IOError(what + ": cannot open the archive: " + std::strerror(errno));
  std::vector<uint8_t> buf;
  for (const FileSegment& s : segments) {
    uint64_t done = 0;
    while (done < s.length) {
      const uint64_t n = std::min(kReadBuffer, s.length - done);
      buf.resize(size_t(n));
      BLZ_RETURN_IF_ERROR(PreadAll(fd.get(), s.offset + done, buf.data(), n, what));
      BLZ_RETURN_IF_ERROR(sink(ByteSpan(buf.data(), size_t(n))));
      done += n;
    }
  }
  return Status::Ok();
}

// The parsed header of the archive file at `path` (`digest` names it in errors).
Result<formats::ArchiveHeader> ReadHeader(const std::string& path, const std::string& digest) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return IOError("archive " + digest + ": cannot open: " + std::strerror(errno));
  }
  const off_t end = ::lseek(fd.get(), 0, SEEK_END);
  if (end < 0) return IOError("archive " + digest + ": cannot seek: " + std::strerror(errno));
  const uint64_t size = uint64_t(end);
  if (size < 24) return Corruption("archive " + digest + ": shorter than its fixed header");
  uint8_t fixed[24];
  BLZ_RETURN_IF_ERROR(PreadAll(fd.get(), 0, fixed, 24, "archive " + digest));
  uint64_t header_len = 0;
  std::memcpy(&header_len, fixed + 16, 8);  // little-endian on every platform blz builds for
  if (header_len > formats::kMaxArchiveHeaderBytes) {
    return Corruption("archive " + digest + ": header length " + std::to_string(header_len) +
                      " exceeds the limit");
  }
  uint64_t prefix = 24 + header_len;
  prefix = (prefix + formats::kArchiveAlignment - 1) / formats::kArchiveAlignment *
           formats::kArchiveAlignment;
  prefix = std::min(prefix, size);
  std::vector<uint8_t> bytes(static_cast<size_t>(prefix));
  BLZ_RETURN_IF_ERROR(PreadAll(fd.get(), 0, bytes.data(), prefix, "archive " + digest));
  Result<formats::ArchiveHeader> header =
      formats::ParseArchivePrefix(ByteSpan(bytes.data(), bytes.size()), size);
  if (!header.ok()) {
    return Status(header.status().code(), "archive " + digest + ": " + header.status().message());
  }
  return header;
}

const formats::ArchiveFile* FindFile(const formats::ArchiveHeader& header,
                                     std::string_view path) {
  auto it = std::lower_bound(
      header.files.begin(), header.files.end(), path,
      [](const formats::ArchiveFile& f, std::string_view p) { return f.path < p; });
  if (it == header.files.end() || it->path != path) return nullptr;
  return &*it;
}

VersionFile FromRecord(store::VersionFileRecord r) {
  return VersionFile{std::move(r.path), r.size, std::move(r.sha256), std::move(r.git_oid), r.lfs};
}

// The bytes of a file's range decoded from the archive's patch(es), chunk by chunk. A range
// that is the whole file is hashed as it goes and checked against the file's SHA-256 before its
// last bytes are handed out.
class PatchRangeProducer : public BodyProducer {
 public:
  PatchRangeProducer(std::unique_ptr<patcher::ArchiveReader::Cursor> cursor, uint64_t length,
                     std::string expect_sha256, std::string what)
      : cursor_(std::move(cursor)),
        length_(length),
        expect_(std::move(expect_sha256)),
        what_(std::move(what)) {}

  Result<ByteSpan> Next() override {
    BLZ_ASSIGN_OR_RETURN(ByteSpan bytes, cursor_->Next());
    if (bytes.empty() || expect_.empty()) return bytes;
    sha_.Update(bytes);
    done_ += bytes.size();
    if (done_ == length_) {
      const std::string got = sha_.FinishHex();
      if (got != expect_) {
        return DigestMismatch(what_ + ": decoded from its stored patch, its bytes have SHA-256 " +
                              got + ", the archive header says " + expect_);
      }
    }
    return bytes;
  }

 private:
  std::unique_ptr<patcher::ArchiveReader::Cursor> cursor_;
  uint64_t length_ = 0, done_ = 0;
  std::string expect_;  // "" = not the whole file: no check
  std::string what_;
  Sha256 sha_;
};

// Hands the bytes of `slice` to `sink` in order (pieces of at most kReadBuffer bytes from a
// file, of at most one chunk from a producer).
Status DrainSlice(const FileSlice& slice, const std::string& what,
                  const std::function<Status(ByteSpan)>& sink) {
  if (slice.producer == nullptr) {
    return ReadSegments(slice.archive_path, slice.segments, what, sink);
  }
  uint64_t done = 0;
  while (true) {
    BLZ_ASSIGN_OR_RETURN(ByteSpan bytes, slice.producer->Next());
    if (bytes.empty()) break;
    done += bytes.size();
    BLZ_RETURN_IF_ERROR(sink(bytes));
  }
  if (done != slice.length) {
    return Internal(what + ": produced " + std::to_string(done) + " bytes, expected " +
                    std::to_string(slice.length));
  }
  return Status::Ok();
}

}  // namespace

bool IsLfsPath(std::string_view path) {
  const size_t slash = path.rfind('/');
  std::string name(slash == std::string_view::npos ? path : path.substr(slash + 1));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  static const char* const kExtensions[] = {
      ".safetensors", ".gguf", ".bin",  ".pt",    ".pth",    ".ckpt", ".h5",      ".onnx",
      ".msgpack",     ".model", ".npy", ".npz",   ".pkl",    ".pickle", ".tflite", ".ot",
      ".pb",          ".parquet", ".arrow", ".joblib", ".mlmodel", ".ftz", ".wasm",  ".7z",
      ".bz2",         ".gz",   ".rar",  ".tar",   ".tgz",    ".xz",   ".zip",     ".zst"};
  for (const char* ext : kExtensions) {
    if (EndsWith(name, ext)) return true;
  }
  return name.find("tfevents") != std::string::npos;
}

std::string LfsPointer(std::string_view sha256_hex, uint64_t size) {
  return "version https://git-lfs.github.com/spec/v1\noid sha256:" + std::string(sha256_hex) +
         "\nsize " + std::to_string(size) + "\n";
}

struct GitBlobHasher::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

GitBlobHasher::GitBlobHasher(uint64_t size) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(impl_->ctx, EVP_sha1(), nullptr);
  const std::string head = "blob " + std::to_string(size);
  EVP_DigestUpdate(impl_->ctx, head.data(), head.size() + 1);  // with the NUL
}

GitBlobHasher::~GitBlobHasher() { EVP_MD_CTX_free(impl_->ctx); }

void GitBlobHasher::Update(ByteSpan data) {
  EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}

std::string GitBlobHasher::FinishHex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(impl_->ctx, md, &n);
  return Hex(md, n);
}

std::string GitBlobId(std::string_view bytes) {
  GitBlobHasher h(bytes.size());
  h.Update(AsBytes(bytes));
  return h.FinishHex();
}

Result<std::vector<FileSegment>> MapFileRange(const formats::ArchiveHeader& header,
                                              const formats::ArchiveFile& file, uint64_t offset,
                                              uint64_t length) {
  if (offset > file.size || length > file.size - offset) {
    return InvalidArgument("bytes " + std::to_string(offset) + "+" + std::to_string(length) +
                           " are outside " + file.path + " (" + std::to_string(file.size) +
                           " bytes)");
  }
  std::vector<FileSegment> out;
  uint64_t pos = 0;  // offset in the file of the current piece
  const uint64_t end = offset + length;
  for (const formats::ArchivePiece& piece : file.pieces) {
    if (pos >= end) break;
    uint64_t at = 0, len = 0;
    if (piece.kind == formats::ArchivePiece::Kind::kRaw) {
      if (piece.index >= header.raws.size()) return Corruption(file.path + ": bad raw index");
      at = header.raws[piece.index].offset;
      len = header.raws[piece.index].length;
    } else {
      if (piece.index >= header.tensors.size()) return Corruption(file.path + ": bad tensor index");
      at = header.tensors[piece.index].offset;
      len = header.tensors[piece.index].length;
    }
    const uint64_t piece_end = pos + len;
    if (piece_end > offset && len > 0) {
      const uint64_t from = std::max(offset, pos);
      const uint64_t to = std::min(end, piece_end);
      const uint64_t abs = header.data_start + at + (from - pos);
      if (!out.empty() && out.back().offset + out.back().length == abs) {
        out.back().length += to - from;  // adjacent pieces: one segment
      } else {
        out.push_back(FileSegment{abs, to - from});
      }
    }
    pos = piece_end;
  }
  uint64_t total = 0;
  for (const FileSegment& s : out) total += s.length;
  if (total != length) {
    return Corruption(file.path + ": its pieces hold fewer bytes than its size");
  }
  return out;
}

VersionFiles::VersionFiles(ArchiveStorage* storage, store::MetadataDb* db)
    : storage_(storage), db_(db) {}

void SetResponseBody(FileSlice slice, Response* res) {
  res->file_length = slice.length;
  if (slice.producer != nullptr) {
    res->file_path.clear();
    res->file_segments.clear();
    res->producer = std::move(slice.producer);
    return;
  }
  res->file_path = std::move(slice.archive_path);
  for (const FileSegment& s : slice.segments) res->file_segments.push_back({s.offset, s.length});
  res->file_offset = res->file_segments.empty() ? 0 : res->file_segments.front().offset;
}

Result<VersionFiles::Opened> VersionFiles::Open(const std::string& archive_digest) {
  // The archive file if there is one: the raw blob, or a copy rebuilt earlier. Never a rebuild.
  BLZ_ASSIGN_OR_RETURN(std::optional<store::BlobInfo> blob,
                       storage_->FileIfStored(archive_digest));
  Cached cached;
  {
    std::lock_guard lock(mu_);
    for (auto it = headers_.begin(); it != headers_.end(); ++it) {
      if (it->digest == archive_digest) {
        headers_.splice(headers_.begin(), headers_, it);
        cached = *it;
        break;
      }
    }
  }
  if (blob.has_value()) {
    if (cached.header != nullptr) return Opened{blob->path, cached.header, nullptr};
    BLZ_ASSIGN_OR_RETURN(formats::ArchiveHeader header, ReadHeader(blob->path, archive_digest));
    cached.header = std::make_shared<const formats::ArchiveHeader>(std::move(header));
  } else if (cached.patch == nullptr) {
    // Only patches are stored (a full patch, or a chain): read them in place.
    Result<std::shared_ptr<const patcher::ArchiveReader>> reader =
        storage_->OpenReader(archive_digest);
    if (!reader.ok()) {
      // A server without patch functions, or a chain whose parts vanished meanwhile: File()
      // knows how to rebuild what there is.
      const Code code = reader.status().code();
      if (code != Code::kNotFound && code != Code::kUnsupported) return reader.status();
      BLZ_ASSIGN_OR_RETURN(store::BlobInfo file, storage_->File(archive_digest));
      if (cached.header == nullptr) {
        BLZ_ASSIGN_OR_RETURN(formats::ArchiveHeader header, ReadHeader(file.path, archive_digest));
        cached.header = std::make_shared<const formats::ArchiveHeader>(std::move(header));
      }
      blob = std::move(file);
    } else {
      cached.patch = std::move(*reader);
      // The header lives as long as the reader that holds it.
      cached.header = std::shared_ptr<const formats::ArchiveHeader>(cached.patch,
                                                                    &cached.patch->header());
    }
  }
  cached.digest = archive_digest;
  {
    std::lock_guard lock(mu_);
    bool found = false;
    for (Cached& c : headers_) {
      if (c.digest == archive_digest) {
        c = cached;
        found = true;
        break;
      }
    }
    if (!found) headers_.push_front(cached);
    while (headers_.size() > kHeaderCacheEntries) headers_.pop_back();
  }
  if (blob.has_value()) return Opened{blob->path, cached.header, nullptr};
  return Opened{"", cached.header, cached.patch};
}

Result<FileSlice> VersionFiles::SliceOf(const Opened& opened, const std::string& archive_digest,
                                        const formats::ArchiveFile& file, uint64_t offset,
                                        uint64_t length) {
  BLZ_ASSIGN_OR_RETURN(std::vector<FileSegment> segments,
                       MapFileRange(*opened.header, file, offset, length));
  if (opened.patch == nullptr) return FileSlice{opened.path, std::move(segments), length, nullptr};
  std::vector<patcher::ArchiveRange> ranges;
  ranges.reserve(segments.size());
  for (const FileSegment& s : segments) ranges.push_back({s.offset, s.length});
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<patcher::ArchiveReader::Cursor> cursor,
                       opened.patch->NewCursor(std::move(ranges)));
  const bool whole = offset == 0 && length == file.size;
  auto producer = std::make_shared<PatchRangeProducer>(
      std::move(cursor), length, whole ? file.sha256 : std::string(),
      "file '" + file.path + "' of archive " + archive_digest);
  return FileSlice{"", std::move(segments), length, std::move(producer)};
}

Result<std::vector<VersionFile>> VersionFiles::Compute(const std::string& archive_digest) {
  BLZ_ASSIGN_OR_RETURN(Opened opened, Open(archive_digest));
  std::vector<VersionFile> out;
  for (const formats::ArchiveFile& f : opened.header->files) {
    VersionFile v;
    v.path = f.path;
    v.size = f.size;
    v.sha256 = f.sha256;
    v.lfs = IsLfsPath(f.path) || f.size >= kLfsThresholdBytes;
    if (v.lfs) {
      v.git_oid = GitBlobId(LfsPointer(f.sha256, f.size));
    } else {
      BLZ_ASSIGN_OR_RETURN(FileSlice slice, SliceOf(opened, archive_digest, f, 0, f.size));
      GitBlobHasher hasher(f.size);
      BLZ_RETURN_IF_ERROR(DrainSlice(slice, "archive " + archive_digest, [&](ByteSpan b) {
        hasher.Update(b);
        return Status::Ok();
      }));
      v.git_oid = hasher.FinishHex();
    }
    out.push_back(std::move(v));
  }
  return out;
}

Result<std::vector<VersionFile>> VersionFiles::List(const std::string& archive_digest) {
  BLZ_ASSIGN_OR_RETURN(std::vector<store::VersionFileRecord> rows,
                       db_->ListVersionFiles(archive_digest));
  if (!rows.empty()) {
    std::vector<VersionFile> out;
    out.reserve(rows.size());
    for (store::VersionFileRecord& r : rows) out.push_back(FromRecord(std::move(r)));
    return out;
  }
  BLZ_ASSIGN_OR_RETURN(std::vector<VersionFile> files, Compute(archive_digest));
  std::vector<store::VersionFileRecord> records;
  records.reserve(files.size());
  for (const VersionFile& f : files) {
    records.push_back(store::VersionFileRecord{f.path, f.size, f.sha256, f.git_oid, f.lfs});
  }
  BLZ_RETURN_IF_ERROR(db_->RecordVersionFiles(archive_digest, records));
  return files;
}

Result<VersionFile> VersionFiles::Find(const std::string& archive_digest, std::string_view path) {
  BLZ_ASSIGN_OR_RETURN(std::vector<VersionFile> files, List(archive_digest));
  auto it = std::lower_bound(files.begin(), files.end(), path,
                             [](const VersionFile& f, std::string_view p) { return f.path < p; });
  if (it == files.end() || it->path != path) {
    return NotFound("no file '" + std::string(path) + "' in archive " + archive_digest);
  }
  return std::move(*it);
}

Result<FileSlice> VersionFiles::Slice(const std::string& archive_digest, std::string_view path,
                                      uint64_t offset, uint64_t length) {
  BLZ_ASSIGN_OR_RETURN(Opened opened, Open(archive_digest));
  const formats::ArchiveFile* file = FindFile(*opened.header, path);
  if (file == nullptr) {
    return NotFound("no file '" + std::string(path) + "' in archive " + archive_digest);
  }
  return SliceOf(opened, archive_digest, *file, offset, length);
}

Status VersionFiles::Read(const std::string& archive_digest, std::string_view path,
                          uint64_t offset, uint64_t length,
                          const std::function<Status(ByteSpan)>& sink) {
  BLZ_ASSIGN_OR_RETURN(FileSlice slice, Slice(archive_digest, path, offset, length));
  return DrainSlice(slice, "archive " + archive_digest, sink);
}

}  // namespace blz::registry::hub
