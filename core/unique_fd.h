// An owned POSIX file descriptor, closed when it goes out of scope (not copyable). -1 (what a
// failed open() returns) owns nothing; check get() >= 0 before use.
#ifndef BLZ_CORE_UNIQUE_FD_H_
#define BLZ_CORE_UNIQUE_FD_H_

#include <unistd.h>

namespace blz {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace blz

#endif  // BLZ_CORE_UNIQUE_FD_H_
