#include "client/pull_stream.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

namespace blz::client {
namespace {

using Kind = formats::ArchivePiece::Kind;

Status MakeParents(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return IOError(path + ": cannot create directory: " + ec.message());
  return Status::Ok();
}

bool SamePiece(const formats::ArchivePiece& a, const formats::ArchivePiece& b) {
  return a.kind == b.kind && a.index == b.index;
}

}  // namespace

FileStreamer::FileStreamer(Mode mode, std::string dir, std::string held_store, FileFilter filter,
                           std::string what, PieceCheck pieces)
    : mode_(mode),
      pieces_(pieces),
      dir_(std::move(dir)),
      held_store_(std::move(held_store)),
      filter_(std::move(filter)),
      what_(std::move(what)) {}

FileStreamer::~FileStreamer() = default;

uint64_t FileStreamer::PieceLength(const formats::ArchivePiece& p) const {
  return p.kind == Kind::kRaw ? header_->raws[p.index].length : header_->tensors[p.index].length;
}

uint64_t FileStreamer::PieceXxh3(const formats::ArchivePiece& p) const {
  return p.kind == Kind::kRaw ? header_->raws[p.index].xxh3 : header_->tensors[p.index].xxh3;
}

Status FileStreamer::Begin(const formats::ArchiveHeader& target) {
  if (header_.has_value()) return Internal(what_ + ": the file streamer was started twice");
  header_ = target;
  for (size_t fi = 0; fi < header_->files.size(); ++fi) {
    const formats::ArchiveFile& f = header_->files[fi];
    if (!IsSafeRelativePath(f.path)) {
      return Corruption(what_ + ": file path '" + f.path + "' is not a safe relative path");
    }
    if (f.sha256.size() != 64 ||
        f.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return Corruption(what_ + ": file '" + f.path + "': bad SHA-256 '" + f.sha256 + "'");
    }
    for (size_t k = 0; k < f.pieces.size(); ++k) {
      order_.push_back({fi, f.pieces[k], k + 1 == f.pieces.size()});
    }
  }
  if (mode_ != Mode::kVerifyOnly) {
    if (::mkdir(dir_.c_str(), 0755) != 0) {
      return IOError(dir_ + ": cannot create directory: " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

Status FileStreamer::StartFile(size_t fi) {
  const formats::ArchiveFile& f = header_->files[fi];
  file_open_ = true;
  file_bytes_ = 0;
  if (mode_ == Mode::kVerifyOnly || !filter_.Keeps(f.path)) return Status::Ok();
  std::string path;
  int perms = 0644;
  if (mode_ == Mode::kDirectory) {
    path = dir_ + "/" + f.path;
  } else {
    path = dir_ + "/" + f.sha256;
    perms = 0444;
    struct stat st {};
    const std::string held =
        held_store_ + "/files/sha256/" + f.sha256.substr(0, 2) + "/" + f.sha256;
    if (!held_store_.empty() && ::stat(held.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        uint64_t(st.st_size) == f.size) {
      return Status::Ok();  // held already (another version shares the file): hashed only
    }
    if (::stat(path.c_str(), &st) == 0) return Status::Ok();  // twice in this model
  }
  BLZ_RETURN_IF_ERROR(MakeParents(path));
  BLZ_ASSIGN_OR_RETURN(out_, AtomicFile::Create(path, perms));
  return Status::Ok();
}

Status FileStreamer::FinishFile(size_t fi) {
  const formats::ArchiveFile& f = header_->files[fi];
  file_open_ = false;
  // Outside kByDigest the file's SHA-256 is not taken (see the header): its size still is.
  const std::string got = mode_ == Mode::kByDigest ? file_sha_.FinishHex() : f.sha256;
  if (got != f.sha256 || file_bytes_ != f.size) {
    out_.reset();  // removes the temporary file
    return Corruption(what_ + ": file '" + f.path + "': rebuilt bytes (" +
                      std::to_string(file_bytes_) + ") have SHA-256 " + got + ", header says " +
                      f.sha256 + " (" + std::to_string(f.size) + " bytes)");
  }
  if (out_.has_value()) {
    Status s = out_->Commit();
    out_.reset();
    if (!s.ok()) return s.WithContext(what_ + ": file '" + f.path + "'");
  }
  return Status::Ok();
}

// Ends the piece at pos_ (which must be complete) and, with it, its file if it is the last.
Status FileStreamer::FinishPiece() {
  const Slot& slot = order_[pos_];
  if (!file_open_) BLZ_RETURN_IF_ERROR(StartFile(slot.file));  // an empty piece
  const uint64_t length = PieceLength(slot.piece);
  const std::string where = what_ + ": file '" + header_->files[slot.file].path + "' " +
                            (slot.piece.kind == Kind::kRaw ? "raw piece " : "tensor ") +
                            (slot.piece.kind == Kind::kRaw
                                 ? std::to_string(slot.piece.index)
                                 : "'" + header_->tensors[slot.piece.index].name + "'");
  if (seen_ != length) {
    out_.reset();
    return Corruption(where + ": " + std::to_string(seen_) + " of its " + std::to_string(length) +
                      " bytes were rebuilt");
  }
  if (pieces_ == PieceCheck::kXxh3) {
    const uint64_t got = piece_xxh_ != nullptr ? piece_xxh_->Digest() : Xxh3_64(ByteSpan());
    if (got != PieceXxh3(slot.piece)) {
      out_.reset();  // removes the temporary file
      return Corruption(where + ": xxh3-64 is " + Hex64(got) + ", header says " +
                        Hex64(PieceXxh3(slot.piece)));
    }
  }
  piece_xxh_.reset();
  seen_ = 0;
  ++pos_;
  if (slot.last_of_file) BLZ_RETURN_IF_ERROR(FinishFile(slot.file));
  return Status::Ok();
}

Status FileStreamer::Data(const formats::ArchivePiece& piece, uint64_t offset, ByteSpan bytes) {
  if (!header_.has_value()) return Internal(what_ + ": data before the archive header");
  // Pieces with no bytes get no Data call: finish them on the way.
  while (pos_ < order_.size() && !SamePiece(order_[pos_].piece, piece)) {
    BLZ_RETURN_IF_ERROR(FinishPiece());
  }
  if (pos_ == order_.size()) {
    return Corruption(what_ + ": rebuilt data for a piece that is not next in the archive");
  }
  if (offset != seen_ || seen_ + bytes.size() > PieceLength(piece)) {
    out_.reset();
    return Corruption(what_ + ": rebuilt data at offset " + std::to_string(offset) +
                      " of a piece where " + std::to_string(seen_) + " bytes were expected");
  }
  if (!file_open_) BLZ_RETURN_IF_ERROR(StartFile(order_[pos_].file));
  if (pieces_ == PieceCheck::kXxh3) {
    if (piece_xxh_ == nullptr) piece_xxh_ = std::make_unique<Xxh3Stream>();
    piece_xxh_->Update(bytes);
  }
  if (mode_ == Mode::kByDigest) file_sha_.Update(bytes);
  if (out_.has_value()) {
    if (Status s = out_->Append(bytes); !s.ok()) {
      out_.reset();
      return s.WithContext(what_ + ": file '" + header_->files[order_[pos_].file].path + "'");
    }
    bytes_written_ += bytes.size();
  }
  seen_ += bytes.size();
  file_bytes_ += bytes.size();
  return Status::Ok();
}

Status FileStreamer::Finish() {
  if (!header_.has_value()) return Internal(what_ + ": the file streamer never started");
  while (pos_ < order_.size()) BLZ_RETURN_IF_ERROR(FinishPiece());
  return Status::Ok();
}

}  // namespace blz::client
