// Random access to a .blz archive. Interface: patcher/archive_reader.h.
#include "patcher/archive_reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <mutex>
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

// One range of WriteArchive, decoded.
struct DecodedRange {
  std::unique_ptr<uint8_t[]> bytes;
  size_t size = 0;
};

}  // namespace

Status WriteArchive(const ArchiveReader& reader, const std::string& out_path, int threads,
                    ArchiveReadStats* stats) {
  if (threads < 0) {
    return InvalidArgument("write archive: threads must be >= 0 (0 = one per core), got " +
                           std::to_string(threads));
  }
  struct stat st {};
  if (::lstat(out_path.c_str(), &st) == 0) return AlreadyExists(out_path + ": already exists");
  const std::vector<ArchiveRange> ranges = reader.IndependentRanges();
  for (const ArchiveRange& r : ranges) {
    if (r.length > 2 * kChunkBytes) {
      return Internal("archive " + reader.archive_digest() + ": a decoding range of " +
                      std::to_string(r.length) + " bytes");
    }
  }
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(out_path));
  // Cursors (with their buffers) and output buffers are reused across ranges; at most one
  // cursor per worker and (window + threads) buffers exist at a time.
  std::mutex mu;
  std::vector<std::unique_ptr<ArchiveReader::Cursor>> idle;
  std::vector<std::unique_ptr<uint8_t[]>> free_buffers;
  ArchiveReadStats decoded;
  auto take_cursor = [&](const ArchiveRange& r) -> Result<std::unique_ptr<ArchiveReader::Cursor>> {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        std::unique_ptr<ArchiveReader::Cursor> c = std::move(idle.back());
        idle.pop_back();
        BLZ_RETURN_IF_ERROR(c->Reset({r}));
        return c;
      }
    }
    return reader.NewCursor({r});
  };
  std::function<Result<DecodedRange>(size_t)> produce = [&](size_t i) -> Result<DecodedRange> {
    const ArchiveRange& r = ranges[i];
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<ArchiveReader::Cursor> cursor, take_cursor(r));
    DecodedRange d;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!free_buffers.empty()) {
        d.bytes = std::move(free_buffers.back());
        free_buffers.pop_back();
      }
    }
    if (d.bytes == nullptr) d.bytes = std::make_unique_for_overwrite<uint8_t[]>(2 * kChunkBytes);
    Status status;
    while (true) {
      Result<ByteSpan> piece = cursor->Next();
      if (!piece.ok()) {
        status = piece.status();
        break;
      }
      if (piece->empty()) break;
      if (piece->size() > r.length - d.size) {
        status = Internal("archive " + reader.archive_digest() + ": a cursor produced more " +
                          "than its range");
        break;
      }
      std::memcpy(d.bytes.get() + d.size, piece->data(), piece->size());
      d.size += piece->size();
    }
    if (status.ok() && d.size != r.length) {
      status = Internal("archive " + reader.archive_digest() + ": a cursor produced " +
                        std::to_string(d.size) + " of " + std::to_string(r.length) + " bytes");
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok()) {
      // A cursor must not be used after an error: keep it only for its stats.
      decoded += cursor->stats();
      return status;
    }
    idle.push_back(std::move(cursor));
    return d;
  };
  Sha256 sha;
  uint64_t written = 0;
  std::function<Status(size_t, DecodedRange&)> consume = [&](size_t, DecodedRange& d) -> Status {
    const ByteSpan bytes(d.bytes.get(), d.size);
    sha.Update(bytes);
    BLZ_RETURN_IF_ERROR(out.WriteAt(written, bytes));
    written += d.size;
    std::lock_guard<std::mutex> lock(mu);
    free_buffers.push_back(std::move(d.bytes));
    return Status::Ok();
  };
  Status s = RunOrdered<DecodedRange>(ranges.size(), ResolveThreads(threads), produce, consume);
  for (const std::unique_ptr<ArchiveReader::Cursor>& c : idle) decoded += c->stats();
  if (stats != nullptr) *stats = decoded;
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
