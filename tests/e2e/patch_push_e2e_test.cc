// End-to-end (issue 27, "Pushes upload a patch"): five consecutive LoRA checkpoints of one
// training run (the corpus roberta checkpoints 500, 1000, 2000, 2400 and a fifth made here from
// 2400) pushed into one repository by `blz push`, against a real `blz serve`. Versions 2..5 go
// up as patches from the previous one; the registry's own counters (/metrics,
// blz_http_received_bytes_total{route="upload"}) show they cost less than the archive, and
// every version pulls back byte-identical. The same run with --no-patch on a fresh server is
// the full-upload baseline; both figures are printed (docs/benchmarks.md, issue 27).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/subprocess.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// relative path -> bytes of every file below `dir`.
std::map<std::string, std::string> TreeOf(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (fs::recursive_directory_iterator it(dir), end; it != end; ++it) {
    if (it->is_regular_file()) {
      out[fs::relative(it->path(), dir).string()] = ReadFileBytes(it->path().string());
    }
  }
  return out;
}

// A further training step after `from` (a LoRA checkpoint directory), written to `to`: the same
// files, with the lowest mantissa bit of every seventh F32 value of adapter_model.safetensors
// flipped (a small change to a seventh of the weights; the header is untouched).
void MakeNextCheckpoint(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) {
    fs::copy_file(e.path(), to + "/" + e.path().filename().string());
  }
  const std::string path = to + "/adapter_model.safetensors";
  std::string bytes = ReadFileBytes(path);
  ASSERT_GT(bytes.size(), 8u);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);  // little-endian on every machine blz runs on
  for (size_t i = 8 + header; i + 4 <= bytes.size(); i += 4 * 7) bytes[i] ^= 1;
  WriteFileBytes(path, bytes);
}

class PatchPushE2ETest : public ::testing::Test {
 protected:
  ProcessResult Blz(std::vector<std::string> args, const std::string& token,
                    const std::string& cache) {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args,
                      {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", cache},
                       {"BLZ_TOKEN", token}},
                      work_.path());
  }

  // Bytes the registry has received in upload requests (POST/PATCH/PUT of blob uploads).
  uint64_t UploadBytes(const ServeProcess& server) {
    ProcessResult r = RunProcess({"/usr/bin/curl", "-sS", "--fail", "-H",
                                  "Authorization: Bearer " + server.token,
                                  "http://" + server.addr + "/metrics"},
                                 {}, work_.path());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string key = "blz_http_received_bytes_total{route=\"upload\"} ";
    const size_t at = r.out.find(key);
    if (at == std::string::npos) return 0;  // no upload yet
    return uint64_t(std::stod(r.out.substr(at + key.size())));
  }

  struct Pushed {
    json result;              // `blz push --json`
    uint64_t received = 0;    // upload bytes the registry received for it
    std::string text;         // the human output of the same push (second server only)
  };

  // Pushes the checkpoints in order as NAME:v1..v5 to a fresh server; `extra` flags for push.
  std::vector<Pushed> PushAll(const std::string& label, const std::vector<std::string>& extra) {
    std::vector<Pushed> out;
    ServeProcess server = StartServe(BLZ_BINARY, work_ / (label + "-data"), {},
                                     work_ / (label + "-serve"));
    EXPECT_FALSE(server.addr.empty()) << ReadFileBytes(work_ / (label + "-serve.err"));
    if (server.addr.empty()) return out;
    const std::string cache = work_ / (label + "-cache");
    for (size_t i = 0; i < checkpoints_.size(); ++i) {
      const std::string ref = server.addr + "/lora/run:v" + std::to_string(i + 1);
      const uint64_t before = UploadBytes(server);
      std::vector<std::string> args = {"push", checkpoints_[i], ref, "--json"};
      args.insert(args.end(), extra.begin(), extra.end());
      ProcessResult r = Blz(args, server.token, cache);
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      Pushed p;
      p.result = json::parse(r.out, nullptr, false);
      p.received = UploadBytes(server) - before;
      p.text = r.err;
      out.push_back(std::move(p));
    }
    // Every version pulls back byte-identical, into a store that holds none of them.
    for (size_t i = 0; i < checkpoints_.size(); ++i) {
      const std::string dir = work_ / (label + "-pulled-v" + std::to_string(i + 1));
      ProcessResult r = Blz({"pull", server.addr + "/lora/run:v" + std::to_string(i + 1), "-o",
                             dir},
                            server.token, work_ / (label + "-pull-cache"));
      EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_TRUE(TreeOf(dir) == TreeOf(checkpoints_[i])) << "v" << i + 1 << " differs";
    }
    StopServe(&server);
    return out;
  }

  TempDir work_;
  std::vector<std::string> checkpoints_;
};

TEST_F(PatchPushE2ETest, FiveCheckpointsUploadOnlyPatchesAndPullBackIdentical) {
  BLZ_REQUIRE_CORPUS(corpus);
  for (const char* step : {"500", "1000", "2000", "2400"}) {
    const std::string dir = corpus + "/roberta-lora/checkpoint-" + step;
    if (!fs::exists(dir + "/adapter_model.safetensors")) GTEST_SKIP() << dir << " is missing";
    checkpoints_.push_back(dir);
  }
  MakeNextCheckpoint(checkpoints_.back(), work_ / "checkpoint-2400-next");
  checkpoints_.push_back(work_ / "checkpoint-2400-next");

  const std::vector<Pushed> full = PushAll("full", {"--no-patch"});
  const std::vector<Pushed> patched = PushAll("patch", {});
  ASSERT_EQ(full.size(), 5u);
  ASSERT_EQ(patched.size(), 5u);

  uint64_t archives = 0, full_bytes = 0, patch_bytes = 0;
  for (size_t i = 0; i < 5; ++i) {
    const uint64_t archive = patched[i].result.value("archive_size", uint64_t(0));
    ASSERT_GT(archive, 0u);
    archives += archive;
    full_bytes += full[i].received;
    patch_bytes += patched[i].received;
    EXPECT_FALSE(full[i].result.value("uploaded_as_patch", true));
    EXPECT_GE(full[i].received, archive) << "a full upload sends the whole archive";
    if (i == 0) {
      EXPECT_FALSE(patched[i].result.value("uploaded_as_patch", true)) << "nothing to patch from";
      EXPECT_GE(patched[i].received, archive);
      continue;
    }
    // From the registry's side: less than the archive arrived for this version.
    EXPECT_LT(patched[i].received, archive) << "v" << i + 1;
    EXPECT_TRUE(patched[i].result.value("uploaded_as_patch", false)) << patched[i].result.dump();
    EXPECT_EQ(patched[i].result.value("patch_from_name", ""), "lora/run:v" + std::to_string(i))
        << patched[i].result.dump();
    EXPECT_EQ(patched[i].result["digest"], full[i].result["digest"]) << "the same archive";
  }
  std::printf("issue-27 five checkpoints: archives %llu bytes; uploaded with --no-patch %llu "
              "bytes (%.3f), with patches %llu bytes (%.3f)\n",
              (unsigned long long)archives, (unsigned long long)full_bytes,
              double(full_bytes) / double(archives), (unsigned long long)patch_bytes,
              double(patch_bytes) / double(archives));
  for (size_t i = 0; i < 5; ++i) {
    std::printf("  v%zu: archive %llu, full upload %llu, patch upload %llu (%.3f)\n", i + 1,
                (unsigned long long)patched[i].result.value("archive_size", uint64_t(0)),
                (unsigned long long)full[i].received, (unsigned long long)patched[i].received,
                double(patched[i].received) /
                    double(patched[i].result.value("archive_size", uint64_t(1))));
  }
}

// A client that pulled v1 the default way keeps it as its files, with no archive. A push of
// the next checkpoint from that client still goes up as a patch from v1, read from those files
// in place: v1's archive is not rebuilt into the store, and v2 pulls back identical.
TEST_F(PatchPushE2ETest, APushFromAVersionKeptAsFilesReadsItInPlace) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string v1 = corpus + "/roberta-lora/checkpoint-500";
  const std::string v2 = corpus + "/roberta-lora/checkpoint-1000";
  if (!fs::exists(v1 + "/adapter_model.safetensors") ||
      !fs::exists(v2 + "/adapter_model.safetensors")) {
    GTEST_SKIP() << "the roberta-lora checkpoints 500 and 1000 are missing";
  }
  ServeProcess server = StartServe(BLZ_BINARY, work_ / "kept-data", {}, work_ / "kept-serve");
  ASSERT_FALSE(server.addr.empty()) << ReadFileBytes(work_ / "kept-serve.err");
  ProcessResult first = Blz({"push", v1, server.addr + "/lora/kept:v1", "--json"}, server.token,
                            work_ / "first-cache");
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const std::string v1_digest = json::parse(first.out, nullptr, false).value("digest", "");
  ASSERT_EQ(v1_digest.size(), 71u) << first.out;

  const std::string cache = work_ / "kept-cache";
  ProcessResult pull = Blz({"pull", server.addr + "/lora/kept:v1", "--json"}, server.token, cache);
  ASSERT_EQ(pull.exit_code, 0) << pull.out << pull.err;
  ASSERT_TRUE(json::parse(pull.out, nullptr, false).value("kept_as_files", false)) << pull.out;
  const std::string hex = v1_digest.substr(7);
  const std::string v1_blob = cache + "/blobs/sha256/" + hex.substr(0, 2) + "/" + hex;
  ASSERT_FALSE(fs::exists(v1_blob));

  ProcessResult push = Blz({"push", v2, server.addr + "/lora/kept:v2", "--json"}, server.token,
                           cache);
  ASSERT_EQ(push.exit_code, 0) << push.out << push.err;
  const json r = json::parse(push.out, nullptr, false);
  EXPECT_TRUE(r.value("uploaded_as_patch", false)) << push.out << push.err;
  EXPECT_EQ(r.value("patch_from", ""), v1_digest) << push.out;
  EXPECT_FALSE(fs::exists(v1_blob)) << "the base's archive was rebuilt";

  ProcessResult back = Blz({"pull", server.addr + "/lora/kept:v2", "-o", work_ / "kept-v2"},
                           server.token, work_ / "fresh-cache");
  ASSERT_EQ(back.exit_code, 0) << back.out << back.err;
  EXPECT_TRUE(TreeOf(work_ / "kept-v2") == TreeOf(v2)) << "the pulled model differs";
  StopServe(&server);
}

// The human output names the base ("uploaded X of Y as a patch from NAME:TAG"), and a pushed
// version stays in the local store as a base for the next push even when the directory is not
// a pulled snapshot.
TEST_F(PatchPushE2ETest, PushSaysItUploadedAPatchAndFromWhichVersion) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string a = corpus + "/roberta-lora/checkpoint-2000";
  const std::string b = corpus + "/roberta-lora/checkpoint-2400";
  if (!fs::exists(a) || !fs::exists(b)) GTEST_SKIP() << "roberta-lora checkpoints missing";
  ServeProcess server = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
  ASSERT_FALSE(server.addr.empty()) << ReadFileBytes(work_ / "serve.err");
  const std::string cache = work_ / "cache";
  ProcessResult first = Blz({"push", a, server.addr + "/lora/run:step-2000"}, server.token, cache);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  EXPECT_EQ(first.out.find("as a patch"), std::string::npos) << first.out;
  ProcessResult second = Blz({"push", b, server.addr + "/lora/run:step-2400"}, server.token, cache);
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  EXPECT_NE(second.out.find(" as a patch from lora/run:step-2000 "), std::string::npos)
      << second.out << second.err;
  // --no-patch: the whole archive, and no note.
  ProcessResult third = Blz({"push", "--no-patch", a, server.addr + "/other:x"}, server.token,
                            work_ / "cache-2");
  EXPECT_EQ(third.exit_code, 0) << third.out << third.err;
  EXPECT_EQ(third.out.find("as a patch"), std::string::npos) << third.out;
  StopServe(&server);
}

// A model built on another and pushed to a repository of its own (issue 27, identical tensors):
// a LLaVA-style model holding the corpus llama's tensors renamed under "language_model." plus a
// new vision tensor. Its structure and repository differ from the llama's, yet `blz push` from
// the store that pushed the llama finds that it holds most of the tensors (&related=) and
// uploads a patch from it, a small part of the archive; the model pulls back identical.
TEST_F(PatchPushE2ETest, AModelBuiltOnAnotherIsPushedAsAPatchFromIt) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string llama = corpus + "/llama-tiny-random";
  if (!fs::exists(llama + "/model.safetensors")) GTEST_SKIP() << "llama-tiny-random missing";
  const std::string llava = work_ / "llava";
  fs::create_directories(llava);
  fs::copy_file(llama + "/config.json", llava + "/config.json");
  const std::string bytes = ReadFileBytes(llama + "/model.safetensors");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json header = json::parse(bytes.substr(8, n));
  json renamed = json::object();
  for (auto& [name, t] : header.items()) {
    renamed[name == "__metadata__" ? name : "language_model." + name] = t;
  }
  std::string data = bytes.substr(8 + n);
  std::string vision(64 * 256 * 4, '\0');
  for (size_t i = 0; i < vision.size(); ++i) vision[i] = char((i * 2654435761u) >> 13);
  renamed["vision_tower.weight"] = {{"dtype", "F32"},
                                    {"shape", {64, 256}},
                                    {"data_offsets", {data.size(), data.size() + vision.size()}}};
  data += vision;
  std::string text = renamed.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  WriteFileBytes(llava + "/model.safetensors", out + text + data);

  ServeProcess server = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
  ASSERT_FALSE(server.addr.empty()) << ReadFileBytes(work_ / "serve.err");
  const std::string cache = work_ / "cache";
  ProcessResult first = Blz({"push", llama, server.addr + "/org/llama:v1"}, server.token, cache);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  ProcessResult second =
      Blz({"push", llava, server.addr + "/org/llava:v1", "--json"}, server.token, cache);
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  const json r = json::parse(second.out, nullptr, false);
  EXPECT_TRUE(r.value("uploaded_as_patch", false)) << second.out << second.err;
  EXPECT_EQ(r.value("patch_from_name", ""), "org/llama:v1") << second.out;
  EXPECT_LT(r.value("bytes_uploaded", uint64_t(0)) * 4, r.value("archive_size", uint64_t(0)))
      << second.out;
  std::printf("LLaVA-style model on the corpus llama: uploaded %llu of %llu bytes\n",
              (unsigned long long)r.value("bytes_uploaded", uint64_t(0)),
              (unsigned long long)r.value("archive_size", uint64_t(0)));
  const std::string pulled = work_ / "pulled";
  ProcessResult pull =
      Blz({"pull", server.addr + "/org/llava:v1", "-o", pulled}, server.token, work_ / "fresh");
  ASSERT_EQ(pull.exit_code, 0) << pull.out << pull.err;
  EXPECT_TRUE(TreeOf(pulled) == TreeOf(llava)) << "the pulled model differs";
  StopServe(&server);
}

// Any failure of the patch route falls back to the full upload and says so: here the local
// copy of the base is damaged, so the patch (if one is made at all) does not rebuild the
// archive on the registry's side.
TEST_F(PatchPushE2ETest, APatchThatFailsFallsBackToTheFullUploadWithANote) {
  BLZ_REQUIRE_CORPUS(corpus);
  const std::string a = corpus + "/roberta-lora/checkpoint-2000";
  const std::string b = corpus + "/roberta-lora/checkpoint-2400";
  if (!fs::exists(a) || !fs::exists(b)) GTEST_SKIP() << "roberta-lora checkpoints missing";
  ServeProcess server = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
  ASSERT_FALSE(server.addr.empty()) << ReadFileBytes(work_ / "serve.err");
  const std::string cache = work_ / "cache";
  ProcessResult first =
      Blz({"push", a, server.addr + "/lora/run:a", "--json"}, server.token, cache);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;
  const std::string digest = json::parse(first.out)["digest"];
  const std::string blob =
      cache + "/blobs/sha256/" + digest.substr(7, 2) + "/" + digest.substr(7);
  ASSERT_TRUE(fs::exists(blob)) << blob;
  fs::permissions(blob, fs::perms::owner_read | fs::perms::owner_write);
  std::string bytes = ReadFileBytes(blob);
  bytes[bytes.size() - 1000] ^= 0x40;  // inside the last tensor's data
  WriteFileBytes(blob, bytes);

  ProcessResult second =
      Blz({"push", b, server.addr + "/lora/run:b", "--json"}, server.token, cache);
  ASSERT_EQ(second.exit_code, 0) << second.out << second.err;
  const json r = json::parse(second.out);
  EXPECT_FALSE(r.value("uploaded_as_patch", true)) << second.out;
  EXPECT_NE(second.err.find("not sent as a patch"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("uploading the full archive"), std::string::npos) << second.err;
  ProcessResult pulled = Blz({"pull", server.addr + "/lora/run:b", "-o", work_ / "b"},
                             server.token, work_ / "pull-cache");
  ASSERT_EQ(pulled.exit_code, 0) << pulled.out << pulled.err;
  EXPECT_TRUE(TreeOf(work_ / "b") == TreeOf(b));
  StopServe(&server);
}

}  // namespace
}  // namespace blz::testing
