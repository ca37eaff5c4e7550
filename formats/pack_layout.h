// A model directory (or a single .safetensors / .gguf file) seen as the .blz archive that Pack
// (formats/blz_archive.h) would make of it, without writing it: the archive's layout, and where
// each of its pieces lies in the input files. Pack is this plus copying and hashing. `blz apply`
// reads a base directory through it without packing it (a patch's base pieces are read straight
// from the model files, patcher/patch.h), since apply never needs the base's digest unless the
// result fails; `blz diff` reads both sides through it, hashed (FillHashes) but never written.
//
// The layout is exact before any byte is hashed: hashes have fixed-width text forms in the
// header, so data_start, every piece's offset and total_size do not depend on them.
// FromArchivePrefix lays a stored archive header over the model files it describes instead:
// the archive rebuilt from its files: how the local store reads a version it keeps as its files
// and the header rather than as a second copy of every byte (client/local_store.h, issue 28).
#ifndef BLZ_FORMATS_PACK_LAYOUT_H_
#define BLZ_FORMATS_PACK_LAYOUT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/file_util.h"
#include "core/mmap_file.h"
#include "core/status.h"
#include "formats/blz_archive.h"

namespace blz::formats {

// Where one archive piece's bytes are in the inputs.
struct PieceSource {
  uint32_t input = 0;  // index into PackLayout::inputs() (= the piece's file_index)
  uint64_t offset = 0;  // byte offset inside that input file
};

class PackLayout {
 public:
  // Lists and opens (memory-maps) the input as Pack does: a directory's model files
  // (formats/model_dir.h: it must hold a *.safetensors or *.gguf file; sharded indexes are
  // checked), or one .safetensors / .gguf file; safetensors and GGUF files are parsed strictly.
  // Nothing is hashed or written. Errors: those of Pack before it writes (kNotFound,
  // kInvalidArgument naming the input, the parsers' kCorruption naming the file and byte
  // offset, kTooLarge).
  static Result<PackLayout> Open(const std::string& input);

  // The archive whose prefix (magic, header, padding: its first data_start bytes, exactly as
  // stored) is `prefix` and whose total size is `total_size`, laid over `files` (one path per
  // header file, in header order, each holding that file's bytes): the archive read back from
  // the model files it was unpacked to, byte for byte, whichever blz packed it (the header is
  // taken as it is, never re-derived by scanning the files). hashed() is true: the header's
  // hashes are the archive's own claims, not checked here (ArchiveDigest proves the whole).
  // Errors: ParseArchivePrefix's (kCorruption naming the field); kInvalidArgument when the
  // number of paths is not the header's number of files; kCorruption naming the file when its
  // size is not the header's; MappedFile::Open's (kNotFound, kIOError).
  static Result<PackLayout> FromArchivePrefix(ByteSpan prefix, uint64_t total_size,
                                              const std::vector<std::string>& files);

  PackLayout(PackLayout&&) noexcept;
  PackLayout& operator=(PackLayout&&) noexcept;
  ~PackLayout();

  // The header Pack would write, with every hash field zero (files' and tensors' sha256 all
  // '0', xxh3 0) until FillHashes. data_start and total_size are exact.
  const ArchiveHeader& header() const { return header_; }
  // The input files, in header().files order (each mapped whole).
  const std::vector<const MappedFile*>& inputs() const { return inputs_; }
  // Where raw piece `index` / tensor `index` lies in the inputs (the index is header()'s; the
  // caller checks it is in range).
  PieceSource RawSource(uint32_t index) const { return raw_sources_[index]; }
  PieceSource TensorSource(uint32_t index) const { return tensor_sources_[index]; }
  ByteSpan RawData(uint32_t index) const;
  ByteSpan TensorData(uint32_t index) const;

  // Reads every input byte once, filling the header's hashes (each piece's xxh3-64, each
  // tensor's and each file's SHA-256). When `out` is not null each byte read is also written
  // to it at its archive offset (Pack). `progress` (may be null) sees the input bytes read, of
  // every input byte. Errors: kIOError from `out`; kInternal if an input's size is not the
  // layout's.
  Status FillHashes(AtomicFile* out, const ProgressCallback& progress = nullptr);
  bool hashed() const { return hashed_; }

  // The archive's bytes before the data section (magic, header JSON, padding), as Pack writes
  // them: final only once hashed().
  const std::string& PrefixBytes() const { return prefix_; }

  // The archive's bytes [offset, offset + length) without a copy, when they lie inside the
  // prefix or inside one piece (a span of PrefixBytes() or of an input's mapping, valid while
  // the layout lives); nullopt otherwise (across pieces, in the padding between them, or
  // outside the archive).
  std::optional<ByteSpan> Direct(uint64_t offset, uint64_t length) const;
  // Copies the archive's bytes [offset, offset + length) to out[0, length): prefix, pieces and
  // the zero padding between them. kInvalidArgument (overflow-checked) outside the archive.
  Status ReadInto(uint64_t offset, uint64_t length, uint8_t* out) const;

  // The digest ("sha256:<hex>") of the archive Pack would write, computed without writing it:
  // the SHA-256 of the prefix, every piece and the zero padding between them (one more read of
  // every input byte). Needs hashed() (kInternal otherwise). Thread-safe with other const
  // calls.
  Result<std::string> ArchiveDigest() const;

 private:
  PackLayout();
  struct Input;  // pack_layout.cc: one opened input file
  std::vector<std::unique_ptr<Input>> owned_;
  std::vector<const MappedFile*> inputs_;
  ArchiveHeader header_;
  std::vector<PieceSource> raw_sources_, tensor_sources_;
  // Every piece by its absolute archive offset, in data order (= offset order).
  struct Placed {
    uint64_t offset = 0;  // absolute, in the archive
    uint64_t length = 0;
    ArchivePiece piece;
  };
  std::vector<Placed> placed_;
  // Fills placed_ from `h`'s pieces (a header that passed ParseArchivePrefix or was laid out).
  Status PlacePieces(const ArchiveHeader& h);
  std::string prefix_;
  bool hashed_ = false;
  // The piece whose bytes contain absolute offset `at` (null in the prefix or the padding).
  const Placed* PieceAt(uint64_t at) const;
  ByteSpan PieceData(const ArchivePiece& p) const;
};

}  // namespace blz::formats

#endif  // BLZ_FORMATS_PACK_LAYOUT_H_
