// The .blz archive, format version 1: one verifiable file holding every file of a model
// directory (safetensors shards, config, tokenizer, ...) such that each can be rebuilt byte for
// byte. Specified in docs/blz-format.md; summary:
//
//   0   magic "BLZARCH\n" (42 4C 5A 41 52 43 48 0A)
//   8   u32 LE format version (1)
//   12  u32 LE flags (0)
//   16  u64 LE header length N (<= kMaxArchiveHeaderBytes)
//   24  header: N bytes of compact UTF-8 JSON, written by blz in a fixed key order
//   24+N  zero bytes up to the next multiple of 64: the data section starts there (data_start)
//   data section: every raw piece and tensor, each at an offset (relative to data_start) that is
//   a multiple of 64, in header order (files in order, pieces in file order), zero bytes between;
//   the file ends at the end of the last piece.
//
// Each original file is a list of pieces: a "raw" piece (bytes stored verbatim, e.g. a whole
// config.json, a safetensors file's 8-byte length + JSON header, a GGUF file's header and
// padding) or a "tensor" piece. Concatenating a file's pieces gives the original file exactly.
//
// The archive is deterministic: the same input directory gives the same bytes. Its SHA-256 (the
// whole file) is the model version's digest.
#ifndef BLZ_FORMATS_BLZ_ARCHIVE_H_
#define BLZ_FORMATS_BLZ_ARCHIVE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/mmap_file.h"
#include "core/progress_fn.h"
#include "core/status.h"
#include "formats/dtype.h"

namespace blz::formats {

inline constexpr uint32_t kArchiveVersion = 1;
inline constexpr uint64_t kArchiveAlignment = 64;
inline constexpr uint64_t kMaxArchiveHeaderBytes = 256ull << 20;

struct ArchiveTensor {
  std::string name;
  // GGUF tensors: dtype is the plain ggml type's DType (f32 -> F32, f16 -> F16, ...) with shape
  // = the GGUF dims reversed (outermost first, as for safetensors); for block-quantized ggml
  // types dtype is U8 and shape is [length] (the tensor is opaque bytes).
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint64_t offset = 0;  // relative to data_start; multiple of 64
  uint64_t length = 0;  // bytes = product(shape) * DTypeSize(dtype)
  uint64_t xxh3 = 0;    // xxh3-64 of the bytes
  std::string sha256;   // hex SHA-256 of the bytes
  uint32_t file_index = 0;  // the file it belongs to
  // Tensors of "gguf" files only: ggml's type name ("f32", "q4_K", ...; formats/ggml_types.h).
  // Empty for safetensors tensors.
  std::string ggml_type;
};

struct ArchiveRaw {
  uint64_t offset = 0;  // relative to data_start; multiple of 64
  uint64_t length = 0;
  uint64_t xxh3 = 0;
  uint32_t file_index = 0;
};

struct ArchivePiece {
  enum class Kind : uint8_t { kRaw, kTensor };
  Kind kind = Kind::kRaw;
  uint32_t index = 0;  // into raws or tensors
};

struct ArchiveFile {
  std::string path;    // relative, '/'-separated, passes IsSafeRelativePath
  std::string kind;    // "file", "safetensors" or "gguf"
  uint64_t size = 0;   // bytes of the original file
  std::string sha256;  // hex SHA-256 of the original file
  std::vector<ArchivePiece> pieces;
};

struct ArchiveHeader {
  std::vector<ArchiveFile> files;   // sorted by path (bytewise)
  std::vector<ArchiveRaw> raws;     // in data-section order
  std::vector<ArchiveTensor> tensors;  // in data-section order
  uint64_t data_start = 0;  // absolute offset of the data section
  uint64_t total_size = 0;  // size of the whole archive file
};

// Parses and validates the archive prefix (magic .. header .. padding). `prefix` must hold at
// least the first data_start bytes; `file_size` is the size of the whole archive (checked
// against the layout: pieces in order, 64-aligned, inside the file, ending exactly at its end).
// Errors name the field and byte offset: kCorruption, kTooLarge, kUnsupported (version).
Result<ArchiveHeader> ParseArchivePrefix(ByteSpan prefix, uint64_t file_size);

// An opened (memory-mapped) archive. Open() validates the layout; data hashes are checked by
// Verify() (or per tensor by the caller).
class BlzArchive {
 public:
  static Result<BlzArchive> Open(const std::string& path);

  const ArchiveHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }
  ByteSpan bytes() const { return file_.bytes(); }
  ByteSpan Prefix() const { return file_.bytes().subspan(0, header_.data_start); }
  ByteSpan TensorData(size_t i) const;
  ByteSpan RawData(size_t i) const;
  const MappedFile& file() const { return file_; }

  // Checks every tensor's xxh3-64 and SHA-256, every file's SHA-256, and that each safetensors
  // or GGUF file's stored header describes exactly its pieces (docs/blz-format.md rules 12-16).
  // The error names the first bad tensor (or file) and its byte offset in the archive.
  // `progress` (optional) sees (data bytes checked, data bytes in the archive), monotonic, ending
  // with done == total when the archive is sound; it is called on the calling thread.
  // An archive with at least `two_pass_bytes` of data is checked by two threads, the files'
  // SHA-256 on one and the pieces' hashes and padding on the other (the calling thread), in
  // about half the wall time on two cores; the result, the error named included, is the same.
  static constexpr uint64_t kVerifyTwoPassBytes = 64ull << 20;
  Status Verify(const ProgressCallback& progress = nullptr,
                uint64_t two_pass_bytes = kVerifyTwoPassBytes) const;

 private:
  MappedFile file_;
  ArchiveHeader header_;
};

struct PackStats {
  uint64_t archive_bytes = 0;
  uint64_t tensor_bytes = 0;
  uint64_t files = 0;
  uint64_t tensors = 0;
  std::string digest;  // "sha256:<hex>" of the archive
};

// Packs a Hugging Face model directory (every regular file below it except inside .git/ and
// .cache/ directories, see formats/model_dir.h; *.safetensors and *.gguf files are parsed
// strictly and split into tensors; it must hold at least one of them), a single .safetensors
// file or a single .gguf file into `out_path`. The output appears atomically; refuses to
// overwrite an existing out_path (kAlreadyExists).
// `progress` (optional) sees (bytes processed, bytes to process): the input bytes copied into
// the archive, then the archive bytes hashed for its digest; monotonic, ending with done ==
// total on success. It does not change what is written.
Status Pack(const std::string& input, const std::string& out_path, PackStats* stats,
            const ProgressCallback& progress = nullptr);

// Rebuilds every original file into `out_dir`, which must not exist (kAlreadyExists). Files are
// written into a temporary sibling directory, verified (SHA-256 per file) and then renamed to
// out_dir, so out_dir appears complete or not at all. Archive paths that are not safe relative
// paths are refused (kCorruption) before anything is written.
// `progress` (optional) sees (file bytes written, total size of the files), monotonic, ending
// with done == total on success.
Status Unpack(const BlzArchive& archive, const std::string& out_dir,
              const ProgressCallback& progress = nullptr);

}  // namespace blz::formats

#endif  // BLZ_FORMATS_BLZ_ARCHIVE_H_
