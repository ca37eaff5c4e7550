#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "core/file_util.h"
#include "core/text.h"
#include "formats/blz_archive.h"

namespace blz::cli {
namespace {

std::string ParentOf(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto pos = p.rfind('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return p.substr(0, pos);
}

Result<bool> IsArchiveFile(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return IOError(path + ": cannot open: " + std::strerror(errno));
  char magic[8] = {};
  size_t n = std::fread(magic, 1, sizeof magic, f);
  std::fclose(f);
  return n == sizeof magic && std::memcmp(magic, "BLZARCH\n", 8) == 0;
}

}  // namespace

void PrintJson(const nlohmann::json& j) {
  std::cout << j.dump(2) << std::endl;
}

void PrintOrderedJson(const nlohmann::ordered_json& j) {
  std::cout << j.dump(2) << std::endl;
}

void Note(const std::string& text) {
  std::fprintf(stderr, "blz: note: %s\n", EscapeForTerminal(text).c_str());
}

void PrintText(const std::string& text) {
  std::fputs(EscapeTextForTerminal(text).c_str(), stdout);
}

std::string Esc(const std::string& s) { return EscapeForTerminal(s); }

bool ProgressWanted(bool flag) { return flag || ::isatty(STDERR_FILENO) == 1; }

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

ScopedTempDir::~ScopedTempDir() {
  if (!path_.empty()) RemoveAll(path_);
}

Status ScopedTempDir::CreateNear(const std::string& near_path) {
  if (!path_.empty()) return Status::Ok();
  BLZ_ASSIGN_OR_RETURN(path_, MakeTempDir(ParentOf(near_path), ".blz-tmp-"));
  return Status::Ok();
}

Result<std::string> EnsureArchive(const std::string& input, const std::string& name,
                                  const std::string& near_path, ScopedTempDir* tmp,
                                  bool* packed) {
  *packed = false;
  struct stat st {};
  if (::stat(input.c_str(), &st) != 0) {
    if (errno == ENOENT) return NotFound(input + ": no such file or directory");
    return IOError(input + ": cannot stat: " + std::strerror(errno));
  }
  if (S_ISREG(st.st_mode)) {
    BLZ_ASSIGN_OR_RETURN(bool is_archive, IsArchiveFile(input));
    if (is_archive) return input;
  } else if (!S_ISDIR(st.st_mode)) {
    return InvalidArgument(input + ": not a directory, .blz archive or .safetensors file");
  }
  BLZ_RETURN_IF_ERROR(tmp->CreateNear(near_path));
  std::string out = tmp->path() + "/" + name + ".blz";
  formats::PackStats stats;
  BLZ_RETURN_IF_ERROR(formats::Pack(input, out, &stats).WithContext("packing " + input));
  *packed = true;
  return out;
}

}  // namespace blz::cli
