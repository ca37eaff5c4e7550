// End-to-end (issue 14): `blz pull REF --lossy STRATEGY` against a real `blz serve`. Two
// versions of a generated F32 model are pushed; a client holding the first pulls the second
// lossily: the output directory holds a model whose error against the true second version is
// the rel_l2 the registry reported, it is labelled LOSSY everywhere, and the local store does
// not hold the second version afterwards. Without a held base the pull fails clearly and
// changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/e2e/subprocess.h"
#include "tests/formats/test_models.h"
#include "tests/test_util.h"

namespace blz::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The F32 tensors of a .safetensors file: name -> values.
std::map<std::string, std::vector<float>> ReadF32Tensors(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  const std::string bytes = ReadFileBytes(path);
  if (bytes.size() < 8) {
    ADD_FAILURE() << path << ": too short";
    return out;
  }
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  json header = json::parse(bytes.substr(8, n), nullptr, false);
  if (header.is_discarded() || 8 + n > bytes.size()) {
    ADD_FAILURE() << path << ": bad header";
    return out;
  }
  for (auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(t["dtype"], "F32") << name;
    const uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    std::vector<float> v((end - begin) / 4);
    std::memcpy(v.data(), bytes.data() + 8 + n + begin, end - begin);
    out[name] = std::move(v);
  }
  return out;
}

// Model-level ||r - t|| / ||t|| over every tensor of every .safetensors file of `target_dir`.
double ModelRelL2(const std::string& recon_dir, const std::string& target_dir) {
  double err2 = 0, t2 = 0;
  for (const auto& e : fs::directory_iterator(target_dir)) {
    if (e.path().extension() != ".safetensors") continue;
    auto t = ReadF32Tensors(e.path().string());
    auto r = ReadF32Tensors((fs::path(recon_dir) / e.path().filename()).string());
    for (const auto& [name, tv] : t) {
      auto it = r.find(name);
      if (it == r.end() || it->second.size() != tv.size()) {
        ADD_FAILURE() << "reconstruction lacks " << name;
        continue;
      }
      for (size_t i = 0; i < tv.size(); ++i) {
        const double d = double(it->second[i]) - double(tv[i]);
        err2 += d * d;
        t2 += double(tv[i]) * double(tv[i]);
      }
    }
  }
  return t2 > 0 ? std::sqrt(err2 / t2) : 0;
}

class LossyPullE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServe(BLZ_BINARY, work_ / "data", {}, work_ / "serve");
    ASSERT_FALSE(server_.addr.empty()) << ReadFileBytes(work_ / "serve.err");
    models_ = work_ / "models";
    ProcessResult g = RunProcess({"/usr/bin/python3",
                                  std::string(BLZ_SOURCE_DIR) + "/scripts/make_demo_model.py",
                                  models_},
                                 {}, work_.path());
    ASSERT_EQ(g.exit_code, 0) << g.err;
  }
  void TearDown() override { StopServe(&server_); }

  ProcessResult Blz(std::vector<std::string> args, const std::string& cache = "cache") {
    args.insert(args.begin(), BLZ_BINARY);
    return RunProcess(args,
                      {{"BLZ_CONFIG_DIR", work_ / "config"}, {"BLZ_CACHE_DIR", work_ / cache},
                       {"BLZ_TOKEN", server_.token}},
                      work_.path());
  }
  json BlzJson(std::vector<std::string> args, const std::string& cache = "cache") {
    args.push_back("--json");
    ProcessResult r = Blz(args, cache);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    json j = json::parse(r.out, nullptr, false);
    return j.is_discarded() ? json::object() : j;
  }
  // Every archive digest the local store `cache` holds (blz ls --json).
  std::vector<std::string> HeldDigests(const std::string& cache) {
    std::vector<std::string> out;
    if (!fs::exists(work_ / (cache + "/blobs"))) return out;
    for (const auto& e : fs::recursive_directory_iterator(work_ / (cache + "/blobs"))) {
      if (e.is_regular_file()) out.push_back("sha256:" + e.path().filename().string());
    }
    return out;
  }

  TempDir work_;
  ServeProcess server_;
  std::string models_;
};

TEST_F(LossyPullE2ETest, BitDeltaFromAHeldBaseIsLabelledAndNeverStoredAsTheTarget) {
  const std::string repo = server_.addr + "/org/demo";
  json v1 = BlzJson({"push", models_ + "/base", repo + ":v1"}, "push-cache");
  json v2 = BlzJson({"push", models_ + "/ft", repo + ":v2"}, "push-cache");
  const std::string d1 = v1.value("digest", ""), d2 = v2.value("digest", "");
  ASSERT_FALSE(d1.empty());
  ASSERT_FALSE(d2.empty());
  // The client holds v1 (a lossless pull).
  ASSERT_EQ(Blz({"pull", repo + ":v1"}).exit_code, 0);

  const std::string out = work_ / "demo-lossy";
  ProcessResult r = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["lossy"], true);
  EXPECT_EQ(j["strategy"], "bitdelta");
  EXPECT_EQ(j["approximates"], d2);
  EXPECT_EQ(j["base"], d1);
  EXPECT_EQ(j["output"], out);
  const std::string own = j.value("output_digest", "");
  EXPECT_TRUE(own.starts_with("sha256:")) << own;
  EXPECT_NE(own, d2);
  EXPECT_EQ(j["base_name"], "org/demo:v1");  // named, not a bare digest (issue 24 item 5)
  EXPECT_GT(j["delta_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["lossless_bytes"].get<uint64_t>(), j["delta_bytes"].get<uint64_t>());
  // Like for like (issue 24 item 3): the saving compares the delta's tensor records with the
  // lossless tensor bytes; the whole file also holds config.json and the header.
  const uint64_t delta_tensors = j.value("delta_tensor_bytes", uint64_t{0});
  EXPECT_GT(delta_tensors, 0u) << j.dump();
  EXPECT_LT(delta_tensors, j["delta_bytes"].get<uint64_t>());
  EXPECT_EQ(j["bytes_saved_vs_lossless"].get<int64_t>(),
            int64_t(j["lossless_bytes"].get<uint64_t>()) - int64_t(delta_tensors));
  ASSERT_TRUE(j["error"]["rel_l2"].is_number()) << j.dump();
  const double reported = j["error"]["rel_l2"];
  EXPECT_GT(reported, 0.0);
  // How much of the update was lost is reported next to the cosine.
  ASSERT_TRUE(j["error"]["delta_rel_l2"].is_number()) << j.dump();
  EXPECT_GT(j["error"]["delta_rel_l2"].get<double>(), reported);

  // The output: the target's files, the label, and the reported error.
  ASSERT_TRUE(fs::is_directory(out));
  EXPECT_TRUE(fs::exists(fs::path(out) / "config.json"));
  json label = json::parse(ReadFileBytes(fs::path(out) / "blz-lossy.json"), nullptr, false);
  ASSERT_FALSE(label.is_discarded());
  EXPECT_EQ(label["lossy"], true);
  EXPECT_EQ(label["approximates"], d2);
  EXPECT_EQ(label["output_digest"], own);
  const double measured = ModelRelL2(out, models_ + "/ft");
  EXPECT_NEAR(measured, reported, 1e-6 + 1e-4 * reported);
  std::cout << "[ e2e      ] bitdelta: delta " << j["delta_bytes"] << " bytes, lossless patch "
            << j["lossless_bytes"] << " bytes, rel_l2 reported " << reported << ", measured "
            << measured << "\n";

  // Never recorded under the target's digest (nor in any index).
  for (const std::string& d : HeldDigests("cache")) EXPECT_NE(d, d2);
  json ls = BlzJson({"ls"});
  EXPECT_EQ(ls.dump().find(d2), std::string::npos) << ls.dump();

  // The human-readable report says LOSSY and names both digests; stdout is the directory.
  const std::string out2 = work_ / "demo-lossy-2";
  ProcessResult text = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "-o", out2});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("LOSSY"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find(d2), std::string::npos);
  EXPECT_NE(text.err.find("saved vs the lossless patch"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("delta_rel_l2"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("of the update lost"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("base    org/demo:v1 (" + d1 + ")"), std::string::npos) << text.err;
  EXPECT_EQ(text.out, out2 + "\n");

  // An existing output directory is refused; --max-error below the error is refused before
  // any download; neither writes anything.
  ProcessResult exists = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "-o", out});
  EXPECT_EQ(exists.exit_code, 7) << exists.err;
  const std::string out3 = work_ / "demo-lossy-3";
  ProcessResult strict = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "--max-error",
                              std::to_string(reported / 2), "-o", out3});
  EXPECT_EQ(strict.exit_code, 2) << strict.err;
  EXPECT_NE(strict.err.find("exceeds --max-error"), std::string::npos) << strict.err;
  EXPECT_FALSE(fs::exists(out3));
  ProcessResult bad = Blz({"pull", repo + ":v2", "--lossy", "zip", "-o", out3});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_FALSE(fs::exists(out3));
  for (const std::string& d : HeldDigests("cache")) EXPECT_NE(d, d2);
}

// Issue 24 item 3: `--lossy auto --max-error 0.001` on a fine-tune whose every weight moved by
// ~1% codes every tensor exact (no lossy coding meets 0.001), so the delta (exact tensors plus
// config.json stored verbatim and its header) is no smaller than the lossless patch: auto
// takes the lossless patch instead, says so, and labels nothing LOSSY.
TEST_F(LossyPullE2ETest, AutoNeverDownloadsMoreThanTheLosslessPatch) {
  const std::string repo = server_.addr + "/org/demo";
  json v1 = BlzJson({"push", models_ + "/base", repo + ":v1"}, "push-cache");
  json v2 = BlzJson({"push", models_ + "/ft", repo + ":v2"}, "push-cache");
  const std::string d2 = v2.value("digest", "");
  ASSERT_FALSE(d2.empty());
  ASSERT_EQ(Blz({"pull", repo + ":v1"}).exit_code, 0);

  const std::string out = work_ / "auto";
  ProcessResult r = Blz({"pull", repo + ":v2", "--lossy", "auto", "--max-error", "0.001", "-o",
                         out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["lossy"], false) << j.dump();
  EXPECT_EQ(j["lossless_fallback"], true) << j.dump();
  ASSERT_TRUE(j["lossless_patch_bytes"].is_number()) << j.dump();
  EXPECT_GE(j["delta_bytes"].get<uint64_t>(), j["lossless_patch_bytes"].get<uint64_t>());
  EXPECT_LE(j["bytes_downloaded"].get<uint64_t>(), j["lossless_patch_bytes"].get<uint64_t>());
  EXPECT_EQ(j["transfer"], "patch");
  EXPECT_EQ(j["base_name"], "org/demo:v1");
  // The exact version: unpacked, not labelled, and held by the store like any pull.
  EXPECT_TRUE(fs::exists(fs::path(out) / "config.json"));
  EXPECT_FALSE(fs::exists(fs::path(out) / "blz-lossy.json"));
  EXPECT_EQ(ReadFileBytes(fs::path(out) / "model.safetensors"),
            ReadFileBytes(fs::path(models_) / "ft/model.safetensors"));
  const std::vector<std::string> held = HeldDigests("cache");
  EXPECT_NE(std::find(held.begin(), held.end(), d2), held.end());

  // The text report says so and never says LOSSY.
  ProcessResult text =
      Blz({"pull", repo + ":v2", "--lossy", "auto", "--max-error", "0.001", "-o",
           work_ / "auto-2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.err.find("LOSSY"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("losslessly"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("is not smaller than the lossless patch"), std::string::npos)
      << text.err;
  // Said once, in the summary (it was a note too).
  EXPECT_EQ(text.err.find("pulled the lossless patch instead"), std::string::npos) << text.err;

  // -q: nothing on stderr, the directory on stdout (issue 24 item 12).
  ProcessResult quiet = Blz({"pull", repo + ":v2", "--lossy", "auto", "--max-error", "0.001",
                             "-q", "-o", work_ / "auto-3"});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(quiet.out, work_ / "auto-3" + "\n");
}

// Issue 24 item 3: a delta that reproduces every tensor exactly (every tensor of this small
// model is under bitdelta's minimum size, so all are stored exact) is not labelled LOSSY.
TEST_F(LossyPullE2ETest, AResultWithZeroErrorIsNotLabelledLossy) {
  const std::string repo = server_.addr + "/org/small";
  TestModelOptions o;
  o.layers = 1;
  WriteTestModel(work_ / "small-base", o);
  o.perturb_scale = 0.01;
  WriteTestModel(work_ / "small-ft", o);
  ASSERT_EQ(Blz({"push", work_ / "small-base", repo + ":v1"}).exit_code, 0);
  ASSERT_EQ(Blz({"push", work_ / "small-ft", repo + ":v2"}).exit_code, 0);
  ASSERT_EQ(Blz({"pull", repo + ":v1"}).exit_code, 0);
  const std::string out = work_ / "small-exact";
  ProcessResult r = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["error"]["rel_l2"], 0.0) << j.dump();
  EXPECT_EQ(j["lossy"], false) << j.dump();
  json label = json::parse(ReadFileBytes(fs::path(out) / "blz-lossy.json"), nullptr, false);
  ASSERT_FALSE(label.is_discarded());
  EXPECT_EQ(label["lossy"], false);
  ProcessResult text = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "-o", out + "-2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.err.find("LOSSY"), std::string::npos) << text.err;
  EXPECT_NE(text.err.find("zero error on every tensor"), std::string::npos) << text.err;
}

// The uses usage.json records for `digest` (client/usage.h); 0 when it has no record.
uint64_t UsesOf(const fs::path& cache, const std::string& digest) {
  if (!fs::exists(cache / "usage.json")) return 0;
  json doc = json::parse(ReadFileBytes(cache / "usage.json"), nullptr, false);
  if (doc.is_discarded() || !doc.contains("versions") || !doc["versions"].contains(digest)) {
    return 0;
  }
  return doc["versions"][digest].value("uses", uint64_t{0});
}

TEST_F(LossyPullE2ETest, OptionsReachTheRegistryAndTheBaseUseIsCounted) {
  const std::string repo = server_.addr + "/org/demo";
  json v1 = BlzJson({"push", models_ + "/base", repo + ":v1"}, "push-cache");
  json v2 = BlzJson({"push", models_ + "/ft", repo + ":v2"}, "push-cache");
  const std::string d1 = v1.value("digest", ""), d2 = v2.value("digest", "");
  ASSERT_FALSE(d1.empty());
  ASSERT_EQ(Blz({"pull", repo + ":v1"}).exit_code, 0);
  const uint64_t uses_before = UsesOf(work_ / "cache", d1);
  EXPECT_EQ(uses_before, 1u);

  // --sparsity and --rank-energy are part of the delta's key at the registry.
  json sparse = BlzJson({"pull", repo + ":v2", "--lossy", "sparse", "--sparsity", "0.5", "-o",
                         work_ / "sparse-50"});
  EXPECT_EQ(sparse.value("params", ""), "strategy=sparse&sparsity=0.5") << sparse.dump();
  json sparse_default =
      BlzJson({"pull", repo + ":v2", "--lossy", "sparse", "-o", work_ / "sparse-90"});
  EXPECT_EQ(sparse_default.value("params", ""), "strategy=sparse&sparsity=0.9");
  // Keeping half the delta loses less than keeping a tenth.
  ASSERT_TRUE(sparse["error"]["rel_l2"].is_number());
  ASSERT_TRUE(sparse_default["error"]["rel_l2"].is_number());
  EXPECT_LT(sparse["error"]["rel_l2"].get<double>(),
            sparse_default["error"]["rel_l2"].get<double>());
  EXPECT_GT(sparse["delta_bytes"].get<uint64_t>(), sparse_default["delta_bytes"].get<uint64_t>());
  json lowrank = BlzJson({"pull", repo + ":v2", "--lossy", "lowrank", "--rank-energy", "0.5",
                          "-o", work_ / "lowrank-50"});
  EXPECT_NE(lowrank.value("params", "").find("rank_energy=0.5"), std::string::npos)
      << lowrank.dump();

  // Each lossy pull used the held base once; the approximations have no record.
  EXPECT_EQ(UsesOf(work_ / "cache", d1), uses_before + 3);
  EXPECT_EQ(UsesOf(work_ / "cache", d2), 0u);

  // Options for a strategy that does not read them, or out of range: refused, nothing written.
  const std::string out = work_ / "refused";
  struct Case {
    std::vector<std::string> flags;
    std::string says;
  };
  const Case cases[] = {
      {{"--lossy", "bitdelta", "--sparsity", "0.5"}, "--sparsity applies to --lossy sparse only"},
      {{"--lossy", "sparse", "--sparsity", "1"}, "--sparsity must be a number in [0, 1)"},
      {{"--lossy", "sparse", "--rank-energy", "0.9"}, "--rank-energy applies to"},
      {{"--lossy", "auto", "--rank-energy", "0"}, "--rank-energy must be a number in (0, 1]"},
      {{"--sparsity", "0.5"}, "need --lossy STRATEGY"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"pull", repo + ":v2", "-o", out};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    ProcessResult r = Blz(args);
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(out));
  }
  EXPECT_EQ(UsesOf(work_ / "cache", d1), uses_before + 3);
}

TEST_F(LossyPullE2ETest, WithoutAHeldBaseFailsClearlyAndChangesNothing) {
  const std::string repo = server_.addr + "/org/demo";
  ASSERT_EQ(Blz({"push", models_ + "/base", repo + ":v1"}, "push-cache").exit_code, 0);
  ASSERT_EQ(Blz({"push", models_ + "/ft", repo + ":v2"}, "push-cache").exit_code, 0);
  const std::string out = work_ / "nothing";
  ProcessResult r = Blz({"pull", repo + ":v2", "--lossy", "bitdelta", "-o", out}, "empty-cache");
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;  // not found: no base
  EXPECT_NE(r.err.find("needs a held base"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(HeldDigests("empty-cache").empty());
  // The default output name is not created either.
  EXPECT_FALSE(fs::exists(work_ / "demo-lossy-bitdelta"));
}

}  // namespace
}  // namespace blz::testing
