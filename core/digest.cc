#include "core/digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <openssl/evp.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

namespace blz {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
  Impl() {
    ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  }
  ~Impl() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(ByteSpan data) {
  if (!data.empty()) EVP_DigestUpdate(impl_->ctx, data.data(), data.size());
}

Sha256Bytes Sha256::Finish() {
  Sha256Bytes out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(impl_->ctx, out.data(), &len);
  EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr);
  return out;
}

std::string Sha256::FinishHex() {
  Sha256Bytes b = Finish();
  return HexEncode(b);
}

Sha256Bytes Sha256Of(ByteSpan data) {
  Sha256 h;
  h.Update(data);
  return h.Finish();
}

std::string Sha256Hex(ByteSpan data) { return HexEncode(Sha256Of(data)); }

std::string Sha512Hex(std::string_view data) {
  std::array<uint8_t, 64> out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha512(), nullptr);
  return HexEncode(ByteSpan(out.data(), len));
}

namespace {

// Reads the file at `path` in 1 MiB reads, handing each to `block`; `progress` (when set) gets
// (bytes read, file size at open) after each.
Status ReadFileBlocks(const std::string& path, const std::function<void(ByteSpan)>& block,
                      const ProgressCallback& progress = nullptr) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IOError(path + ": cannot open: " + std::strerror(errno));
  uint64_t size = 0, done = 0;
  if (progress) {
    struct stat st {};
    if (::fstat(fd, &st) == 0) size = uint64_t(st.st_size);
  }
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return IOError(path + ": read failed: " + std::strerror(e));
    }
    if (n == 0) break;
    block(ByteSpan(buf.data(), size_t(n)));
    done += uint64_t(n);
    if (progress) progress(done, std::max(size, done));
  }
  ::close(fd);
  return Status::Ok();
}

// The hex digest of the file at `path` under `md`, streamed in 1 MiB reads; `also` (when set)
// sees the same bytes.
Result<std::string> FileHexWith(const std::string& path, const EVP_MD* md,
                                const ProgressCallback& progress = nullptr,
                                Xxh3Stream* also = nullptr) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), md, nullptr);
  BLZ_RETURN_IF_ERROR(ReadFileBlocks(
      path,
      [&](ByteSpan b) {
        EVP_DigestUpdate(ctx.get(), b.data(), b.size());
        if (also != nullptr) also->Update(b);
      },
      progress));
  std::array<uint8_t, EVP_MAX_MD_SIZE> out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), out.data(), &len);
  return HexEncode(ByteSpan(out.data(), len));
}

}  // namespace

Result<std::string> Sha256FileHex(const std::string& path) {
  return FileHexWith(path, EVP_sha256());
}

Result<std::string> Sha256FileHex(const std::string& path, const ProgressCallback& progress) {
  return FileHexWith(path, EVP_sha256(), progress);
}

Result<FileSums> Sha256AndXxh3File(const std::string& path) {
  Xxh3Stream xxh;
  FileSums sums;
  BLZ_ASSIGN_OR_RETURN(sums.sha256_hex, FileHexWith(path, EVP_sha256(), nullptr, &xxh));
  sums.xxh3 = xxh.Digest();
  return sums;
}

Result<uint64_t> Xxh3File(const std::string& path) {
  Xxh3Stream xxh;
  BLZ_RETURN_IF_ERROR(ReadFileBlocks(path, [&](ByteSpan b) { xxh.Update(b); }));
  return xxh.Digest();
}

bool IsValidOciDigest(std::string_view digest) {
  if (digest.rfind("sha256:", 0) == 0) return IsLowerHex(digest.substr(7), 64);
  if (digest.rfind("sha512:", 0) == 0) return IsLowerHex(digest.substr(7), 128);
  return false;
}

Result<std::string> FileDigestLike(const std::string& path, std::string_view digest_like) {
  if (!IsValidOciDigest(digest_like)) {
    return InvalidArgument("'" + std::string(digest_like) + "' is not a sha256 or sha512 digest");
  }
  const bool sha512 = digest_like.rfind("sha512:", 0) == 0;
  BLZ_ASSIGN_OR_RETURN(std::string hex, FileHexWith(path, sha512 ? EVP_sha512() : EVP_sha256()));
  return (sha512 ? "sha512:" : "sha256:") + hex;
}

uint64_t Xxh3_64(ByteSpan data) { return XXH3_64bits(data.data(), data.size()); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::Update(ByteSpan data) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data.data(), data.size());
}
uint64_t Xxh3Stream::Digest() const {
  return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_));
}

std::string HexEncode(ByteSpan data) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(data.size() * 2, '0');
  for (size_t i = 0; i < data.size(); ++i) {
    s[2 * i] = kDigits[data[i] >> 4];
    s[2 * i + 1] = kDigits[data[i] & 15];
  }
  return s;
}

std::string Hex64(uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (56 - 8 * i));
  return HexEncode(ByteSpan(b, 8));
}

bool IsLowerHex(std::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Result<uint64_t> ParseHex64(std::string_view s) {
  if (!IsLowerHex(s, 16)) {
    return InvalidArgument("expected 16 lower-case hex digits, got '" + std::string(s) + "'");
  }
  uint64_t v = 0;
  for (char c : s) v = (v << 4) | uint64_t(c <= '9' ? c - '0' : c - 'a' + 10);
  return v;
}

std::string MakeDigest(std::string_view sha256_hex) {
  return "sha256:" + std::string(sha256_hex);
}

Result<std::string> ParseDigest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (digest.substr(0, kPrefix.size()) != kPrefix || !IsLowerHex(digest.substr(kPrefix.size()), 64)) {
    return InvalidArgument("invalid digest '" + std::string(digest.substr(0, 80)) +
                           "': expected sha256:<64 lower-case hex digits>");
  }
  return std::string(digest.substr(kPrefix.size()));
}

}  // namespace blz
