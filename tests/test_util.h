// Helpers shared by blz tests: temp directories, the shared corpus, small file I/O.
#ifndef BLZ_TESTS_TEST_UTIL_H_
#define BLZ_TESTS_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace blz::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "blz-test-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

// The shared corpus of real model files ("" when absent).
inline std::string CorpusDir() {
  const char* env = std::getenv("BLZ_CORPUS_DIR");
  std::string dir = env != nullptr ? env : BLZ_CORPUS_DIR;
  return std::filesystem::is_directory(dir) ? dir : std::string();
}

inline std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFileBytes(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), std::streamsize(data.size()));
}

// Every regular file below `dir` (relative path -> bytes); empty when `dir` is not a directory.
inline std::map<std::string, std::string> ReadTree(const std::string& dir) {
  std::map<std::string, std::string> out;
  if (!std::filesystem::is_directory(dir)) return out;
  for (auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) {
      out[std::filesystem::relative(e.path(), dir).string()] = ReadFileBytes(e.path().string());
    }
  }
  return out;
}

}  // namespace blz::testing

// Skips the current test with a clear message when the shared corpus is missing.
#define BLZ_REQUIRE_CORPUS(var)                                                        \
  std::string var = ::blz::testing::CorpusDir();                                       \
  if (var.empty()) {                                                                   \
    GTEST_SKIP() << "shared corpus not found (looked in BLZ_CORPUS_DIR and "           \
                 << BLZ_CORPUS_DIR << "); skipping test that needs real model files"; \
  }

#endif  // BLZ_TESTS_TEST_UTIL_H_
