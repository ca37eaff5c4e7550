// A Beast body type that sends a byte range [offset, offset + length) of a file, read in fixed
// buffers (Beast's file_body in Boost 1.74 can only send a whole file). Used for blob downloads
// with Range support.
#ifndef BLZ_REGISTRY_FILE_RANGE_BODY_H_
#define BLZ_REGISTRY_FILE_RANGE_BODY_H_

#include <cstdint>
#include <utility>

#include "registry/net.h"

namespace blz::registry {

struct FileRangeBody {
  struct value_type {
    beast::file file;
    uint64_t offset = 0;
    uint64_t length = 0;
  };

  static uint64_t size(const value_type& body) { return body.length; }

  class writer {
   public:
    using const_buffers_type = net::const_buffer;

    template <bool isRequest, class Fields>
    writer(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(beast::error_code& ec) {
      remain_ = body_.length;
      body_.file.seek(body_.offset, ec);
    }

    boost::optional<std::pair<const_buffers_type, bool>> get(beast::error_code& ec) {
      if (remain_ == 0) {
        ec = {};
        return boost::none;
      }
      const size_t amount = remain_ < sizeof(buf_) ? size_t(remain_) : sizeof(buf_);
      const size_t n = body_.file.read(buf_, amount, ec);
      if (ec) return boost::none;
      if (n == 0) {  // the file shrank under us
        ec = http::error::short_read;
        return boost::none;
      }
      remain_ -= n;
      ec = {};
      return {{const_buffers_type(buf_, n), remain_ > 0}};
    }

   private:
    value_type& body_;
    uint64_t remain_ = 0;
    char buf_[64 * 1024];
  };
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_FILE_RANGE_BODY_H_
