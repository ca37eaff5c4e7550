// Random access to a .blz archive. Interface: patcher/archive_reader.h.
#include "patcher/archive_reader.h"

#include <algorithm>
#include <utility>

#include "core/checked.h"
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
