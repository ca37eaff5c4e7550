// Random access to the archive a full patch or a chain link holds. Interface:
// patcher/patch_reader.h.
#include "patcher/patch_reader.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
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

// Where a piece lies in its archive: absolute offset and length (indices valid: checked by
// formats::ParseArchivePrefix for the archive's own pieces, by the caller for base pieces).
void PieceSpan(const ArchiveHeader& h, Kind kind, uint32_t index, uint64_t* offset,
               uint64_t* length) {
  if (kind == Kind::kRaw) {
    *offset = h.data_start + h.raws[index].offset;
    *length = h.raws[index].length;
  } else {
    *offset = h.data_start + h.tensors[index].offset;
    *length = h.tensors[index].length;
  }
}

}  // namespace

std::string PatchReader::Describe(const Chunk& c) const {
  const std::string where =
      c.piece < 0 ? "archive header" : DescribePiece(header_, order_[size_t(c.piece)]);
  return path_ + ": " + where + " chunk " + std::to_string(c.index) +
         " (payload at byte offset " + std::to_string(c.payload_offset) + ")";
}

// The chunks a reader keeps for its cursors (Open's shared_chunks): the last `capacity` decoded,
// by chunk index, oldest dropped first.
struct PatchReader::SharedChunks {
  using Bytes = std::shared_ptr<const std::vector<uint8_t>>;
  explicit SharedChunks(size_t n) : capacity(n) {}
  Bytes Get(size_t chunk) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [index, bytes] : kept) {
      if (index == chunk) return bytes;
    }
    return nullptr;
  }
  void Put(size_t chunk, ByteSpan bytes) {
    if (Get(chunk) != nullptr) return;  // another cursor kept it meanwhile
    Bytes copy = std::make_shared<const std::vector<uint8_t>>(bytes.begin(), bytes.end());
    std::lock_guard<std::mutex> lock(mu);
    kept.emplace_back(chunk, std::move(copy));
    if (kept.size() > capacity) kept.pop_front();
  }
  const size_t capacity;
  std::mutex mu;  // guards kept
  std::deque<std::pair<size_t, Bytes>> kept;
};

PatchReader::PatchReader() = default;
PatchReader::~PatchReader() = default;

Result<std::shared_ptr<const PatchReader>> PatchReader::Open(
    const std::string& patch_path, std::shared_ptr<const ArchiveReader> parent,
    size_t shared_chunks) {
  std::shared_ptr<PatchReader> r(new PatchReader());
  r->path_ = patch_path;
  if (shared_chunks > 0) r->shared_ = std::make_unique<SharedChunks>(shared_chunks);
  BLZ_ASSIGN_OR_RETURN(r->file_, MappedFile::Open(patch_path));
  const ByteSpan bytes = r->file_.bytes();
  // The patch header: sizes, codecs, payload offsets back to back ending at the end of the
  // file (so every payload lies inside the mapping), overflow-checked.
  BLZ_ASSIGN_OR_RETURN(internal::PatchHeader ph,
                       internal::ParsePatch(bytes, r->file_.size(), patch_path));
  if (ph.has_base && parent == nullptr) {
    return InvalidArgument(patch_path + ": not a full patch: it needs base archive " +
                           ph.base_digest + " (open it with a reader of that archive)");
  }
  if (!ph.has_base && parent != nullptr) {
    return InvalidArgument(patch_path + ": a full patch (of " + ph.target_digest +
                           ") needs no parent archive, " + parent->archive_digest() +
                           " was given");
  }
  if (parent != nullptr) {
    if (ph.base_digest != parent->archive_digest()) {
      return InvalidArgument(patch_path + ": a patch from base archive " + ph.base_digest +
                             ", the parent given is " + parent->archive_digest());
    }
    if (ph.base_size != parent->archive_size()) {
      return Corruption(patch_path + ": base.size " + std::to_string(ph.base_size) +
                        " but the base archive " + ph.base_digest + " has " +
                        std::to_string(parent->archive_size()) + " bytes");
    }
  }
  r->parent_ = std::move(parent);
  r->archive_digest_ = ph.target_digest;

  // The archive's prefix: prefix_length <= kMaxPrefixBytes (ParsePatch), decoded and checked
  // chunk by chunk, then parsed; it is dropped once the header is known (Cursor decodes its
  // chunks again when a range asks for them).
  std::vector<uint8_t> prefix(size_t(ph.prefix_length));
  for (size_t j = 0; j < ph.prefix_chunks.size(); ++j) {
    const internal::PatchChunk& c = ph.prefix_chunks[j];
    Chunk ref{j * kChunkBytes, c.size, ph.payload_start + c.offset, c.length, c.xxh3, -1,
              uint32_t(j), 1, c.codec, false, 0};
    r->chunks_.push_back(ref);
    if (CodecNeedsBase(c.codec)) {
      return Corruption(patch_path + ": prefix.chunks[" + std::to_string(j) + "]: codec " +
                        std::string(CodecName(c.codec)) +
                        " needs a base, the archive header has none");
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
    // The base piece (a chain link's): in the parent, of the same kind and size (tensors: the
    // same dtype, shape and ggml type), so chunk j of the piece is coded against the parent's
    // bytes [base_at + j * kChunkBytes, + its size), inside the parent's piece.
    uint64_t base_at = 0;
    if (p.base.has_value()) {
      const ArchiveHeader& ph_parent = r->parent_->header();  // has_base: a parent was given
      const uint32_t b = *p.base;
      const bool valid =
          p.kind == Kind::kRaw ? b < ph_parent.raws.size() : b < ph_parent.tensors.size();
      if (!valid) {
        return Corruption(f + ": base index " + std::to_string(b) +
                          " is past the base archive's " +
                          (p.kind == Kind::kRaw ? "raw pieces" : "tensors"));
      }
      uint64_t base_length = 0;
      PieceSpan(ph_parent, p.kind, b, &base_at, &base_length);
      if (p.kind == Kind::kTensor) {
        const auto& bt = ph_parent.tensors[b];
        const auto& tt = h.tensors[p.index];
        if (bt.dtype != tt.dtype || bt.shape != tt.shape || bt.ggml_type != tt.ggml_type ||
            bt.length != tt.length) {
          return Corruption(f + ": base " + DescribePiece(ph_parent, ArchivePiece{p.kind, b}) +
                            " does not have the dtype and shape of target " +
                            DescribePiece(h, want));
        }
      } else if (base_length != length) {
        return Corruption(f + ": base " + DescribePiece(ph_parent, ArchivePiece{p.kind, b}) +
                          " has " + std::to_string(base_length) + " bytes, the target piece " +
                          std::to_string(length));
      }
    }
    for (size_t j = 0; j < p.chunks.size(); ++j) {
      const internal::PatchChunk& c = p.chunks[j];
      if (!p.base.has_value() && CodecNeedsBase(c.codec)) {
        return Corruption(f + ".chunks[" + std::to_string(j) + "]: codec " +
                          std::string(CodecName(c.codec)) + " needs a base, and the piece has " +
                          "none");
      }
      // Every chunk but the last is kChunkBytes (ParsePatch), so this cannot overflow (the
      // base piece has the piece's length and lies inside the parent).
      // Only codecs that need the base read it: a chunk of a based piece coded on its own
      // (zstd, planes) decodes nothing of the parent.
      r->chunks_.push_back(Chunk{at + covered, c.size, ph.payload_start + c.offset, c.length,
                                 c.xxh3, int64_t(i), uint32_t(j), elem, c.codec,
                                 p.base.has_value() && CodecNeedsBase(c.codec),
                                 base_at + covered});
      covered += c.size;
    }
    if (covered != length) {
      return Corruption(f + " (" + DescribePiece(h, want) + "): chunks cover " +
                        std::to_string(covered) + " bytes, the piece has " +
                        std::to_string(length));
    }
    end = piece_end;
  }
  return std::shared_ptr<const PatchReader>(std::move(r));
}

// A patch's cursor: decodes the chunk a position falls in (against the parent's bytes, read
// through a cursor of the parent, when the chunk has a base) and hands out its bytes once they
// match the chunk's xxh3-64.
class PatchReader::PatchCursor final : public ArchiveReader::Cursor {
 public:
  PatchCursor(std::shared_ptr<const PatchReader> reader, std::vector<ArchiveRange> ranges)
      : reader_(std::move(reader)), ranges_(std::move(ranges)) {}

  Result<ByteSpan> Next() override;
  Status Reset(std::vector<ArchiveRange> ranges) override {
    BLZ_RETURN_IF_ERROR(reader_->CheckRanges(ranges));
    ranges_ = std::move(ranges);
    range_ = 0;
    done_ = 0;
    return Status::Ok();
  }
  ArchiveReadStats stats() const override {
    ArchiveReadStats s = stats_;
    if (base_ != nullptr) s += base_->stats();
    return s;
  }

 private:
  Status Decode(size_t chunk);
  // The parent's bytes chunk `c` is coded against, valid until the next call.
  Result<ByteSpan> ReadBase(const Chunk& c);

  std::shared_ptr<const PatchReader> reader_;
  std::vector<ArchiveRange> ranges_;
  size_t range_ = 0;   // the current range
  uint64_t done_ = 0;  // bytes of it produced
  std::unique_ptr<uint8_t[]> buf_;  // decoded bytes (allocated on first use)
  ByteSpan view_;                   // the chunk `decoded_`: in buf_, or the base's bytes
  size_t decoded_ = SIZE_MAX;
  std::unique_ptr<ArchiveReader::Cursor> base_;  // the parent's (a link's, on first use)
  std::unique_ptr<uint8_t[]> base_buf_;  // a base range the parent gave in several spans
  std::shared_ptr<const std::vector<uint8_t>> kept_;  // view_'s bytes when the reader kept them
  ArchiveReadStats stats_;
};

Result<std::unique_ptr<ArchiveReader::Cursor>> PatchReader::NewCursor(
    std::vector<ArchiveRange> ranges) const {
  BLZ_RETURN_IF_ERROR(CheckRanges(ranges));
  return std::unique_ptr<ArchiveReader::Cursor>(new PatchCursor(
      std::static_pointer_cast<const PatchReader>(shared_from_this()), std::move(ranges)));
}

Result<ByteSpan> PatchReader::PatchCursor::ReadBase(const Chunk& c) {
  const std::vector<ArchiveRange> range = {{c.base_offset, c.size}};
  Status s = base_ == nullptr ? Status::Ok() : base_->Reset(range);
  if (base_ == nullptr) {
    Result<std::unique_ptr<ArchiveReader::Cursor>> cursor = reader_->parent_->NewCursor(range);
    if (cursor.ok()) base_ = std::move(*cursor);
    s = cursor.status();
  }
  if (!s.ok()) return s.WithContext(reader_->Describe(c) + ": its base");
  // The base range is one chunk of the parent's piece when the parent codes that piece in
  // chunks from its start (every patch does): one span, used in place. Otherwise assembled.
  uint64_t got = 0;
  while (got < c.size) {
    Result<ByteSpan> bytes = base_->Next();
    if (!bytes.ok()) return bytes.status().WithContext(reader_->Describe(c) + ": its base");
    if (bytes->empty()) {
      return Internal(reader_->Describe(c) + ": the parent produced " + std::to_string(got) +
                      " of " + std::to_string(c.size) + " base bytes");
    }
    if (got == 0 && bytes->size() == c.size) return *bytes;
    if (base_buf_ == nullptr) base_buf_ = std::make_unique_for_overwrite<uint8_t[]>(kChunkBytes);
    std::memcpy(base_buf_.get() + got, bytes->data(), bytes->size());  // got + size <= c.size
    got += bytes->size();
  }
  return ByteSpan(base_buf_.get(), size_t(c.size));
}

Status PatchReader::PatchCursor::Decode(size_t index) {
  const Chunk& c = reader_->chunks_[index];
  decoded_ = SIZE_MAX;  // until it checked out
  kept_.reset();
  if (reader_->shared_ != nullptr) {
    // Decoded (and checked) by another cursor of this reader a moment ago.
    if (auto kept = reader_->shared_->Get(index); kept != nullptr && kept->size() == c.size) {
      kept_ = std::move(kept);
      view_ = ByteSpan(*kept_);
      decoded_ = index;
      return Status::Ok();
    }
  }
  ByteSpan base;
  if (c.has_base) {
    BLZ_ASSIGN_OR_RETURN(base, ReadBase(c));
  }
  if (c.codec == Codec::kIdentical) {
    if (base.size() != c.size) {
      return Corruption(reader_->Describe(c) + ": identical chunk without a base");
    }
    view_ = base;  // valid until base_ moves on, which only Decode does
  } else {
    if (buf_ == nullptr) buf_ = std::make_unique_for_overwrite<uint8_t[]>(kChunkBytes);
    MutableByteSpan out(buf_.get(), size_t(c.size));  // size <= kChunkBytes (ParsePatch)
    Status s = DecodeChunk(c.codec, base,
                           reader_->file_.bytes().subspan(c.payload_offset, c.payload_length),
                           c.elem_size, out);
    if (!s.ok()) return s.WithContext(reader_->Describe(c));
    view_ = out;
  }
  const uint64_t got = Xxh3_64(view_);
  if (got != c.xxh3) {
    return Corruption(reader_->Describe(c) + ": decoded bytes have xxh3 " + Hex64(got) +
                      ", expected " + Hex64(c.xxh3));
  }
  decoded_ = index;
  ++stats_.chunks_decoded;
  stats_.bytes_decoded += c.size;
  stats_.payload_bytes += c.payload_length;
  if (reader_->shared_ != nullptr) reader_->shared_->Put(index, view_);
  return Status::Ok();
}

Result<ByteSpan> PatchReader::PatchCursor::Next() {
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
    return view_.subspan(size_t(at - c.offset), size_t(n));
  }
  // Padding between pieces: zeros up to the next chunk (or the end of the archive).
  const uint64_t next = it == chunks.end() ? reader_->archive_size() : it->offset;
  const uint64_t n = std::min<uint64_t>({want, next - at, kZeroBytes});
  done_ += n;
  return ByteSpan(kZeros, size_t(n));
}

std::vector<ArchiveRange> PatchReader::IndependentRanges() const {
  std::vector<ArchiveRange> out;
  // Zeros (padding) from `at` to `end`, in kChunkBytes pieces.
  auto zeros = [&out](uint64_t at, uint64_t end) {
    for (; at < end; at += std::min<uint64_t>(kChunkBytes, end - at)) {
      out.push_back({at, std::min<uint64_t>(kChunkBytes, end - at)});
    }
  };
  uint64_t at = 0;
  for (const Chunk& c : chunks_) {  // sorted, not overlapping, inside the archive (Open)
    if (c.offset - at + c.size > 2 * kChunkBytes) {
      zeros(at, c.offset);
      at = c.offset;
    }
    out.push_back({at, c.offset + c.size - at});
    at = c.offset + c.size;
  }
  zeros(at, archive_size());
  return out;
}

}  // namespace blz::patcher
