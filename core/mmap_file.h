// Read-only memory map of a whole file. Tensors are read as views into the map; blz never
// copies a whole model into memory. An empty file maps to an empty span.
#ifndef BLZ_CORE_MMAP_FILE_H_
#define BLZ_CORE_MMAP_FILE_H_

#include <string>

#include "core/bytes.h"
#include "core/status.h"

namespace blz {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only. Errors: kNotFound (no such file), kIOError.
  static Result<MappedFile> Open(const std::string& path);

  ByteSpan bytes() const { return {data_, size_}; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Tells the kernel the range will be read sequentially / is no longer needed.
  void AdviseSequential() const;
  void DropRange(size_t offset, size_t length) const;

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace blz

#endif  // BLZ_CORE_MMAP_FILE_H_
