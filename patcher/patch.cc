// Per-tensor patches between two .blz archives: creating them (CreatePatch, CreateFullPatch,
// CreatePatchFromReaders) and reading their header (ReadPatchInfo); patch_apply.cc applies and
// verifies them.
// Interface: patcher/patch.h; container: patcher/patch_format.h; spec: docs/patch-format.md.
//
// Both directions cut every piece of the target archive into chunks of kChunkBytes and run
// them through an ordered pipeline (core/ordered_pipeline.h): workers encode or decode chunks
// in parallel, the calling thread writes them in order. Archive files are memory-mapped;
// archives stored as patches are decoded chunk by chunk (ArchiveSource); no whole tensor is
// ever held in memory.
#include "patcher/patch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "formats/pack_layout.h"
#include "formats/tensor_share.h"
#include "patcher/archive_reader.h"
#include "patcher/patch_format.h"
#include "patcher/patch_internal.h"
#include "patcher/patch_sink.h"
#include "core/ordered_pipeline.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher {
namespace {

using formats::ArchiveHeader;
using formats::ArchivePiece;
using internal::PatchChunk;
using internal::PatchHeader;
using internal::PatchPiece;
using Kind = formats::ArchivePiece::Kind;

constexpr std::string_view kPrefixReportName = "(archive header)";

using internal::ChunkCount;
using internal::ChunkSize;
using internal::DataOrder;
using internal::Describe;
using internal::DigestOf;
using internal::ElemSize;
using internal::HashZeros;
using internal::Job;
using internal::PageDropper;
using internal::PathExists;
using internal::PieceSpan;
using formats::SameTensorType;
using internal::Span;

// Tensor names that occur in more than one file of an archive.
std::unordered_map<std::string, uint32_t> NameCounts(const ArchiveHeader& h) {
  std::unordered_map<std::string, uint32_t> counts;
  for (const auto& t : h.tensors) ++counts[t.name];
  return counts;
}

// A tensor's name for reports: qualified by its file path when the name is not unique.
std::string TensorReportName(const ArchiveHeader& h, uint32_t index,
                             const std::unordered_map<std::string, uint32_t>& counts) {
  const auto& t = h.tensors[index];
  auto it = counts.find(t.name);
  if (it != counts.end() && it->second > 1) return h.files[t.file_index].path + ":" + t.name;
  return t.name;
}

// An anonymous temporary file in the output's directory for the payloads while the header
// is not yet known.
class ScratchFile {
 public:
  ~ScratchFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScratchFile() = default;
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  Status Create(const std::string& near_path) {
    // Preferably a file that never has a name (O_TMPFILE); else a named one, unlinked at once.
    auto slash = near_path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : near_path.substr(0, slash == 0 ? 1 : slash);
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ >= 0) return Status::Ok();
    std::string tmpl = near_path + ".payload-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    fd_ = ::mkostemp(buf.data(), O_CLOEXEC);
    if (fd_ < 0) return IOError(tmpl + ": cannot create: " + std::strerror(errno));
    ::unlink(buf.data());
    return Status::Ok();
  }
  Status WriteAt(uint64_t offset, ByteSpan data) {
    while (!data.empty()) {
      ssize_t w = ::pwrite(fd_, data.data(), data.size(), off_t(offset));
      if (w < 0) {
        if (errno == EINTR) continue;
        return IOError(std::string("payload scratch file: write failed: ") + std::strerror(errno));
      }
      data = data.subspan(size_t(w));
      offset += uint64_t(w);
    }
    return Status::Ok();
  }
  // Appends bytes [0, length) of this file to `out`.
  Status CopyTo(AtomicFile* out, uint64_t length) const {
    return out->AppendFromFd(fd_, 0, length, "payload scratch file");
  }

 private:
  int fd_ = -1;
};

// ---- diff ---------------------------------------------------------------------------------

struct Encoded {
  Codec codec = Codec::kZstd;
  std::string payload;
  uint64_t xxh3 = 0;
  // The target chunk's bytes when they were decoded (not a span of a mapping): the calling
  // thread hashes them in order.
  std::vector<uint8_t> target;
};

// One archive as the diff reads it: a memory-mapped file, whose spans are handed out as they
// are, or an archive stored as a patch (patcher/patch_reader.h), whose ranges are decoded into
// the caller's buffer through a CursorPool (one cursor per thread at a time). For the latter, the
// chunks a codec choice samples are decoded whole and kept until the job that codes that
// chunk takes them (Use), so sampling a tensor does not decode its chunks twice.
class ArchiveSource {
 public:
  // How a read's decoded chunks are kept (a reader's only; a mapping keeps everything).
  enum class Use {
    kOnce,    // decoded for this read only
    kSample,  // part of a codec choice's sample: the chunks it touches are decoded whole and
              // kept for the kChunk read of the same chunk
    kChunk,   // a job's chunk: taken from what a sample kept, else decoded for this read
  };
  // Kept chunks at most (the oldest, in data order, go first): a sample keeps up to 8.
  static constexpr size_t kMaxKept = 24;

  explicit ArchiveSource(const formats::BlzArchive& archive)
      : header_(archive.header()), file_(&archive.file()), name_(archive.path()) {}
  explicit ArchiveSource(std::shared_ptr<const ArchiveReader> reader)
      : header_(reader->header()), name_(reader->archive_digest()), reader_(std::move(reader)) {
    if (auto* f = dynamic_cast<const ArchiveFileReader*>(reader_.get())) {
      file_ = &f->file();
      name_ = f->file().path();
    } else {
      ranges_ = reader_->IndependentRanges();
      pool_ = std::make_unique<CursorPool>(reader_);
    }
  }
  // A model read in place (formats::PackLayout, hashed already): spans of its files, or of
  // its prefix, where a range lies inside one piece (every job's chunk does); copies else.
  ArchiveSource(const formats::PackLayout& layout, std::string name)
      : header_(layout.header()), name_(std::move(name)), layout_(&layout) {}
  ArchiveSource(const ArchiveSource&) = delete;
  ArchiveSource& operator=(const ArchiveSource&) = delete;

  const ArchiveHeader& header() const { return header_; }
  uint64_t size() const { return header_.total_size; }
  const std::string& name() const { return name_; }  // the file's path, or the digest
  const MappedFile* file() const { return file_; }   // null when decoded or a layout
  // Whether the bytes are at hand (a mapping, or a model read in place) rather than decoded:
  // such a source can be hashed (Digest) and read again at no cost (Direct).
  bool in_place() const { return file_ != nullptr || layout_ != nullptr; }
  // Bytes [offset, offset + length) without a copy: always for a mapping; for a layout when
  // the range lies inside one piece or the prefix; never for a decoded archive.
  std::optional<ByteSpan> Direct(uint64_t offset, uint64_t length) const {
    if (file_ != nullptr) return file_->bytes().subspan(offset, length);
    if (layout_ != nullptr) return layout_->Direct(offset, length);
    return std::nullopt;
  }
  // The archive's digest ("sha256:<hex>"), for an in_place() source: a mapping's SHA-256
  // (releasing the pages behind it when `drop`), a layout's ArchiveDigest.
  Result<std::string> Digest(bool drop) const {
    if (file_ != nullptr) return DigestOf(*file_, drop);
    if (layout_ != nullptr) return layout_->ArchiveDigest();
    return Internal(name_ + ": a decoded archive is not hashed here (its digest is given)");
  }
  // Bytes [offset, offset + length) (inside the archive): a span of the mapping, or decoded
  // into *buf. Errors: the reader's (kCorruption naming the patch, piece and chunk).
  Result<ByteSpan> Read(uint64_t offset, uint64_t length, std::vector<uint8_t>* buf,
                        Use use = Use::kOnce) const {
    if (file_ != nullptr) return file_->bytes().subspan(offset, length);
    if (layout_ != nullptr) {
      if (std::optional<ByteSpan> d = layout_->Direct(offset, length)) return *d;
      buf->resize(length);
      BLZ_RETURN_IF_ERROR(layout_->ReadInto(offset, length, buf->data()));
      return ByteSpan(*buf);
    }
    if (use == Use::kChunk) {
      std::shared_ptr<const std::vector<uint8_t>> kept;
      uint64_t start = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = kept_.upper_bound(offset);
        if (it != kept_.begin()) {
          --it;
          if (offset - it->first + length <= it->second->size()) {
            start = it->first;
            kept = std::move(it->second);
            kept_.erase(it);
          }
        }
      }
      if (kept != nullptr) {
        const auto from = kept->begin() + ptrdiff_t(offset - start);
        buf->assign(from, from + ptrdiff_t(length));
        return ByteSpan(*buf);
      }
    }
    if (use != Use::kSample) {
      BLZ_RETURN_IF_ERROR(Decode(offset, length, buf));
      return ByteSpan(*buf);
    }
    buf->clear();
    auto it = std::upper_bound(
        ranges_.begin(), ranges_.end(), offset,
        [](uint64_t o, const ArchiveRange& r) { return o < r.offset; });
    if (it != ranges_.begin()) --it;
    for (; it != ranges_.end() && it->offset < offset + length; ++it) {
      BLZ_ASSIGN_OR_RETURN(std::shared_ptr<const std::vector<uint8_t>> range, Kept(*it));
      const uint64_t from = std::max(offset, it->offset);
      const uint64_t to = std::min(offset + length, it->offset + it->length);
      if (from >= to) continue;
      buf->insert(buf->end(), range->begin() + ptrdiff_t(from - it->offset),
                  range->begin() + ptrdiff_t(to - it->offset));
    }
    if (buf->size() != length) {
      return Internal(name_ + ": sampled " + std::to_string(buf->size()) + " bytes at offset " +
                      std::to_string(offset) + ", not " + std::to_string(length));
    }
    return ByteSpan(*buf);
  }

  // Decodes and keeps, on up to `threads` threads, every chunk the slices of a piece starting
  // at `start` touch (a reader's only): the sample's chunks are decoded side by side, not one
  // after the other by the one job that makes the choice while the others wait for it.
  Status KeepForSample(uint64_t start, const std::vector<SampleSlice>& slices,
                       unsigned threads) const {
    if (in_place()) return Status::Ok();
    std::vector<ArchiveRange> wanted;
    for (const SampleSlice& slice : slices) {
      const uint64_t offset = start + slice.offset, end = offset + slice.length;
      auto it = std::upper_bound(
          ranges_.begin(), ranges_.end(), offset,
          [](uint64_t o, const ArchiveRange& r) { return o < r.offset; });
      if (it != ranges_.begin()) --it;
      for (; it != ranges_.end() && it->offset < end; ++it) {
        if (wanted.empty() || wanted.back().offset != it->offset) wanted.push_back(*it);
      }
    }
    if (wanted.size() < 2 || threads < 2) return Status::Ok();  // Read decodes them
    return RunOrdered<bool>(
        wanted.size(), std::min<unsigned>(threads, unsigned(wanted.size())),
        [&](size_t i) -> Result<bool> {
          BLZ_RETURN_IF_ERROR(Kept(wanted[i]).status());
          return true;
        },
        [](size_t, bool&) { return Status::Ok(); });
  }

 private:
  // Decodes [offset, offset + length) into *buf through a pooled cursor.
  Status Decode(uint64_t offset, uint64_t length, std::vector<uint8_t>* buf) const {
    buf->resize(length);
    return pool_->DecodeInto({offset, length}, buf->data());
  }
  // The independent range `r` decoded whole: kept already, or decoded now and kept.
  Result<std::shared_ptr<const std::vector<uint8_t>>> Kept(const ArchiveRange& r) const {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = kept_.find(r.offset);
      if (it != kept_.end()) return it->second;
    }
    auto range = std::make_shared<std::vector<uint8_t>>();
    BLZ_RETURN_IF_ERROR(Decode(r.offset, r.length, range.get()));
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.size() >= kMaxKept) kept_.erase(kept_.begin());
    kept_[r.offset] = range;
    return std::shared_ptr<const std::vector<uint8_t>>(range);
  }

  const ArchiveHeader& header_;
  const MappedFile* file_ = nullptr;
  std::string name_;
  const formats::PackLayout* layout_ = nullptr;
  std::shared_ptr<const ArchiveReader> reader_;
  std::vector<ArchiveRange> ranges_;  // a reader's IndependentRanges
  std::unique_ptr<CursorPool> pool_;   // a reader's (not a mapping's)
  mutable std::mutex mu_;             // guards kept_
  mutable std::map<uint64_t, std::shared_ptr<const std::vector<uint8_t>>> kept_;  // by offset
};

// Finds, for every piece of `b` in data order, the piece of `a` it is coded against.
struct Plan {
  std::vector<ArchivePiece> order;          // b's pieces in data order
  std::vector<std::optional<uint32_t>> base;  // same indexing as order
  std::vector<std::string> removed;          // names of a's tensors b lacks
};

// With no base (`base_archive` null: a full patch) every piece is coded without one.
Result<Plan> MakePlan(const ArchiveSource* base_archive, const ArchiveSource& b) {
  const ArchiveHeader& hb = b.header();
  Plan plan;
  plan.order = DataOrder(hb);
  if (base_archive == nullptr) {
    plan.base.assign(plan.order.size(), std::nullopt);
    return plan;
  }
  const ArchiveSource& a = *base_archive;
  const ArchiveHeader& ha = a.header();

  std::unordered_map<std::string, std::vector<uint32_t>> a_by_name;
  for (uint32_t i = 0; i < ha.tensors.size(); ++i) a_by_name[ha.tensors[i].name].push_back(i);
  auto b_counts = NameCounts(hb);
  std::unordered_map<std::string, std::vector<uint32_t>> a_raws_by_path;
  for (uint32_t i = 0; i < ha.raws.size(); ++i) {
    a_raws_by_path[ha.files[ha.raws[i].file_index].path].push_back(i);
  }
  std::vector<bool> a_named(ha.tensors.size(), false);
  // A's tensors by content (the header's SHA-256 of their bytes): a tensor of B identical to
  // one of A under another name (renamed, or in a model of another structure that shares it)
  // is coded against it, so it costs only `identical` chunks.
  std::unordered_map<std::string, std::vector<uint32_t>> a_by_content;
  for (uint32_t i = 0; i < ha.tensors.size(); ++i) {
    if (ha.tensors[i].length > 0) a_by_content[ha.tensors[i].sha256].push_back(i);
  }

  for (const ArchivePiece& p : plan.order) {
    std::optional<uint32_t> base;
    if (p.kind == Kind::kTensor) {
      const auto& t = hb.tensors[p.index];
      auto it = a_by_name.find(t.name);
      if (it != a_by_name.end()) {
        std::optional<uint32_t> cand;
        if (it->second.size() == 1 && b_counts[t.name] == 1) {
          cand = it->second[0];
        } else {
          // The name occurs in several files: match the one in the file with the same path.
          const std::string& path = hb.files[t.file_index].path;
          for (uint32_t ai : it->second) {
            if (ha.files[ha.tensors[ai].file_index].path == path) cand = ai;
          }
        }
        if (cand.has_value()) {
          a_named[*cand] = true;
          const auto& at = ha.tensors[*cand];
          if (SameTensorType(at, t)) base = cand;
        }
      }
      // The same-named tensor is not the same bytes: an identical one of A wins (the first in
      // A's order; its chunks all code as `identical`).
      if (!base.has_value() || ha.tensors[*base].sha256 != t.sha256) {
        auto same = a_by_content.find(t.sha256);
        if (same != a_by_content.end()) {
          for (uint32_t ai : same->second) {
            if (SameTensorType(ha.tensors[ai], t)) {
              base = ai;
              break;
            }
          }
        }
      }
    } else {
      const auto& r = hb.raws[p.index];
      auto it = a_raws_by_path.find(hb.files[r.file_index].path);
      if (it != a_raws_by_path.end()) {
        // The same path and the same bytes (the hashes in the headers first: nothing is read
        // of a file that changed).
        const Span bs = PieceSpan(hb, Kind::kRaw, p.index);
        std::vector<uint8_t> b_buf, a_buf;
        std::optional<ByteSpan> bytes;
        for (uint32_t ai : it->second) {
          const Span as = PieceSpan(ha, Kind::kRaw, ai);
          if (as.length != bs.length || as.xxh3 != bs.xxh3) continue;
          if (!bytes.has_value()) {
            BLZ_ASSIGN_OR_RETURN(bytes, b.Read(bs.offset, bs.length, &b_buf));
          }
          BLZ_ASSIGN_OR_RETURN(ByteSpan other, a.Read(as.offset, as.length, &a_buf));
          bool same = bytes->empty() ||
                      std::memcmp(other.data(), bytes->data(), bytes->size()) == 0;
          if (a.file() != nullptr) a.file()->DropRange(as.offset, as.length);
          if (same) {
            base = ai;
            break;
          }
        }
      }
    }
    plan.base.push_back(base);
  }
  auto a_counts = NameCounts(ha);
  for (uint32_t i = 0; i < ha.tensors.size(); ++i) {
    if (!a_named[i]) plan.removed.push_back(TensorReportName(ha, i, a_counts));
  }
  return plan;
}

// The bytes between the target's pieces must be zero: ApplyPatch writes zeros there.
Status CheckGapsZero(const ArchiveSource& b, const std::vector<ArchivePiece>& order) {
  const ArchiveHeader& h = b.header();
  uint64_t pos = h.data_start;
  std::vector<uint8_t> buf;
  auto check = [&](uint64_t from, uint64_t to) -> Status {
    if (to < from || to > b.size()) {
      return Internal(b.name() + ": pieces out of order at byte offset " + std::to_string(from));
    }
    if (to == from) return Status::Ok();
    BLZ_ASSIGN_OR_RETURN(ByteSpan gap, b.Read(from, to - from, &buf));
    for (uint64_t k = 0; k < gap.size(); ++k) {
      if (gap[k] != 0) {
        return Corruption(b.name() + ": non-zero padding byte at byte offset " +
                          std::to_string(from + k));
      }
    }
    return Status::Ok();
  };
  for (const ArchivePiece& p : order) {
    Span s = PieceSpan(h, p.kind, p.index);
    BLZ_RETURN_IF_ERROR(check(pos, s.offset));
    pos = s.offset + s.length;
  }
  return check(pos, b.size());
}

std::string CodecLabel(const std::vector<PatchChunk>& chunks, bool has_base) {
  if (chunks.empty()) return has_base ? "identical" : "empty";
  bool used[256] = {};
  for (const auto& c : chunks) used[uint8_t(c.codec)] = true;
  std::string out;
  for (int id = 0; id < 256; ++id) {
    if (!used[id]) continue;
    if (!out.empty()) out += "+";
    out += std::string(CodecName(Codec(uint8_t(id))));
  }
  return out;
}

}  // namespace

namespace {

Status CheckDiffOptions(const DiffOptions& options) {
  if (options.threads < 0) {
    return InvalidArgument("diff: threads must be >= 0 (0 = one per core), got " +
                           std::to_string(options.threads));
  }
  if (options.zstd_level < 1 || options.zstd_level > 22) {
    return InvalidArgument("diff: zstd level must be in 1..22, got " +
                           std::to_string(options.zstd_level));
  }
  for (const std::string* d : {&options.known_base_digest, &options.known_target_digest}) {
    if (!d->empty() && !ParseDigest(*d).ok()) {
      return InvalidArgument("diff: known digest '" + *d + "' is not sha256:<64 hex digits>");
    }
  }
  return Status::Ok();
}

bool Cancelled(const DiffOptions& options) {
  return options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed);
}

// The patch from `base` (null: a full patch) to `b`, written to `patch_path`.
Status CreateImpl(const ArchiveSource* base, const ArchiveSource& b,
                  const std::string& patch_path, const DiffOptions& options, DiffStats* stats) {
  const ArchiveHeader& hb = b.header();
  const std::string& target_archive = b.name();
  if (hb.data_start > internal::kMaxPrefixBytes || hb.data_start == 0) {
    return Internal(target_archive + ": data_start " + std::to_string(hb.data_start) +
                    " outside the patch format's range");
  }

  // The digests. The target's is computed while its chunks are consumed in data order (below),
  // so its bytes are read once; the base's on a helper thread, side by side with the encoding
  // (unless the caller knows the digests).
  std::string a_digest = options.known_base_digest, b_digest = options.known_target_digest;
  const bool hash_target = b_digest.empty();
  if ((base != nullptr && !base->in_place() && a_digest.empty()) ||
      (!b.in_place() && hash_target)) {
    return Internal(patch_path + ": an archive read from a patch needs its digest given");
  }
  std::thread helper;
  Status helper_status;  // the helper's hashing
  // With one thread (--threads 1) everything runs on the calling thread, the base's hash
  // after the encoding; otherwise it gets a helper thread of its own.
  const bool hash_base_inline = ResolveThreads(options.threads) <= 1;
  if (base != nullptr && a_digest.empty() && !hash_base_inline) {
    try {
      // The encoder reads the base behind the helper and releases what it used; the helper
      // releasing pages ahead of it made every base page fault in twice.
      helper = std::thread([&] {
        Result<std::string> d = base->Digest(/*drop=*/false);
        if (d.ok()) {
          a_digest = *d;
        } else {
          helper_status = d.status();
        }
      });
    } catch (const std::system_error&) {
      // No thread: hashed on this one after the encoding (below).
    }
  }
  struct Joiner {
    std::thread* t;
    ~Joiner() {
      if (t->joinable()) t->join();
    }
  } joiner{&helper};
  Sha256 b_sha;
  uint64_t b_hashed = 0;

  BLZ_ASSIGN_OR_RETURN(Plan plan, MakePlan(base, b));
  BLZ_RETURN_IF_ERROR(CheckGapsZero(b, plan.order));

  // Jobs: the prefix's chunks, then every piece's chunks in data order.
  PatchHeader ph;
  ph.has_base = base != nullptr;
  ph.base_size = base != nullptr ? base->size() : 0;
  ph.target_size = b.size();
  ph.prefix_length = hb.data_start;
  ph.removed = plan.removed;
  std::vector<Job> jobs;
  for (uint64_t j = 0; j < ChunkCount(hb.data_start); ++j) {
    jobs.push_back({-1, j, j * kChunkBytes, ChunkSize(hb.data_start, j), 0, false, 1, {}});
  }
  for (size_t i = 0; i < plan.order.size(); ++i) {
    const ArchivePiece& p = plan.order[i];
    PatchPiece piece;
    piece.kind = p.kind;
    piece.index = p.index;
    piece.base = plan.base[i];
    ph.pieces.push_back(piece);
    Span s = PieceSpan(hb, p.kind, p.index);
    uint64_t base_offset = piece.base ? PieceSpan(base->header(), p.kind, *piece.base).offset : 0;
    uint32_t elem = ElemSize(hb, p.kind, p.index);
    std::optional<formats::DType> dtype;
    if (p.kind == Kind::kTensor) dtype = hb.tensors[p.index].dtype;
    for (uint64_t j = 0; j < ChunkCount(s.length); ++j) {
      jobs.push_back({int64_t(i), j, s.offset + j * kChunkBytes, ChunkSize(s.length, j),
                      base_offset + j * kChunkBytes, piece.base.has_value(), elem, dtype});
    }
  }

  ScratchFile scratch;
  BLZ_RETURN_IF_ERROR(scratch.Create(patch_path));
  CodecOptions copts;
  copts.zstd_level = options.zstd_level;

  struct PieceChoice {
    uint64_t chunks = 0;
    std::once_flag once;
    Status status;
    CodecChoice choice;
  };
  std::vector<PieceChoice> choices(plan.order.size());
  for (size_t i = 0; i < plan.order.size(); ++i) {
    choices[i].chunks = ChunkCount(PieceSpan(hb, plan.order[i].kind, plan.order[i].index).length);
  }

  using Use = ArchiveSource::Use;
  std::function<Result<Encoded>(size_t)> produce = [&](size_t i) -> Result<Encoded> {
    const Job& job = jobs[i];
    if (Cancelled(options)) return Unavailable(patch_path + ": cancelled");
    CodecOptions o = copts;
    o.dtype = job.dtype;
    auto where = [&] {
      return (job.piece < 0 ? std::string("archive header")
                            : Describe(hb, plan.order[job.piece].kind,
                                       plan.order[job.piece].index)) +
             " chunk " + std::to_string(job.chunk);
    };
    // A tensor of several chunks has its codec chosen once, from a sample of the whole tensor,
    // by whichever of its chunks comes first (the choice depends only on the bytes, so the
    // patch does not depend on thread timing, nor on how the archives are stored); a chunk
    // alone chooses for itself. The choice comes before the chunk is read: a decoded
    // archive's chunks that the sample decoded are then taken, not decoded again.
    const bool whole_piece_choice = job.piece >= 0 && choices[size_t(job.piece)].chunks > 1;
    if (whole_piece_choice) {
      PieceChoice& pc = choices[size_t(job.piece)];
      std::call_once(pc.once, [&] {
        const ArchivePiece& p = plan.order[size_t(job.piece)];
        Span s = PieceSpan(hb, p.kind, p.index);
        // The sample's slices (tensor_codec.h SampleSlices), read from either archive.
        std::vector<uint8_t> sample_b, sample_t, buf;
        const uint64_t base_start = job.base_offset - job.chunk * kChunkBytes;
        const std::vector<SampleSlice> slices = SampleSlices(s.length, job.elem_size);
        const unsigned threads = ResolveThreads(options.threads);
        Status kept = b.KeepForSample(s.offset, slices, threads);
        if (kept.ok() && job.has_base) kept = base->KeepForSample(base_start, slices, threads);
        if (!kept.ok()) {
          pc.status = kept;
          return;
        }
        for (const SampleSlice& slice : slices) {
          Result<ByteSpan> t = b.Read(s.offset + slice.offset, slice.length, &buf, Use::kSample);
          if (!t.ok()) {
            pc.status = t.status();
            return;
          }
          sample_t.insert(sample_t.end(), t->begin(), t->end());
          if (!job.has_base) continue;
          Result<ByteSpan> a =
              base->Read(base_start + slice.offset, slice.length, &buf, Use::kSample);
          if (!a.ok()) {
            pc.status = a.status();
            return;
          }
          sample_b.insert(sample_b.end(), a->begin(), a->end());
        }
        Result<CodecChoice> c =
            ChooseCodecOnSample(sample_b, sample_t, s.length, job.elem_size, o);
        if (c.ok()) {
          pc.choice = *c;
        } else {
          pc.status = c.status();
        }
      });
      if (!pc.status.ok()) return pc.status.WithContext(where());
    }
    std::vector<uint8_t> target_buf;  // handed to consume (Encoded::target) when decoded
    thread_local std::vector<uint8_t> base_buf;
    BLZ_ASSIGN_OR_RETURN(ByteSpan target,
                         b.Read(job.offset, job.size, &target_buf, Use::kChunk));
    ByteSpan base_chunk;
    if (job.has_base) {
      BLZ_ASSIGN_OR_RETURN(base_chunk,
                           base->Read(job.base_offset, job.size, &base_buf, Use::kChunk));
    }
    Result<EncodedChunk> e =
        whole_piece_choice
            ? EncodeChunkAs(choices[size_t(job.piece)].choice, base_chunk, target,
                            job.elem_size, o)
            : EncodeChunk(base_chunk, target, job.elem_size, o);
    if (!e.ok()) return e.status().WithContext(where());
    Encoded out;
    out.codec = e->codec;
    out.payload = std::move(e->payload);
    out.xxh3 = Xxh3_64(target);
    out.target = std::move(target_buf);
    return out;
  };

  uint64_t payload_pos = 0;
  std::optional<PageDropper> drop_target, drop_base;
  if (b.file() != nullptr) drop_target.emplace(*b.file());
  if (base != nullptr && base->file() != nullptr) drop_base.emplace(*base->file());
  std::unique_ptr<Xxh3Stream> piece_hash;
  std::function<Status(size_t, Encoded&)> consume = [&](size_t i, Encoded& e) -> Status {
    const Job& job = jobs[i];
    if (job.offset < b_hashed) return Internal(target_archive + ": chunks out of data order");
    const std::optional<ByteSpan> direct = b.Direct(job.offset, job.size);
    const ByteSpan target = direct.has_value() ? *direct : ByteSpan(e.target);
    if (hash_target) {
      HashZeros(&b_sha, job.offset - b_hashed);  // the gaps are zero (CheckGapsZero)
      b_sha.Update(target);
    }
    b_hashed = job.offset + job.size;
    if (options.counters != nullptr) {
      options.counters->done.fetch_add(job.size, std::memory_order_relaxed);
    }
    BLZ_RETURN_IF_ERROR(scratch.WriteAt(payload_pos, AsBytes(e.payload)));
    PatchChunk c{e.codec, payload_pos, e.payload.size(), job.size, e.xxh3};
    payload_pos += e.payload.size();
    if (job.piece < 0) {
      ph.prefix_chunks.push_back(c);
      return Status::Ok();
    }
    PatchPiece& piece = ph.pieces[size_t(job.piece)];
    piece.chunks.push_back(c);
    // Check the target's own tensor hashes as we go: a patch to a damaged archive would be
    // useless (ApplyPatch checks them).
    if (job.chunk == 0) piece_hash = std::make_unique<Xxh3Stream>();
    piece_hash->Update(target);
    // Done with these bytes: let the kernel reclaim the pages (memory stays bounded).
    if (drop_target.has_value()) drop_target->Drop(job.offset, job.size);
    if (job.has_base && drop_base.has_value()) drop_base->Drop(job.base_offset, job.size);
    Span s = PieceSpan(hb, piece.kind, piece.index);
    if (job.chunk + 1 == ChunkCount(s.length) && piece_hash->Digest() != s.xxh3) {
      return Corruption(target_archive + ": " + Describe(hb, piece.kind, piece.index) +
                        " at byte offset " + std::to_string(s.offset) + ": xxh3 " +
                        Hex64(piece_hash->Digest()) + " != " + Hex64(s.xxh3) +
                        " in the archive header");
    }
    return Status::Ok();
  };
  // Empty target pieces have no chunks: check their hashes here.
  for (const PatchPiece& piece : ph.pieces) {
    Span s = PieceSpan(hb, piece.kind, piece.index);
    if (s.length == 0 && s.xxh3 != Xxh3_64(ByteSpan())) {
      return Corruption(target_archive + ": empty " + Describe(hb, piece.kind, piece.index) +
                        ": xxh3 " + Hex64(s.xxh3) + " is not the hash of no bytes");
    }
  }
  if (options.counters != nullptr) {
    uint64_t total = 0;
    for (const Job& job : jobs) total += job.size;
    options.counters->total.store(total, std::memory_order_relaxed);
  }
  BLZ_RETURN_IF_ERROR(RunOrdered<Encoded>(
      jobs.size(), ResolveThreads(options.threads), produce, consume));
  if (Cancelled(options)) return Unavailable(patch_path + ": cancelled");
  if (hash_target) {
    HashZeros(&b_sha, b.size() - b_hashed);
    b_digest = MakeDigest(b_sha.FinishHex());
  }
  if (helper.joinable()) helper.join();
  BLZ_RETURN_IF_ERROR(helper_status);
  if (base != nullptr && a_digest.empty()) {
    BLZ_ASSIGN_OR_RETURN(a_digest, base->Digest(true));
  }
  ph.base_digest = a_digest;
  ph.target_digest = b_digest;

  BLZ_ASSIGN_OR_RETURN(std::string json, internal::SerializePatchHeader(ph));
  if (json.size() > internal::kMaxPatchHeaderBytes) {
    return TooLarge(patch_path + ": the patch header would be " + std::to_string(json.size()) +
                    " bytes, more than the cap of " + std::to_string(internal::kMaxPatchHeaderBytes));
  }
  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(patch_path));
  BLZ_RETURN_IF_ERROR(out.Append(internal::EncodePatchFixedHeader(json.size())));
  BLZ_RETURN_IF_ERROR(out.Append(json));
  BLZ_RETURN_IF_ERROR(scratch.CopyTo(&out, payload_pos));
  uint64_t patch_bytes = out.size();
  BLZ_RETURN_IF_ERROR(out.Commit(/*no_replace=*/true));

  if (stats != nullptr) {
    DiffStats st;
    st.base_digest = a_digest;
    st.target_digest = b_digest;
    st.target_bytes = hb.total_size;
    st.patch_bytes = patch_bytes;
    auto sum = [](const std::vector<PatchChunk>& cs) {
      uint64_t n = 0;
      for (const auto& c : cs) n += c.length;
      return n;
    };
    st.pieces.push_back({std::string(kPrefixReportName), CodecLabel(ph.prefix_chunks, false),
                         ph.prefix_length, sum(ph.prefix_chunks)});
    auto b_counts = NameCounts(hb);
    for (const PatchPiece& piece : ph.pieces) {
      PieceReport r;
      Span s = PieceSpan(hb, piece.kind, piece.index);
      r.name = piece.kind == Kind::kRaw ? hb.files[s.file_index].path
                                        : TensorReportName(hb, piece.index, b_counts);
      r.codec = CodecLabel(piece.chunks, piece.base.has_value());
      r.target_bytes = s.length;
      r.patch_bytes = sum(piece.chunks);
      if (piece.kind == Kind::kTensor) {
        bool all_identical = std::all_of(piece.chunks.begin(), piece.chunks.end(),
                                         [](const PatchChunk& c) { return c.codec == Codec::kIdentical; });
        if (!piece.base) {
          ++st.added;
        } else if (all_identical) {
          ++st.identical;
        } else {
          ++st.patched;
        }
      }
      st.pieces.push_back(std::move(r));
    }
    for (const std::string& name : plan.removed) {
      st.pieces.push_back({name, "removed", 0, 0});
      ++st.removed;
    }
    *stats = std::move(st);
  }
  return Status::Ok();
}

}  // namespace

// One side of CreatePatch: an archive file, or a model read in place (hashed on open).
struct OpenedSide {
  std::optional<formats::BlzArchive> archive;
  std::optional<formats::PackLayout> layout;
  std::optional<ArchiveSource> source;

  // Opens `path` (`what`: "base" or "target", for errors) as CreatePatch takes it; a model's
  // layout is not hashed yet.
  Status Open(const std::string& path, const char* what) {
    if (internal::IsModelInput(path)) {
      Result<formats::PackLayout> l = formats::PackLayout::Open(path);
      if (!l.ok()) return l.status().WithContext(std::string(what) + " model");
      layout.emplace(std::move(*l));
    } else {
      Result<formats::BlzArchive> ar = formats::BlzArchive::Open(path);
      if (!ar.ok()) return ar.status().WithContext(std::string(what) + " archive");
      archive.emplace(std::move(*ar));
    }
    return Status::Ok();
  }
  // The source over what Open opened (a model's layout hashed by then); `path` names it.
  void MakeSource(const std::string& path) {
    if (layout) {
      source.emplace(*layout, path);
    } else {
      source.emplace(*archive);
    }
  }
};

Status CreatePatch(const std::string& base_archive, const std::string& target_archive,
                   const std::string& patch_path, const DiffOptions& options, DiffStats* stats) {
  BLZ_RETURN_IF_ERROR(CheckDiffOptions(options));
  if (PathExists(patch_path)) return AlreadyExists(patch_path + ": already exists");
  OpenedSide a, b;
  std::vector<OpenedSide*> to_hash;
  for (auto [side, path, what] : {std::tuple(&a, &base_archive, "base"),
                                  std::tuple(&b, &target_archive, "target")}) {
    BLZ_RETURN_IF_ERROR(side->Open(*path, what));
    if (side->layout) to_hash.push_back(side);
  }
  // A model's header hashes first (each tensor's and file's SHA-256, each piece's xxh3-64):
  // the plan matches tensors by them. Two models are hashed side by side, unless one thread.
  Status hashed_a;
  std::thread second;
  if (to_hash.size() == 2 && ResolveThreads(options.threads) > 1) {
    try {
      second = std::thread([&] { hashed_a = a.layout->FillHashes(nullptr); });
      to_hash.erase(to_hash.begin());
    } catch (const std::system_error&) {
      // No thread: both on this one.
    }
  }
  Status hashed;
  for (OpenedSide* side : to_hash) {
    if (hashed.ok()) hashed = side->layout->FillHashes(nullptr);
  }
  if (second.joinable()) second.join();
  BLZ_RETURN_IF_ERROR(hashed_a.WithContext(base_archive));
  BLZ_RETURN_IF_ERROR(hashed);
  a.MakeSource(base_archive);
  b.MakeSource(target_archive);
  return CreateImpl(&*a.source, *b.source, patch_path, options, stats);
}

Status CreatePatch(const formats::PackLayout& base, const std::string& base_name,
                   const std::string& target_archive, const std::string& patch_path,
                   const DiffOptions& options, DiffStats* stats) {
  BLZ_RETURN_IF_ERROR(CheckDiffOptions(options));
  if (!base.hashed()) return InvalidArgument(base_name + ": the base's layout is not hashed");
  if (PathExists(patch_path)) return AlreadyExists(patch_path + ": already exists");
  OpenedSide b;
  BLZ_RETURN_IF_ERROR(b.Open(target_archive, "target"));
  if (b.layout) BLZ_RETURN_IF_ERROR(b.layout->FillHashes(nullptr).WithContext(target_archive));
  b.MakeSource(target_archive);
  const ArchiveSource a(base, base_name);
  return CreateImpl(&a, *b.source, patch_path, options, stats);
}

Status CreatePatchFromReaders(std::shared_ptr<const ArchiveReader> base,
                              std::shared_ptr<const ArchiveReader> target,
                              const std::string& patch_path, DiffOptions options,
                              DiffStats* stats) {
  if (base == nullptr || target == nullptr) {
    return InvalidArgument("CreatePatchFromReaders: a reader is missing");
  }
  if (options.known_base_digest.empty()) options.known_base_digest = base->archive_digest();
  if (options.known_target_digest.empty()) options.known_target_digest = target->archive_digest();
  if (options.known_base_digest != base->archive_digest() ||
      options.known_target_digest != target->archive_digest()) {
    return InvalidArgument("CreatePatchFromReaders: the known digests are not the readers'");
  }
  BLZ_RETURN_IF_ERROR(CheckDiffOptions(options));
  if (PathExists(patch_path)) return AlreadyExists(patch_path + ": already exists");
  const ArchiveSource a(std::move(base)), b(std::move(target));
  return CreateImpl(&a, b, patch_path, options, stats);
}

Status CreateFullPatch(const std::string& target_archive, const std::string& patch_path,
                       const DiffOptions& options, DiffStats* stats) {
  BLZ_RETURN_IF_ERROR(CheckDiffOptions(options));
  if (PathExists(patch_path)) return AlreadyExists(patch_path + ": already exists");
  Result<formats::BlzArchive> b_or = formats::BlzArchive::Open(target_archive);
  if (!b_or.ok()) return b_or.status().WithContext("target archive");
  const ArchiveSource b(*b_or);
  return CreateImpl(nullptr, b, patch_path, options, stats);
}

Result<PatchInfo> ReadPatchInfo(const std::string& patch_path) {
  BLZ_ASSIGN_OR_RETURN(MappedFile f, MappedFile::Open(patch_path));
  BLZ_ASSIGN_OR_RETURN(PatchHeader ph, internal::ParsePatch(f.bytes(), f.size(), patch_path));
  PatchInfo info;
  info.full = !ph.has_base;
  info.base_digest = ph.base_digest;
  info.target_digest = ph.target_digest;
  info.target_bytes = ph.target_size;
  info.format_version = ph.version;
  return info;
}

}  // namespace blz::patcher
