#include "core/digest.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace blz {
namespace {

TEST(DigestTest, Sha256KnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(Sha256Hex(std::string_view("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex(std::string_view("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestTest, Sha256StreamingEqualsOneShot) {
  std::string data(100000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 31);
  Sha256 h;
  h.Update(std::string_view(data).substr(0, 777));
  h.Update(std::string_view(data).substr(777));
  EXPECT_EQ(h.FinishHex(), Sha256Hex(data));
  // The object is reusable after Finish.
  h.Update(std::string_view("abc"));
  EXPECT_EQ(h.FinishHex(), Sha256Hex(std::string_view("abc")));
}

TEST(DigestTest, Sha256File) {
  testing::TempDir dir;
  testing::WriteFileBytes(dir / "f", "abc");
  EXPECT_EQ(Sha256FileHex(dir / "f").value(), Sha256Hex(std::string_view("abc")));
  EXPECT_FALSE(Sha256FileHex(dir / "missing").ok());
}

// Both sums of a file in one read, over more than one 1 MiB read, equal the one-shot ones.
TEST(DigestTest, Sha256AndXxh3OfAFile) {
  testing::TempDir dir;
  std::string data((3u << 20) + 5, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 13 + (i >> 20));
  testing::WriteFileBytes(dir / "f", data);
  Result<FileSums> sums = Sha256AndXxh3File(dir / "f");
  ASSERT_TRUE(sums.ok()) << sums.status().ToString();
  EXPECT_EQ(sums->sha256_hex, Sha256Hex(data));
  EXPECT_EQ(sums->xxh3, Xxh3_64(AsBytes(data)));
  EXPECT_EQ(Xxh3File(dir / "f").value(), Xxh3_64(AsBytes(data)));
  EXPECT_EQ(Sha256AndXxh3File(dir / "missing").status().code(), Code::kIOError);
  EXPECT_EQ(Xxh3File(dir / "missing").status().code(), Code::kIOError);
}

TEST(DigestTest, Xxh3StreamingEqualsOneShot) {
  std::string data(5000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7 + 3);
  Xxh3Stream s;
  s.Update(AsBytes(std::string_view(data).substr(0, 100)));
  s.Update(AsBytes(std::string_view(data).substr(100)));
  EXPECT_EQ(s.Digest(), Xxh3_64(AsBytes(data)));
  EXPECT_NE(Xxh3_64(AsBytes(std::string_view("a"))), Xxh3_64(AsBytes(std::string_view("b"))));
}

TEST(DigestTest, HexRoundTrip) {
  EXPECT_EQ(Hex64(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(ParseHex64("0123456789abcdef").value(), 0x0123456789abcdefull);
  EXPECT_FALSE(ParseHex64("0123456789ABCDEF").ok());
  EXPECT_FALSE(ParseHex64("123").ok());
}

TEST(DigestTest, ParseDigest) {
  std::string hex(64, 'a');
  EXPECT_EQ(ParseDigest("sha256:" + hex).value(), hex);
  EXPECT_FALSE(ParseDigest("sha512:" + hex).ok());
  EXPECT_FALSE(ParseDigest("sha256:" + hex.substr(1)).ok());
  EXPECT_FALSE(ParseDigest("sha256:" + std::string(64, 'A')).ok());
  EXPECT_EQ(MakeDigest(hex), "sha256:" + hex);
}

}  // namespace
TEST(DigestTest, OciDigestAlgorithms) {
  const std::string sha(64, 'a');
  EXPECT_TRUE(IsValidOciDigest("sha256:" + sha));
  EXPECT_TRUE(IsValidOciDigest("sha512:" + std::string(128, '0')));
  EXPECT_FALSE(IsValidOciDigest("sha512:" + sha));
  EXPECT_FALSE(IsValidOciDigest("sha256:" + std::string(64, 'A')));
  EXPECT_FALSE(IsValidOciDigest("md5:" + std::string(32, 'a')));
  EXPECT_FALSE(IsValidOciDigest(""));
}

TEST(DigestTest, FileDigestLikeUsesTheAlgorithmOfItsExample) {
  testing::TempDir tmp;
  testing::WriteFileBytes(tmp / "f", "abc");
  auto s256 = FileDigestLike(tmp / "f", "sha256:" + std::string(64, '0'));
  ASSERT_TRUE(s256.ok());
  EXPECT_EQ(*s256, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto s512 = FileDigestLike(tmp / "f", "sha512:" + std::string(128, '0'));
  ASSERT_TRUE(s512.ok());
  EXPECT_EQ(*s512, "sha512:" + Sha512Hex("abc"));
  EXPECT_EQ(s512->substr(7, 16), "ddaf35a193617aba");  // FIPS 180-2's "abc" example
  EXPECT_EQ(FileDigestLike(tmp / "f", "md5:x").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(FileDigestLike(tmp / "missing", "sha256:" + std::string(64, '0')).status().code(),
            Code::kIOError);
}

}  // namespace blz
