// Random access to the archive a full patch holds. Interface: patcher/full_patch_reader.h.
#include "patcher/full_patch_reader.h"

#include <algorithm>
#include <utility>

#include "core/checked.h"
#include "core/digest.h"
#include "patcher/patch_format.h"

namespace blz::patcher {
namespace {

using formats::ArchiveHeader;
using formats::ArchivePiece;
using Kind = formats::ArchivePiece::Kind;

// Zero bytes for the padding between pieces (at most 63 bytes each in a valid archive).
constexpr size_t kZeroBytes = 64 * 1024;
const uint8_t kZeros[kZeroBytes] = {};

std::vector<ArchivePiece> DataOrder(const ArchiveHeader& h) {
  std::vector<ArchivePiece> out;
  out.reserve(h.raws.size() + h.tensors.size());
  for (const auto& f : h.files) out.insert(out.end(), f.pieces.begin(), f.pieces.end());
  return out;
}

std::string DescribePiece(const ArchiveHeader& h, const ArchivePiece& p) {
  if (p.kind == Kind::kRaw) {
    return "raw piece of file '" + h.files[h.raws[p.index].file_index].path + "'";
  }
  const auto& t = h.tensors[p.index];
  return "tensor '" + t.name + "' (file '" + h.files[t.file_index].path + "')";
}

}  // namespace

std::string FullPatchReader::Describe(const Chunk& c) const {
  const std::string where =
      c.piece < 0 ? "archive header" : DescribePiece(header_, order_[size_t(c.piece)]);
  return path_ + ": " + where + " chunk " + std::to_string(c.index) +
         " (payload at byte offset " + std::to_string(c.payload_offset) + ")";
}

Result<std::shared_ptr<const FullPatchReader>> FullPatchReader::Open(
    const std::string& patch_path) {
  std::shared_ptr<FullPatchReader> r(new FullPatchReader());
  r->path_ = patch_path;
  BLZ_ASSIGN_OR_RETURN(r->file_, MappedFile::Open(patch_path));
  const ByteSpan bytes = r->file_.bytes();
  // The patch header: sizes, codecs, payload offsets back to back ending at the end of the
  // file (so every payload lies inside the mapping), overflow-checked.
  BLZ_ASSIGN_OR_RETURN(internal::PatchHeader ph,
                       internal::ParsePatch(bytes, r->file_.size(), patch_path));
  if (ph.has_base) {
    return InvalidArgument(patch_path + ": not a full patch: it needs base archive " +
                           ph.base_digest + " (random access reads full patches only)");
  }
  r->archive_digest_ = ph.target_digest;

  // The archive's prefix: prefix_length <= kMaxPrefixBytes (ParsePatch), decoded and checked
  // chunk by chunk, then parsed; it is dropped once the header is known (Cursor decodes its
  // chunks again when a range asks for them).
  std::vector<uint8_t> prefix(size_t(ph.prefix_length));
  for (size_t j = 0; j < ph.prefix_chunks.size(); ++j) {
    const internal::PatchChunk& c = ph.prefix_chunks[j];
    Chunk ref{j * kChunkBytes, c.size, ph.payload_start + c.offset, c.length, c.xxh3, -1,
              uint32_t(j), 1, c.codec};
    r->chunks_.push_back(ref);
    if (CodecNeedsBase(c.codec)) {
      return Corruption(patch_path + ": prefix.chunks[" + std::to_string(j) + "]: codec " +
                        std::string(CodecName(c.codec)) + " needs a base, a full patch has none");
    }
    MutableByteSpan out(prefix.data() + j * kChunkBytes, size_t(c.size));
    Status s = DecodeChunk(c.codec, ByteSpan(), bytes.subspan(ref.payload_offset, c.length), 1,
                           out);
    if (!s.ok()) return s.WithContext(r->Describe(ref));
    if (Xxh3_64(out) != c.xxh3) return Corruption(r->Describe(ref) + ": xxh3 mismatch");
  }
  Result<ArchiveHeader> header = formats::ParseArchivePrefix(prefix, ph.target_size);
  if (!header.ok()) return header.status().WithContext(patch_path + ": archive header");
  r->header_ = std::move(*header);
  const ArchiveHeader& h = r->header_;
  if (h.data_start != ph.prefix_length || h.total_size != ph.target_size) {
    return Corruption(patch_path + ": the archive header puts the data at " +
                      std::to_string(h.data_start) + " and the end at " +
                      std::to_string(h.total_size) + ", the patch says " +
                      std::to_string(ph.prefix_length) + " and " + std::to_string(ph.target_size));
  }
  prefix.clear();
  prefix.shrink_to_fit();

  // The pieces: exactly the archive's, in data order, each covered by its chunks.
  r->order_ = DataOrder(h);
  if (ph.pieces.size() != r->order_.size()) {
    return Corruption(patch_path + ": the patch lists " + std::to_string(ph.pieces.size()) +
                      " pieces, the archive has " + std::to_string(r->order_.size()));
  }
  uint64_t end = h.data_start;  // where the previous chunk ended
  for (size_t i = 0; i < ph.pieces.size(); ++i) {
    const internal::PatchPiece& p = ph.pieces[i];
    const ArchivePiece& want = r->order_[i];
    const std::string f = patch_path + ": pieces[" + std::to_string(i) + "]";
    if (p.kind != want.kind || p.index != want.index) {
      return Corruption(f + " is not the archive's piece " + std::to_string(i) +
                        " in data-section order");
    }
    // Indices and offsets are valid: ParseArchivePrefix checked the layout (pieces in order,
    // inside the file).
    uint64_t rel = 0, length = 0;
    uint32_t elem = 1;
    if (p.kind == Kind::kRaw) {
      rel = h.raws[p.index].offset;
      length = h.raws[p.index].length;
    } else {
      rel = h.tensors[p.index].offset;
      length = h.tensors[p.index].length;
      elem = formats::DTypeSize(h.tensors[p.index].dtype);
    }
    uint64_t at = 0, covered = 0, piece_end = 0;
    if (!CheckedAdd(h.data_start, rel, &at) || !CheckedAdd(at, length, &piece_end) ||
        piece_end > h.total_size || at < end) {
      return Corruption(f + " (" + DescribePiece(h, want) + "): lies outside the archive");
    }
    const uint64_t want_chunks = length / kChunkBytes + (length % kChunkBytes != 0);
    if (p.chunks.size() != want_chunks) {
      return Corruption(f + " (" + DescribePiece(h, want) + "): " +
                        std::to_string(p.chunks.size()) + " chunks, a piece of " +
                        std::to_string(length) + " bytes has " + std::to_string(want_chunks));
    }
    for (size_t j = 0; j < p.chunks.size(); ++j) {
      const internal::PatchChunk& c = p.chunks[j];
      if (CodecNeedsBase(c.codec)) {
        return Corruption(f + ".chunks[" + std::to_string(j) + "]: codec " +
                          std::string(CodecName(c.codec)) + " needs a base, a full patch has none");
      }
      // Every chunk but the last is kChunkBytes (ParsePatch), so this cannot overflow.
      r->chunks_.push_back(Chunk{at + covered, c.size, ph.payload_start + c.offset, c.length,
                                 c.xxh3, int64_t(i), uint32_t(j), elem, c.codec});
      covered += c.size;
    }
    if (covered != length) {
      return Corruption(f + " (" + DescribePiece(h, want) + "): chunks cover " +
                        std::to_string(covered) + " bytes, the piece has " +
                        std::to_string(length));
    }
    end = piece_end;
  }
  return std::shared_ptr<const FullPatchReader>(std::move(r));
}

Result<std::unique_ptr<FullPatchReader::Cursor>> FullPatchReader::NewCursor(
    std::vector<ArchiveRange> ranges) const {
  for (const ArchiveRange& range : ranges) {
    uint64_t end = 0;
    if (!CheckedAdd(range.offset, range.length, &end) || end > archive_size()) {
      return InvalidArgument("bytes " + std::to_string(range.offset) + "+" +
                             std::to_string(range.length) + " are outside archive " +
                             archive_digest_ + " (" + std::to_string(archive_size()) +
                             " bytes)");
    }
  }
  return std::unique_ptr<Cursor>(new Cursor(shared_from_this(), std::move(ranges)));
}

FullPatchReader::Cursor::Cursor(std::shared_ptr<const FullPatchReader> reader,
                                std::vector<ArchiveRange> ranges)
    : reader_(std::move(reader)), ranges_(std::move(ranges)) {}

Status FullPatchReader::Cursor::Decode(size_t index) {
  const Chunk& c = reader_->chunks_[index];
  if (buf_ == nullptr) buf_ = std::make_unique_for_overwrite<uint8_t[]>(kChunkBytes);
  decoded_ = SIZE_MAX;  // until it checked out
  MutableByteSpan out(buf_.get(), size_t(c.size));  // size <= kChunkBytes (ParsePatch)
  Status s = DecodeChunk(c.codec, ByteSpan(),
                         reader_->file_.bytes().subspan(c.payload_offset, c.payload_length),
                         c.elem_size, out);
  if (!s.ok()) return s.WithContext(reader_->Describe(c));
  const uint64_t got = Xxh3_64(out);
  if (got != c.xxh3) {
    return Corruption(reader_->Describe(c) + ": decoded bytes have xxh3 " + Hex64(got) +
                      ", expected " + Hex64(c.xxh3));
  }
  decoded_ = index;
  ++stats_.chunks_decoded;
  stats_.bytes_decoded += c.size;
  stats_.payload_bytes += c.payload_length;
  return Status::Ok();
}

Result<ByteSpan> FullPatchReader::Cursor::Next() {
  while (range_ < ranges_.size() && done_ == ranges_[range_].length) {
    ++range_;
    done_ = 0;
  }
  if (range_ == ranges_.size()) return ByteSpan();
  const ArchiveRange& range = ranges_[range_];
  const uint64_t at = range.offset + done_;  // inside the archive (NewCursor)
  const uint64_t want = range.length - done_;
  const std::vector<Chunk>& chunks = reader_->chunks_;
  // The last chunk starting at or before `at`.
  auto it = std::upper_bound(chunks.begin(), chunks.end(), at,
                             [](uint64_t pos, const Chunk& c) { return pos < c.offset; });
  if (it != chunks.begin() && at < std::prev(it)->offset + std::prev(it)->size) {
    const size_t index = size_t(std::prev(it) - chunks.begin());
    if (decoded_ != index) BLZ_RETURN_IF_ERROR(Decode(index));
    const Chunk& c = chunks[index];
    const uint64_t n = std::min(want, c.offset + c.size - at);
    done_ += n;
    return ByteSpan(buf_.get() + (at - c.offset), size_t(n));
  }
  // Padding between pieces: zeros up to the next chunk (or the end of the archive).
  const uint64_t next = it == chunks.end() ? reader_->archive_size() : it->offset;
  const uint64_t n = std::min<uint64_t>({want, next - at, kZeroBytes});
  done_ += n;
  return ByteSpan(kZeros, size_t(n));
}

Status FullPatchReader::Read(uint64_t offset, uint64_t length,
                             const std::function<Status(ByteSpan)>& sink,
                             FullPatchReadStats* stats) const {
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

}  // namespace blz::patcher
