// Helpers shared by the files of formats' .blz archive code (blz_archive.cc: layout, pack,
// unpack; blz_archive_verify.cc: Verify and the stored-header checks). Not part of the
// formats API.
#ifndef BLZ_FORMATS_BLZ_ARCHIVE_INTERNAL_H_
#define BLZ_FORMATS_BLZ_ARCHIVE_INTERNAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress_fn.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "formats/gguf.h"

namespace blz::formats::archive_internal {

inline constexpr uint8_t kMagic[8] = {'B', 'L', 'Z', 'A', 'R', 'C', 'H', '\n'};
inline constexpr uint64_t kFixedHeaderBytes = 24;  // magic, version, flags, header length
// Pieces are copied and hashed in chunks of this size, so memory stays bounded.
inline constexpr size_t kCopyChunk = 8u << 20;
inline constexpr std::string_view kZeroSha256 =
    "0000000000000000000000000000000000000000000000000000000000000000";

// The header JSON exactly as blz writes it: compact, keys in a fixed order.
std::string HeaderJson(const ArchiveHeader& h);
// The 24-byte fixed header followed by the JSON and zero padding up to data_start.
std::string PrefixBytes(const std::string& json, uint64_t data_start);
// The last component of `path` (trailing slashes ignored).
std::string BaseName(const std::string& path);
// Whether anything (a dangling symlink too) is at `path`.
bool PathExists(const std::string& path);

// Counts the work done for a progress callback (none: counts only).
struct WorkCounter {
  const ProgressCallback& fn;
  uint64_t total = 0;
  uint64_t done = 0;
  void Add(uint64_t n) {
    done += n;
    if (fn) fn(done, total);
  }
};

// Decimal text of `v`, for messages.
std::string Num(uint64_t v);

// `s` in single quotes, cut to 200 bytes (with "...") for messages.
std::string Quote(std::string_view s);

// The archive dtype and shape of a GGUF tensor (docs/blz-format.md section 2.3): plain ggml
// types keep their element type with the GGUF dims reversed (outermost first); block-quantized
// types are U8 bytes of shape [n_bytes].
void GgufTensorDTypeShape(const GgufTensorInfo& t, DType* dtype, std::vector<uint64_t>* shape);

// "tensor 'NAME' of file 'PATH'" or "raw piece N of file 'PATH'", for messages.
std::string PieceLabel(const ArchiveHeader& h, size_t fi, const ArchivePiece& p);

// Walks the data section in header order, calling fn(file_index, piece, offset, length) for each
// piece. Assumes a header that passed ParseArchivePrefix.
template <typename Fn>
Status ForEachPiece(const ArchiveHeader& h, Fn&& fn) {
  for (size_t fi = 0; fi < h.files.size(); ++fi) {
    for (const ArchivePiece& p : h.files[fi].pieces) {
      uint64_t off, len;
      if (p.kind == ArchivePiece::Kind::kRaw) {
        off = h.raws[p.index].offset;
        len = h.raws[p.index].length;
      } else {
        off = h.tensors[p.index].offset;
        len = h.tensors[p.index].length;
      }
      BLZ_RETURN_IF_ERROR(fn(fi, p, off, len));
    }
  }
  return Status::Ok();
}

}  // namespace blz::formats::archive_internal

#endif  // BLZ_FORMATS_BLZ_ARCHIVE_INTERNAL_H_
