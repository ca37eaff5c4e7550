// issue 24 through the `blz` binary: `blz diff` answers "did anything change?" (structure,
// tensor values, non-tensor files) with cmp-style exit codes; `blz export` tells an exact cast
// from a lossy one; `--fail-on-nan` gates `inspect` and `push`, and push warns about NaN/Inf.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace blz::cli {
namespace {

using blz::testing::ReadFileBytes;
using blz::testing::TempDir;
using blz::testing::WriteFileBytes;

struct BlzRun {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs `blz <args>` through the shell (args are trusted test strings), with a private config
// directory and store.
BlzRun Blz(const std::string& args, const TempDir& tmp) {
  const std::string err_path = tmp / "stderr.txt";
  const std::string cmd = "BLZ_CONFIG_DIR=" + tmp / "config" + " BLZ_CACHE_DIR=" +
                          tmp / "cache" + " " + BLZ_BINARY + " " + args + " 2>" +
                          err_path;
  BlzRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ReadFileBytes(err_path);
  return r;
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

// A safetensors file of 1-D F32 tensors (name, values), in the order given.
std::string SafetensorsF32(const std::vector<std::pair<std::string, std::vector<float>>>& ts) {
  std::string header = "{";
  std::string data;
  for (const auto& [name, values] : ts) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(values.size()) +
              "],\"data_offsets\":[" + std::to_string(begin) + "," +
              std::to_string(data.size()) + "]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  return out + header + data;
}

// Item 1: a fine-tune (same structure, other values) used to be IDENTICAL with exit 0 even
// with --fail-on-diff, and --values printed IDENTICAL above "... changed".
TEST(BlzDiffVerdictTest, ChangedValuesMakeModelsDifferentWithExit1) {
  TempDir tmp;
  const std::string a = tmp / "a.safetensors", b = tmp / "b.safetensors";
  WriteFileBytes(a, SafetensorsF32({{"w", {1, 2, 3, 4}}, {"bias", {0.5f}}}));
  WriteFileBytes(b, SafetensorsF32({{"w", {1, 2, 3, 5}}, {"bias", {0.5f}}}));

  BlzRun plain = Blz("diff " + a + " " + b, tmp);
  EXPECT_EQ(plain.code, 1) << plain.out << plain.err;
  EXPECT_EQ(FirstLine(plain.out), "DIFFERENT: values of 1 of 2 tensors") << plain.out;
  EXPECT_NE(plain.out.find("  ~ w\n"), std::string::npos) << plain.out;
  // No "IDENTICAL" anywhere below the verdict (weight-inspect's structure text said so).
  EXPECT_EQ(plain.out.find("IDENTICAL"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("Structure:        unchanged\n"), std::string::npos) << plain.out;
  EXPECT_TRUE(plain.err.empty()) << plain.err;

  BlzRun gate = Blz("diff " + a + " " + b + " --fail-on-diff", tmp);
  EXPECT_EQ(gate.code, 1) << gate.out << gate.err;
  EXPECT_EQ(FirstLine(gate.out), "DIFFERENT: values of 1 of 2 tensors") << gate.out;

  BlzRun values = Blz("diff " + a + " " + b + " --values", tmp);
  EXPECT_EQ(values.code, 1) << values.err;
  EXPECT_EQ(FirstLine(values.out), "DIFFERENT: values of 1 of 2 tensors") << values.out;
  EXPECT_NE(values.out.find("CHANGED%"), std::string::npos) << values.out;
  EXPECT_EQ(values.out.find("IDENTICAL"), std::string::npos) << values.out;

  // The structure-only question keeps weight-inspect's answer and exit code.
  BlzRun structure = Blz("diff " + a + " " + b + " --structure-only", tmp);
  EXPECT_EQ(structure.code, 0) << structure.err;
  EXPECT_EQ(FirstLine(structure.out), "IDENTICAL") << structure.out;

  BlzRun j = Blz("diff --json " + a + " " + b, tmp);
  EXPECT_EQ(j.code, 1) << j.err;
  nlohmann::json doc = nlohmann::json::parse(j.out);  // non-const: a missing key is null
  EXPECT_EQ(doc["schema"], 1);
  EXPECT_EQ(doc["identical"], false);
  EXPECT_EQ(doc["verdict"], "DIFFERENT: values of 1 of 2 tensors");
  EXPECT_EQ(doc["differences"]["structure"], false);
  EXPECT_EQ(doc["differences"]["tensor_values"], 1);
  EXPECT_EQ(doc["content"]["tensors_changed"], nlohmann::json::array({"w"}));
  EXPECT_EQ(doc["structure"]["hash_equal"], true);
  EXPECT_FALSE(doc.contains("values"));
  BlzRun jv = Blz("diff --json --values " + a + " " + b, tmp);
  EXPECT_EQ(jv.code, 1) << jv.err;
  EXPECT_EQ(nlohmann::json::parse(jv.out)["identical"], false);
  EXPECT_EQ(nlohmann::json::parse(jv.out)["values"]["model"]["changed"], 1);

  BlzRun same = Blz("diff " + a + " " + a, tmp);
  EXPECT_EQ(same.code, 0) << same.err;
  EXPECT_EQ(FirstLine(same.out),
            "IDENTICAL: same structure, tensor values (2 tensors) and files (0)")
      << same.out;
  BlzRun usage = Blz("diff " + a + " " + b + " --structure-only --values", tmp);
  EXPECT_EQ(usage.code, 2) << usage.err;
}

// Archives are compared by their header digests; non-tensor files count as content.
TEST(BlzDiffVerdictTest, ArchivesByDigestAndNonTensorFilesCount) {
  TempDir tmp;
  namespace fs = std::filesystem;
  const std::string d1 = tmp / "m1", d2 = tmp / "m2", d3 = tmp / "m3";
  for (const std::string& d : {d1, d2, d3}) fs::create_directories(d);
  const std::string base = SafetensorsF32({{"w", {1, 2, 3, 4}}, {"bias", {0.5f}}});
  WriteFileBytes(d1 + "/model.safetensors", base);
  WriteFileBytes(d1 + "/config.json", "{\"a\": 1}\n");
  WriteFileBytes(d2 + "/model.safetensors", base);
  WriteFileBytes(d2 + "/config.json", "{\"a\": 2}\n");
  WriteFileBytes(d3 + "/model.safetensors",
                 SafetensorsF32({{"w", {1, 2, 3, 4}}, {"bias", {0.25f}}}));
  WriteFileBytes(d3 + "/config.json", "{\"a\": 1}\n");
  for (const char* n : {"1", "2", "3"}) {
    ASSERT_EQ(Blz("pack " + tmp / (std::string("m") + n) + " -o " +
                      tmp / (std::string("m") + n + ".blz"),
                  tmp)
                  .code,
              0);
  }

  BlzRun files = Blz("diff " + d1 + " " + d2, tmp);
  EXPECT_EQ(files.code, 1) << files.err;
  EXPECT_EQ(FirstLine(files.out), "DIFFERENT: file config.json") << files.out;
  BlzRun files_blz = Blz("diff " + tmp / "m1.blz" + " " + tmp / "m2.blz", tmp);
  EXPECT_EQ(files_blz.code, 1) << files_blz.err;
  EXPECT_EQ(FirstLine(files_blz.out), "DIFFERENT: file config.json") << files_blz.out;

  BlzRun values_blz = Blz("diff " + tmp / "m1.blz" + " " + tmp / "m3.blz", tmp);
  EXPECT_EQ(values_blz.code, 1) << values_blz.err;
  EXPECT_EQ(FirstLine(values_blz.out), "DIFFERENT: values of 1 of 2 tensors") << values_blz.out;
  EXPECT_NE(values_blz.out.find("compared by digest"), std::string::npos) << values_blz.out;
  EXPECT_NE(values_blz.out.find("  ~ bias\n"), std::string::npos) << values_blz.out;

  // A directory and its archive hold the same content.
  BlzRun same = Blz("diff " + d1 + " " + tmp / "m1.blz", tmp);
  EXPECT_EQ(same.code, 0) << same.out << same.err;
  EXPECT_EQ(FirstLine(same.out),
            "IDENTICAL: same structure, tensor values (2 tensors) and files (1)")
      << same.out;
}

// Item 4 (CLI): a cast to F16 of values F16 represents exactly changed nothing, yet was
// reported as "cast with loss; largest relative L2 error 0".
TEST(BlzExportCastTest, ExactCastsAreNotReportedAsLossy) {
  TempDir tmp;
  const std::string exact = tmp / "exact.safetensors", lossy = tmp / "lossy.safetensors";
  WriteFileBytes(exact, SafetensorsF32({{"a", {0.5f, 1, -2, 0}}, {"b", {8, 0.25f}}}));
  WriteFileBytes(lossy, SafetensorsF32({{"a", {0.1f, 1}}, {"b", {8, 0.25f}}}));
  BlzRun e = Blz("export " + exact + " --format safetensors --cast f16 -o " +
                     tmp / "exact-f16.safetensors",
                 tmp);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err.find("cast with loss"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("2 tensors cast exactly"), std::string::npos) << e.err;
  BlzRun l = Blz("export " + lossy + " --format safetensors --cast f16 -o " +
                     tmp / "lossy-f16.safetensors",
                 tmp);
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_NE(l.err.find("1 tensors cast with loss"), std::string::npos) << l.err;
  EXPECT_NE(l.err.find("(a)"), std::string::npos) << l.err;
  EXPECT_NE(l.err.find("1 tensor cast exactly"), std::string::npos) << l.err;
}

// Item 6 (CLI): NaN/Inf tensors are a gate for inspect, and a warning (or, with
// --fail-on-nan, a refusal) for push.
TEST(BlzNanGateTest, InspectFailOnNanExits1NamingTheTensors) {
  TempDir tmp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::string bad = tmp / "bad.safetensors", good = tmp / "good.safetensors";
  WriteFileBytes(bad, SafetensorsF32({{"fine", {1, 2}}, {"half", {nan, 1}}, {"all", {inf, nan}}}));
  WriteFileBytes(good, SafetensorsF32({{"fine", {1, 2}}}));

  BlzRun gate = Blz("inspect --fail-on-nan " + bad, tmp);
  EXPECT_EQ(gate.code, 1) << gate.err;
  EXPECT_NE(gate.err.find("2 tensors hold NaN/Inf: half (1 of 2 values), all (all 2 values)"),
            std::string::npos)
      << gate.err;
  EXPECT_EQ(gate.err.find("fine"), std::string::npos) << gate.err;
  EXPECT_NE(gate.out.find("is all NaN/Inf"), std::string::npos) << gate.out;
  BlzRun json = Blz("inspect --fail-on-nan --json " + bad, tmp);
  EXPECT_EQ(json.code, 1) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["stats"]["summary"]["all_non_finite"], 1);
  // Without the flag: warnings only, exit 0 (as before); a healthy model passes the gate.
  EXPECT_EQ(Blz("inspect --stats " + bad, tmp).code, 0);
  BlzRun ok = Blz("inspect --fail-on-nan " + good, tmp);
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_TRUE(ok.err.empty()) << ok.err;
}

TEST(BlzNanGateTest, PushWarnsAboutNanTensorsAndFailOnNanRefuses) {
  TempDir tmp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string bad = tmp / "bad.safetensors";
  WriteFileBytes(bad, SafetensorsF32({{"fine", {1, 2}}, {"all", {nan, nan}}}));
  // Nothing listens on port 1: the push itself fails after the check (exit 6).
  BlzRun warn = Blz("push " + bad + " 127.0.0.1:1/org/m:v1 --retries 0 -q", tmp);
  EXPECT_EQ(warn.code, 6) << warn.err;
  EXPECT_NE(warn.err.find("blz: warning: " + bad +
                          ": 1 tensor holds NaN/Inf: all (all 2 values) (pushing anyway"),
            std::string::npos)
      << warn.err;
  BlzRun refuse = Blz("push --fail-on-nan " + bad + " 127.0.0.1:1/org/m:v1 --retries 0 -q", tmp);
  EXPECT_EQ(refuse.code, 1) << refuse.err;
  EXPECT_NE(refuse.err.find("push --fail-on-nan: not pushed: " + bad + ": 1 tensor holds NaN/Inf"),
            std::string::npos)
      << refuse.err;
  EXPECT_EQ(refuse.err.find("blz: error"), std::string::npos) << refuse.err;  // never connected
}

}  // namespace
}  // namespace blz::cli
