// A streaming writer of PyTorch checkpoints in the zip format torch.save writes (the default
// since torch 1.6), e.g. `pytorch_model.bin`, loadable with torch.load(path, weights_only=True)
// as an OrderedDict {name: tensor} with each tensor's dtype, shape and values.
//
// Layout (docs/pytorch-export.md has the full description), entries in this order:
//   <archive>/data.pkl                  the pickle of the state dict (formats/export/torch_pickle.h)
//   <archive>/byteorder                 "little"
//   <archive>/data/0 .. data/<n-1>      tensor i's bytes (little-endian, C order)
//   <archive>/version                   "3\n" (the format version torch.save writes)
//   <archive>/.data/serialization_id    40 decimal digits (torch >= 2.1 writes one; optional)
// then the central directory and the end records. Every entry is stored (method 0) and its data
// starts at a multiple of 64 bytes in the file: the local header's extra field carries torch's
// "FB" padding block. Tensor entries are streamed: the local header is written with CRC-32 0 and
// the CRC is patched in (AtomicFile::WriteAt) when the entry ends, so no data descriptor is used
// (general-purpose flags 0x800: UTF-8 names, as torch's writer sets). ZIP64: an entry of
// >= 0xFFFFFFFF bytes gets a zip64 extra field in its local and central headers, an entry whose
// header starts at >= 0xFFFFFFFF gets one in its central header, and the zip64 end of central
// directory record and locator are written when there are more than 65535 entries or the
// central directory's offset or size needs them. Times are fixed (1980-01-01 00:00), so the
// output depends only on the inputs.
//
// The archive starts at the file's size when Start is called; offsets in it are absolute file
// offsets (so a non-empty prefix is allowed, as in self-extracting zips; torch.save's files have
// none).
#ifndef BLZ_FORMATS_EXPORT_TORCH_ZIP_H_
#define BLZ_FORMATS_EXPORT_TORCH_ZIP_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/file_util.h"
#include "core/status.h"
#include "formats/export/torch_pickle.h"

namespace blz::exporter {

// Data of every entry starts at a multiple of this many bytes (as torch's writer does).
inline constexpr uint64_t kTorchZipAlignment = 64;
// Longest accepted archive name (the top-level folder inside the zip).
inline constexpr size_t kMaxTorchArchiveNameBytes = 255;

struct TorchZipOptions {
  // Write every entry with zip64 extra fields (32-bit fields 0xFFFFFFFF) and the zip64 end
  // records, as a > 4 GiB archive has them: lets tests exercise the zip64 paths on small files.
  bool force_zip64 = false;
};

class TorchZipWriter {
 public:
  TorchZipWriter(TorchZipWriter&&) noexcept = default;
  TorchZipWriter& operator=(TorchZipWriter&&) noexcept = default;
  TorchZipWriter(const TorchZipWriter&) = delete;
  TorchZipWriter& operator=(const TorchZipWriter&) = delete;

  // Validates every spec (ValidateTorchTensors) and `archive_name` (non-empty, at most
  // kMaxTorchArchiveNameBytes, valid UTF-8, no '/', '\\', control characters, not "." or
  // ".."; torch.save uses the file's stem: "pytorch_model" for pytorch_model.bin), then
  // writes the data.pkl and byteorder entries to `file` from its current end. `file` (created
  // by the caller, committed by the caller after Finish) must outlive the writer and receive no
  // other writes until Finish.
  // Errors: kUnsupported (a dtype, naming the tensor), kInvalidArgument (names), kTooLarge
  // (sizes), kIOError (writes).
  static Result<TorchZipWriter> Start(AtomicFile* file, std::vector<TorchTensorSpec> tensors,
                                      std::string archive_name, TorchZipOptions options = {});

  // Tensor i's bytes (little-endian, C order), for i = 0, 1, ... in order: BeginTensor(i), one
  // or more Append calls that together give exactly tensor_bytes(i) bytes (none for an empty
  // tensor), EndTensor().
  // Errors: kInvalidArgument for a call out of that order (naming the expected call), for
  // Append past the tensor's size and for EndTensor before it (naming the tensor and the byte
  // offset); kTooLarge when the file would pass 2^63 bytes; kIOError. After any error the
  // writer is failed: every later call returns kInvalidArgument and the caller abandons the file.
  Status BeginTensor(size_t i);
  Status Append(ByteSpan bytes);
  Status EndTensor();
  // After the last EndTensor: the version and serialization_id entries, the central directory
  // and the end records. Errors: as above (kInvalidArgument when a tensor is missing).
  Status Finish();

  size_t tensor_count() const { return tensors_.size(); }
  // REQUIRES: i < tensor_count().
  uint64_t tensor_bytes(size_t i) const { return layouts_[i].bytes; }

 private:
  struct Entry {
    std::string name;  // full name in the zip
    uint64_t header_offset = 0;
    uint64_t size = 0;
    uint32_t crc = 0;
  };

  TorchZipWriter() = default;

  Status Fail(Status s);
  Status CheckUsable(const char* call) const;
  // Writes the local header of a `size`-byte entry named `name` at the end of the file and
  // records it in entries_ (CRC still to be set).
  Status BeginEntry(std::string name, uint64_t size, uint32_t crc);
  // A whole entry whose bytes are known.
  Status WriteSmallEntry(const std::string& rel_name, std::string_view data);
  // Updates the serialization id inputs with a finished entry.
  void NoteFinishedEntry(const Entry& e);
  std::string LocalHeader(const Entry& e) const;
  std::string CentralHeader(const Entry& e) const;
  bool Zip64Sizes(const Entry& e) const;
  bool Zip64Offset(const Entry& e) const;

  AtomicFile* file_ = nullptr;
  std::vector<TorchTensorSpec> tensors_;
  std::vector<TorchTensorLayout> layouts_;
  std::string archive_name_;
  TorchZipOptions options_;
  std::vector<Entry> entries_;

  size_t next_tensor_ = 0;
  bool in_tensor_ = false;
  uint64_t tensor_done_ = 0;  // bytes given for the current tensor
  uint32_t tensor_crc_ = 0;
  bool finished_ = false;
  bool failed_ = false;

  // Serialization id input: the CRC-32 of every finished entry's data, concatenated.
  uint32_t all_data_crc_ = 0;
};

}  // namespace blz::exporter

#endif  // BLZ_FORMATS_EXPORT_TORCH_ZIP_H_
