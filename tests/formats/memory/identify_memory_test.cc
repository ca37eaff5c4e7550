// Issue 9, defect 2: the structural identity of a GGUF must cost memory within a small constant
// factor of the file's bytes, never one heap object per metadata array element. This binary
// replaces the global operator new / delete with counting versions (live bytes, peak, number
// of allocations), so the bounds below are exact and deterministic (also under ASan, which
// inflates RSS but not these counts). It is its own binary so the rest of the formats tests
// keep ASan's own new / delete checks.
#include <malloc.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "formats/blz_archive.h"
#include "formats/gguf.h"
#include "formats/identify.h"
#include "formats/inspect.h"
#include "formats/structural_hash.h"
#include "tests/test_util.h"

namespace {

std::atomic<uint64_t> g_live{0};
std::atomic<uint64_t> g_peak{0};
std::atomic<uint64_t> g_count{0};

void* CountedAlloc(std::size_t n, std::size_t align) {
  void* p = nullptr;
  if (align > alignof(std::max_align_t)) {
    if (::posix_memalign(&p, align, n == 0 ? 1 : n) != 0) p = nullptr;
  } else {
    p = std::malloc(n == 0 ? 1 : n);
  }
  if (p == nullptr) throw std::bad_alloc();
  const uint64_t live = g_live.fetch_add(::malloc_usable_size(p)) + ::malloc_usable_size(p);
  uint64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  g_count.fetch_add(1);
  return p;
}

void CountedFree(void* p) {
  if (p == nullptr) return;
  g_live.fetch_sub(::malloc_usable_size(p));
  std::free(p);
}

// Heap use of the code run between construction and Extra() / Allocations().
class HeapWatch {
 public:
  HeapWatch() : base_(g_live.load()), count_(g_count.load()) { g_peak.store(base_); }
  uint64_t PeakExtra() const { return g_peak.load() - base_; }
  uint64_t Allocations() const { return g_count.load() - count_; }

 private:
  uint64_t base_;
  uint64_t count_;
};

}  // namespace

void* operator new(std::size_t n) { return CountedAlloc(n, 0); }
void* operator new[](std::size_t n) { return CountedAlloc(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) {
  return CountedAlloc(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return CountedAlloc(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, std::size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, std::size_t) noexcept { CountedFree(p); }
void operator delete(void* p, std::align_val_t) noexcept { CountedFree(p); }
void operator delete[](void* p, std::align_val_t) noexcept { CountedFree(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { CountedFree(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { CountedFree(p); }

namespace blz::formats {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
// Far below one allocation per element (the arrays below have 256k to 8M elements).
constexpr uint64_t kMaxAllocations = 5000;

// A GGUF at `path` with one tensor and the array `value` under "big".
void WriteGgufWithArray(const std::string& path, GgufValue value) {
  GgufHeader h;
  h.metadata.push_back({"general.architecture", GgufValue::String("llama")});
  h.metadata.push_back({"big", std::move(value)});
  h.tensors.push_back({"t", {4}, GgmlType::kF32, 0, 0});
  ASSERT_TRUE(AssignGgufOffsets(&h).ok());
  const std::string data(16, '\0');
  const ByteSpan spans[] = {AsBytes(data)};
  Status st = WriteGgufFile(path, h, spans, {});
  ASSERT_TRUE(st.ok()) << st.ToString();
}

GgufValue U8Array(uint64_t n) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.element_type = GgufType::kUint8;
  v.count = n;
  v.raw.resize(n);
  for (uint64_t i = 0; i < n; ++i) v.raw[i] = static_cast<char>(i * 7);
  return v;
}

// n strings of 8 bytes (16 bytes each in the file).
GgufValue StringArray(uint64_t n) {
  std::vector<GgufValue> items;
  for (uint64_t i = 0; i < n; ++i) {
    items.push_back(GgufValue::String("tok" + std::to_string(10000 + i % 90000)));
  }
  return GgufValue::Array(GgufType::kString, items).value();
}

// n empty float32 arrays (12 bytes each in the file).
GgufValue NestedArray(uint64_t n) {
  const GgufValue empty = GgufValue::Array(GgufType::kFloat32, {}).value();
  const std::vector<GgufValue> items(n, empty);
  return GgufValue::Array(GgufType::kArray, items).value();
}

uint64_t FileSize(const std::string& path) {
  auto m = MappedFile::Open(path);
  EXPECT_TRUE(m.ok());
  return m.ok() ? m->size() : 0;
}

// `blz id`'s path (IdentifyPath) over the file: peak heap within `factor` x the file + 1 MiB
// and no per-element allocations. Returns the hash.
std::string CheckIdentify(const std::string& path, uint64_t factor) {
  const uint64_t size = FileSize(path);
  HeapWatch w;
  auto id = IdentifyPath(path);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_LE(w.PeakExtra(), factor * size + kMiB) << path << " (" << size << " bytes)";
  std::printf("  identify: %llu-byte file, peak extra heap %llu bytes, %llu allocations\n",
              static_cast<unsigned long long>(size),
              static_cast<unsigned long long>(w.PeakExtra()),
              static_cast<unsigned long long>(w.Allocations()));
  EXPECT_LE(w.Allocations(), kMaxAllocations) << path;
  return id.ok() ? id->structural_hash : "";
}

TEST(IdentifyMemory, U8ArrayOf8MiB) {
  testing::TempDir dir;
  const std::string path = dir / "u8.gguf";
  WriteGgufWithArray(path, U8Array(8 * kMiB));
  const std::string hash = CheckIdentify(path, 1);

  // `blz inspect` (a full read, plus the identity).
  {
    const uint64_t size = FileSize(path);
    HeapWatch w;
    auto s = Describe(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_LE(w.PeakExtra(), 2 * size + kMiB);
    EXPECT_LE(w.Allocations(), kMaxAllocations);
  }

  // The registry's ArchiveStructuralHash: the archive's stored GGUF header.
  const std::string blz = dir / "u8.blz";
  ASSERT_TRUE(Pack(path, blz, nullptr).ok());
  {
    const uint64_t size = FileSize(path);
    HeapWatch w;
    auto a = BlzArchive::Open(blz);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto in = StructuralInputFromArchive(*a);
    ASSERT_TRUE(in.ok()) << in.status().ToString();
    EXPECT_EQ(StructuralHash(*in), hash);
    EXPECT_LE(w.PeakExtra(), 1 * size + kMiB);
    EXPECT_LE(w.Allocations(), kMaxAllocations);
  }
}

TEST(IdentifyMemory, StringArrayOf256kStrings) {
  testing::TempDir dir;
  const std::string path = dir / "str.gguf";
  WriteGgufWithArray(path, StringArray(256 * 1024));  // 4 MiB
  CheckIdentify(path, 1);
}

TEST(IdentifyMemory, NestedArrayOf350kEmptyArrays) {
  testing::TempDir dir;
  const std::string path = dir / "nested.gguf";
  WriteGgufWithArray(path, NestedArray(350000));  // 4.2 MB
  CheckIdentify(path, 1);
}

}  // namespace
}  // namespace blz::formats
