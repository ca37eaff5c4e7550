// Tests for random access to a full patch or a chain link (patcher/patch_reader.h): any byte
// range of the archive, decoded from the full patch alone (or a chain of links over it), is
// that range of the archive (corpus model and a generated model whose tensors span several
// chunks), only the chunks a range touches are decoded, and damaged or wrong patches are
// refused with errors that say where; WriteArchive writes exactly the archive, or nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
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
void CheckReaderRanges(const ArchiveReader& r, const Packed& p, int random_ranges) {
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

void CheckRanges(const Packed& p, int random_ranges) {
  auto reader = PatchReader::Open(p.patch_path);
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  CheckReaderRanges(**reader, p, random_ranges);
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


// ---- chain links ----------------------------------------------------------------------------

// A chain as the registry stores one: v0 as its full patch, v1 as a patch from v0, v2 as a
// patch from v1 (depth 2). The models have tensors of several chunks; v1 keeps the layers of v0
// (identical chunks), v2 changes everything a little (XOR / sub planes against v1).
struct Chain {
  Packed v0, v1, v2;           // archive bytes and paths (v0.patch_path: its full patch)
  std::string link1, link2;    // v0 -> v1, v1 -> v2
};

Chain MakeChain(const testing::TempDir& dir) {
  Chain c;
  testing::TestModelOptions o;
  o.layers = 1;
  o.hidden = 264;
  o.vocab = 8192;
  o.with_edge_tensors = true;
  auto pack = [&](const std::string& name, const testing::TestModelOptions& opts) {
    testing::WriteTestModel(dir / name, opts);
    Packed p;
    p.archive_path = dir / (name + ".blz");
    formats::PackStats ps;
    Status s = formats::Pack(dir / name, p.archive_path, &ps);
    EXPECT_TRUE(s.ok()) << s.ToString();
    p.archive = testing::ReadFileBytes(p.archive_path);
    return p;
  };
  c.v0 = pack("v0", o);
  testing::TestModelOptions o1 = o;
  o1.perturb_scale = 0.01;
  o1.frozen_prefix = "model.layers";
  c.v1 = pack("v1", o1);
  testing::TestModelOptions o2 = o;
  o2.perturb_scale = 0.02;
  o2.perturb_seed = 3;
  c.v2 = pack("v2", o2);
  c.v0.patch_path = dir / "v0.blzpatch";
  DiffStats st;
  Status s = CreateFullPatch(c.v0.archive_path, c.v0.patch_path, DiffOptions{}, &st);
  EXPECT_TRUE(s.ok()) << s.ToString();
  c.link1 = dir / "v1.link.blzpatch";
  c.link2 = dir / "v2.link.blzpatch";
  s = CreatePatch(c.v0.archive_path, c.v1.archive_path, c.link1, DiffOptions{}, &st);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(st.identical, 0u) << "v1 should share tensors with v0";
  s = CreatePatch(c.v1.archive_path, c.v2.archive_path, c.link2, DiffOptions{}, &st);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(st.patched, 0u) << "v2 should be coded against v1";
  return c;
}

// The readers of a Chain: v0's full patch, link1 over it, link2 over that (null from the
// first that fails to open, which is reported).
struct OpenedChain {
  std::shared_ptr<const PatchReader> root, l1, l2;
};
OpenedChain OpenChain(const Chain& c) {
  OpenedChain oc;
  auto root = PatchReader::Open(c.v0.patch_path);
  EXPECT_TRUE(root.ok()) << root.status().ToString();
  if (!root.ok()) return oc;
  oc.root = *root;
  auto l1 = PatchReader::Open(c.link1, oc.root);
  EXPECT_TRUE(l1.ok()) << l1.status().ToString();
  if (!l1.ok()) return oc;
  oc.l1 = *l1;
  auto l2 = PatchReader::Open(c.link2, oc.l1);
  EXPECT_TRUE(l2.ok()) << l2.status().ToString();
  if (l2.ok()) oc.l2 = *l2;
  return oc;
}

// v2 read through link2 -> link1 -> v0's full patch, and through link2 -> v1's archive file:
// every tensor edge, chunk edge and random ranges are v2's bytes.
TEST(ChainLinkReaderTest, EveryRangeOfAChainOfDepthTwoMatchesTheArchive) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  auto root = PatchReader::Open(c.v0.patch_path);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto l1 = PatchReader::Open(c.link1, *root);
  ASSERT_TRUE(l1.ok()) << l1.status().ToString();
  auto l2 = PatchReader::Open(c.link2, *l1);
  ASSERT_TRUE(l2.ok()) << l2.status().ToString();
  EXPECT_EQ((*l2)->archive_digest(), MakeDigest(Sha256Hex(c.v2.archive)));
  EXPECT_EQ((*l2)->parent(), *l1);
  CheckReaderRanges(**l1, c.v1, 16);
  CheckReaderRanges(**l2, c.v2, 30);

  // The root may be a plain archive file (a raw blob, or a copy in the cache).
  auto file = ArchiveFileReader::Open(c.v1.archive_path, MakeDigest(Sha256Hex(c.v1.archive)));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  CheckReaderRanges(**file, c.v1, 4);
  auto on_file = PatchReader::Open(c.link2, *file);
  ASSERT_TRUE(on_file.ok()) << on_file.status().ToString();
  CheckReaderRanges(**on_file, c.v2, 8);
}

// One byte of v2 decodes one chunk per level of the chain (not the archive); `bytes=0-0` of
// model.safetensors decodes the archive header's chunk of each patch it touches. Printed for
// docs/storage.md against a whole rebuild (ApplyPatch twice after ApplyFullPatch).
TEST(ChainLinkReaderTest, ARangeDecodesOneChunkPerLinkNotTheChain) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  const OpenedChain oc = OpenChain(c);
  ASSERT_NE(oc.l2, nullptr);
  const formats::ArchiveHeader& h = oc.l2->header();
  const formats::ArchiveTensor* big = nullptr;
  for (const auto& t : h.tensors) {
    if (big == nullptr || t.length > big->length) big = &t;
  }
  ASSERT_GT(big->length, 2 * kChunkBytes);
  const uint64_t at = h.data_start + big->offset + kChunkBytes + 5;
  ArchiveReadStats one;
  EXPECT_EQ(ReadRange(*oc.l2, at, 1, &one), c.v2.archive.substr(at, 1));
  EXPECT_EQ(one.chunks_decoded, 3u);  // v2's chunk, v1's chunk it is coded against, v0's
  EXPECT_EQ(one.bytes_decoded, 3 * kChunkBytes);

  // The first byte of model.safetensors: its safetensors header (a raw piece).
  const formats::ArchiveFile* model = nullptr;
  for (const auto& f : h.files) {
    if (f.path == "model.safetensors") model = &f;
  }
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->pieces.front().kind, formats::ArchivePiece::Kind::kRaw);
  const uint64_t first = h.data_start + h.raws[model->pieces.front().index].offset;
  ArchiveReadStats zero;
  EXPECT_EQ(ReadRange(*oc.l2, first, 1, &zero), c.v2.archive.substr(first, 1));
  EXPECT_LE(zero.chunks_decoded, 3u);
  ApplyStats a;
  ASSERT_TRUE(ApplyFullPatch(c.v0.patch_path, dir / "r0.blz", &a).ok());
  ASSERT_TRUE(ApplyPatch(dir / "r0.blz", c.link1, dir / "r1.blz", &a).ok());
  ASSERT_TRUE(ApplyPatch(dir / "r1.blz", c.link2, dir / "r2.blz", &a).ok());
  const uint64_t rebuild = c.v0.archive.size() + c.v1.archive.size() + c.v2.archive.size();
  std::cout << "[ measure  ] chain of depth 2 (archives " << c.v2.archive.size()
            << " bytes): bytes=0-0 of model.safetensors decoded " << zero.bytes_decoded
            << " bytes (" << zero.chunks_decoded << " chunks); 1 byte mid-tensor "
            << one.bytes_decoded << " bytes; a rebuild decodes " << rebuild
            << " bytes (every archive of the chain)\n";
  EXPECT_LT(zero.bytes_decoded, rebuild / 10);
}

// The corpus fine-tune (tiny-gpt2 ft-v1) stored as a link from its base (stored as its full
// patch), as the registry chains it: what `Range: bytes=0-0` of model.safetensors decodes,
// against the old first read (both archives rebuilt). Printed for docs/huggingface.md.
TEST(ChainLinkReaderTest, FirstByteOfACorpusChainDecodesFarLessThanARebuild) {
  BLZ_REQUIRE_CORPUS(corpus);
  testing::TempDir dir, dir2;
  Packed base = PackAndPatch(corpus + "/tiny-gpt2/base", dir);
  Packed ft = PackAndPatch(corpus + "/tiny-gpt2/ft-v1", dir2);
  DiffStats st;
  ASSERT_TRUE(CreatePatch(base.archive_path, ft.archive_path, dir / "link.blzpatch",
                          DiffOptions{}, &st).ok());
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  auto t0 = now();
  auto root = PatchReader::Open(base.patch_path);
  ASSERT_TRUE(root.ok());
  auto link = PatchReader::Open(dir / "link.blzpatch", *root);
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  const formats::ArchiveHeader& h = (*link)->header();
  const formats::ArchiveFile* model = nullptr;
  for (const auto& f : h.files) {
    if (f.path == "model.safetensors") model = &f;
  }
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->pieces.front().kind, formats::ArchivePiece::Kind::kRaw);
  const uint64_t first = h.data_start + h.raws[model->pieces.front().index].offset;
  ArchiveReadStats zero;
  EXPECT_EQ(ReadRange(**link, first, 1, &zero), ft.archive.substr(first, 1));
  auto t1 = now();
  ApplyStats a;
  ASSERT_TRUE(ApplyFullPatch(base.patch_path, dir / "r0.blz", &a).ok());
  ASSERT_TRUE(ApplyPatch(dir / "r0.blz", dir / "link.blzpatch", dir / "r1.blz", &a).ok());
  auto t2 = now();
  const uint64_t rebuild = base.archive.size() + ft.archive.size();
  std::cout << "[ measure  ] tiny-gpt2 ft-v1 as a link from base: bytes=0-0 of "
            << "model.safetensors decoded " << zero.bytes_decoded << " bytes ("
            << zero.chunks_decoded << " chunks, " << ms(t1 - t0)
            << " ms with opening both patches); the old first read rebuilt base and ft-v1: "
            << rebuild << " bytes (" << ms(t2 - t1) << " ms, plus writing them)\n";
  EXPECT_LE(zero.chunks_decoded, 2u);
  EXPECT_LT(zero.bytes_decoded, rebuild / 10);
}

// A damaged chunk in the link, or in the parent's patch under it: a range touching it is
// refused (kCorruption naming the patch and the tensor) and none of its bytes are handed out;
// other ranges still read. A link opened on the wrong parent is refused.
// Issue 28: two links over one parent (siblings) whose parent keeps its decoded chunks
// (shared_chunks): what one sibling's read decoded of the parent, the other's takes, with the
// same bytes; a damaged parent chunk is refused to both (nothing bad is kept).
TEST(ChainLinkReaderTest, SiblingsOverASharedParentDecodeItsChunksOnce) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  const std::string sibling = dir / "v2.from-v0.blzpatch";  // v2 as a link from v0, like v1
  DiffStats st;
  ASSERT_TRUE(CreatePatch(c.v0.archive_path, c.v2.archive_path, sibling, DiffOptions{}, &st).ok());
  auto open = [&](const std::string& patch_path, size_t shared) {
    auto root = PatchReader::Open(c.v0.patch_path, nullptr, shared);
    EXPECT_TRUE(root.ok()) << root.status().ToString();
    auto a = PatchReader::Open(c.link1, *root);
    auto b = PatchReader::Open(patch_path, *root);
    EXPECT_TRUE(a.ok() && b.ok());
    return std::pair(*a, *b);
  };
  auto [s1, s2] = open(sibling, 8);
  auto [u1, u2] = open(sibling, 0);
  // Every chunk of the largest tensor through v1, then through v2: with the shared parent, v2's
  // reads find v0's chunks kept.
  const formats::ArchiveHeader& h = s2->header();
  const formats::ArchiveTensor* big = nullptr;
  for (const auto& t : h.tensors) {
    if (big == nullptr || t.length > big->length) big = &t;
  }
  ASSERT_GT(big->length, 2 * kChunkBytes);
  const uint64_t at = h.data_start + big->offset;
  ArchiveReadStats shared1, shared2, alone1, alone2;
  EXPECT_EQ(ReadRange(*s1, at, big->length, &shared1), c.v1.archive.substr(at, big->length));
  EXPECT_EQ(ReadRange(*s2, at, big->length, &shared2), c.v2.archive.substr(at, big->length));
  EXPECT_EQ(ReadRange(*u1, at, big->length, &alone1), c.v1.archive.substr(at, big->length));
  EXPECT_EQ(ReadRange(*u2, at, big->length, &alone2), c.v2.archive.substr(at, big->length));
  EXPECT_EQ(shared1.chunks_decoded, alone1.chunks_decoded);  // the first decodes v0's chunks
  EXPECT_LT(shared2.chunks_decoded, alone2.chunks_decoded) << "v0's chunks decoded again";
  std::cout << "[ measure  ] siblings over one parent, one tensor of " << big->length
            << " bytes: the second sibling decoded " << shared2.chunks_decoded
            << " chunks with the parent's kept, " << alone2.chunks_decoded << " without\n";
  CheckReaderRanges(*s2, c.v2, 16);
  CheckReaderRanges(*s1, c.v1, 16);

  // A damaged v0 chunk that both siblings read: refused to each, never kept.
  std::string full = testing::ReadFileBytes(c.v0.patch_path);
  auto ph = internal::ParsePatch(AsBytes(full), full.size(), "patch");
  ASSERT_TRUE(ph.ok());
  uint64_t victim = 0;
  for (const auto& p : ph->pieces) {
    if (p.kind == formats::ArchivePiece::Kind::kTensor && p.index == size_t(big - &h.tensors[0]) &&
        !p.chunks.empty()) {
      victim = ph->payload_start + p.chunks[0].offset + p.chunks[0].length / 2;
    }
  }
  ASSERT_GT(victim, 0u);
  full[victim] ^= 0x5a;
  testing::WriteFileBytes(dir / "v0-damaged.blzpatch", full);
  auto root = PatchReader::Open(dir / "v0-damaged.blzpatch", nullptr, 8);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  auto d1 = PatchReader::Open(c.link1, *root);
  auto d2 = PatchReader::Open(sibling, *root);
  ASSERT_TRUE(d1.ok() && d2.ok());
  for (const auto& reader : {*d1, *d2}) {
    Status read = reader->Read(at, kChunkBytes, [](ByteSpan) { return Status::Ok(); });
    EXPECT_EQ(read.code(), Code::kCorruption) << read.ToString();
    EXPECT_THAT(read.message(), HasSubstr("v0-damaged.blzpatch"));
  }
}

TEST(ChainLinkReaderTest, DamagedChunksInTheLinkOrItsParentAreRefused) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  // The largest payload of a patch's tensor chunks coded with (or without) a base.
  auto victim = [](const std::string& patch, bool with_base, size_t* piece_out) {
    auto ph = internal::ParsePatch(AsBytes(patch), patch.size(), "patch");
    EXPECT_TRUE(ph.ok());
    uint64_t best = 0, where = 0;
    for (size_t i = 0; i < ph->pieces.size(); ++i) {
      const auto& p = ph->pieces[i];
      if (p.kind != formats::ArchivePiece::Kind::kTensor || p.base.has_value() != with_base ||
          p.chunks.empty()) {
        continue;
      }
      if (p.chunks[0].length > best) {
        best = p.chunks[0].length;
        where = ph->payload_start + p.chunks[0].offset + p.chunks[0].length / 2;
        *piece_out = p.index;
      }
    }
    EXPECT_GT(best, 100u);
    return where;
  };
  auto read_tensor = [](const ArchiveReader& r, size_t tensor, std::string* sent) {
    const formats::ArchiveHeader& h = r.header();
    const formats::ArchiveTensor& t = h.tensors[tensor];
    return r.Read(h.data_start + t.offset, std::min<uint64_t>(t.length, kChunkBytes),
                  [&](ByteSpan b) {
                    sent->append(reinterpret_cast<const char*>(b.data()), b.size());
                    return Status::Ok();
                  });
  };
  auto root = PatchReader::Open(c.v0.patch_path);
  ASSERT_TRUE(root.ok());
  auto l1 = PatchReader::Open(c.link1, *root);
  ASSERT_TRUE(l1.ok());

  // In the link: a chunk coded against v1.
  std::string link2 = testing::ReadFileBytes(c.link2);
  size_t tensor = 0;
  link2[victim(link2, true, &tensor)] ^= 0x5a;
  testing::WriteFileBytes(dir / "damaged-link.blzpatch", link2);
  auto bad = PatchReader::Open(dir / "damaged-link.blzpatch", *l1);
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  std::string sent;
  Status s = read_tensor(**bad, tensor, &sent);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("damaged-link.blzpatch"));
  EXPECT_THAT(s.message(), HasSubstr("tensor '" + (*bad)->header().tensors[tensor].name + "'"));
  EXPECT_THAT(s.message(), HasSubstr("chunk 0"));
  EXPECT_TRUE(sent.empty()) << "bytes of a bad chunk were handed out";
  EXPECT_EQ(ReadRange(**bad, 0, 100), c.v2.archive.substr(0, 100));

  // In the parent: v0's full patch, under link1 under link2. v1's tensors under
  // "model.layers" are identical to v0's, so a damaged v0 chunk of one of them reaches v2.
  std::string full = testing::ReadFileBytes(c.v0.patch_path);
  auto ph = internal::ParsePatch(AsBytes(full), full.size(), "patch");
  ASSERT_TRUE(ph.ok());
  size_t layer = SIZE_MAX;
  uint64_t at = 0;
  for (const auto& p : ph->pieces) {
    if (p.kind == formats::ArchivePiece::Kind::kTensor && !p.chunks.empty() &&
        (*root)->header().tensors[p.index].name.rfind("model.layers.0.mlp.up", 0) == 0) {
      layer = p.index;
      at = ph->payload_start + p.chunks[0].offset + p.chunks[0].length / 2;
    }
  }
  ASSERT_NE(layer, SIZE_MAX);
  full[at] ^= 0x5a;
  testing::WriteFileBytes(dir / "damaged-root.blzpatch", full);
  auto bad_root = PatchReader::Open(dir / "damaged-root.blzpatch");
  ASSERT_TRUE(bad_root.ok()) << bad_root.status().ToString();
  auto bad_l1 = PatchReader::Open(c.link1, *bad_root);
  ASSERT_TRUE(bad_l1.ok());
  auto bad_l2 = PatchReader::Open(c.link2, *bad_l1);
  ASSERT_TRUE(bad_l2.ok());
  const std::string name = (*root)->header().tensors[layer].name;
  size_t in_v2 = SIZE_MAX;
  for (size_t i = 0; i < (*bad_l2)->header().tensors.size(); ++i) {
    if ((*bad_l2)->header().tensors[i].name == name) in_v2 = i;
  }
  ASSERT_NE(in_v2, SIZE_MAX);
  sent.clear();
  s = read_tensor(**bad_l2, in_v2, &sent);
  EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("damaged-root.blzpatch"));
  EXPECT_THAT(s.message(), HasSubstr("tensor '" + name + "'"));
  EXPECT_TRUE(sent.empty()) << "bytes decoded from a bad base were handed out";
  EXPECT_EQ(ReadRange(**bad_l2, 0, 100), c.v2.archive.substr(0, 100));

  // The wrong parent, or none.
  auto wrong = PatchReader::Open(c.link2, *root);
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("the parent given is"));
  EXPECT_EQ(PatchReader::Open(c.link2).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PatchReader::Open(c.v0.patch_path, *root).status().code(), Code::kInvalidArgument);
}

// ---- WriteArchive ----------------------------------------------------------------------------

// No temporary files left in `dir` (AtomicFile's "<dest>.tmp-*").
std::vector<std::string> TempFilesIn(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp-") != std::string::npos) {
      out.push_back(e.path().string());
    }
  }
  return out;
}

// link2 with one byte flipped in the middle of its last tensor chunk's payload (decoded last:
// the ranges before it succeed), written to `path` and opened over `l1`.
Result<std::shared_ptr<const PatchReader>> DamagedLastChunk(
    const Chain& c, const std::shared_ptr<const PatchReader>& l1, const std::string& path) {
  std::string link2 = testing::ReadFileBytes(c.link2);
  auto ph = internal::ParsePatch(AsBytes(link2), link2.size(), "patch");
  if (!ph.ok()) return ph.status();
  uint64_t at = 0;
  for (const auto& p : ph->pieces) {
    if (p.kind == formats::ArchivePiece::Kind::kTensor && !p.chunks.empty() &&
        p.chunks.back().length > 100) {
      at = ph->payload_start + p.chunks.back().offset + p.chunks.back().length / 2;
    }
  }
  if (at == 0) return Internal("no tensor chunk to damage");
  link2[at] ^= 0x5a;
  testing::WriteFileBytes(path, link2);
  return PatchReader::Open(path, l1);
}

// v2 written whole through link2 -> link1 -> v0's full patch, on 1, 2 and 3 threads, is v2's
// archive byte for byte; the independent ranges partition the archive; every chunk of every
// level was decoded once (each range's chunk and the parents' chunks it is coded against).
TEST(WriteArchiveTest, AChainOfDepthTwoIsWrittenAsTheArchive) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  const OpenedChain oc = OpenChain(c);
  ASSERT_NE(oc.l2, nullptr);
  for (const ArchiveReader* r : {static_cast<const ArchiveReader*>(oc.l2.get()),
                                 static_cast<const ArchiveReader*>(oc.root.get())}) {
    uint64_t at = 0;
    for (const ArchiveRange& range : r->IndependentRanges()) {
      EXPECT_EQ(range.offset, at);
      EXPECT_GT(range.length, 0u);
      EXPECT_LE(range.length, 2 * kChunkBytes);
      at = range.offset + range.length;
    }
    EXPECT_EQ(at, r->archive_size());
  }
  for (int threads : {1, 2, 3}) {
    const std::string out = dir / ("v2-" + std::to_string(threads) + ".blz");
    ArchiveReadStats stats;
    Status s = WriteArchive(*oc.l2, out, threads, &stats);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(testing::ReadFileBytes(out) == c.v2.archive) << threads << " threads";
    EXPECT_GE(stats.bytes_decoded, c.v2.archive.size() / 2) << threads << " threads";
    // Writing over an existing file is refused.
    EXPECT_EQ(WriteArchive(*oc.l2, out, threads).code(), Code::kAlreadyExists);
  }
  // A plain file reader too (the root of a chain may be one).
  auto file = ArchiveFileReader::Open(c.v1.archive_path, MakeDigest(Sha256Hex(c.v1.archive)));
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(WriteArchive(**file, dir / "v1-copy.blz", 2).ok());
  EXPECT_TRUE(testing::ReadFileBytes(dir / "v1-copy.blz") == c.v1.archive);
  EXPECT_THAT(TempFilesIn(dir.path()), ::testing::IsEmpty());
}

// A damaged chunk anywhere in the chain, or bytes that do not hash to the reader's digest:
// the error names the patch (or the digests), and nothing is left at the output path or
// beside it.
TEST(WriteArchiveTest, ADamagedChainOrAWrongDigestWritesNothing) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  auto root = PatchReader::Open(c.v0.patch_path);
  ASSERT_TRUE(root.ok());
  auto l1 = PatchReader::Open(c.link1, *root);
  ASSERT_TRUE(l1.ok());
  auto bad = DamagedLastChunk(c, *l1, dir / "damaged.blzpatch");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  for (int threads : {1, 2}) {
    Status s = WriteArchive(**bad, dir / "out.blz", threads);
    EXPECT_EQ(s.code(), Code::kCorruption) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr("damaged.blzpatch"));
    EXPECT_FALSE(std::filesystem::exists(dir / "out.blz"));
  }
  // v1's bytes under v2's name.
  auto wrong = ArchiveFileReader::Open(c.v1.archive_path, MakeDigest(Sha256Hex(c.v2.archive)));
  ASSERT_TRUE(wrong.ok());
  Status s = WriteArchive(**wrong, dir / "out.blz", 2);
  EXPECT_EQ(s.code(), Code::kDigestMismatch) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(MakeDigest(Sha256Hex(c.v1.archive))));
  EXPECT_FALSE(std::filesystem::exists(dir / "out.blz"));
  EXPECT_EQ(WriteArchive(**wrong, dir / "out.blz", -1).code(), Code::kInvalidArgument);
  EXPECT_THAT(TempFilesIn(dir.path()), ::testing::IsEmpty());
}

// ---- ArchiveStream -----------------------------------------------------------------------------

std::string Drain(ArchiveStream& stream, Status* error = nullptr) {
  std::string out;
  while (true) {
    Result<ByteSpan> b = stream.Next();
    if (!b.ok()) {
      if (error != nullptr) *error = b.status();
      return out;
    }
    if (b->empty()) return out;
    EXPECT_LE(b->size(), 2 * kChunkBytes);
    out.append(reinterpret_cast<const char*>(b->data()), b->size());
  }
}

// v2 streamed through its chain on 1-3 threads, whole and from odd offsets, is v2's bytes in
// order; a stream dropped half-way stops its workers; a damaged chunk ends it with the
// patch's name and none of that chunk's bytes.
TEST(ArchiveStreamTest, AChainStreamsInOrderOnAnyNumberOfThreads) {
  testing::TempDir dir;
  Chain c = MakeChain(dir);
  const OpenedChain oc = OpenChain(c);
  ASSERT_NE(oc.l2, nullptr);
  const uint64_t size = c.v2.archive.size();
  for (int threads : {1, 2, 3}) {
    auto whole = ArchiveStream::Start(oc.l2, 0, size, threads);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    EXPECT_TRUE(Drain(**whole) == c.v2.archive) << threads << " threads";
    EXPECT_GE((*whole)->stats().bytes_decoded, size / 2);
    const uint64_t from = kChunkBytes + 12345, n = size - from - 777;
    auto part = ArchiveStream::Start(oc.l2, from, n, threads);
    ASSERT_TRUE(part.ok());
    EXPECT_TRUE(Drain(**part) == c.v2.archive.substr(from, n)) << threads << " threads";
    auto dropped = ArchiveStream::Start(oc.l2, 0, size, threads);
    ASSERT_TRUE(dropped.ok());
    ASSERT_TRUE((*dropped)->Next().ok());
    dropped->reset();  // must not hang
  }
  auto empty = ArchiveStream::Start(oc.l2, 5, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(Drain(**empty), "");
  EXPECT_EQ(ArchiveStream::Start(oc.l2, size, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ArchiveStream::Start(oc.l2, 1, UINT64_MAX).status().code(), Code::kInvalidArgument);

  auto bad = DamagedLastChunk(c, oc.l1, dir / "damaged.blzpatch");
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  auto stream = ArchiveStream::Start(*bad, 0, size, 2);
  ASSERT_TRUE(stream.ok());
  Status error;
  const std::string got = Drain(**stream, &error);
  EXPECT_EQ(error.code(), Code::kCorruption) << error.ToString();
  EXPECT_THAT(error.message(), HasSubstr("damaged.blzpatch"));
  EXPECT_LT(got.size(), size);
  EXPECT_TRUE(got == c.v2.archive.substr(0, got.size())) << "wrong bytes before the error";
}

}  // namespace
}  // namespace blz::patcher
