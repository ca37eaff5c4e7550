#include "formats/export/torch_zip.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "core/checked.h"
#include "core/digest.h"
#include "core/text.h"
#include "formats/json_strict.h"

namespace blz::exporter {
namespace {

// Zip record signatures and fields (PKWARE APPNOTE.TXT 6.3).
constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kZip64LocalExtraSize = 4 + 16;  // header + uncompressed + compressed size
constexpr uint64_t kPaddingExtraHeader = 4;        // torch's "FB" block: id + length
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kTorchPaddingId = 0x4246;  // the bytes 'F', 'B'
constexpr uint16_t kVersionNeeded = 20;        // 2.0: stored entries
constexpr uint16_t kVersionNeededZip64 = 45;   // 4.5: zip64
constexpr uint16_t kVersionMadeBy = (3 << 8) | 45;  // Unix, spec 4.5
constexpr uint16_t kFlagUtf8 = 0x0800;
constexpr uint16_t kDosTime = 0;                    // 00:00:00
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01
constexpr uint32_t kExternalAttrs = uint32_t(0100644) << 16;  // regular file, rw-r--r--
constexpr uint32_t kMax32 = 0xffffffff;
constexpr uint16_t kMax16 = 0xffff;

// What torch.save writes (caffe2/serialize: kMinProducedFileFormatVersion, "version" record).
constexpr std::string_view kVersionRecord = "3\n";

void Put16(std::string* s, uint16_t v) {
  s->push_back(char(v & 0xff));
  s->push_back(char(v >> 8));
}

uint32_t Crc32(uint32_t crc, ByteSpan data) {
  uLong c = crc;
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), size_t{1} << 30);
    c = crc32(c, data.data(), uInt(n));
    data = data.subspan(n);
  }
  return uint32_t(c);
}

Status CheckArchiveName(std::string_view name) {
  const std::string label = "pytorch export: archive name '" + EscapeForTerminal(name) + "'";
  if (name.empty()) return InvalidArgument("pytorch export: empty archive name");
  if (name.size() > kMaxTorchArchiveNameBytes) {
    return InvalidArgument(label + ": longer than " + std::to_string(kMaxTorchArchiveNameBytes) +
                           " bytes");
  }
  if (name == "." || name == "..") return InvalidArgument(label + ": not a folder name");
  if (auto bad = formats::FindInvalidUtf8(name)) {
    return InvalidArgument(label + ": not valid UTF-8 at byte " + std::to_string(*bad));
  }
  for (char c : name) {
    const auto u = uint8_t(c);
    if (c == '/' || c == '\\' || u < 0x20 || u == 0x7f) {
      return InvalidArgument(label + ": contains '/', '\\' or a control character");
    }
  }
  return Status::Ok();
}

std::string Digits20(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020llu", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Result<TorchZipWriter> TorchZipWriter::Start(AtomicFile* file,
                                             std::vector<TorchTensorSpec> tensors,
                                             std::string archive_name,
                                             TorchZipOptions options) {
  if (file == nullptr) return InvalidArgument("pytorch export: no output file");
  BLZ_RETURN_IF_ERROR(CheckArchiveName(archive_name));
  BLZ_ASSIGN_OR_RETURN(std::vector<TorchTensorLayout> layouts, ValidateTorchTensors(tensors));
  BLZ_ASSIGN_OR_RETURN(std::string pickle, EncodeTorchStateDictPickle(tensors));

  TorchZipWriter w;
  w.file_ = file;
  w.tensors_ = std::move(tensors);
  w.layouts_ = std::move(layouts);
  w.archive_name_ = std::move(archive_name);
  w.options_ = options;
  w.entries_.reserve(w.tensors_.size() + 4);
  BLZ_RETURN_IF_ERROR(w.WriteSmallEntry("data.pkl", pickle));
  BLZ_RETURN_IF_ERROR(w.WriteSmallEntry("byteorder", "little"));
  return w;
}

Status TorchZipWriter::Fail(Status s) {
  failed_ = true;
  return s;
}

Status TorchZipWriter::CheckUsable(const char* call) const {
  if (failed_) {
    return InvalidArgument(std::string("pytorch export: ") + call +
                           " after an earlier error: the output must be abandoned");
  }
  if (finished_) return InvalidArgument(std::string("pytorch export: ") + call + " after Finish");
  return Status::Ok();
}

bool TorchZipWriter::Zip64Sizes(const Entry& e) const {
  return options_.force_zip64 || e.size >= kMax32;
}

bool TorchZipWriter::Zip64Offset(const Entry& e) const {
  return options_.force_zip64 || e.header_offset >= kMax32;
}

std::string TorchZipWriter::LocalHeader(const Entry& e) const {
  const bool zip64_sizes = Zip64Sizes(e);
  const uint64_t zip64_len = zip64_sizes ? kZip64LocalExtraSize : 0;
  // Offsets stay far below 2^64: the caller checked e.header_offset + size fits.
  const uint64_t unpadded =
      e.header_offset + kLocalHeaderSize + e.name.size() + zip64_len + kPaddingExtraHeader;
  const uint64_t padding = (kTorchZipAlignment - unpadded % kTorchZipAlignment) % kTorchZipAlignment;
  std::string h;
  h.reserve(size_t(unpadded - e.header_offset + padding));
  AppendLE32(&h, kLocalHeaderSig);
  Put16(&h, zip64_sizes || Zip64Offset(e) ? kVersionNeededZip64 : kVersionNeeded);
  Put16(&h, kFlagUtf8);  // names are UTF-8 (torch sets it too)
  Put16(&h, 0);  // stored
  Put16(&h, kDosTime);
  Put16(&h, kDosDate);
  AppendLE32(&h, e.crc);
  const uint32_t size32 = zip64_sizes ? kMax32 : uint32_t(e.size);
  AppendLE32(&h, size32);  // compressed
  AppendLE32(&h, size32);  // uncompressed
  Put16(&h, uint16_t(e.name.size()));
  Put16(&h, uint16_t(zip64_len + kPaddingExtraHeader + padding));
  h += e.name;
  if (zip64_sizes) {
    Put16(&h, kZip64ExtraId);
    Put16(&h, 16);
    AppendLE64(&h, e.size);  // uncompressed
    AppendLE64(&h, e.size);  // compressed
  }
  Put16(&h, kTorchPaddingId);
  Put16(&h, uint16_t(padding));
  h.append(size_t(padding), 'Z');
  return h;
}

std::string TorchZipWriter::CentralHeader(const Entry& e) const {
  const bool zip64_sizes = Zip64Sizes(e);
  const bool zip64_offset = Zip64Offset(e);
  const uint16_t extra_len =
      zip64_sizes || zip64_offset ? uint16_t(4 + (zip64_sizes ? 16 : 0) + (zip64_offset ? 8 : 0))
                                  : 0;
  std::string h;
  AppendLE32(&h, kCentralHeaderSig);
  Put16(&h, kVersionMadeBy);
  Put16(&h, zip64_sizes || zip64_offset ? kVersionNeededZip64 : kVersionNeeded);
  Put16(&h, kFlagUtf8);  // names are UTF-8 (torch sets it too)
  Put16(&h, 0);  // stored
  Put16(&h, kDosTime);
  Put16(&h, kDosDate);
  AppendLE32(&h, e.crc);
  const uint32_t size32 = zip64_sizes ? kMax32 : uint32_t(e.size);
  AppendLE32(&h, size32);
  AppendLE32(&h, size32);
  Put16(&h, uint16_t(e.name.size()));
  Put16(&h, extra_len);
  Put16(&h, 0);  // comment
  Put16(&h, 0);  // disk number start
  Put16(&h, 0);  // internal attributes
  AppendLE32(&h, kExternalAttrs);
  AppendLE32(&h, zip64_offset ? kMax32 : uint32_t(e.header_offset));
  h += e.name;
  if (extra_len != 0) {
    // Only the fields whose 32-bit slot holds 0xFFFFFFFF, in this order (APPNOTE 4.5.3).
    Put16(&h, kZip64ExtraId);
    Put16(&h, uint16_t(extra_len - 4));
    if (zip64_sizes) {
      AppendLE64(&h, e.size);
      AppendLE64(&h, e.size);
    }
    if (zip64_offset) AppendLE64(&h, e.header_offset);
  }
  return h;
}

Status TorchZipWriter::BeginEntry(std::string name, uint64_t size, uint32_t crc) {
  Entry e;
  e.name = std::move(name);
  e.header_offset = file_->size();
  e.size = size;
  e.crc = crc;
  // Header (< 64 KiB + 128) plus data must stay addressable with room for the end records.
  uint64_t end = 0;
  if (!CheckedAdd(e.header_offset, size, &end) || !CheckedAdd(end, uint64_t{1} << 20, &end) ||
      end > uint64_t(std::numeric_limits<int64_t>::max())) {
    return Fail(TooLarge("pytorch export: entry '" + EscapeForTerminal(e.name) + "' at offset " +
                         std::to_string(e.header_offset) + " makes the file too large"));
  }
  Status s = file_->Append(LocalHeader(e));
  if (!s.ok()) {
    return Fail(s.WithContext("pytorch export: entry '" + EscapeForTerminal(e.name) + "'"));
  }
  entries_.push_back(std::move(e));
  return Status::Ok();
}

void TorchZipWriter::NoteFinishedEntry(const Entry& e) {
  all_data_crc_ = uint32_t(crc32_combine(all_data_crc_, e.crc, z_off_t(e.size)));
}

Status TorchZipWriter::WriteSmallEntry(const std::string& rel_name, std::string_view data) {
  const uint32_t crc = Crc32(0, AsBytes(data));
  BLZ_RETURN_IF_ERROR(BeginEntry(archive_name_ + "/" + rel_name, data.size(), crc));
  Status s = file_->Append(data);
  if (!s.ok()) {
    return Fail(
        s.WithContext("pytorch export: entry '" + EscapeForTerminal(entries_.back().name) + "'"));
  }
  NoteFinishedEntry(entries_.back());
  return Status::Ok();
}

Status TorchZipWriter::BeginTensor(size_t i) {
  BLZ_RETURN_IF_ERROR(CheckUsable("BeginTensor"));
  if (in_tensor_) {
    return Fail(InvalidArgument("pytorch export: BeginTensor(" + std::to_string(i) +
                                ") before EndTensor of tensor " + std::to_string(next_tensor_)));
  }
  if (i != next_tensor_ || i >= tensors_.size()) {
    return Fail(InvalidArgument(
        "pytorch export: BeginTensor(" + std::to_string(i) + "): tensors are written in order, " +
        (next_tensor_ < tensors_.size() ? "expected " + std::to_string(next_tensor_)
                                        : "all " + std::to_string(tensors_.size()) +
                                              " tensors are written: call Finish")));
  }
  BLZ_RETURN_IF_ERROR(
      BeginEntry(archive_name_ + "/data/" + std::to_string(i), layouts_[i].bytes, 0));
  in_tensor_ = true;
  tensor_done_ = 0;
  tensor_crc_ = 0;
  return Status::Ok();
}

Status TorchZipWriter::Append(ByteSpan bytes) {
  BLZ_RETURN_IF_ERROR(CheckUsable("Append"));
  if (!in_tensor_) {
    return Fail(InvalidArgument("pytorch export: Append of " + std::to_string(bytes.size()) +
                                " bytes outside a tensor (call BeginTensor first)"));
  }
  const TorchTensorSpec& t = tensors_[next_tensor_];
  const uint64_t expected = layouts_[next_tensor_].bytes;
  if (bytes.size() > expected - tensor_done_) {
    return Fail(InvalidArgument(
        "pytorch export: tensor '" + EscapeForTerminal(t.name) + "': " +
        std::to_string(bytes.size()) + " bytes appended at byte offset " +
        std::to_string(tensor_done_) + " go past its " + std::to_string(expected) + " bytes"));
  }
  Status s = file_->Append(bytes);
  if (!s.ok()) {
    return Fail(s.WithContext("pytorch export: tensor '" + EscapeForTerminal(t.name) + "'"));
  }
  tensor_crc_ = Crc32(tensor_crc_, bytes);
  tensor_done_ += bytes.size();
  return Status::Ok();
}

Status TorchZipWriter::EndTensor() {
  BLZ_RETURN_IF_ERROR(CheckUsable("EndTensor"));
  if (!in_tensor_) return Fail(InvalidArgument("pytorch export: EndTensor outside a tensor"));
  const TorchTensorSpec& t = tensors_[next_tensor_];
  const uint64_t expected = layouts_[next_tensor_].bytes;
  if (tensor_done_ != expected) {
    return Fail(InvalidArgument("pytorch export: tensor '" + EscapeForTerminal(t.name) +
                                "': ended after " + std::to_string(tensor_done_) +
                                " bytes, expected " + std::to_string(expected)));
  }
  Entry& e = entries_.back();
  e.crc = tensor_crc_;
  uint8_t crc_le[4];
  StoreLE32(crc_le, e.crc);
  Status s = file_->WriteAt(e.header_offset + 14, ByteSpan(crc_le, 4));  // local header CRC-32
  if (!s.ok()) {
    return Fail(s.WithContext("pytorch export: tensor '" + EscapeForTerminal(t.name) + "'"));
  }
  NoteFinishedEntry(e);
  in_tensor_ = false;
  ++next_tensor_;
  return Status::Ok();
}

Status TorchZipWriter::Finish() {
  BLZ_RETURN_IF_ERROR(CheckUsable("Finish"));
  if (in_tensor_ || next_tensor_ != tensors_.size()) {
    return Fail(InvalidArgument(
        "pytorch export: Finish with tensor " + std::to_string(next_tensor_) + " of " +
        std::to_string(tensors_.size()) + " ('" +
        EscapeForTerminal(tensors_[next_tensor_].name) + "') " +
        (in_tensor_ ? "not ended" : "not written")));
  }
  BLZ_RETURN_IF_ERROR(WriteSmallEntry("version", kVersionRecord));
  // torch (>= 2.1) writes 20 digits of a hash of the record names and 20 of a combined CRC;
  // it only logs the id. Ours: xxh3-64 of the names, CRC-32 of all record data concatenated.
  Xxh3Stream names;
  for (const Entry& e : entries_) {
    names.Update(AsBytes(e.name));
    names.Update(AsBytes("\n"));
  }
  const std::string id = Digits20(names.Digest()) + Digits20(all_data_crc_);
  BLZ_RETURN_IF_ERROR(WriteSmallEntry(".data/serialization_id", id));

  std::string central;
  for (const Entry& e : entries_) central += CentralHeader(e);
  const uint64_t cd_offset = file_->size();
  const uint64_t cd_size = central.size();
  const uint64_t count = entries_.size();
  const bool zip64_end = options_.force_zip64 || count >= kMax16 || cd_offset >= kMax32 ||
                         cd_size >= kMax32;
  std::string end;
  if (zip64_end) {
    const uint64_t zip64_end_offset = cd_offset + cd_size;
    AppendLE32(&end, kZip64EndSig);
    AppendLE64(&end, 44);  // size of the rest of this record
    Put16(&end, kVersionMadeBy);
    Put16(&end, kVersionNeededZip64);
    AppendLE32(&end, 0);  // this disk
    AppendLE32(&end, 0);  // disk with the central directory
    AppendLE64(&end, count);
    AppendLE64(&end, count);
    AppendLE64(&end, cd_size);
    AppendLE64(&end, cd_offset);
    AppendLE32(&end, kZip64LocatorSig);
    AppendLE32(&end, 0);  // disk with the zip64 end record
    AppendLE64(&end, zip64_end_offset);
    AppendLE32(&end, 1);  // total disks
  }
  const bool big = options_.force_zip64;
  const uint16_t count16 = big || count >= kMax16 ? kMax16 : uint16_t(count);
  AppendLE32(&end, kEndSig);
  Put16(&end, 0);  // this disk
  Put16(&end, 0);  // disk with the central directory
  Put16(&end, count16);
  Put16(&end, count16);
  AppendLE32(&end, big || cd_size >= kMax32 ? kMax32 : uint32_t(cd_size));
  AppendLE32(&end, big || cd_offset >= kMax32 ? kMax32 : uint32_t(cd_offset));
  Put16(&end, 0);  // comment length
  Status s = file_->Append(central + end);
  if (!s.ok()) return Fail(s.WithContext("pytorch export: central directory"));
  finished_ = true;
  return Status::Ok();
}

}  // namespace blz::exporter
