// Helpers shared by the files of formats' .blz archive code (blz_archive.cc: layout, pack,
// unpack; blz_archive_verify.cc: Verify and the stored-header checks). Not part of the
// formats API.
#ifndef BLZ_FORMATS_BLZ_ARCHIVE_INTERNAL_H_
#define BLZ_FORMATS_BLZ_ARCHIVE_INTERNAL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "formats/blz_archive.h"
#include "formats/gguf.h"

namespace blz::formats::archive_internal {

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
