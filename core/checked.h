// Overflow-checked unsigned arithmetic for lengths, offsets and element counts read from
// untrusted files. Each returns false (and leaves *out unspecified) on overflow.
#ifndef BLZ_CORE_CHECKED_H_
#define BLZ_CORE_CHECKED_H_

#include <cstdint>

namespace blz {

[[nodiscard]] inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
[[nodiscard]] inline bool CheckedMul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
// Rounds `v` up to a multiple of `align` (a power of two).
[[nodiscard]] inline bool CheckedAlignUp(uint64_t v, uint64_t align, uint64_t* out) {
  uint64_t t;
  if (!CheckedAdd(v, align - 1, &t)) return false;
  *out = t & ~(align - 1);
  return true;
}

}  // namespace blz

#endif  // BLZ_CORE_CHECKED_H_
