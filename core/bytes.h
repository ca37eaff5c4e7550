// Byte views and little-endian fixed-width coding. All blz on-disk integers are little-endian.
#ifndef BLZ_CORE_BYTES_H_
#define BLZ_CORE_BYTES_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace blz {

using ByteSpan = std::span<const uint8_t>;
using MutableByteSpan = std::span<uint8_t>;

inline ByteSpan AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
inline std::string_view AsChars(ByteSpan b) {
  return {reinterpret_cast<const char*>(b.data()), b.size()};
}

// REQUIRES: p points at >= 4 / 8 readable bytes.
inline uint32_t LoadLE32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t LoadLE64(const uint8_t* p) {
  return uint64_t(LoadLE32(p)) | uint64_t(LoadLE32(p + 4)) << 32;
}
inline void StoreLE32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void StoreLE64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void AppendLE32(std::string* s, uint32_t v) {
  uint8_t b[4];
  StoreLE32(b, v);
  s->append(reinterpret_cast<char*>(b), 4);
}
inline void AppendLE64(std::string* s, uint64_t v) {
  uint8_t b[8];
  StoreLE64(b, v);
  s->append(reinterpret_cast<char*>(b), 8);
}

}  // namespace blz

#endif  // BLZ_CORE_BYTES_H_
