// Tests for random access to a full patch or a chain link (patcher/patch_reader.h): any byte range of the
// archive, decoded from the full patch alone, is that range of the archive (corpus model and a
// generated model whose tensors span several chunks), only the chunks a range touches are
// decoded, and damaged or wrong patches are refused with errors that say where.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/digest.h"
#include "formats/blz_archive.h"
#include "patcher/patch_reader.h"
#include "patcher/patch.h"
#include "patcher/patch_format.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::patcher {
namespace {

using ::testing::HasSubstr;

// The archive of `input` and its full patch, in `dir`.
struct Packed {
  std::string archive;  // the archive's bytes
  std::string archive_path, patch_path;
};

Packed PackAndPatch(const std::string& input, const testing::TempDir& dir) {
  Packed p;
  p.archive_path = dir / "m.blz";
  p.patch_path = dir / "m.blzpatch";
  formats::PackStats ps;
  Status s = formats::Pack(input, p.archive_path, &ps);
  EXPECT_TRUE(s.ok()) << s.ToString();
  DiffStats st;
  s = CreateFullPatch(p.archive_path, p.patch_path, DiffOptions{}, &st);
  EXPECT_TRUE(s.ok()) << s.ToString();
  p.archive = testing::ReadFileBytes(p.archive_path);
  return p;
}

std::string ReadRange(const ArchiveReader& r, uint64_t offset, uint64_t length,
                      ArchiveReadStats* stats = nullptr) {
  std::string out;
  Status s = r.Read(offset, length,
                    [&](ByteSpan b) {
                      EXPECT_FALSE(b.empty());
                      EXPECT_LE(b.size(), kChunkBytes);
                      out.append(reinterpret_cast<const char*>(b.data()), b.size());
                      return Status::Ok();
                    },
                    stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

// Every kind of range: whole, empty, first byte, last byte, each piece's edges (crossing from
// the padding into a piece and from one piece into the next), chunk edges, random ones.
void CheckRanges(const Packed& p, int random_ranges) {
  auto reader = PatchReader::Open(p.patch_path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const ArchiveReader& r = **reader;
  const uint64_t size = p.archive.size();
  ASSERT_EQ(r.archive_size(), size);
  EXPECT_EQ(r.archive_digest(), MakeDigest(Sha256Hex(p.archive)));
  auto archive = formats::BlzArchive::Open(p.archive_path);
  ASSERT_TRUE(archive.ok());
  EXPECT_EQ(r.header().files.size(), archive->header().files.size());
  EXPECT_EQ(r.header().tensors.size(), archive->header().tensors.size());
  EXPECT_EQ(r.header().data_start, archive->header().data_start);

  std::vector<std::pair<uint64_t, uint64_t>> ranges = {
      {0, size}, {0, 0}, {0, 1}, {size - 1, 1}, {size, 0}, {1, size - 2}};
  const uint64_t ds = archive->header().data_start;
  ranges.push_back({ds - 1, 2});  // the end of the prefix into the first piece
  for (const auto& t : archive->header().tensors) {
    const uint64_t at = ds + t.offset;
    ranges.push_back({at, t.length});  // exactly the tensor
    ranges.push_back({at - 7, std::min<uint64_t>(t.length + 30, size - (at - 7))});  // across
    if (t.length > 0) {
      const uint64_t last = at + t.length - 1;
      ranges.push_back({last, std::min<uint64_t>(100, size - last)});
    }
    for (uint64_t c = kChunkBytes; c < t.length; c += kChunkBytes) {
      ranges.push_back({at + c - 3, 6});  // across a chunk edge inside the tensor
    }
  }
  std::mt19937_64 rng(26);
  for (int i = 0; i < random_ranges; ++i) {
    const uint64_t off = rng() % size;
    const uint64_t len = (i % 4 == 0) ? rng() % (size - off + 1)
                                      : rng() % std::min<uint64_t>(5000, size - off + 1);
    ranges.push_back({off, len});
  }
  for (const auto& [off, len] : ranges) {
    ASSERT_LE(off + len, size);
    std::string got = ReadRange(r, off, len);
    ASSERT_EQ(got.size(), len) << off << "+" << len;
    ASSERT_TRUE(got == p.archive.substr(off, len)) << "bytes differ in " << off << "+" << len;
  }
  // Several ranges through one cursor: their concatenation.
  auto cursor = r.NewCursor({{size - 1, 1}, {0, 0}, {0, 3}, {ds, 100}});
  ASSERT_TRUE(cursor.ok());
  std::string got;
  while (true) {
    auto b = (*cursor)->Next();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (b->empty()) break;
    got.append(reinterpret_cast<const char*>(b->data()), b->size());
  }
  EXPECT_TRUE(got == p.archive.substr(size - 1, 1) + p.archive.substr(0, 3) +
                         p.archive.substr(ds, 100));
}

TEST(FullPatchReaderTest, EveryRangeOfACorpusArchiveMatchesTheArchive) {
  BLZ_REQUIRE_CORPUS(corpus);
  testing::TempDir dir;
  Packed p = PackAndPatch(corpus + "/tiny-gpt2/base", dir);
  CheckRanges(p, 400);
}

// A model whose embedding (8 MiB + F32) spans three chunks, plus a 0-rank and an empty tensor.
TEST(FullPatchReaderTest, RangesAcrossChunksOfLargeTensorsMatchTheArchive) {
  testing::TempDir dir;
  testing::TestModelOptions o;
  o.layers = 1;
  o.hidden = 264;
  o.vocab = 8192;
  o.with_edge_tensors = true;
  testing::WriteTestModel(dir / "model", o);
  Packed p = PackAndPatch(dir / "model", dir);
  auto archive = formats::BlzArchive::Open(p.archive_path);
  ASSERT_TRUE(archive.ok());
  bool multi = false;
  for (const auto& t : archive->header().tensors) multi = multi || t.length > 2 * kChunkBytes;
  ASSERT_TRUE(multi) << "the model should have a tensor of more than two chunks";
  CheckRanges(p, 60);
}

// One byte of a tensor decodes one chunk, not the archive.
TEST(FullPatchReaderTest, ARangeDecodesOnlyTheChunksItTouches) {
  testing::TempDir dir;
  testing::TestModelOptions o;
  o.layers = 1;
  o.hidden = 264;
  o.vocab = 8192;
  testing::WriteTestModel(dir / "model", o);
  Packed p = PackAndPatch(dir / "model", dir);
  auto reader = PatchReader::Open(p.patch_path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const formats::ArchiveHeader& h = (*reader)->header();
  const formats::ArchiveTensor* big = nullptr;
  for (const auto& t : h.tensors) {
    if (big == nullptr || t.length > big->length) big = &t;
  }
  ASSERT_GT(big->length, 2 * kChunkBytes);
  const uint64_t at = h.data_start + big->offset;
  ArchiveReadStats stats;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadRange(**reader, at + kChunkBytes + 5, 1, &stats),
            p.archive.substr(at + kChunkBytes + 5, 1));
  std::cout << "[ measure  ] one byte of a " << big->length << "-byte F32 tensor: decoded "
            << stats.bytes_decoded << " bytes from " << stats.payload_bytes << " in "
            << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                   .count()
            << " ms\n";
  EXPECT_EQ(stats.chunks_decoded, 1u);
  EXPECT_EQ(stats.bytes_decoded, kChunkBytes);
  EXPECT_GT(stats.payload_bytes, 0u);
  // Across a chunk edge: two chunks.
  ReadRange(**reader, at + kChunkBytes - 1, 2, &stats);
  EXPECT_EQ(stats.chunks_decoded, 2u);
  // The padding after a piece decodes nothing.
  for (const auto& t : h.tensors) {
    const uint64_t end = h.data_start + t.offset + t.length;
    if (end < h.total_size && p.archive[end] == 0 && end % formats::kArchiveAlignment != 0) {
      EXPECT_EQ(ReadRange(**reader, end, 1, &stats), std::string(1, '\0'));
      EXPECT_EQ(stats.chunks_decoded, 0u);
      break;
    }
  }
  // The whole archive decodes every chunk once.
  ReadRange(**reader, 0, h.total_size, &stats);
  EXPECT_EQ(stats.bytes_decoded, h.total_size - [&] {
    uint64_t padding = h.total_size - h.data_start;
    for (const auto& t : h.tensors) padding -= t.length;
    for (const auto& raw : h.raws) padding -= raw.length;
    return padding;
  }());
}

// What one Range of a file costs against rebuilding the whole archive (ApplyFullPatch), on the
// corpus model: bytes decoded, printed for docs/huggingface.md (times are printed, not checked).
TEST(FullPatchReaderTest, OneRangeDecodesFarLessThanARebuild) {
  BLZ_REQUIRE_CORPUS(corpus);
  testing::TempDir dir;
  Packed p = PackAndPatch(corpus + "/tiny-gpt2/base", dir);
  auto reader = PatchReader::Open(p.patch_path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const formats::ArchiveHeader& h = (*reader)->header();
  const formats::ArchiveFile* model = nullptr;
  for (const auto& f : h.files) {
    if (f.path == "model.safetensors") model = &f;
  }
  ASSERT_NE(model, nullptr);
  // The file's first byte is in its first piece (the safetensors header, a raw piece); its
  // middle is in some tensor: map both through the file's pieces.
  auto piece_at = [&](uint64_t file_offset) {
    uint64_t pos = 0;
    for (const auto& piece : model->pieces) {
      const uint64_t off = piece.kind == formats::ArchivePiece::Kind::kRaw
                               ? h.raws[piece.index].offset
                               : h.tensors[piece.index].offset;
      const uint64_t len = piece.kind == formats::ArchivePiece::Kind::kRaw
                               ? h.raws[piece.index].length
                               : h.tensors[piece.index].length;
      if (file_offset < pos + len) return h.data_start + off + (file_offset - pos);
      pos += len;
    }
    return uint64_t(0);
  };
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  ArchiveReadStats first, middle;
  auto t0 = now();
  ReadRange(**reader, piece_at(0), 1, &first);
  auto t1 = now();
  ReadRange(**reader, piece_at(model->size / 2), 4096, &middle);
  auto t2 = now();
  ApplyStats st;
  ASSERT_TRUE(ApplyFullPatch(p.patch_path, dir / "rebuilt.blz", &st).ok());
  auto t3 = now();
  std::cout << "[ measure  ] tiny-gpt2/base archive " << h.total_size << " bytes; Range "
            << "bytes=0-0 of model.safetensors decoded " << first.bytes_decoded << " bytes ("
            << first.chunks_decoded << " chunk, " << ms(t1 - t0) << " ms); 4 KiB mid-file: "
            << middle.bytes_decoded << " bytes (" << middle.chunks_decoded << " chunk, "
            << ms(t2 - t1) << " ms); whole rebuild: " << st.target_bytes << " bytes ("
            << ms(t3 - t2) << " ms)\n";
  // A 4 KiB range in a small tensor (tiny-gpt2's middle byte is in its embedding, 95% of it).
  const formats::ArchiveTensor* small = nullptr;
  for (const auto& t : h.tensors) {
    if (t.length >= 4096 && (small == nullptr || t.length < small->length)) small = &t;
  }
  ASSERT_NE(small, nullptr);
  ArchiveReadStats in_small;
  auto t4 = now();
  ReadRange(**reader, h.data_start + small->offset, 4096, &in_small);
  auto t5 = now();
  std::cout << "[ measure  ] 4 KiB of tensor '" << small->name << "' (" << small->length
            << " bytes): decoded " << in_small.bytes_decoded << " bytes (" << ms(t5 - t4)
            << " ms)\n";
  EXPECT_EQ(first.chunks_decoded, 1u);
  EXPECT_LE(middle.chunks_decoded, 2u);
  EXPECT_EQ(in_small.chunks_decoded, 1u);
  EXPECT_LT(first.bytes_decoded, h.total_size / 10);
  EXPECT_LT(in_small.bytes_decoded, h.total_size / 10);
}

TEST(FullPatchReaderTest, DamagedOrWrongPatchesAreRefused) {
  BLZ_REQUIRE_CORPUS(corpus);
  testing::TempDir dir;
  Packed p = PackAndPatch(corpus + "/tiny-gpt2/base", dir);
  const std::string patch = testing::ReadFileBytes(p.patch_path);
  auto ph = internal::ParsePatch(AsBytes(patch), patch.size(), "patch");
  ASSERT_TRUE(ph.ok());
  auto reader = PatchReader::Open(p.patch_path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  const formats::ArchiveHeader& h = (*reader)->header();

  // A damaged tensor payload: the patch opens (payloads are checked when decoded), a range in
  // that tensor fails naming it and the chunk, and other ranges still read.
  size_t victim = 0;
  for (size_t i = 0; i < ph->pieces.size(); ++i) {
    if (ph->pieces[i].kind == formats::ArchivePiece::Kind::kTensor &&
        ph->pieces[i].chunks[0].length > 1000) {
      victim = i;
      break;
    }
  }
  const internal::PatchPiece& piece = ph->pieces[victim];
  ASSERT_EQ(piece.kind, formats::ArchivePiece::Kind::kTensor);
  std::string damaged = patch;
  damaged[ph->payload_start + piece.chunks[0].offset + piece.chunks[0].length / 2] ^= 0x5a;
  testing::WriteFileBytes(dir / "damaged.blzpatch", damaged);
  auto bad = PatchReader::Open(dir / "damaged.blzpatch");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  const formats::ArchiveTensor& t = h.tensors[piece.index];
  std::string sent;
  Status s = (*bad)->Read(h.data_start + t.offset, t.length, [&](ByteSpan b) {
    sent.append(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("tensor '" + t.name + "'"));
  EXPECT_THAT(s.message(), HasSubstr("chunk 0"));
  EXPECT_THAT(s.message(), HasSubstr("damaged.blzpatch"));
  EXPECT_TRUE(sent.empty()) << "bytes of a bad chunk were handed out";
  EXPECT_EQ(ReadRange(**bad, 0, 100), p.archive.substr(0, 100));

  // A damaged archive header (prefix payload): refused at Open.
  damaged = patch;
  damaged[ph->payload_start + ph->prefix_chunks[0].length / 2] ^= 0x5a;
  testing::WriteFileBytes(dir / "prefix.blzpatch", damaged);
  auto bad_prefix = PatchReader::Open(dir / "prefix.blzpatch");
  EXPECT_EQ(bad_prefix.status().code(), Code::kCorruption) << bad_prefix.status().ToString();
  EXPECT_THAT(bad_prefix.status().message(), HasSubstr("archive header chunk 0"));

  // Truncated: the payloads no longer end at the end of the file.
  testing::WriteFileBytes(dir / "short.blzpatch", patch.substr(0, patch.size() - 10));
  auto truncated = PatchReader::Open(dir / "short.blzpatch");
  EXPECT_EQ(truncated.status().code(), Code::kCorruption);
  EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));

  // A patch that needs a base is not a full patch.
  testing::TempDir dir2;
  Packed ft = PackAndPatch(corpus + "/tiny-gpt2/ft-v1", dir2);
  DiffStats st;
  ASSERT_TRUE(CreatePatch(p.archive_path, ft.archive_path, dir / "delta.blzpatch", DiffOptions{},
                          &st).ok());
  auto delta = PatchReader::Open(dir / "delta.blzpatch");
  EXPECT_EQ(delta.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(delta.status().message(), HasSubstr("needs base archive sha256:"));

  // Ranges outside the archive, and ones whose end overflows.
  const uint64_t size = (*reader)->archive_size();
  EXPECT_EQ((*reader)->NewCursor({{size, 1}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*reader)->NewCursor({{1, UINT64_MAX}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ((*reader)->Read(size - 1, 2, [](ByteSpan) { return Status::Ok(); }).code(),
            Code::kInvalidArgument);
  // Not a patch at all.
  EXPECT_EQ(PatchReader::Open(p.archive_path).status().code(), Code::kCorruption);
  EXPECT_EQ(PatchReader::Open(dir / "missing").status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace blz::patcher
