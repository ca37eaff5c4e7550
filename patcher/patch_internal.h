// Helpers shared by the two halves of the patcher's container code: patch.cc (diff: writing a
// patch) and patch_apply.cc (apply and verify: reading one). Not an interface: nothing outside
// patcher/patch*.cc includes this. Offsets are absolute byte offsets in an archive file.
#ifndef BLZ_PATCHER_PATCH_INTERNAL_H_
#define BLZ_PATCHER_PATCH_INTERNAL_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/digest.h"
#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "patcher/patch.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher::internal {

// An archive piece's bytes.
struct Span {
  uint64_t offset = 0;  // absolute, in the archive file
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  uint32_t file_index = 0;
};

// The archive's pieces in data-section order (files in order, pieces in file order).
std::vector<formats::ArchivePiece> DataOrder(const formats::ArchiveHeader& h);
Span PieceSpan(const formats::ArchiveHeader& h, formats::ArchivePiece::Kind kind, uint32_t index);
bool PieceIndexValid(const formats::ArchiveHeader& h, formats::ArchivePiece::Kind kind,
                     uint32_t index);
// Bytes per element: 1 for raw pieces, the dtype's size for tensors.
uint32_t ElemSize(const formats::ArchiveHeader& h, formats::ArchivePiece::Kind kind,
                  uint32_t index);
// "tensor 'wte'" / "raw piece of file 'config.json'", for error messages.
std::string Describe(const formats::ArchiveHeader& h, formats::ArchivePiece::Kind kind,
                     uint32_t index);
// "sha256:<hex>" of a mapped file, releasing the pages it has read as it goes (so hashing a
// large archive does not leave it all resident). `drop`: release the pages behind the hash
// (not when another thread is about to read them).
std::string DigestOf(const MappedFile& f, bool drop = true);
// Feeds `n` zero bytes to `sha`.
void HashZeros(Sha256* sha, uint64_t n);
bool PathExists(const std::string& path);
// Whether `path` names a model to read in place through a formats::PackLayout (a directory,
// or a .safetensors / .gguf file; formats::DetectModelPath) rather than an archive file
// (anything else, a missing path or a file with neither magic nor a model's name too:
// opening it as an archive reports what is wrong, kNotFound or kCorruption as before).
bool IsModelInput(const std::string& path);

// The chunk list of a span of `length` bytes: chunk j covers [j*kChunkBytes, ...).
inline uint64_t ChunkCount(uint64_t length) { return (length + kChunkBytes - 1) / kChunkBytes; }
inline uint64_t ChunkSize(uint64_t length, uint64_t j) {
  return std::min<uint64_t>(kChunkBytes, length - j * kChunkBytes);
}

// One chunk of the target: which piece (-1 = the archive prefix) and where.
struct Job {
  int64_t piece = -1;    // index into the patch's pieces, or -1 for the prefix
  uint64_t chunk = 0;    // index within the piece
  uint64_t offset = 0;   // absolute offset in the target archive
  uint64_t size = 0;     // target bytes
  uint64_t base_offset = 0;  // absolute offset in the base archive (when the piece has a base)
  bool has_base = false;
  uint32_t elem_size = 1;
  std::optional<formats::DType> dtype;  // tensors: a hint for the codecs
  // Apply: which of the base's files holds base_offset (0 for an archive; a model directory
  // read in place has one per model file, and base_offset is then an offset in that file).
  uint32_t base_file = 0;
};

// Coalesces "done with these bytes" hints for a mapped file into few madvise calls: ranges
// that continue the pending one are merged, and the pending range is handed to DropRange when
// it reaches kSpan bytes, when a range does not continue it, or at destruction.
class PageDropper {
 public:
  explicit PageDropper(const MappedFile& file) : file_(file) {}
  ~PageDropper() { Flush(); }
  PageDropper(const PageDropper&) = delete;
  PageDropper& operator=(const PageDropper&) = delete;

  void Drop(uint64_t offset, uint64_t length) {
    if (length_ > 0 && offset != offset_ + length_) Flush();
    if (length_ == 0) offset_ = offset;
    length_ += length;
    if (length_ >= kSpan) Flush();
  }
  void Flush() {
    if (length_ > 0) file_.DropRange(offset_, length_);
    length_ = 0;
  }

 private:
  static constexpr uint64_t kSpan = 64ull << 20;
  const MappedFile& file_;
  uint64_t offset_ = 0, length_ = 0;
};

}  // namespace blz::patcher::internal

#endif  // BLZ_PATCHER_PATCH_INTERNAL_H_
