// Writes .wdelta fixtures for tests/patcher/lossy/wdelta_numpy_check.py: for each format version,
// one file holding sparse, quantized and int4 tensors of several shapes, plus raw little-endian
// float32 files per tensor (the base, the delta blz encoded, and blz's reconstruction) and a
// manifest.json describing them. Usage: wdelta_fixture_tool OUT_DIR
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/wdelta.h"
#include "patcher/lossy/wdelta_strategies.h"

namespace {

void WriteF32(const std::string& path, const std::vector<float>& v) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "wdelta_fixture_tool: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace blz;
  if (argc != 2) return Fail("usage: wdelta_fixture_tool OUT_DIR");
  const std::string dir = argv[1];
  const std::vector<std::vector<uint64_t>> shapes = {
      {1, 2}, {3}, {7, 5}, {64, 33}, {128, 256}, {2, 20000}, {3001}, {4, 3, 5}};
  const std::vector<std::string> strategies = {"sparse", "quantized", "int4"};
  nlohmann::ordered_json manifest = nlohmann::ordered_json::array();
  std::mt19937 rng(1234);
  for (uint32_t version : {1u, 2u}) {
    formats::WdeltaFileOut file;
    file.version = version;
    file.parent_hash = std::string(64, 'f');
    file.strategy = "auto";
    struct Pending {
      std::string name;
      std::string strategy;
      std::vector<uint64_t> shape;
      std::vector<float> base, delta;
    };
    std::vector<Pending> pending;
    int case_no = 0;
    for (const auto& shape : shapes) {
      uint64_t n = 1;
      for (uint64_t d : shape) n *= d;
      for (const auto& strategy : strategies) {
        for (int zero = 0; zero < (strategy == "int4" ? 2 : 1); ++zero) {
          Pending p;
          p.name = "v" + std::to_string(version) + "." + strategy + "." + std::to_string(case_no++);
          p.strategy = strategy;
          p.shape = shape;
          std::normal_distribution<float> g(0.0f, 1.0f);
          std::uniform_real_distribution<float> e(-4.0f, 1.0f);
          const float scale = std::pow(10.0f, e(rng));
          p.base.resize(n);
          p.delta.resize(n);
          for (auto& v : p.base) v = g(rng);
          for (auto& v : p.delta) v = zero != 0 ? 0.0f : g(rng) * scale;
          Result<formats::WdeltaTensorOut> t =
              strategy == "sparse"      ? lossy::EncodeSparse(p.name, p.delta, shape, 0.9)
              : strategy == "quantized" ? lossy::EncodeQuantized(p.name, p.delta, shape)
                                        : lossy::EncodeInt4(p.name, p.delta, shape, 0.01, version);
          if (!t.ok()) return Fail(t.status().ToString());
          file.tensors.push_back(std::move(*t));
          pending.push_back(std::move(p));
        }
      }
    }
    const std::string path = dir + "/v" + std::to_string(version) + ".wdelta";
    if (Status s = formats::WriteWdelta(path, file); !s.ok()) return Fail(s.ToString());
    auto reader = formats::WdeltaReader::Open(path);
    if (!reader.ok()) return Fail(reader.status().ToString());
    for (const auto& p : pending) {
      auto payload = lossy::ReadPayload(*reader, p.name);
      if (!payload.ok()) return Fail(payload.status().ToString());
      std::vector<float> recon = p.base;
      Status s = p.strategy == "sparse"      ? lossy::DecodeAddSparse(*payload, recon)
                 : p.strategy == "quantized" ? lossy::DecodeAddQuantized(*payload, recon)
                                             : lossy::DecodeAddInt4(*payload, recon);
      if (!s.ok()) return Fail(s.ToString());
      WriteF32(dir + "/" + p.name + ".base.f32", p.base);
      WriteF32(dir + "/" + p.name + ".delta.f32", p.delta);
      WriteF32(dir + "/" + p.name + ".recon.f32", recon);
      manifest.push_back({{"file", "v" + std::to_string(version) + ".wdelta"},
                          {"name", p.name},
                          {"strategy", p.strategy},
                          {"shape", p.shape}});
    }
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump(1) << "\n";

  // detail::NumpyMeanF32 on its own (the fp16 scales hide most float32 differences): rows of
  // many lengths around numpy's 128-element pairwise block and 8192-element buffer.
  std::vector<uint64_t> lengths = {1, 7, 8, 9, 127, 128, 129, 1000, 8191, 8192, 8193, 16385};
  std::uniform_int_distribution<uint64_t> len(8193, 70000);
  for (int i = 0; i < 40; ++i) lengths.push_back(len(rng));
  std::vector<float> rows, means;
  std::uniform_real_distribution<float> u(0.0f, 3.0f);
  for (uint64_t n : lengths) {
    const size_t at = rows.size();
    for (uint64_t i = 0; i < n; ++i) rows.push_back(u(rng));
    means.push_back(lossy::detail::NumpyMeanF32(rows.data() + at, n));
  }
  WriteF32(dir + "/means.rows.f32", rows);
  WriteF32(dir + "/means.blz.f32", means);
  std::ofstream(dir + "/means.json") << nlohmann::json(lengths).dump() << "\n";
  return 0;
}
