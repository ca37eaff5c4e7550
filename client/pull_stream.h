// Writes and checks a pulled model's files from the bytes a patch apply rebuilds, or a
// downloaded archive holds (issue 28, patcher::TargetSink), so that a pull writes the model
// files in the pass that checks the archive instead of reading the archive back to verify and
// then unpack it.
//
// What a FileStreamer checks, as the bytes go by: every piece's length against the target's
// header and (PieceCheck::kXxh3) its xxh3-64, every file's size; in kByDigest mode also every
// file's SHA-256, which names it in the store's files/. PieceCheck::kCheckedBySource skips the
// pieces' xxh3-64 where the source already checked every byte it hands over: a patch apply
// checks each decoded chunk against the patch's xxh3-64 and the whole target against its
// SHA-256 (patcher/patch_sink.h), so hashing the pieces again was a second xxh3 pass over the
// whole target (issue 28). A downloaded archive (patcher::FeedArchiveToSink checks nothing) is
// streamed with kXxh3. The caller proves every byte with the archive's SHA-256 (= the
// manifest's digest) before anything the streamer wrote is published: apply checks it before
// it returns OK, a download before the archive is fed (patcher::FeedArchiveToSink). With
// BlzArchive::CheckStoredHeaders on the result, that is what BlzArchive::Verify checks except
// the header's own digest fields, which are not recomputed: the tensors' SHA-256 and, outside
// kByDigest, the files' SHA-256. The bytes those fields describe are already proven by the
// archive's SHA-256; recomputing them would only prove the header consistent with itself,
// which the registry checks when a version is pushed and `blz verify` on demand. kByDigest
// does hash each file: a files/ entry is shared by every version that names that SHA-256, so
// its name must be proven, not taken from one archive's header.
//
// Where the files go (Mode):
//   kVerifyOnly  nowhere: every piece is checked (a pull that keeps only the archive).
//   kDirectory   into `dir` (which must not exist; Begin creates it), each kept file at its
//                path, mode 0644: pull -o's private build directory (client/pull.h), renamed
//                into place by the caller only after the apply and Finish succeeded.
//   kByDigest    into `dir` (which must not exist; Begin creates it), each kept file named by
//                its SHA-256 (64 hex), mode 0444: the verified files MakeSnapshot moves into
//                the store's files/ (client/snapshot.h) instead of writing them again. A file
//                whose files/ entry is held already (<held_store>/files/sha256/<2 hex>/<hex>,
//                another version shares it) is hashed and checked but not written. `dir` is
//                under the store's tmp/ (a staging directory), never files/ itself: a
//                concurrent snapshot change removes files/ entries no snapshot links.
// Files the filter drops are checked but not written. Each file is written through an
// AtomicFile (a "*.tmp-*" sibling until complete); a failure leaves no partial file under its
// final name (kDirectory: the caller removes the whole build directory).
//
// Memory: a hash state per open file and piece; the bytes are never copied.
#ifndef BLZ_CLIENT_PULL_STREAM_H_
#define BLZ_CLIENT_PULL_STREAM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/snapshot.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "patcher/patch_sink.h"

namespace blz::client {

class FileStreamer : public patcher::TargetSink {
 public:
  enum class Mode { kVerifyOnly, kDirectory, kByDigest };
  // Whether each piece's xxh3-64 is checked against the header (see above).
  enum class PieceCheck { kXxh3, kCheckedBySource };

  // `what` names the target in errors (e.g. "archive sha256:..."). `dir`, `held_store`: see
  // Mode.
  FileStreamer(Mode mode, std::string dir, std::string held_store, FileFilter filter,
               std::string what, PieceCheck pieces = PieceCheck::kXxh3);
  ~FileStreamer() override;

  Status Begin(const formats::ArchiveHeader& target) override;
  Status Data(const formats::ArchivePiece& piece, uint64_t offset, ByteSpan bytes) override;

  // Call after the apply returned OK: finishes the pieces and files after the last data (empty
  // ones) and checks that every piece was seen whole. Errors: kCorruption naming the file or
  // piece, kIOError.
  Status Finish();

  // Bytes written to files (kept files not already held).
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  struct Slot {
    size_t file = 0;
    formats::ArchivePiece piece;
    bool last_of_file = false;
  };
  Status StartFile(size_t file_index);
  Status FinishPiece();
  Status FinishFile(size_t file_index);
  uint64_t PieceLength(const formats::ArchivePiece& p) const;
  uint64_t PieceXxh3(const formats::ArchivePiece& p) const;

  Mode mode_;
  PieceCheck pieces_;
  std::string dir_;
  std::string held_store_;
  FileFilter filter_;
  std::string what_;
  std::optional<formats::ArchiveHeader> header_;
  std::vector<Slot> order_;  // every piece in data-section order
  size_t pos_ = 0;           // the piece now being received
  uint64_t seen_ = 0;        // bytes of it received
  bool file_open_ = false;   // StartFile ran for order_[pos_].file
  std::unique_ptr<Xxh3Stream> piece_xxh_;
  Sha256 file_sha_;
  uint64_t file_bytes_ = 0;
  std::optional<AtomicFile> out_;
  uint64_t bytes_written_ = 0;
};

}  // namespace blz::client

#endif  // BLZ_CLIENT_PULL_STREAM_H_
