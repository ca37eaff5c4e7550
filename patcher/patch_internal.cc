// Helpers shared by patch.cc and patch_apply.cc: patcher/patch_internal.h.
#include "patcher/patch_internal.h"

#include <sys/stat.h>

#include "formats/identify.h"

namespace blz::patcher::internal {

using formats::ArchiveHeader;
using formats::ArchivePiece;
using Kind = formats::ArchivePiece::Kind;

// The archive's pieces in data-section order (files in order, pieces in file order).
std::vector<ArchivePiece> DataOrder(const ArchiveHeader& h) {
  std::vector<ArchivePiece> out;
  out.reserve(h.raws.size() + h.tensors.size());
  for (const auto& f : h.files) out.insert(out.end(), f.pieces.begin(), f.pieces.end());
  return out;
}


Span PieceSpan(const ArchiveHeader& h, Kind kind, uint32_t index) {
  if (kind == Kind::kRaw) {
    const auto& r = h.raws[index];
    return {h.data_start + r.offset, r.length, r.xxh3, r.file_index};
  }
  const auto& t = h.tensors[index];
  return {h.data_start + t.offset, t.length, t.xxh3, t.file_index};
}

bool PieceIndexValid(const ArchiveHeader& h, Kind kind, uint32_t index) {
  return kind == Kind::kRaw ? index < h.raws.size() : index < h.tensors.size();
}

uint32_t ElemSize(const ArchiveHeader& h, Kind kind, uint32_t index) {
  return kind == Kind::kRaw ? 1 : formats::DTypeSize(h.tensors[index].dtype);
}

// "tensor 'wte'" / "raw piece of file 'config.json'", for error messages.
std::string Describe(const ArchiveHeader& h, Kind kind, uint32_t index) {
  if (kind == Kind::kRaw) return "raw piece of file '" + h.files[h.raws[index].file_index].path + "'";
  const auto& t = h.tensors[index];
  return "tensor '" + t.name + "' (file '" + h.files[t.file_index].path + "')";
}

// "sha256:<hex>" of a mapped file, releasing the pages it has read as it goes (so hashing a
// large archive does not leave it all resident).
// `drop`: release the pages behind the hash (not when another thread is about to read them).
std::string DigestOf(const MappedFile& f, bool drop) {
  constexpr uint64_t kBlock = 64u << 20;
  Sha256 sha;
  for (uint64_t pos = 0; pos < f.size(); pos += kBlock) {
    uint64_t n = std::min<uint64_t>(kBlock, f.size() - pos);
    sha.Update(f.bytes().subspan(pos, n));
    if (drop) f.DropRange(pos, n);
  }
  return MakeDigest(sha.FinishHex());
}

// Feeds `n` zero bytes to `sha`.
void HashZeros(Sha256* sha, uint64_t n) {
  static const uint8_t kZeros[4096] = {};
  while (n > 0) {
    uint64_t k = std::min<uint64_t>(n, sizeof(kZeros));
    sha->Update(ByteSpan(kZeros, k));
    n -= k;
  }
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool IsModelInput(const std::string& path) {
  Result<formats::ModelPathKind> kind = formats::DetectModelPath(path);
  return kind.ok() && *kind != formats::ModelPathKind::kArchive;
}


}  // namespace blz::patcher::internal
