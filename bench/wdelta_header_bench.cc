// wdelta_header_bench: time to open a .wdelta whose header lists many tensors, and to look each
// one up (issue 23: the header parse and the lookups were quadratic in the tensor count).
//
//   wdelta_header_bench [N ...]          (default: 10000 40000 200000)
//
// For each N, writes /tmp/wdelta-header-bench-N.wdelta by hand (not with WriteWdelta, so the
// file does not depend on the code measured): N tensors "model.layers.<i/16>.t<i%16>", each a
// "sparse" header object with a 1-element "indices" and "values" record, then times (wall,
// best of 3) WdeltaReader::Open and one Meta() + Field() per tensor, and checks every lookup
// found its tensor. Output: one markdown row per N. Exit codes: 0 ok, 1 failure.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/digest.h"
#include "core/file_util.h"
#include "formats/wdelta.h"

namespace {

using Clock = std::chrono::steady_clock;

void Record(std::string* out, const std::string& tensor, const std::string& field,
            const std::string& dtype, const std::string& bytes) {
  for (const std::string* s : {&tensor, &field, &dtype}) {
    blz::AppendLE32(out, uint32_t(s->size()));
    *out += *s;
  }
  blz::AppendLE32(out, 1);  // ndim
  blz::AppendLE64(out, 1);  // shape [1]
  blz::AppendLE64(out, bytes.size());
  *out += bytes;
}

std::string Name(uint64_t i) {
  return "model.layers." + std::to_string(i / 16) + ".t" + std::to_string(i % 16);
}

std::string MakeFile(uint64_t n) {
  std::string header = "{\"parent_hash\":\"" + std::string(64, '0') +
                       "\",\"strategy\":\"sparse\",\"tensors\":{";
  std::string records;
  const std::string index(8, '\0'), value = "\x00\x00\x80\x3f";
  for (uint64_t i = 0; i < n; ++i) {
    if (i > 0) header += ",";
    header += "\"" + Name(i) +
              "\":{\"strategy\":\"sparse\",\"shape\":[1],\"dtype\":\"float32\",\"sparsity\":0.5,"
              "\"indices\":{\"_ref\":\"indices\"},\"values\":{\"_ref\":\"values\"}}";
    Record(&records, Name(i), "indices", "int64", index);
    Record(&records, Name(i), "values", "float32", std::string(value.data(), 4));
  }
  header += "}}";
  std::string file(blz::formats::kWdeltaMagic);
  blz::AppendLE32(&file, 1);
  blz::AppendLE32(&file, uint32_t(header.size()));
  file += header;
  file += records;
  const blz::Sha256Bytes sum = blz::Sha256Of(blz::AsBytes(std::string_view(file)));
  file.append(reinterpret_cast<const char*>(sum.data()), sum.size());
  return file;
}

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<uint64_t> counts;
  for (int i = 1; i < argc; ++i) counts.push_back(std::strtoull(argv[i], nullptr, 10));
  if (counts.empty()) counts = {10000, 40000, 200000};
  std::printf("| tensors | header bytes | file bytes | Open s | %s s |\n", "Meta+Field of all");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (uint64_t n : counts) {
    const std::string path = "/tmp/wdelta-header-bench-" + std::to_string(n) + ".wdelta";
    const std::string file = MakeFile(n);
    if (blz::Status s = blz::WriteFileAtomic(path, file); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 1;
    }
    double best_open = 1e9, best_lookup = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = Clock::now();
      auto reader = blz::formats::WdeltaReader::Open(path);
      const auto t1 = Clock::now();
      if (!reader.ok()) {
        std::fprintf(stderr, "%s\n", reader.status().ToString().c_str());
        return 1;
      }
      for (uint64_t i = 0; i < n; ++i) {
        const std::string name = Name(i);
        if (!reader->Meta(name).ok() || !reader->Field(name, "values").ok()) {
          std::fprintf(stderr, "tensor %s not found\n", name.c_str());
          return 1;
        }
      }
      const auto t2 = Clock::now();
      best_open = std::min(best_open, Seconds(t0, t1));
      best_lookup = std::min(best_lookup, Seconds(t1, t2));
    }
    std::printf("| %llu | %llu | %zu | %.3f | %.3f |\n", static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(blz::LoadLE32(reinterpret_cast<const uint8_t*>(
                    file.data() + 11))),
                file.size(), best_open, best_lookup);
    std::fflush(stdout);
    std::remove(path.c_str());
  }
  return 0;
}
