// The .blzpatch container, format version 2 (version 1 is still read): the fixed header and
// the JSON header, written and parsed (strictly) here; CreatePatch / ApplyPatch (patcher/patch.h)
// use them. The byte-exact specification is docs/patch-format.md; summary:
//
//   0    magic "BLZPATCH" (42 4C 5A 50 41 54 43 48)
//   8    u32 LE format version (2 written; 1 and 2 read)
//   12   u32 LE flags (0)
//   16   u64 LE header length N (1 <= N <= kMaxPatchHeaderBytes)
//   24   header: N bytes of compact JSON in the canonical form SerializePatchHeader writes
//   24+N payload section: every chunk payload, back to back, in header order (the target's
//        prefix chunks, then each piece's chunks); the file ends at the end of the last one.
//
// Version 2 adds full patches: "base" may be null (the patch needs no base archive; every piece
// is coded without one). A version-1 patch always has a base. Everything else is the same.
//
// Internal to the patcher layer (exposed for tests).
#ifndef BLZ_PATCHER_PATCH_FORMAT_H_
#define BLZ_PATCHER_PATCH_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/bytes.h"
#include "core/status.h"
#include "formats/blz_archive.h"
#include "patcher/tensor_codec.h"

namespace blz::patcher::internal {

inline constexpr char kPatchMagic[8] = {'B', 'L', 'Z', 'P', 'A', 'T', 'C', 'H'};
// The version this build writes, and the oldest one it reads.
inline constexpr uint32_t kPatchVersion = 2;
inline constexpr uint32_t kMinPatchVersion = 1;
inline constexpr uint64_t kPatchFixedBytes = 24;
inline constexpr uint64_t kMaxPatchHeaderBytes = 256ull << 20;
// The target prefix is magic + archive header + padding: at most 24 + cap + 63 bytes.
inline constexpr uint64_t kMaxPrefixBytes =
    24 + formats::kMaxArchiveHeaderBytes + formats::kArchiveAlignment;

// One independently coded chunk of target bytes.
struct PatchChunk {
  Codec codec = Codec::kZstd;
  uint64_t offset = 0;  // of the payload, relative to the payload section (24 + N)
  uint64_t length = 0;  // payload bytes (0 for kIdentical)
  uint64_t size = 0;    // decoded (target) bytes, 1 .. kChunkBytes
  uint64_t xxh3 = 0;    // xxh3-64 of the decoded bytes
};

// One piece of the target archive's data section (same order as the data section).
struct PatchPiece {
  formats::ArchivePiece::Kind kind = formats::ArchivePiece::Kind::kRaw;
  uint32_t index = 0;            // into the target header's raws or tensors
  std::optional<uint32_t> base;  // into the base header's raws or tensors (same kind)
  std::vector<PatchChunk> chunks;
};

struct PatchHeader {
  // False for a full patch ("base": null, version >= 2): base_digest is "" and base_size 0,
  // every piece has base == nullopt and `removed` is empty.
  bool has_base = true;
  std::string base_digest;  // "sha256:<hex>"
  uint64_t base_size = 0;
  std::string target_digest;  // "sha256:<hex>"
  uint64_t target_size = 0;
  uint64_t prefix_length = 0;  // the target's data_start
  std::vector<PatchChunk> prefix_chunks;
  std::vector<PatchPiece> pieces;
  std::vector<std::string> removed;  // base tensors the target lacks (reporting only)

  // Filled by ParsePatch (not serialized): the format version of the fixed header, where the
  // payload section starts and its size.
  uint32_t version = kPatchVersion;
  uint64_t payload_start = 0;
  uint64_t payload_bytes = 0;
};

// The header JSON in canonical form: compact, keys in the fixed order of docs/patch-format.md,
// integers in decimal, xxh3 as 16 lower-case hex digits. kInvalidArgument if a string is not
// valid UTF-8.
Result<std::string> SerializePatchHeader(const PatchHeader& header);

// The 24 fixed bytes for a header of `json_length` bytes. `version` is kPatchVersion except in
// tests that make older patches.
std::string EncodePatchFixedHeader(uint64_t json_length, uint32_t version = kPatchVersion);

// Validates the fixed header (`head` holds at least its 24 bytes; `file_size` is the size of
// the whole patch) and returns N; *version (if not null) receives the format version. Errors:
// kCorruption (magic, truncated, N == 0, 24 + N past the end), kUnsupported (a version outside
// kMinPatchVersion..kPatchVersion, flags), kTooLarge (N > cap). `what` prefixes messages.
Result<uint64_t> ParsePatchFixedHeader(ByteSpan head, uint64_t file_size, std::string_view what,
                                       uint32_t* version = nullptr);

// Parses and validates a whole patch's header. `head` holds at least the first 24 + N bytes
// (more is fine: a map of the whole file). Checks, before allocating anything sized by input:
// the fixed header; then the JSON: the exact key set and types, digests of the "sha256:<hex>"
// form ("base" may be null only from version 2 on; then no piece has a base and "removed" is
// empty), 1 <= chunk size <= kChunkBytes with every chunk but a list's last exactly
// kChunkBytes, known codec ids, no payload for kIdentical, payloads back to back from 0 in
// header order ending exactly at the end of the file (overflow-checked), the prefix chunks
// adding up to prefix_length <= kMaxPrefixBytes <= target_size; and that the JSON is
// byte-for-byte the canonical form (so no duplicate keys, extra keys or whitespace). Whether
// the pieces fit the target and base archives is checked by ApplyPatch. Errors: kCorruption,
// kTooLarge, kUnsupported; messages name `what`, the field and the byte offset.
Result<PatchHeader> ParsePatch(ByteSpan head, uint64_t file_size, std::string_view what);

}  // namespace blz::patcher::internal

#endif  // BLZ_PATCHER_PATCH_FORMAT_H_
