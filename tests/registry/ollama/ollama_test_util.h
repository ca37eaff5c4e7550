// Helpers of the Ollama tests: a real GGUF version (the corpus file Ollama's own tests use) and
// the bytes a response sends.
#ifndef BLZ_TESTS_REGISTRY_OLLAMA_OLLAMA_TEST_UTIL_H_
#define BLZ_TESTS_REGISTRY_OLLAMA_OLLAMA_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "formats/blz_archive.h"
#include "registry/http_message.h"
#include "tests/test_util.h"

namespace blz::registry::testing {

// ollama/ollama api/data/llama-2-tiny-random.gguf @ 87a88cc8f9 (../shared/corpus PROVENANCE.md):
// GGUF v3, llama architecture, 12 tensors, 1,750,560 bytes.
inline std::string TinyGgufPath(const std::string& corpus) {
  return corpus + "/gguf/llama-2-tiny-random.gguf";
}

// The .blz archive of the GGUF file at `path` (formats::Pack of the single file).
inline std::string GgufArchive(const std::string& path) {
  blz::testing::TempDir tmp;
  formats::PackStats stats;
  Status s = formats::Pack(path, tmp / "model.blz", &stats);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return blz::testing::ReadFileBytes(tmp / "model.blz");
}

// The bytes a response sends: its body, or its file's range or segments.
inline std::string SentBytes(const Response& r) {
  if (r.file_path.empty() && r.producer != nullptr) {  // decoded from a full patch: drained once
    std::string out;
    while (true) {
      Result<ByteSpan> b = r.producer->Next();
      if (!b.ok()) return "<producer error: " + b.status().ToString() + ">";
      if (b->empty()) return out;
      out.append(reinterpret_cast<const char*>(b->data()), b->size());
    }
  }
  if (r.file_path.empty()) return r.body;
  const std::string all = blz::testing::ReadFileBytes(r.file_path);
  if (r.file_segments.empty()) {
    if (r.file_offset > all.size()) return "<offset past end>";
    return all.substr(size_t(r.file_offset), size_t(r.file_length));
  }
  std::string out;
  for (const Response::Segment& s : r.file_segments) {
    if (s.offset + s.length > all.size()) return "<segment past end>";
    out += all.substr(size_t(s.offset), size_t(s.length));
  }
  return out;
}

}  // namespace blz::registry::testing

#endif  // BLZ_TESTS_REGISTRY_OLLAMA_OLLAMA_TEST_UTIL_H_
