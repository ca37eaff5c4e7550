// PackLayout (formats/pack_layout.h) and Pack (formats/blz_archive.h), which is a PackLayout
// copied and hashed into a file.
#include "formats/pack_layout.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/checked.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/blz_archive_internal.h"
#include "formats/ggml_types.h"
#include "formats/gguf.h"
#include "formats/json_strict.h"
#include "formats/model_dir.h"
#include "formats/safetensors.h"

namespace blz::formats {

using archive_internal::BaseName;
using archive_internal::GgufTensorDTypeShape;
using archive_internal::HeaderJson;
using archive_internal::kCopyChunk;
using archive_internal::kFixedHeaderBytes;
using archive_internal::kZeroSha256;
using archive_internal::Num;
using archive_internal::PathExists;
using archive_internal::WorkCounter;

// One input file, opened.
struct PackLayout::Input {
  ModelFile file;
  MappedFile map;                       // kinds "file" and "gguf"
  std::unique_ptr<SafetensorsFile> st;  // kind "safetensors"
  const MappedFile& bytes() const { return st ? st->file() : map; }
};

PackLayout::PackLayout() = default;
PackLayout::PackLayout(PackLayout&&) noexcept = default;
PackLayout& PackLayout::operator=(PackLayout&&) noexcept = default;
PackLayout::~PackLayout() = default;

Result<PackLayout> PackLayout::Open(const std::string& input) {
  struct stat st {};
  if (::stat(input.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(input + ": no such file or directory");
    return IOError(input + ": cannot stat: " + std::strerror(errno));
  }
  std::vector<ModelFile> listing;
  if (S_ISDIR(st.st_mode)) {
    BLZ_ASSIGN_OR_RETURN(listing, ListModelFiles(input));
    if (std::none_of(listing.begin(), listing.end(),
                     [](const ModelFile& f) { return f.is_safetensors || f.is_gguf; })) {
      return InvalidArgument(input + ": no *.safetensors or *.gguf file (a model directory "
                                     "holds at least one; .git/ and .cache/ are not searched)");
    }
    BLZ_RETURN_IF_ERROR(CheckShardIndexes(listing));
  } else if (S_ISREG(st.st_mode)) {
    ModelFile f;
    f.path = BaseName(input);
    f.abs_path = input;
    f.size = uint64_t(st.st_size);
    f.is_safetensors = IsSafetensorsName(f.path);
    f.is_gguf = IsGgufName(f.path);
    if (!f.is_safetensors && !f.is_gguf) {
      return InvalidArgument(input + ": not a directory, a .safetensors file or a .gguf file");
    }
    if (!IsSafeRelativePath(f.path) || FindInvalidUtf8(f.path).has_value()) {
      return InvalidArgument(input + ": file name is not usable in an archive");
    }
    listing.push_back(std::move(f));
  } else {
    return InvalidArgument(input + ": not a directory or a regular file");
  }

  // Open every input and lay out the archive: pieces 64-aligned in file order.
  PackLayout layout;
  ArchiveHeader& h = layout.header_;
  uint64_t pos = 0;
  uint64_t src = 0;  // the current piece's offset in its input file
  auto place = [&](uint64_t length, uint64_t* offset) -> Status {
    if (!CheckedAlignUp(pos, kArchiveAlignment, offset) || !CheckedAdd(*offset, length, &pos)) {
      return TooLarge(input + ": archive would exceed 2^64 bytes");
    }
    return Status::Ok();
  };
  for (size_t fi = 0; fi < listing.size(); ++fi) {
    auto owned = std::make_unique<Input>();
    Input& in = *owned;
    in.file = listing[fi];
    src = 0;
    ArchiveFile af;
    af.path = in.file.path;
    af.sha256 = std::string(kZeroSha256);
    auto add_raw = [&](uint64_t length) -> Status {
      ArchiveRaw r;
      r.file_index = uint32_t(fi);
      r.length = length;
      BLZ_RETURN_IF_ERROR(place(r.length, &r.offset));
      af.pieces.push_back({ArchivePiece::Kind::kRaw, uint32_t(h.raws.size())});
      h.raws.push_back(r);
      layout.raw_sources_.push_back({uint32_t(fi), src});
      src += length;
      return Status::Ok();
    };
    auto add_tensor = [&](ArchiveTensor at) -> Status {
      at.sha256 = std::string(kZeroSha256);
      at.file_index = uint32_t(fi);
      BLZ_RETURN_IF_ERROR(place(at.length, &at.offset));
      af.pieces.push_back({ArchivePiece::Kind::kTensor, uint32_t(h.tensors.size())});
      layout.tensor_sources_.push_back({uint32_t(fi), src});
      src += at.length;
      h.tensors.push_back(std::move(at));
      return Status::Ok();
    };
    if (in.file.is_safetensors) {
      BLZ_ASSIGN_OR_RETURN(SafetensorsFile sf, SafetensorsFile::Open(in.file.abs_path));
      in.st = std::make_unique<SafetensorsFile>(std::move(sf));
      af.kind = "safetensors";
      af.size = in.st->file().size();
      BLZ_RETURN_IF_ERROR(add_raw(in.st->header().data_start));
      for (const SafetensorsTensor& t : in.st->tensors()) {
        ArchiveTensor at;
        at.name = t.name;
        at.dtype = t.dtype;
        at.shape = t.shape;
        at.length = t.bytes();
        BLZ_RETURN_IF_ERROR(add_tensor(std::move(at)));
      }
    } else if (in.file.is_gguf) {
      BLZ_ASSIGN_OR_RETURN(in.map, MappedFile::Open(in.file.abs_path));
      BLZ_ASSIGN_OR_RETURN(GgufFile g, ParseGguf(in.map.bytes(), GgufMode::kFull,
                                                 in.file.abs_path));
      af.kind = "gguf";
      af.size = in.map.size();
      const std::vector<GgufTensorInfo>& ts = g.header.tensors;
      // The header and its padding (with no tensors: the whole file, which may end before the
      // padding), then each tensor followed by its padding as a raw piece when non-empty.
      BLZ_RETURN_IF_ERROR(add_raw(ts.empty() ? in.map.size() : g.data_start));
      for (size_t i = 0; i < ts.size(); ++i) {
        const GgufTensorInfo& t = ts[i];
        ArchiveTensor at;
        at.name = t.name;
        at.ggml_type = std::string(GgmlTypeName(t.type));
        GgufTensorDTypeShape(t, &at.dtype, &at.shape);
        at.length = t.n_bytes;
        BLZ_RETURN_IF_ERROR(add_tensor(std::move(at)));
        const uint64_t end = t.offset + t.n_bytes;
        const bool last = i + 1 == ts.size();
        const uint64_t next = !last ? ts[i + 1].offset : (g.padded_end ? g.data_bytes : end);
        if (next > end) BLZ_RETURN_IF_ERROR(add_raw(next - end));
      }
    } else {
      BLZ_ASSIGN_OR_RETURN(in.map, MappedFile::Open(in.file.abs_path));
      af.kind = "file";
      af.size = in.map.size();
      BLZ_RETURN_IF_ERROR(add_raw(in.map.size()));
    }
    if (src != af.size) {
      return Internal(in.file.abs_path + ": pieces cover " + Num(src) + " of " + Num(af.size) +
                      " bytes");
    }
    h.files.push_back(std::move(af));
    layout.inputs_.push_back(&in.bytes());
    layout.owned_.push_back(std::move(owned));
  }

  // Hashes have fixed-width text forms, so the header's length is known before they are.
  std::string json;
  try {
    json = HeaderJson(h);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(input + ": cannot encode the archive header: " + e.what());
  }
  if (json.size() > kMaxArchiveHeaderBytes) {
    return TooLarge(input + ": archive header would be " + Num(json.size()) +
                    " bytes, more than the cap of " + Num(kMaxArchiveHeaderBytes));
  }
  if (!CheckedAlignUp(kFixedHeaderBytes + json.size(), kArchiveAlignment, &h.data_start) ||
      !CheckedAdd(h.data_start, pos, &h.total_size)) {
    return TooLarge(input + ": archive would exceed 2^64 bytes");
  }
  layout.prefix_ = archive_internal::PrefixBytes(json, h.data_start);
  BLZ_RETURN_IF_ERROR(layout.PlacePieces(h));
  return layout;
}

Result<PackLayout> PackLayout::FromArchivePrefix(ByteSpan prefix, uint64_t total_size,
                                                 const std::vector<std::string>& files) {
  BLZ_ASSIGN_OR_RETURN(ArchiveHeader h, ParseArchivePrefix(prefix, total_size));
  if (files.size() != h.files.size()) {
    return InvalidArgument("archive layout: " + Num(files.size()) + " file paths for a header of " +
                           Num(h.files.size()) + " files");
  }
  PackLayout layout;
  layout.raw_sources_.resize(h.raws.size());
  layout.tensor_sources_.resize(h.tensors.size());
  for (size_t fi = 0; fi < h.files.size(); ++fi) {
    const ArchiveFile& af = h.files[fi];
    auto owned = std::make_unique<Input>();
    BLZ_ASSIGN_OR_RETURN(owned->map, MappedFile::Open(files[fi]));
    if (owned->map.size() != af.size) {
      return Corruption(files[fi] + ": has " + Num(owned->map.size()) + " bytes, the archive's '" +
                        af.path + "' " + Num(af.size));
    }
    // A file is its pieces, one after another (docs/blz-format.md): each piece's place in it is
    // the sum of the lengths before it; ParseArchivePrefix checked that they add up to af.size.
    uint64_t src = 0;
    for (const ArchivePiece& p : af.pieces) {
      const bool raw = p.kind == ArchivePiece::Kind::kRaw;
      (raw ? layout.raw_sources_ : layout.tensor_sources_)[p.index] = {uint32_t(fi), src};
      src += raw ? h.raws[p.index].length : h.tensors[p.index].length;
    }
    layout.inputs_.push_back(&owned->bytes());
    layout.owned_.push_back(std::move(owned));
  }
  BLZ_RETURN_IF_ERROR(layout.PlacePieces(h));
  layout.prefix_.assign(reinterpret_cast<const char*>(prefix.data()), size_t(h.data_start));
  layout.header_ = std::move(h);
  layout.hashed_ = true;
  return layout;
}

Status PackLayout::PlacePieces(const ArchiveHeader& h) {
  return archive_internal::ForEachPiece(
      h, [&](size_t, const ArchivePiece& p, uint64_t off, uint64_t len) -> Status {
        placed_.push_back({h.data_start + off, len, p});
        return Status::Ok();
      });
}

const PackLayout::Placed* PackLayout::PieceAt(uint64_t at) const {
  auto it = std::upper_bound(placed_.begin(), placed_.end(), at,
                             [](uint64_t o, const Placed& p) { return o < p.offset; });
  if (it == placed_.begin()) return nullptr;
  --it;
  return at - it->offset < it->length ? &*it : nullptr;
}

ByteSpan PackLayout::PieceData(const ArchivePiece& p) const {
  return p.kind == ArchivePiece::Kind::kRaw ? RawData(p.index) : TensorData(p.index);
}

std::optional<ByteSpan> PackLayout::Direct(uint64_t offset, uint64_t length) const {
  uint64_t end;
  if (!CheckedAdd(offset, length, &end) || end > header_.total_size) return std::nullopt;
  if (end <= prefix_.size()) return AsBytes(prefix_).subspan(size_t(offset), size_t(length));
  const Placed* p = PieceAt(offset);
  if (p == nullptr || end - p->offset > p->length) {
    if (length == 0) return ByteSpan();
    return std::nullopt;
  }
  return PieceData(p->piece).subspan(size_t(offset - p->offset), size_t(length));
}

Status PackLayout::ReadInto(uint64_t offset, uint64_t length, uint8_t* out) const {
  uint64_t end;
  if (!CheckedAdd(offset, length, &end) || end > header_.total_size) {
    return InvalidArgument("archive bytes [" + Num(offset) + ", +" + Num(length) +
                           ") are outside the " + Num(header_.total_size) + "-byte archive");
  }
  uint64_t at = offset;
  while (at < end) {
    uint64_t n;
    if (at < prefix_.size()) {
      n = std::min<uint64_t>(end, prefix_.size()) - at;
      std::memcpy(out, prefix_.data() + at, size_t(n));
    } else if (const Placed* p = PieceAt(at)) {
      n = std::min(end, p->offset + p->length) - at;
      std::memcpy(out, PieceData(p->piece).data() + (at - p->offset), size_t(n));
    } else {  // padding: up to the next piece (or the end)
      auto next = std::upper_bound(placed_.begin(), placed_.end(), at,
                                   [](uint64_t o, const Placed& q) { return o < q.offset; });
      n = std::min(end, next == placed_.end() ? end : next->offset) - at;
      std::memset(out, 0, size_t(n));
    }
    out += n;
    at += n;
  }
  return Status::Ok();
}

ByteSpan PackLayout::RawData(uint32_t index) const {
  const PieceSource s = raw_sources_[index];
  return inputs_[s.input]->bytes().subspan(size_t(s.offset), size_t(header_.raws[index].length));
}

ByteSpan PackLayout::TensorData(uint32_t index) const {
  const PieceSource s = tensor_sources_[index];
  return inputs_[s.input]->bytes().subspan(size_t(s.offset),
                                           size_t(header_.tensors[index].length));
}

Status PackLayout::FillHashes(AtomicFile* out, const ProgressCallback& progress) {
  WorkCounter work{progress, 0};
  for (const MappedFile* in : inputs_) work.total += in->size();
  // Each piece in chunks: xxh3-64 of the piece, SHA-256 of the tensor and of the whole file,
  // and (Pack) the bytes written at the piece's archive offset.
  auto copy = [&](const MappedFile& file, uint64_t src, uint64_t length, uint64_t dest,
                  Xxh3Stream* xxh, Sha256* piece_sha, Sha256* file_sha) -> Status {
    for (uint64_t done = 0; done < length; done += kCopyChunk) {
      const size_t n = size_t(std::min<uint64_t>(kCopyChunk, length - done));
      const ByteSpan chunk = file.bytes().subspan(size_t(src + done), n);
      xxh->Update(chunk);
      if (piece_sha != nullptr) piece_sha->Update(chunk);
      file_sha->Update(chunk);
      if (out != nullptr) BLZ_RETURN_IF_ERROR(out->WriteAt(dest + done, chunk));
      file.DropRange(size_t(src + done), n);
      work.Add(n);
    }
    return Status::Ok();
  };
  for (size_t fi = 0; fi < header_.files.size(); ++fi) {
    ArchiveFile& af = header_.files[fi];
    const MappedFile& file = *inputs_[fi];
    if (file.size() != af.size) {
      return Internal(file.path() + ": has " + Num(file.size()) + " bytes, laid out as " +
                      Num(af.size));
    }
    file.AdviseSequential();
    Sha256 file_sha;
    for (const ArchivePiece& p : af.pieces) {
      Xxh3Stream xxh;
      if (p.kind == ArchivePiece::Kind::kRaw) {
        ArchiveRaw& r = header_.raws[p.index];
        BLZ_RETURN_IF_ERROR(copy(file, raw_sources_[p.index].offset, r.length,
                                 header_.data_start + r.offset, &xxh, nullptr, &file_sha));
        r.xxh3 = xxh.Digest();
      } else {
        ArchiveTensor& t = header_.tensors[p.index];
        Sha256 tensor_sha;
        BLZ_RETURN_IF_ERROR(copy(file, tensor_sources_[p.index].offset, t.length,
                                 header_.data_start + t.offset, &xxh, &tensor_sha, &file_sha));
        t.xxh3 = xxh.Digest();
        t.sha256 = tensor_sha.FinishHex();
      }
    }
    af.sha256 = file_sha.FinishHex();
  }
  const std::string json = HeaderJson(header_);
  if (archive_internal::kFixedHeaderBytes + json.size() > header_.data_start) {
    return Internal("archive header changed length after hashing");
  }
  prefix_ = archive_internal::PrefixBytes(json, header_.data_start);
  hashed_ = true;
  return Status::Ok();
}

Result<std::string> PackLayout::ArchiveDigest() const {
  if (!hashed_) return Internal("PackLayout::ArchiveDigest before FillHashes");
  Sha256 sha;
  sha.Update(AsBytes(prefix_));
  uint64_t at = header_.data_start;  // absolute offset hashed so far
  static const uint8_t kZeros[kArchiveAlignment] = {};
  for (const Placed& p : placed_) {
    sha.Update(ByteSpan(kZeros, size_t(p.offset - at)));  // < 64 bytes of padding
    const ByteSpan data = PieceData(p.piece);
    for (size_t done = 0; done < data.size(); done += kCopyChunk) {
      sha.Update(data.subspan(done, std::min(kCopyChunk, data.size() - done)));
    }
    at = p.offset + p.length;
  }
  return MakeDigest(sha.FinishHex());
}

Status Pack(const std::string& input, const std::string& out_path, PackStats* stats,
            const ProgressCallback& progress) {
  if (PathExists(out_path)) return AlreadyExists(out_path + ": already exists");
  BLZ_ASSIGN_OR_RETURN(PackLayout layout, PackLayout::Open(input));
  const uint64_t total = layout.header().total_size;
  const std::string json = HeaderJson(layout.header());

  BLZ_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(out_path));
  BLZ_RETURN_IF_ERROR(out.Truncate(total));  // padding between pieces reads as zeros
  // The work: every input byte copied, then every archive byte hashed.
  uint64_t input_bytes = 0;
  for (const MappedFile* in : layout.inputs()) input_bytes += in->size();
  const uint64_t work_total = input_bytes + total;
  ProgressCallback copying;
  if (progress) copying = [&](uint64_t done, uint64_t) { progress(done, work_total); };
  BLZ_RETURN_IF_ERROR(layout.FillHashes(&out, copying));
  const std::string& prefix = layout.PrefixBytes();
  if (HeaderJson(layout.header()).size() != json.size()) {
    return Internal("archive header changed length after hashing");
  }
  BLZ_RETURN_IF_ERROR(out.WriteAt(0, AsBytes(prefix)));
  // The writer and the reader must agree; this is cheap (header only).
  {
    auto check = ParseArchivePrefix(AsBytes(prefix), total);
    if (!check.ok()) return Internal("packed archive fails validation: " + check.status().ToString());
  }
  ProgressCallback hashing;
  if (progress) {
    hashing = [&](uint64_t hashed, uint64_t) {
      progress(input_bytes + std::min(hashed, total), work_total);
    };
  }
  BLZ_ASSIGN_OR_RETURN(std::string digest_hex, Sha256FileHex(out.temp_path(), hashing));
  BLZ_RETURN_IF_ERROR(out.Commit(/*no_replace=*/true));
  if (progress) progress(work_total, work_total);
  if (stats != nullptr) {
    const ArchiveHeader& h = layout.header();
    uint64_t tensor_bytes = 0;
    for (const ArchiveTensor& t : h.tensors) tensor_bytes += t.length;
    stats->archive_bytes = total;
    stats->tensor_bytes = tensor_bytes;
    stats->files = h.files.size();
    stats->tensors = h.tensors.size();
    stats->digest = MakeDigest(digest_hex);
  }
  return Status::Ok();
}

}  // namespace blz::formats
