// BlzArchive::Verify and the checks of the stored safetensors/GGUF headers
// (docs/blz-format.md rules 12-16); split from blz_archive.cc.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "formats/blz_archive_check.h"
#include "formats/blz_archive_internal.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/pack_layout.h"
#include "formats/safetensors.h"

namespace blz::formats {

using archive_internal::ForEachPiece;
using archive_internal::GgufTensorDTypeShape;
using archive_internal::Num;
using archive_internal::PieceLabel;
using archive_internal::Quote;

namespace {

// Bytes hashed per step (and released behind, see PassMarks).
constexpr size_t kCopyChunk = 8u << 20;

}  // namespace

// Rule 16 of docs/blz-format.md: the stored GGUF header describes exactly the file's pieces.
namespace {

// `A` is a BlzArchive or a PackLayout (header(), RawData(index)); `ap` names it in errors.
template <class A>
Status CheckGgufPieces(const A& archive, const std::string& ap, const ArchiveFile& f) {
  const ArchiveHeader& h = archive.header();
  const ArchiveRaw& raw = h.raws[f.pieces[0].index];
  const std::string at = " (raw piece at byte offset " + Num(h.data_start + raw.offset) + ")";
  const ByteSpan head = archive.RawData(f.pieces[0].index);
  auto parsed = ParseGguf(head, GgufMode::kHeaderOnly, f.path);
  if (!parsed.ok()) return parsed.status().WithContext(ap + at);
  const GgufFile& g = *parsed;
  auto bad = [&](const std::string& what) {
    return Corruption(ap + ": file " + Quote(f.path) + at + ": " + what);
  };
  auto all_zero = [](ByteSpan b) {
    return std::all_of(b.begin(), b.end(), [](uint8_t c) { return c == 0; });
  };
  const std::vector<GgufTensorInfo>& ts = g.header.tensors;
  const bool head_ok = ts.empty() ? (head.size() == g.header_bytes || head.size() == g.data_start)
                                  : head.size() == g.data_start;
  if (!head_ok) {
    return bad("the GGUF header piece is " + Num(head.size()) + " bytes, but the header ends at " +
               Num(g.header_bytes) + " and the data section starts at " + Num(g.data_start));
  }
  if (!all_zero(head.subspan(g.header_bytes))) {
    return bad("non-zero padding between the GGUF header and its data section");
  }
  size_t k = 1;
  for (size_t i = 0; i < ts.size(); ++i) {
    const GgufTensorInfo& t = ts[i];
    if (k >= f.pieces.size() || f.pieces[k].kind != ArchivePiece::Kind::kTensor) {
      return bad("GGUF tensor " + Quote(t.name) + " (number " + Num(i) +
                 ") has no tensor piece at pieces[" + Num(k) + "]");
    }
    const ArchiveTensor& a = h.tensors[f.pieces[k].index];
    DType dtype;
    std::vector<uint64_t> shape;
    GgufTensorDTypeShape(t, &dtype, &shape);
    if (a.name != t.name || a.ggml_type != GgmlTypeName(t.type) || a.dtype != dtype ||
        a.shape != shape || a.length != t.n_bytes) {
      return bad("GGUF tensor " + Quote(t.name) + " does not match archive tensor " +
                 Quote(a.name) + " (name, ggml type, dtype, shape or length)");
    }
    ++k;
    const uint64_t end = t.offset + t.n_bytes;  // the header-only parse checked these sums
    const uint64_t next = i + 1 < ts.size() ? ts[i + 1].offset : g.data_bytes;
    const uint64_t pad = next - end;
    if (pad > 0 && k < f.pieces.size() && f.pieces[k].kind == ArchivePiece::Kind::kRaw) {
      const ByteSpan p = archive.RawData(f.pieces[k].index);
      if (p.size() != pad || !all_zero(p)) {
        return bad("the padding piece after GGUF tensor " + Quote(t.name) + " must be " +
                   Num(pad) + " zero bytes (alignment " + Num(g.alignment) + ")");
      }
      ++k;
    } else if (pad > 0 && i + 1 < ts.size()) {
      return bad("the " + Num(pad) + "-byte padding after GGUF tensor " + Quote(t.name) +
                 " is missing");
    }
  }
  if (k != f.pieces.size()) {
    return bad("pieces[" + Num(k) + "] and after are not part of the GGUF layout");
  }
  return Status::Ok();
}

}  // namespace

namespace {

template <class A>
Status CheckStoredHeader(const A& archive, const std::string& ap, size_t fi) {
  const ArchiveHeader& h = archive.header();
  const ArchiveFile& f = h.files[fi];
  if (f.kind == "safetensors") {
    // The stored safetensors header must describe exactly the stored tensors.
    const ArchiveRaw& raw = h.raws[f.pieces[0].index];
    auto sh = ParseSafetensorsHeader(archive.RawData(f.pieces[0].index), f.size, f.path);
    const std::string at = " (raw piece at byte offset " + Num(h.data_start + raw.offset) + ")";
    if (!sh.ok()) return sh.status().WithContext(ap + at);
    if (sh->data_start != raw.length || sh->tensors.size() + 1 != f.pieces.size()) {
      return Corruption(ap + ": file " + Quote(f.path) + at +
                        ": its safetensors header does not match the archive's tensor list");
    }
    for (size_t k = 0; k < sh->tensors.size(); ++k) {
      const SafetensorsTensor& st = sh->tensors[k];
      const ArchiveTensor& at_t = h.tensors[f.pieces[k + 1].index];
      if (st.name != at_t.name || st.dtype != at_t.dtype || st.shape != at_t.shape ||
          st.bytes() != at_t.length) {
        return Corruption(ap + ": file " + Quote(f.path) + at + ": safetensors tensor " +
                          Quote(st.name) + " does not match archive tensor " +
                          Quote(at_t.name) + " (name, dtype, shape or length)");
      }
    }
  }
  if (f.kind == "gguf") BLZ_RETURN_IF_ERROR(CheckGgufPieces(archive, ap, f));
  return Status::Ok();
}

}  // namespace

Status CheckStoredHeaders(const BlzArchive& archive) {
  for (size_t i = 0; i < archive.header().files.size(); ++i) {
    BLZ_RETURN_IF_ERROR(CheckStoredHeader(archive, archive.path(), i));
  }
  return Status::Ok();
}

Status CheckStoredHeaders(const PackLayout& layout, const std::string& what) {
  for (size_t i = 0; i < layout.header().files.size(); ++i) {
    BLZ_RETURN_IF_ERROR(CheckStoredHeader(layout, what, i));
  }
  return Status::Ok();
}

namespace {

// Pages both passes of Verify have read are released behind the slower one (bounds the RSS:
// MappedFile::DropRange); a pass that ends or stops no longer holds any back.
class PassMarks {
 public:
  PassMarks(const MappedFile& file, uint64_t data_start) : file_(file), base_(data_start) {}
  // Pass `which` (0 or 1) has read the data section up to offset `end`.
  void Reached(int which, uint64_t end) {
    std::lock_guard<std::mutex> lock(mu_);
    reached_[which] = end;
    const uint64_t both = std::min(reached_[0], reached_[1]);
    if (both > dropped_ && both != UINT64_MAX) {
      file_.DropRange(size_t(base_ + dropped_), size_t(both - dropped_));
      dropped_ = both;
    }
  }
  void Ended(int which) { Reached(which, UINT64_MAX); }

 private:
  const MappedFile& file_;
  const uint64_t base_;
  std::mutex mu_;
  uint64_t reached_[2] = {0, 0};
  uint64_t dropped_ = 0;
};

// What one pass of Verify checks: the pieces (padding, xxh3-64, tensor SHA-256) and/or the
// files (SHA-256, stored header).
enum PassChecks : unsigned { kPieces = 1, kFiles = 2 };

// The first error a pass found, and the index of the file it is in. Within a file, a piece's
// error comes before the file's own (its SHA-256 and stored header are checked at its end), so
// of two passes' errors the one a single pass would have met first is the one with the lower
// file index, the pieces pass's on a tie (Verify's contract: the first bad tensor or file).
struct PassError {
  Status status;
  size_t file = SIZE_MAX;
};

}  // namespace

Status BlzArchive::Verify(const ProgressCallback& progress, uint64_t two_pass_bytes) const {
  const ArchiveHeader& h = header_;
  const uint64_t data_total = h.total_size - h.data_start;
  const std::string& ap = file_.path();
  file_.AdviseSequential();

  // A large archive is checked by two passes on two threads: the files' SHA-256 on one, the
  // pieces' xxh3-64 and SHA-256 on the other (the SHA-256 passes take about the same time,
  // xxh3 is ten times faster); a small one by a single pass doing both.
  const bool two_passes = data_total >= two_pass_bytes;
  PassMarks marks(file_, h.data_start);
  // The failing file of each pass (SIZE_MAX: none yet), read by the other to stop early.
  std::atomic<size_t> failed_at[2] = {SIZE_MAX, SIZE_MAX};

  auto run_pass = [&](int which, unsigned checks) -> PassError {
    const bool pieces = (checks & kPieces) != 0;
    const bool files = (checks & kFiles) != 0;
    const int other = 1 - which;
    uint64_t prev_end = 0;
    Sha256 file_sha;
    Sha256 tensor_sha;
    size_t current_file = SIZE_MAX;
    PassError error;
    auto finish_file = [&](size_t fi) -> Status {
      const ArchiveFile& f = h.files[fi];
      const std::string got = file_sha.FinishHex();
      if (got != f.sha256) {
        return Corruption(ap + ": file " + Quote(f.path) + " (pieces from byte offset " +
                          Num(h.data_start + (f.pieces[0].kind == ArchivePiece::Kind::kRaw
                                                  ? h.raws[f.pieces[0].index].offset
                                                  : h.tensors[f.pieces[0].index].offset)) +
                          "): SHA-256 is " + got + ", header says " + f.sha256);
      }
      return CheckStoredHeader(*this, path(), fi);
    };
    // Whether the other pass's error already comes before anything this one can still find
    // in file `fi` (see PassError).
    auto outranked = [&](size_t fi) {
      const size_t theirs = failed_at[other].load(std::memory_order_relaxed);
      return theirs < fi || (theirs == fi && !pieces);
    };
    // Set when this pass stops because the other's error comes first: not an error of its own.
    bool stopped = false;
    Status walk = ForEachPiece(
        h, [&](size_t fi, const ArchivePiece& p, uint64_t off, uint64_t len) -> Status {
          if (outranked(fi)) {
            stopped = true;
            return Internal("stopped");
          }
          if (fi != current_file) {
            if (current_file != SIZE_MAX && files) {
              if (Status s = finish_file(current_file); !s.ok()) {
                error.file = current_file;
                return s;
              }
            }
            current_file = fi;
          }
          error.file = fi;
          if (pieces) {
            // Padding before the piece must be zero.
            for (uint64_t i = prev_end; i < off; ++i) {
              if (file_.data()[h.data_start + i] != 0) {
                return Corruption(ap + ": non-zero padding at byte offset " +
                                  Num(h.data_start + i) + " before " + PieceLabel(h, fi, p));
              }
            }
          }
          prev_end = off + len;
          const ByteSpan data = file_.bytes().subspan(h.data_start + off, len);
          Xxh3Stream xxh;
          const bool is_tensor = p.kind == ArchivePiece::Kind::kTensor;
          for (size_t done = 0; done < data.size(); done += kCopyChunk) {
            const ByteSpan chunk = data.subspan(done, std::min(kCopyChunk, data.size() - done));
            if (pieces) {
              xxh.Update(chunk);
              if (is_tensor) tensor_sha.Update(chunk);
            }
            if (files) file_sha.Update(chunk);
            marks.Reached(which, off + done + chunk.size());
            if (progress && pieces) progress(off + done + chunk.size(), data_total);
          }
          if (!pieces) return Status::Ok();
          const uint64_t want_xxh = is_tensor ? h.tensors[p.index].xxh3 : h.raws[p.index].xxh3;
          const std::string where =
              ap + ": " + PieceLabel(h, fi, p) + " at byte offset " + Num(h.data_start + off);
          if (xxh.Digest() != want_xxh) {
            return Corruption(where + ": xxh3-64 is " + Hex64(xxh.Digest()) +
                              ", header says " + Hex64(want_xxh));
          }
          if (is_tensor) {
            const std::string got = tensor_sha.FinishHex();
            if (got != h.tensors[p.index].sha256) {
              return Corruption(where + ": SHA-256 is " + got + ", header says " +
                                h.tensors[p.index].sha256);
            }
          }
          return Status::Ok();
        });
    if (walk.ok() && files && current_file != SIZE_MAX) {
      // Files without pieces cannot exist (every kind has at least one): every file is checked.
      if (outranked(current_file)) {
        stopped = true;
      } else {
        error.file = current_file;
        walk = finish_file(current_file);
      }
    }
    marks.Ended(which);
    if (stopped || walk.ok()) return {};
    error.status = std::move(walk);
    failed_at[which].store(error.file, std::memory_order_relaxed);
    return error;
  };

  if (!two_passes) {
    marks.Ended(1);
    PassError e = run_pass(0, kPieces | kFiles);
    if (!e.status.ok()) return e.status;
  } else {
    PassError file_error;
    std::thread files_pass([&] { file_error = run_pass(1, kFiles); });
    PassError piece_error = run_pass(0, kPieces);
    files_pass.join();
    if (!piece_error.status.ok() && piece_error.file <= file_error.file) return piece_error.status;
    if (!file_error.status.ok()) return file_error.status;
    if (!piece_error.status.ok()) return piece_error.status;
  }
  if (progress) progress(data_total, data_total);
  return Status::Ok();
}

}  // namespace blz::formats
