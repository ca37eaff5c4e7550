// Applying and verifying per-tensor patches: the reading half of patcher/patch.h (patch.cc
// writes them). Container: patcher/patch_format.h; spec: docs/patch-format.md. Each chunk is
// decoded by a worker of an ordered pipeline (core/ordered_pipeline.h) and checked before it
// is written, in order, by the calling thread; a sink gets it, in order, on a stage of its own.
#include "patcher/patch.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "formats/pack_layout.h"
#include "formats/tensor_share.h"
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
using internal::ChunkCount;
using internal::DataOrder;
using internal::Describe;
using internal::DigestOf;
using internal::ElemSize;
using internal::HashZeros;
using internal::Job;
using internal::PageDropper;
using internal::PathExists;
using internal::PieceIndexValid;
using internal::PieceSpan;
using formats::SameTensorType;
using internal::Span;

// Checks that the patch's pieces are exactly the target's pieces in data order, with chunk
// lists covering them, and that their base references fit the base archive.
Status CheckPieces(const PatchHeader& ph, const ArchiveHeader& target, const ArchiveHeader& base,
                   const std::string& what) {
  std::vector<ArchivePiece> order = DataOrder(target);
  if (ph.pieces.size() != order.size()) {
    return Corruption(what + ": the patch lists " + std::to_string(ph.pieces.size()) +
                      " pieces, the target archive has " + std::to_string(order.size()));
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const PatchPiece& p = ph.pieces[i];
    std::string f = what + ": pieces[" + std::to_string(i) + "]";
    if (p.kind != order[i].kind || p.index != order[i].index) {
      return Corruption(f + " is not the target's piece " + std::to_string(i) +
                        " in data-section order");
    }
    Span s = PieceSpan(target, p.kind, p.index);
    uint64_t total = 0;
    for (const auto& c : p.chunks) total += c.size;  // each <= kChunkBytes: no overflow
    if (p.chunks.size() != ChunkCount(s.length) || total != s.length) {
      return Corruption(f + " (" + Describe(target, p.kind, p.index) + "): chunks cover " +
                        std::to_string(total) + " bytes, the piece has " + std::to_string(s.length));
    }
    if (p.base.has_value()) {
      if (!PieceIndexValid(base, p.kind, *p.base)) {
        return Corruption(f + ": base index " + std::to_string(*p.base) +
                          " is past the base archive's " +
                          (p.kind == Kind::kRaw ? "raw pieces" : "tensors"));
      }
      if (p.kind == Kind::kTensor) {
        const auto& bt = base.tensors[*p.base];
        const auto& tt = target.tensors[p.index];
        if (!SameTensorType(bt, tt)) {
          return Corruption(f + ": base " + Describe(base, p.kind, *p.base) +
                            " does not have the dtype and shape of target " +
                            Describe(target, p.kind, p.index));
        }
      } else if (base.raws[*p.base].length != s.length) {
        return Corruption(f + ": base " + Describe(base, p.kind, *p.base) + " has " +
                          std::to_string(base.raws[*p.base].length) + " bytes, the target piece " +
                          std::to_string(s.length));
      }
    } else {
      for (size_t j = 0; j < p.chunks.size(); ++j) {
        if (CodecNeedsBase(p.chunks[j].codec)) {
          return Corruption(f + ".chunks[" + std::to_string(j) + "]: codec " +
                            std::string(CodecName(p.chunks[j].codec)) +
                            " needs a base, and the piece has none");
        }
      }
    }
  }
  return Status::Ok();
}

struct Decoded {
  std::unique_ptr<uint8_t[]> owned;  // null when `view` points into the base
  ByteSpan view;
};

// Recycles the kChunkBytes output buffers of decoded chunks. A fresh 4 MiB allocation per
// chunk is an mmap, page faults on first touch and an munmap (with a TLB shootdown on every
// other core running the process) each time: with two threads that tripled apply's system
// time. At most (window + threads) buffers are ever in flight (RunOrdered), so the pool is
// bounded by the same.
class ChunkBufferPool {
 public:
  std::unique_ptr<uint8_t[]> Get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        std::unique_ptr<uint8_t[]> b = std::move(free_.back());
        free_.pop_back();
        return b;
      }
    }
    return std::make_unique_for_overwrite<uint8_t[]>(kChunkBytes);
  }
  void Put(std::unique_ptr<uint8_t[]> b) {
    if (b == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::move(b));
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<uint8_t[]>> free_;
};


// What ApplyImpl is asked to do: apply a patch with a base, apply a full patch, or decode
// either without writing.
enum class ApplyMode : uint8_t { kWithBase, kFull, kVerify };

// VerifyPatchAgainst's target: a verified copy, and the digest the patch must name.
struct ExpectedTarget {
  MappedFile file;
  std::string digest;
};

// Where the base's pieces are: in an archive file (at their offsets in it), or in the files of
// a model directory read in place (formats::PackLayout: the archive Pack would make of it,
// never written). A full patch's is an empty archive with an empty header.
class BaseBytes {
 public:
  BaseBytes(const MappedFile* archive, const ArchiveHeader* header)
      : files_{archive}, header_(header) {}
  explicit BaseBytes(const formats::PackLayout* layout)
      : files_(layout->inputs()), header_(&layout->header()), layout_(layout) {}

  const ArchiveHeader& header() const { return *header_; }
  const std::vector<const MappedFile*>& files() const { return files_; }
  // The file (an index into files()) and the offset in it where piece (kind, index) starts.
  formats::PieceSource Locate(Kind kind, uint32_t index) const {
    if (layout_ == nullptr) return {0, PieceSpan(*header_, kind, index).offset};
    return kind == Kind::kRaw ? layout_->RawSource(index) : layout_->TensorSource(index);
  }

 private:
  std::vector<const MappedFile*> files_;
  const ArchiveHeader* header_ = nullptr;
  const formats::PackLayout* layout_ = nullptr;
};

Status Rebuild(const MappedFile& patch, const PatchHeader& ph, ByteSpan payload,
               const BaseBytes& base, const std::string& patch_path,
               const std::string& target_out, const ApplyOptions& options, ApplyStats* stats,
               TargetSink* sink, const ExpectedTarget* expected);

// Applies (or, with an empty `target_out`, only decodes and checks) `patch_path`. `base_archive`
// is "" for a full patch. `expected` (kVerify only; may be null): a verified copy of the target
// the result is compared with byte for byte instead of hashed (VerifyPatchAgainst).
Status ApplyImpl(const std::string& base_archive, const std::string& patch_path,
                 const std::string& target_out, ApplyMode mode, const ApplyOptions& options,
                 ApplyStats* stats, TargetSink* sink = nullptr,
                 const ExpectedTarget* expected = nullptr,
                 formats::PackLayout* base_layout = nullptr) {
  if (options.threads < 0) {
    return InvalidArgument("apply: threads must be >= 0 (0 = one per core), got " +
                           std::to_string(options.threads));
  }
  if (!target_out.empty() && PathExists(target_out)) {
    return AlreadyExists(target_out + ": already exists");
  }

  BLZ_ASSIGN_OR_RETURN(MappedFile patch, MappedFile::Open(patch_path));
  BLZ_ASSIGN_OR_RETURN(PatchHeader ph, internal::ParsePatch(patch.bytes(), patch.size(), patch_path));
  const ByteSpan payload = patch.bytes().subspan(ph.payload_start);

  const bool want_base = mode == ApplyMode::kWithBase ||
                         (mode == ApplyMode::kVerify && !base_archive.empty());
  if (want_base && !ph.has_base) {
    return InvalidArgument(patch_path + ": a full patch (of " + ph.target_digest +
                           ") needs no base archive; apply it without one (ApplyFullPatch)");
  }
  if (!want_base && ph.has_base) {
    return InvalidArgument(patch_path + ": the patch needs base archive " + ph.base_digest +
                           " and none was given (only a full patch applies without a base)");
  }

  // The base must be the archive the patch was made from, whatever its name. Its SHA-256 is
  // not computed up front: the rebuilt target is checked chunk by chunk and by its own SHA-256,
  // so a wrong base cannot produce a wrong output, and one hashing pass over the base (as many
  // bytes as the target, at SHA-256 speed) is saved. When the rebuild fails, the base's digest
  // is computed then, so that a wrong base is still reported as such (kDigestMismatch).
  MappedFile base;
  // The base's pieces read in place from model files: a model directory (opened here), or the
  // caller's layout (`base_layout`: an archive the local store keeps as its files).
  std::optional<formats::PackLayout> opened;
  formats::PackLayout* base_files = nullptr;
  ArchiveHeader bh;  // stays empty without a base
  BaseBytes base_bytes(&base, &bh);
  if (ph.has_base && base_layout != nullptr) {
    base_files = base_layout;
    base_bytes = BaseBytes(base_files);
  } else if (ph.has_base && internal::IsModelInput(base_archive)) {
    Result<formats::PackLayout> layout = formats::PackLayout::Open(base_archive);
    if (!layout.ok()) return layout.status().WithContext("base model");
    opened.emplace(std::move(*layout));
    base_files = &*opened;
    base_bytes = BaseBytes(base_files);
  } else if (ph.has_base) {
    Result<MappedFile> base_or = MappedFile::Open(base_archive);
    if (!base_or.ok()) return base_or.status().WithContext("base archive");
    base = std::move(*base_or);
  }
  auto wrong_base = [&]() -> std::optional<Status> {
    std::string base_digest;
    if (base_files != nullptr) {
      Status filled = base_files->hashed() ? Status::Ok() : base_files->FillHashes(nullptr);
      if (!filled.ok()) return filled.WithContext(base_archive + ": hashing the base model");
      Result<std::string> d = base_files->ArchiveDigest();
      if (!d.ok()) return d.status().WithContext(base_archive + ": hashing the base model");
      base_digest = *d;
    } else {
      base_digest = DigestOf(base);
    }
    if (base_digest == ph.base_digest) return std::nullopt;
    const char* has = base_layout != nullptr ? ": the base's files give digest "
                      : base_files != nullptr  ? ": base model packs to digest "
                                               : ": base archive has digest ";
    return DigestMismatch(base_archive + has + base_digest + ", the patch " + patch_path +
                          " needs base " + ph.base_digest);
  };
  if (ph.has_base) {
    const uint64_t base_size =
        base_files != nullptr ? base_files->header().total_size : base.size();
    if (base_size != ph.base_size) {
      if (auto s = wrong_base()) return *s;
      return Corruption(patch_path + ": base.size " + std::to_string(ph.base_size) +
                        " but the base with that digest has " + std::to_string(base_size) +
                        " bytes");
    }
  }
  if (ph.has_base && base_files == nullptr) {
    Result<ArchiveHeader> bh_or = formats::ParseArchivePrefix(base.bytes(), base.size());
    if (!bh_or.ok()) {
      if (auto s = wrong_base()) return *s;
      return bh_or.status().WithContext(base_archive);
    }
    bh = std::move(*bh_or);
  }
  Status rebuilt = Rebuild(patch, ph, payload, base_bytes, patch_path, target_out, options,
                           stats, sink, expected);
  if (!rebuilt.ok() && ph.has_base && rebuilt.code() != Code::kAlreadyExists &&
      rebuilt.code() != Code::kIOError) {
    if (auto s = wrong_base()) return *s;
  }
  return rebuilt;
}

// The rest of ApplyImpl once the base (if any) is open: decodes, checks and writes the target.
Status Rebuild(const MappedFile& patch, const PatchHeader& ph, ByteSpan payload,
               const BaseBytes& base, const std::string& patch_path,
               const std::string& target_out, const ApplyOptions& options, ApplyStats* stats,
               TargetSink* sink, const ExpectedTarget* expected) {
  const ArchiveHeader& bh = base.header();
  if (expected != nullptr && ph.target_digest != expected->digest) {
    return DigestMismatch(patch_path + ": rebuilds " + ph.target_digest + ", not " +
                          expected->digest);
  }
  if (expected != nullptr && expected->file.size() != ph.target_size) {
    return DigestMismatch(patch_path + ": rebuilds an archive of " +
                          std::to_string(ph.target_size) + " bytes, the expected one has " +
                          std::to_string(expected->file.size()));
  }
  // The target's prefix (magic, header, padding): decoded first, it says where everything goes.
  std::string what = patch_path;
  std::vector<uint8_t> prefix(ph.prefix_length);  // <= kMaxPrefixBytes (ParsePatch)
  for (size_t j = 0; j < ph.prefix_chunks.size(); ++j) {
    const PatchChunk& c = ph.prefix_chunks[j];
    if (CodecNeedsBase(c.codec)) {
      return Corruption(what + ": prefix.chunks[" + std::to_string(j) + "]: codec " +
                        std::string(CodecName(c.codec)) + " needs a base, the prefix has none");
    }
    MutableByteSpan out(prefix.data() + j * kChunkBytes, c.size);
    Status s = DecodeChunk(c.codec, ByteSpan(), payload.subspan(c.offset, c.length), 1, out);
    if (!s.ok()) return s.WithContext(what + ": archive header chunk " + std::to_string(j));
    if (Xxh3_64(out) != c.xxh3) {
      return Corruption(what + ": archive header chunk " + std::to_string(j) +
                        ": xxh3 mismatch (payload at byte offset " +
                        std::to_string(ph.payload_start + c.offset) + ")");
    }
  }
  Result<ArchiveHeader> th_or = formats::ParseArchivePrefix(prefix, ph.target_size);
  if (!th_or.ok()) return th_or.status().WithContext(what + ": target archive header");
  const ArchiveHeader& th = *th_or;
  if (th.data_start != ph.prefix_length || th.total_size != ph.target_size) {
    return Corruption(what + ": target archive header puts the data at " +
                      std::to_string(th.data_start) + " and the end at " +
                      std::to_string(th.total_size) + ", the patch says " +
                      std::to_string(ph.prefix_length) + " and " + std::to_string(ph.target_size));
  }
  BLZ_RETURN_IF_ERROR(CheckPieces(ph, th, bh, what));
  for (const PatchPiece& piece : ph.pieces) {
    Span s = PieceSpan(th, piece.kind, piece.index);
    if (s.length == 0 && s.xxh3 != Xxh3_64(ByteSpan())) {
      return Corruption(what + ": target " + Describe(th, piece.kind, piece.index) +
                        ": empty, but its xxh3 is " + Hex64(s.xxh3));
    }
  }

  std::vector<Job> jobs;
  for (size_t i = 0; i < ph.pieces.size(); ++i) {
    const PatchPiece& piece = ph.pieces[i];
    Span s = PieceSpan(th, piece.kind, piece.index);
    const formats::PieceSource from =
        piece.base ? base.Locate(piece.kind, *piece.base) : formats::PieceSource{};
    uint32_t elem = ElemSize(th, piece.kind, piece.index);
    for (uint64_t j = 0; j < piece.chunks.size(); ++j) {
      jobs.push_back({int64_t(i), j, s.offset + j * kChunkBytes, piece.chunks[j].size,
                      from.offset + j * kChunkBytes, piece.base.has_value(), elem, {},
                      from.input});
    }
  }

  // No output file when only verifying.
  std::optional<AtomicFile> out;
  if (sink != nullptr) BLZ_RETURN_IF_ERROR(sink->Begin(th));
  if (!target_out.empty()) {
    BLZ_ASSIGN_OR_RETURN(out, AtomicFile::Create(target_out));
    BLZ_RETURN_IF_ERROR(out->Truncate(ph.target_size));  // the gaps between pieces stay zero
    BLZ_RETURN_IF_ERROR(out->WriteAt(0, ByteSpan(prefix)));
  }
  // The result is checked either by its SHA-256 or, given a verified copy of the target
  // (`expected`), byte for byte against it: every decoded byte, and the gaps between pieces
  // (zeros in the rebuilt archive).
  const ByteSpan want = expected != nullptr ? expected->file.bytes() : ByteSpan();
  std::optional<PageDropper> drop_expected;
  if (expected != nullptr) drop_expected.emplace(expected->file);
  auto differs = [&](uint64_t at, ByteSpan got) {
    return std::memcmp(want.data() + at, got.data(), got.size()) != 0;
  };
  auto not_zero = [&](uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) {
      if (want[i] != 0) return true;
    }
    return false;
  };
  auto mismatch = [&](const std::string& at) {
    return DigestMismatch(at + ": the rebuilt bytes differ from the expected archive " +
                          ph.target_digest);
  };
  Sha256 sha;
  if (expected == nullptr) {
    sha.Update(ByteSpan(prefix));
  } else if (differs(0, ByteSpan(prefix))) {
    return mismatch(what + ": archive header");
  }
  uint64_t hashed = prefix.size();
  if (options.progress) options.progress(hashed, ph.target_size);
  // Kept for stats->target_prefix, else freed now.
  std::vector<uint8_t> kept_prefix;
  if (stats != nullptr) kept_prefix = std::move(prefix);
  prefix.clear();
  prefix.shrink_to_fit();

  ChunkBufferPool buffers;
  PageDropper drop_patch(patch);
  std::vector<std::unique_ptr<PageDropper>> drop_base;  // one per base file
  for (const MappedFile* f : base.files()) drop_base.push_back(std::make_unique<PageDropper>(*f));
  auto where = [&](const Job& job) {
    const PatchPiece& p = ph.pieces[size_t(job.piece)];
    return what + ": " + Describe(th, p.kind, p.index) + " chunk " + std::to_string(job.chunk);
  };
  std::function<Result<Decoded>(size_t)> produce = [&](size_t i) -> Result<Decoded> {
    const Job& job = jobs[i];
    const PatchChunk& c = ph.pieces[size_t(job.piece)].chunks[job.chunk];
    ByteSpan b = job.has_base
                     ? base.files()[job.base_file]->bytes().subspan(job.base_offset, job.size)
                     : ByteSpan();
    Decoded d;
    if (c.codec == Codec::kIdentical) {
      if (b.size() != job.size) return Corruption(where(job) + ": identical chunk without a base");
      d.view = b;
    } else {
      d.owned = buffers.Get();  // job.size <= kChunkBytes (ParsePatch)
      MutableByteSpan buf(d.owned.get(), job.size);
      Status s = DecodeChunk(c.codec, b, payload.subspan(c.offset, c.length), job.elem_size, buf);
      if (!s.ok()) {
        return s.WithContext(where(job) + " (payload at byte offset " +
                             std::to_string(ph.payload_start + c.offset) + ")");
      }
      d.view = buf;
    }
    uint64_t got = Xxh3_64(d.view);
    if (got != c.xxh3) {
      return Corruption(where(job) + ": decoded bytes have xxh3 " + Hex64(got) + ", expected " +
                        Hex64(c.xxh3) + " (payload at byte offset " +
                        std::to_string(ph.payload_start + c.offset) + ")");
    }
    return d;
  };

  // What a consumed chunk holds until nobody reads it any more: its buffer, and the patch's
  // and base's pages it was decoded from (dropped behind the apply).
  auto release = [&](size_t i, Decoded& d) {
    const Job& job = jobs[i];
    buffers.Put(std::move(d.owned));
    if (job.has_base) drop_base[job.base_file]->Drop(job.base_offset, job.size);
    const PatchChunk& c = ph.pieces[size_t(job.piece)].chunks[job.chunk];
    drop_patch.Drop(ph.payload_start + c.offset, c.length);
  };
  // The sink (the model files a pull writes, their SHA-256 in a snapshot) runs on a stage of
  // its own, so that its writes and hashes overlap the archive's SHA-256 and write below
  // instead of following them on this thread: they were the 1 GB patch pull's critical path
  // (issue 28). At most kSinkChunks decoded chunks wait for it.
  struct SinkItem {
    size_t job;
    Decoded d;
  };
  constexpr size_t kSinkChunks = 4;
  std::optional<SerialStage<SinkItem>> sink_stage;
  if (sink != nullptr) {
    sink_stage.emplace(
        kSinkChunks,
        [&](SinkItem& it) -> Status {
          const Job& job = jobs[it.job];
          const PatchPiece& piece = ph.pieces[size_t(job.piece)];
          return sink->Data({piece.kind, piece.index}, job.chunk * kChunkBytes, it.d.view);
        },
        [&](SinkItem& it) { release(it.job, it.d); });
  }

  // Each chunk was checked against its xxh3 when decoded, and the whole file is checked
  // against the target digest below, so the pieces' own xxh3 (in the target header) are not
  // recomputed: that was a second xxh3 pass over every byte (2.5% of a 1-thread apply).
  std::function<Status(size_t, Decoded&)> consume = [&](size_t i, Decoded& d) -> Status {
    const Job& job = jobs[i];
    if (job.offset < hashed) return Internal(where(job) + ": pieces out of order");
    if (expected == nullptr) {
      HashZeros(&sha, job.offset - hashed);
      sha.Update(d.view);
    } else {
      if (not_zero(hashed, job.offset) || differs(job.offset, d.view)) return mismatch(where(job));
      drop_expected->Drop(hashed, job.offset + job.size - hashed);
    }
    hashed = job.offset + job.size;
    if (out.has_value()) BLZ_RETURN_IF_ERROR(out->WriteAt(job.offset, d.view));
    if (sink_stage.has_value()) {
      BLZ_RETURN_IF_ERROR(sink_stage->Push({i, std::move(d)}));
    } else {
      release(i, d);
    }
    if (options.progress) options.progress(hashed, ph.target_size);
    return Status::Ok();
  };
  Status rebuilt = RunOrdered<Decoded>(jobs.size(), ResolveThreads(options.threads), produce,
                                       consume);
  if (sink_stage.has_value()) {
    if (!rebuilt.ok()) sink_stage->Cancel();
    // The sink's error first: it is about an earlier chunk than anything after it, as when
    // the sink ran on this thread.
    BLZ_RETURN_IF_ERROR(sink_stage->Finish());
  }
  BLZ_RETURN_IF_ERROR(rebuilt);
  std::string got;
  if (expected == nullptr) {
    HashZeros(&sha, ph.target_size - hashed);
    got = MakeDigest(sha.FinishHex());
  } else {
    if (not_zero(hashed, ph.target_size)) return mismatch(what + ": the archive's end");
    got = ph.target_digest;  // equal, byte for byte, to the verified archive of that digest
  }
  if (options.progress) options.progress(ph.target_size, ph.target_size);
  if (got != ph.target_digest) {
    return DigestMismatch(what + ": the rebuilt archive has digest " + got +
                          ", the patch names target " + ph.target_digest);
  }
  if (out.has_value()) BLZ_RETURN_IF_ERROR(out->Commit(/*no_replace=*/true));
  if (stats != nullptr) {
    stats->target_digest = got;
    stats->target_bytes = ph.target_size;
    stats->target_prefix.assign(reinterpret_cast<const char*>(kept_prefix.data()),
                                kept_prefix.size());
  }
  return Status::Ok();
}

}  // namespace

Status ApplyPatch(const std::string& base_archive, const std::string& patch_path,
                  const std::string& target_out, ApplyStats* stats,
                  const ApplyOptions& options) {
  if (target_out.empty()) return InvalidArgument("apply: no output path given");
  return ApplyImpl(base_archive, patch_path, target_out, ApplyMode::kWithBase, options, stats);
}

Status ApplyFullPatch(const std::string& patch_path, const std::string& target_out,
                      ApplyStats* stats, const ApplyOptions& options) {
  if (target_out.empty()) return InvalidArgument("apply: no output path given");
  return ApplyImpl("", patch_path, target_out, ApplyMode::kFull, options, stats);
}

Status VerifyPatch(const std::string& base_archive, const std::string& patch_path,
                   ApplyStats* stats, const ApplyOptions& options) {
  return ApplyImpl(base_archive, patch_path, "", ApplyMode::kVerify, options, stats);
}

Status VerifyPatchAgainst(const std::string& base_archive, const std::string& patch_path,
                          const std::string& target_archive, const std::string& target_digest,
                          ApplyStats* stats, const ApplyOptions& options) {
  Result<MappedFile> file = MappedFile::Open(target_archive);
  if (!file.ok()) return file.status().WithContext("expected target archive");
  const ExpectedTarget expected{std::move(*file), target_digest};
  return ApplyImpl(base_archive, patch_path, "", ApplyMode::kVerify, options, stats, nullptr,
                   &expected);
}

Status ApplyPatchToSink(const std::string& base_archive, const std::string& patch_path,
                        const std::string& target_out, TargetSink* sink, ApplyStats* stats,
                        const ApplyOptions& options) {
  if (sink == nullptr) return InvalidArgument("apply: no sink given");
  return ApplyImpl(base_archive, patch_path, target_out,
                   target_out.empty() ? ApplyMode::kVerify : ApplyMode::kWithBase, options, stats,
                   sink);
}

Status ApplyPatchToSink(formats::PackLayout* base, const std::string& base_name,
                        const std::string& patch_path, const std::string& target_out,
                        TargetSink* sink, ApplyStats* stats, const ApplyOptions& options) {
  if (sink == nullptr) return InvalidArgument("apply: no sink given");
  if (base == nullptr) return InvalidArgument("apply: no base layout given");
  return ApplyImpl(base_name, patch_path, target_out,
                   target_out.empty() ? ApplyMode::kVerify : ApplyMode::kWithBase, options, stats,
                   sink, nullptr, base);
}

Status ApplyFullPatchToSink(const std::string& patch_path, const std::string& target_out,
                            TargetSink* sink, ApplyStats* stats, const ApplyOptions& options) {
  if (sink == nullptr) return InvalidArgument("apply: no sink given");
  return ApplyImpl("", patch_path, target_out,
                   target_out.empty() ? ApplyMode::kVerify : ApplyMode::kFull, options, stats,
                   sink);
}

}  // namespace blz::patcher
