// Digests: SHA-256 (content addresses, whole-file verification) and xxh3-64 (fast per-tensor
// integrity). Text forms are lower-case hex: 64 digits for SHA-256, 16 digits for xxh3-64
// (the 64-bit value written big-endian, i.e. as printf("%016llx") prints it).
// A content address is "sha256:<64 hex>", as in the OCI distribution spec.
#ifndef BLZ_CORE_DIGEST_H_
#define BLZ_CORE_DIGEST_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/bytes.h"
#include "core/progress_fn.h"
#include "core/status.h"

namespace blz {

using Sha256Bytes = std::array<uint8_t, 32>;

// Incremental SHA-256 (OpenSSL EVP). Not thread-safe; one per stream.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(ByteSpan data);
  void Update(std::string_view data) { Update(AsBytes(data)); }
  // Finishes the hash; the object is reset and may be reused.
  Sha256Bytes Finish();
  std::string FinishHex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

Sha256Bytes Sha256Of(ByteSpan data);
std::string Sha256Hex(ByteSpan data);
inline std::string Sha256Hex(std::string_view data) { return Sha256Hex(AsBytes(data)); }

// SHA-512 of `data`, 128 lower-case hex digits (OCI manifests may be addressed by sha512).
std::string Sha512Hex(std::string_view data);

// SHA-256 of a whole file, streamed in fixed buffers. Hex result.
Result<std::string> Sha256FileHex(const std::string& path);
// The same, calling `progress` (when set) with (bytes hashed, file size at open) after each read.
Result<std::string> Sha256FileHex(const std::string& path, const ProgressCallback& progress);

// OCI content digests (image-spec descriptor.md, the registered algorithms):
// "sha256:<64 lower-case hex>" or "sha512:<128 lower-case hex>".
bool IsValidOciDigest(std::string_view digest);
// The digest of the file at `path` with the algorithm of `digest_like` (an OCI digest, e.g. the
// one the file should have): "sha256:<hex>" or "sha512:<hex>", streamed. Errors:
// kInvalidArgument (`digest_like` is not an OCI digest), kIOError.
Result<std::string> FileDigestLike(const std::string& path, std::string_view digest_like);

uint64_t Xxh3_64(ByteSpan data);
// Incremental xxh3-64 (same value as Xxh3_64 over the concatenation).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void Update(ByteSpan data);
  uint64_t Digest() const;

 private:
  void* state_;
};

// SHA-256 (hex) and xxh3-64 of a whole file, in one streamed read: the xxh3 is a cheap
// checksum for noticing later damage to a file whose SHA-256 was just taken.
struct FileSums {
  std::string sha256_hex;
  uint64_t xxh3 = 0;
};
Result<FileSums> Sha256AndXxh3File(const std::string& path);
// xxh3-64 of a whole file, streamed. Errors: kIOError.
Result<uint64_t> Xxh3File(const std::string& path);

std::string HexEncode(ByteSpan data);
// 16 lower-case hex digits.
std::string Hex64(uint64_t v);
// Parses exactly 16 hex digits.
Result<uint64_t> ParseHex64(std::string_view s);
bool IsLowerHex(std::string_view s, size_t length);

// "sha256:" + hex. ParseDigest accepts only that form with 64 lower-case hex digits and
// returns the hex part.
std::string MakeDigest(std::string_view sha256_hex);
Result<std::string> ParseDigest(std::string_view digest);

}  // namespace blz

#endif  // BLZ_CORE_DIGEST_H_
