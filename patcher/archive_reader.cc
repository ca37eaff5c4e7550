// Random access to a .blz archive. Interface: patcher/archive_reader.h.
#include "patcher/archive_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/ordered_pipeline.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher {

Status ArchiveReader::CheckRanges(const std::vector<ArchiveRange>& ranges) const {
  for (const ArchiveRange& range : ranges) {
    uint64_t end = 0;
    if (!CheckedAdd(range.offset, range.length, &end) || end > archive_size()) {
      return InvalidArgument("bytes " + std::to_string(range.offset) + "+" +
                             std::to_string(range.length) + " are outside archive " +
                             archive_digest() + " (" + std::to_string(archive_size()) +
                             " bytes)");
    }
  }
  return Status::Ok();
}

Status ArchiveReader::Read(uint64_t offset, uint64_t length,
                           const std::function<Status(ByteSpan)>& sink,
                           ArchiveReadStats* stats) const {
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<Cursor> cursor,
                       NewCursor({ArchiveRange{offset, length}}));
  Status result = Status::Ok();
  while (true) {
    Result<ByteSpan> bytes = cursor->Next();
    if (!bytes.ok()) {
      result = bytes.status();
      break;
    }
    if (bytes->empty()) break;
    result = sink(*bytes);
    if (!result.ok()) break;
  }
  if (stats != nullptr) *stats = cursor->stats();
  return result;
}

std::vector<ArchiveRange> ArchiveReader::IndependentRanges() const {
  std::vector<ArchiveRange> out;
  for (uint64_t at = 0; at < archive_size(); at += kChunkBytes) {
    out.push_back({at, std::min<uint64_t>(kChunkBytes, archive_size() - at)});
  }
  return out;
}

namespace {

// One range of the archive, decoded (into a buffer of 2 x kChunkBytes).
struct DecodedRange {
  std::unique_ptr<uint8_t[]> bytes;
  size_t size = 0;
};

// Ranges of an archive whose cursors decode them independently (IndependentRanges) inside
// [offset, offset + length).
std::vector<ArchiveRange> JobsFor(const ArchiveReader& reader, uint64_t offset, uint64_t length) {
  std::vector<ArchiveRange> jobs;
  const uint64_t end = offset + length;  // inside the archive (checked by the caller)
  for (const ArchiveRange& r : reader.IndependentRanges()) {
    const uint64_t from = std::max(r.offset, offset);
    const uint64_t to = std::min(r.offset + r.length, end);
    if (from < to) jobs.push_back({from, to - from});
  }
  return jobs;
}

}  // namespace

CursorPool::CursorPool(std::shared_ptr<const ArchiveReader> reader)
    : reader_(std::move(reader)) {}

CursorPool::~CursorPool() = default;

Status CursorPool::DecodeInto(const ArchiveRange& r, uint8_t* out) const {
  std::unique_ptr<ArchiveReader::Cursor> cursor;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      cursor = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (cursor != nullptr) {
    BLZ_RETURN_IF_ERROR(cursor->Reset({r}));
  } else {
    BLZ_ASSIGN_OR_RETURN(cursor, reader_->NewCursor({r}));
  }
  uint64_t size = 0;
  Status status;
  while (true) {
    Result<ByteSpan> piece = cursor->Next();
    if (!piece.ok()) {
      status = piece.status();
      break;
    }
    if (piece->empty()) break;
    if (piece->size() > r.length - size) {
      status = Internal("archive " + reader_->archive_digest() +
                        ": a cursor produced more than its range");
      break;
    }
    std::memcpy(out + size, piece->data(), piece->size());
    size += piece->size();
  }
  if (status.ok() && size != r.length) {
    status = Internal("archive " + reader_->archive_digest() + ": a cursor produced " +
                      std::to_string(size) + " of " + std::to_string(r.length) + " bytes");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!status.ok()) {
    dropped_ += cursor->stats();  // a cursor is not used after an error
    return status;
  }
  idle_.push_back(std::move(cursor));
  return Status::Ok();
}

ArchiveReadStats CursorPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ArchiveReadStats all = dropped_;
  for (const std::unique_ptr<ArchiveReader::Cursor>& c : idle_) all += c->stats();
  return all;
}

// Decodes ranges of at most 2 x kChunkBytes on any thread (a CursorPool) into buffers reused
// across ranges, so at most one cursor per thread and one buffer per range in flight exist.
class RangeDecoder {
 public:
  explicit RangeDecoder(std::shared_ptr<const ArchiveReader> reader) : pool_(std::move(reader)) {}

  Result<DecodedRange> Decode(const ArchiveRange& r) {
    if (r.length > 2 * kChunkBytes) {
      return Internal("archive " + pool_.reader().archive_digest() +
                      ": a decoding range of " + std::to_string(r.length) + " bytes");
    }
    DecodedRange d;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        d.bytes = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (d.bytes == nullptr) d.bytes = std::make_unique_for_overwrite<uint8_t[]>(2 * kChunkBytes);
    Status status = pool_.DecodeInto(r, d.bytes.get());
    if (!status.ok()) {
      Recycle(std::move(d.bytes));
      return status;
    }
    d.size = r.length;
    return d;
  }

  void Recycle(std::unique_ptr<uint8_t[]> bytes) {
    if (bytes == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(bytes));
  }

  // What every cursor decoded (call once no range is being decoded).
  ArchiveReadStats stats() const { return pool_.stats(); }

 private:
  CursorPool pool_;
  std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> free_;
};

namespace {

// The whole archive `reader` reads, decoded through an ArchiveStream on `threads` workers,
// handed to `sink` in order; stops at the first error (the stream's or the sink's).
Status DrainArchive(const ArchiveReader& reader, int threads, ArchiveReadStats* stats,
                    const std::function<Status(ByteSpan)>& sink) {
  BLZ_ASSIGN_OR_RETURN(std::unique_ptr<ArchiveStream> stream,
                       ArchiveStream::Start(reader.shared_from_this(), 0, reader.archive_size(),
                                            threads));
  Status s;
  while (true) {
    Result<ByteSpan> bytes = stream->Next();
    if (!bytes.ok()) {
      s = bytes.status();
      break;
    }
    if (bytes->empty()) break;
    s = sink(*bytes);
    if (!s.ok()) break;
  }
  if (stats != nullptr) *stats = stream->stats();
  return s;
}

}  // namespace

Status WriteArchive(const ArchiveReader& reader, const std::string& out_path, int threads,
                    ArchiveReadStats* stats) {
  struct stat st {};
  if (::lstat(out_path.c_str(), &st) == 0) return AlreadyExists(out_path + ": already exists");
  if (threads < 0) {
    return InvalidArgument("archive stream: threads must be >= 0 (0 = one per core), got " +
                           std::to_string(threads));
  }
  // The same decoding pipeline as a streamed download, drained into the file.
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(out_path));
  Sha256 sha;
  Status s = DrainArchive(reader, threads, stats, [&](ByteSpan bytes) {
    sha.Update(bytes);
    return out.Append(bytes);
  });
  if (!s.ok()) {
    out.Abandon();
    return s;
  }
  const std::string got = MakeDigest(sha.FinishHex());
  if (got != reader.archive_digest()) {
    out.Abandon();
    return DigestMismatch("archive " + reader.archive_digest() + ": its stored form rebuilds " +
                          "bytes with digest " + got);
  }
  return out.Commit(/*no_replace=*/true);
}

Status VerifyReader(const ArchiveReader& reader, const std::string& archive_path, int threads,
                    ArchiveReadStats* stats) {
  MappedFile file;
  if (!archive_path.empty()) {
    BLZ_ASSIGN_OR_RETURN(file, MappedFile::Open(archive_path));
    if (file.size() != reader.archive_size()) {
      return DigestMismatch("archive " + reader.archive_digest() + ": its stored form has " +
                            std::to_string(reader.archive_size()) + " bytes, " + archive_path +
                            " " + std::to_string(file.size()));
    }
    file.AdviseSequential();
  }
  Sha256 sha;
  uint64_t at = 0;
  BLZ_RETURN_IF_ERROR(DrainArchive(reader, threads, stats, [&](ByteSpan bytes) -> Status {
    if (archive_path.empty()) {
      sha.Update(bytes);
    } else {
      if (std::memcmp(bytes.data(), file.data() + at, bytes.size()) != 0) {
        uint64_t k = 0;
        while (bytes[k] == file.data()[at + k]) ++k;
        return DigestMismatch("archive " + reader.archive_digest() +
                              ": its stored form differs from " + archive_path +
                              " at byte offset " + std::to_string(at + k));
      }
      file.DropRange(at, bytes.size());
    }
    at += bytes.size();
    return Status::Ok();
  }));
  if (archive_path.empty()) {
    const std::string got = MakeDigest(sha.FinishHex());
    if (got != reader.archive_digest()) {
      return DigestMismatch("archive " + reader.archive_digest() +
                            ": its stored form rebuilds bytes with digest " + got);
    }
  }
  return Status::Ok();
}

// ---- ArchiveStream -----------------------------------------------------------------------------

Result<std::unique_ptr<ArchiveStream>> ArchiveStream::Start(
    std::shared_ptr<const ArchiveReader> reader, uint64_t offset, uint64_t length, int threads) {
  if (reader == nullptr) return InvalidArgument("archive stream: no reader");
  if (threads < 0) {
    return InvalidArgument("archive stream: threads must be >= 0 (0 = one per core), got " +
                           std::to_string(threads));
  }
  uint64_t end = 0;
  if (!CheckedAdd(offset, length, &end) || end > reader->archive_size()) {
    return InvalidArgument("bytes " + std::to_string(offset) + "+" + std::to_string(length) +
                           " are outside archive " + reader->archive_digest() + " (" +
                           std::to_string(reader->archive_size()) + " bytes)");
  }
  std::unique_ptr<ArchiveStream> s(new ArchiveStream());
  s->decoder_ = std::make_unique<RangeDecoder>(reader);
  s->jobs_ = JobsFor(*reader, offset, length);
  const unsigned n = ResolveThreads(threads);
  ArchiveStream* self = s.get();
  try {
    s->driver_ = std::thread([self, n] { self->Drive(n); });
  } catch (const std::system_error& e) {
    return Internal(std::string("archive stream: cannot start a thread: ") + e.what());
  }
  return s;
}

void ArchiveStream::Drive(unsigned threads) {
  std::function<Result<DecodedRange>(size_t)> produce = [this](size_t i) {
    return decoder_->Decode(jobs_[i]);
  };
  std::function<Status(size_t, DecodedRange&)> consume = [this](size_t,
                                                                DecodedRange& d) -> Status {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return cancelled_ || ready_.size() < kAhead; });
    if (cancelled_) return Internal("archive stream: cancelled");
    ready_.push_back(Piece{std::move(d.bytes), d.size});
    cv_.notify_all();
    return Status::Ok();
  };
  Status s = RunOrdered<DecodedRange>(jobs_.size(), threads, produce, consume);
  std::lock_guard<std::mutex> lock(mu_);
  status_ = s;
  done_ = true;
  cv_.notify_all();
}

ArchiveStream::~ArchiveStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
  if (driver_.joinable()) driver_.join();
}

Result<ByteSpan> ArchiveStream::Next() {
  decoder_->Recycle(std::move(current_.bytes));
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return !ready_.empty() || done_; });
  if (!ready_.empty()) {
    current_ = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return ByteSpan(current_.bytes.get(), current_.size);
  }
  if (!status_.ok()) return status_;
  return ByteSpan();
}

ArchiveReadStats ArchiveStream::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? decoder_->stats() : ArchiveReadStats{};
}

// Spans of the mapping, at most kChunkBytes each.
class ArchiveFileReader::FileCursor final : public ArchiveReader::Cursor {
 public:
  FileCursor(std::shared_ptr<const ArchiveFileReader> reader, std::vector<ArchiveRange> ranges)
      : reader_(std::move(reader)), ranges_(std::move(ranges)) {}

  Result<ByteSpan> Next() override {
    while (range_ < ranges_.size() && done_ == ranges_[range_].length) {
      ++range_;
      done_ = 0;
    }
    if (range_ == ranges_.size()) return ByteSpan();
    const ArchiveRange& r = ranges_[range_];
    const uint64_t n = std::min<uint64_t>(r.length - done_, kChunkBytes);
    const ByteSpan out = reader_->file_.bytes().subspan(r.offset + done_, size_t(n));
    done_ += n;
    return out;
  }
  Status Reset(std::vector<ArchiveRange> ranges) override {
    BLZ_RETURN_IF_ERROR(reader_->CheckRanges(ranges));
    ranges_ = std::move(ranges);
    range_ = 0;
    done_ = 0;
    return Status::Ok();
  }
  ArchiveReadStats stats() const override { return {}; }

 private:
  std::shared_ptr<const ArchiveFileReader> reader_;
  std::vector<ArchiveRange> ranges_;
  size_t range_ = 0;
  uint64_t done_ = 0;
};

Result<std::shared_ptr<const ArchiveFileReader>> ArchiveFileReader::Open(const std::string& path,
                                                                         std::string digest) {
  std::shared_ptr<ArchiveFileReader> r(new ArchiveFileReader());
  BLZ_ASSIGN_OR_RETURN(r->file_, MappedFile::Open(path));
  Result<formats::ArchiveHeader> header = formats::ParseArchivePrefix(r->file_.bytes(),
                                                                      r->file_.size());
  if (!header.ok()) return header.status().WithContext(path);
  r->header_ = std::move(*header);
  r->digest_ = std::move(digest);
  return std::shared_ptr<const ArchiveFileReader>(std::move(r));
}

Result<std::unique_ptr<ArchiveReader::Cursor>> ArchiveFileReader::NewCursor(
    std::vector<ArchiveRange> ranges) const {
  BLZ_RETURN_IF_ERROR(CheckRanges(ranges));
  return std::unique_ptr<Cursor>(new FileCursor(
      std::static_pointer_cast<const ArchiveFileReader>(shared_from_this()), std::move(ranges)));
}

}  // namespace blz::patcher
