// Tests for the .blzpatch container header (patcher/patch_format.h): the canonical writer and
// one crafted bad input per rejection path of the strict reader.
#include "patcher/patch_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/digest.h"

namespace blz::patcher::internal {
namespace {

using ::testing::HasSubstr;
using Kind = formats::ArchivePiece::Kind;

PatchHeader ValidHeader() {
  PatchHeader h;
  h.base_digest = MakeDigest(std::string(64, '1'));
  h.base_size = 1000;
  h.target_digest = MakeDigest(std::string(64, '2'));
  h.target_size = kChunkBytes + 5000;
  h.prefix_length = 128;
  h.prefix_chunks = {{Codec::kZstd, 0, 10, 128, 0x1234}};
  h.pieces.push_back({Kind::kRaw, 0, std::nullopt, {{Codec::kZstd, 10, 7, 50, 1}}});
  h.pieces.push_back({Kind::kTensor, 0, 3u,
                      {{Codec::kIdentical, 17, 0, kChunkBytes, 2},
                       {Codec::kXorPlanes, 17, 20, 100, 0xfedcba9876543210ull}}});
  h.pieces.push_back({Kind::kTensor, 1, std::nullopt, {}});  // an empty tensor
  h.removed = {"gone", "na\xc3\xafve"};
  return h;
}

uint64_t PayloadBytes(const PatchHeader& h) {
  uint64_t n = 0;
  for (const auto& c : h.prefix_chunks) n += c.length;
  for (const auto& p : h.pieces) {
    for (const auto& c : p.chunks) n += c.length;
  }
  return n;
}

std::string FileWithJson(const std::string& json, uint64_t payload_bytes) {
  return EncodePatchFixedHeader(json.size()) + json + std::string(payload_bytes, 'x');
}

std::string FileOf(const PatchHeader& h) {
  auto json = SerializePatchHeader(h);
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  return FileWithJson(*json, PayloadBytes(h));
}

Result<PatchHeader> Parse(const std::string& file) {
  return ParsePatch(AsBytes(file), file.size(), "t.blzpatch");
}

// Expects `file` to be refused with `code` and a message containing `needle`.
void ExpectRefused(const std::string& file, Code code, const std::string& needle) {
  auto r = Parse(file);
  ASSERT_FALSE(r.ok()) << "accepted";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_THAT(r.status().message(), HasSubstr(needle));
  EXPECT_THAT(r.status().message(), HasSubstr("t.blzpatch"));
}

void ExpectMutationRefused(const std::function<void(PatchHeader*)>& mutate, const std::string& needle) {
  PatchHeader h = ValidHeader();
  mutate(&h);
  ExpectRefused(FileOf(h), Code::kCorruption, needle);
}

// Replaces `from` (which must occur) in the valid header's JSON.
std::string JsonEdit(const std::string& from, const std::string& to) {
  PatchHeader h = ValidHeader();
  std::string json = *SerializePatchHeader(h);
  size_t at = json.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) json.replace(at, from.size(), to);
  return FileWithJson(json, PayloadBytes(h));
}

TEST(PatchFormatTest, RoundTrip) {
  PatchHeader h = ValidHeader();
  std::string file = FileOf(h);
  auto r = Parse(file);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->base_digest, h.base_digest);
  EXPECT_EQ(r->base_size, h.base_size);
  EXPECT_EQ(r->target_digest, h.target_digest);
  EXPECT_EQ(r->target_size, h.target_size);
  EXPECT_EQ(r->prefix_length, h.prefix_length);
  ASSERT_EQ(r->pieces.size(), 3u);
  EXPECT_EQ(r->pieces[0].kind, Kind::kRaw);
  EXPECT_FALSE(r->pieces[0].base.has_value());
  EXPECT_EQ(r->pieces[1].kind, Kind::kTensor);
  EXPECT_EQ(r->pieces[1].base, 3u);
  ASSERT_EQ(r->pieces[1].chunks.size(), 2u);
  EXPECT_EQ(r->pieces[1].chunks[1].codec, Codec::kXorPlanes);
  EXPECT_EQ(r->pieces[1].chunks[1].xxh3, 0xfedcba9876543210ull);
  EXPECT_EQ(r->pieces[1].chunks[1].size, 100u);
  EXPECT_TRUE(r->pieces[2].chunks.empty());
  EXPECT_EQ(r->removed, h.removed);
  EXPECT_EQ(r->payload_bytes, 37u);
  EXPECT_EQ(r->payload_start + r->payload_bytes, file.size());
  EXPECT_EQ(*SerializePatchHeader(*r), file.substr(24, file.size() - 24 - 37));
}

TEST(PatchFormatTest, CanonicalLayoutMatchesTheSpec) {
  // docs/patch-format.md, "Header JSON": keys in this order, chunks as 5-tuples.
  std::string json = *SerializePatchHeader(ValidHeader());
  EXPECT_EQ(json.rfind("{\"base\":{\"digest\":\"sha256:1111", 0), 0u) << json;
  EXPECT_THAT(json, HasSubstr(",\"size\":1000},\"target\":{\"digest\":\"sha256:2222"));
  EXPECT_THAT(json, HasSubstr("},\"prefix\":{\"length\":128,\"chunks\":[[1,0,10,128,\"0000000000001234\"]]}"));
  EXPECT_THAT(json, HasSubstr(",\"pieces\":[{\"kind\":\"raw\",\"index\":0,\"base\":null,"
                              "\"chunks\":[[1,10,7,50,\"0000000000000001\"]]},"
                              "{\"kind\":\"tensor\",\"index\":0,\"base\":3,\"chunks\":[[0,17,0,"));
  EXPECT_THAT(json, HasSubstr("[2,17,20,100,\"fedcba9876543210\"]"));
  EXPECT_THAT(json, HasSubstr("{\"kind\":\"tensor\",\"index\":1,\"base\":null,\"chunks\":[]}"));
  EXPECT_THAT(json, HasSubstr("],\"removed\":[\"gone\",\"na\xc3\xafve\"]}"));
  std::string head = EncodePatchFixedHeader(json.size());
  ASSERT_EQ(head.size(), 24u);
  EXPECT_EQ(head.substr(0, 8), "BLZPATCH");
  EXPECT_EQ(LoadLE32(AsBytes(head).data() + 8), 2u);  // version 2 (full patches)
  EXPECT_EQ(LoadLE32(AsBytes(head).data() + 12), 0u);
  EXPECT_EQ(LoadLE64(AsBytes(head).data() + 16), json.size());
}

TEST(PatchFormatTest, SerializeRefusesInvalidUtf8) {
  PatchHeader h = ValidHeader();
  h.removed.push_back("bad\xff");
  EXPECT_EQ(SerializePatchHeader(h).status().code(), Code::kInvalidArgument);
}

TEST(PatchFormatTest, FixedHeaderRejections) {
  std::string good = FileOf(ValidHeader());
  auto set32 = [&](size_t at, uint32_t v) {
    std::string f = good;
    StoreLE32(reinterpret_cast<uint8_t*>(f.data()) + at, v);
    return f;
  };
  auto set64 = [&](size_t at, uint64_t v) {
    std::string f = good;
    StoreLE64(reinterpret_cast<uint8_t*>(f.data()) + at, v);
    return f;
  };
  std::string magic = good;
  magic[3] = 'X';
  ExpectRefused(magic, Code::kCorruption, "magic");
  ExpectRefused(good.substr(0, 23), Code::kCorruption, "truncated");
  ExpectRefused(set32(8, 3), Code::kUnsupported, "version 3");
  ExpectRefused(set32(8, 0), Code::kUnsupported, "version 0");
  ExpectRefused(set32(12, 1), Code::kUnsupported, "flags");
  ExpectRefused(set64(16, kMaxPatchHeaderBytes + 1), Code::kTooLarge, "cap");
  ExpectRefused(set64(16, 0), Code::kCorruption, "header length 0");
  ExpectRefused(set64(16, good.size()), Code::kCorruption, "past the end");
}

TEST(PatchFormatTest, JsonRejections) {
  ExpectRefused(JsonEdit("{\"base\"", "[\"base\""), Code::kCorruption, "not valid JSON");
  ExpectRefused(FileWithJson("[]", 0), Code::kCorruption, "(root)");
  ExpectRefused(JsonEdit(",\"removed\":[\"gone\",\"na\xc3\xafve\"]", ",\"extra\":[\"gone\",\"nave\"]"),
                Code::kCorruption, "missing key 'removed'");
  ExpectRefused(JsonEdit("{\"base\":{", "{\"x\":0,\"base\":{"), Code::kCorruption,
                "unexpected key 'x'");
  ExpectRefused(JsonEdit("\"sha256:1111", "\"sha256:AAAA"), Code::kCorruption, "base.digest");
  ExpectRefused(JsonEdit("\"size\":1000", "\"size\":-1"), Code::kCorruption, "base.size");
  ExpectRefused(JsonEdit("\"size\":1000", "\"size\":1e3"), Code::kCorruption, "base.size");
  ExpectRefused(JsonEdit("\"kind\":\"raw\"", "\"kind\":\"blob\""), Code::kCorruption,
                "pieces[0].kind");
  ExpectRefused(JsonEdit("\"index\":1,", "\"index\":4294967296,"), Code::kCorruption,
                "pieces[2].index");
  ExpectRefused(JsonEdit("\"base\":3,", "\"base\":\"3\","), Code::kCorruption, "pieces[1].base");
  ExpectRefused(JsonEdit("[1,10,7,50,\"0000000000000001\"]", "[1,10,7,50]"), Code::kCorruption,
                "pieces[0].chunks[0]");
  ExpectRefused(JsonEdit("\"fedcba9876543210\"", "\"FEDCBA9876543210\""), Code::kCorruption,
                "xxh3");
  ExpectRefused(JsonEdit("\"removed\":[\"gone\"", "\"removed\":[7"), Code::kCorruption,
                "removed[0]");
  ExpectRefused(JsonEdit("\"pieces\":[", "\"pieces\" : ["), Code::kCorruption, "canonical form");
  ExpectRefused(JsonEdit("\"0000000000000001\"", "\"\\u0030000000000000001\""), Code::kCorruption,
                "canonical form");
  // A duplicate key (nlohmann keeps the last one; the canonical check catches it).
  ExpectRefused(JsonEdit("{\"base\":{\"digest\":", "{\"base\":{\"size\":1000,\"digest\":"),
                Code::kCorruption, "canonical form");
}

TEST(PatchFormatTest, ChunkRejections) {
  ExpectMutationRefused([](PatchHeader* h) { h->pieces[0].chunks[0].codec = Codec(200); },
                        "pieces[0].chunks[0][0] (codec)");
  ExpectMutationRefused([](PatchHeader* h) { h->pieces[0].chunks[0].size = 0; },
                        "pieces[0].chunks[0][3] (size)");
  ExpectMutationRefused([](PatchHeader* h) { h->pieces[1].chunks[1].size = kChunkBytes + 1; },
                        "pieces[1].chunks[1][3] (size)");
  ExpectMutationRefused([](PatchHeader* h) { h->pieces[1].chunks[0].size = kChunkBytes - 1; },
                        "only the last chunk");
  ExpectMutationRefused(
      [](PatchHeader* h) {
        h->pieces[1].chunks[0].length = 3;
        h->pieces[1].chunks[1].offset += 3;
      },
      "an identical chunk has no payload");
  ExpectMutationRefused([](PatchHeader* h) { h->pieces[1].chunks[1].offset = 18; },
                        "back to back");
  ExpectMutationRefused([](PatchHeader* h) { h->prefix_chunks[0].offset = 1; }, "prefix.chunks[0][1]");
  ExpectMutationRefused(
      [](PatchHeader* h) {
        h->pieces[0].chunks[0].length = UINT64_MAX;
      },
      "overflows");
}

TEST(PatchFormatTest, PrefixRejections) {
  ExpectMutationRefused([](PatchHeader* h) { h->prefix_length = 0; }, "prefix.length");
  ExpectMutationRefused([](PatchHeader* h) { h->prefix_length = kMaxPrefixBytes + 1; },
                        "prefix.length");
  ExpectMutationRefused(
      [](PatchHeader* h) {
        h->target_size = 100;
      },
      "prefix.length");
  ExpectMutationRefused([](PatchHeader* h) { h->prefix_length = 129; }, "add up to 128");
}

// A full patch: no base, so every piece has none and nothing is removed.
PatchHeader ValidFullHeader() {
  PatchHeader h = ValidHeader();
  h.has_base = false;
  h.base_digest.clear();
  h.base_size = 0;
  h.pieces[1].base.reset();
  h.pieces[1].chunks = {{Codec::kPlanes, 17, 20, kChunkBytes, 2}, {Codec::kZstd, 37, 5, 100, 3}};
  h.removed.clear();
  return h;
}

TEST(PatchFormatTest, FullPatchHeaderRoundTripsWithNullBase) {
  PatchHeader h = ValidFullHeader();
  std::string file = FileOf(h);
  EXPECT_THAT(file, HasSubstr("{\"base\":null,\"target\":{"));
  auto parsed = Parse(file);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_FALSE(parsed->has_base);
  EXPECT_EQ(parsed->version, kPatchVersion);
  EXPECT_EQ(parsed->base_digest, "");
  EXPECT_EQ(parsed->base_size, 0u);
  EXPECT_EQ(parsed->target_digest, h.target_digest);
  ASSERT_EQ(parsed->pieces.size(), 3u);
  EXPECT_FALSE(parsed->pieces[1].base.has_value());
  EXPECT_EQ(*SerializePatchHeader(*parsed), *SerializePatchHeader(h));
}

TEST(PatchFormatTest, Version1PatchesAreStillRead) {
  PatchHeader h = ValidHeader();
  std::string json = *SerializePatchHeader(h);
  std::string v1 = EncodePatchFixedHeader(json.size(), 1) + json + std::string(PayloadBytes(h), 'x');
  EXPECT_EQ(v1[8], 1);
  auto parsed = Parse(v1);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->version, 1u);
  EXPECT_TRUE(parsed->has_base);
  EXPECT_EQ(parsed->base_digest, h.base_digest);
  // What this build writes is version 2.
  EXPECT_EQ(FileOf(h)[8], 2);
  EXPECT_EQ(Parse(FileOf(h))->version, 2u);
}

TEST(PatchFormatTest, FullPatchRejections) {
  // "base": null needs version 2.
  PatchHeader full = ValidFullHeader();
  std::string json = *SerializePatchHeader(full);
  ExpectRefused(EncodePatchFixedHeader(json.size(), 1) + json + std::string(PayloadBytes(full), 'x'),
                Code::kCorruption, "needs patch format version 2");
  // A full patch with a base piece, or with removed tensors.
  PatchHeader with_base_piece = ValidFullHeader();
  with_base_piece.pieces[1].base = 3;
  ExpectRefused(FileOf(with_base_piece), Code::kCorruption, "pieces[1].base");
  PatchHeader with_removed = ValidFullHeader();
  with_removed.removed = {"gone"};
  ExpectRefused(FileOf(with_removed), Code::kCorruption, "removes nothing");
  // "base" must be an object or null.
  std::string good = *SerializePatchHeader(ValidHeader());
  const size_t from = good.find("{\"base\":") + 8, to = good.find(",\"target\"");
  std::string bad = good.substr(0, from) + "7" + good.substr(to);
  ExpectRefused(FileWithJson(bad, PayloadBytes(ValidHeader())), Code::kCorruption,
                "field 'base': not an object");
}

TEST(PatchFormatTest, PayloadSectionMustEndTheFile) {
  std::string good = FileOf(ValidHeader());
  ExpectRefused(good.substr(0, good.size() - 1), Code::kCorruption, "truncated");
  ExpectRefused(good + "z", Code::kCorruption, "trailing bytes");
}

}  // namespace
}  // namespace blz::patcher::internal
