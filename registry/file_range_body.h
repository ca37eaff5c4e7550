// A Beast body type that sends a byte range [offset, offset + length) of a file, or a list of
// byte segments of it in order, read in fixed buffers (Beast's file_body in Boost 1.74 can only
// send a whole file). Used for blob downloads with Range support, and for the files of a model
// version, whose bytes are pieces of an archive (registry/hub/version_files.h). ProducerBody
// sends the bytes a BodyProducer makes as it goes (a file of a version stored as a full patch).
#ifndef BLZ_REGISTRY_FILE_RANGE_BODY_H_
#define BLZ_REGISTRY_FILE_RANGE_BODY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "registry/body_producer.h"
#include "registry/net.h"

namespace blz::registry {

struct FileRangeBody {
  struct value_type {
    beast::file file;
    uint64_t offset = 0;
    uint64_t length = 0;  // with `segments`: their total
    // When not empty: send these [first = offset, second = length) segments instead of
    // [offset, offset + length).
    std::vector<std::pair<uint64_t, uint64_t>> segments;
  };

  static uint64_t size(const value_type& body) { return body.length; }

  class writer {
   public:
    using const_buffers_type = net::const_buffer;

    template <bool isRequest, class Fields>
    writer(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    void init(beast::error_code& ec) {
      total_ = body_.length;
      if (body_.segments.empty()) body_.segments.emplace_back(body_.offset, body_.length);
      next_ = 0;
      remain_ = 0;
      ec = {};
    }

    boost::optional<std::pair<const_buffers_type, bool>> get(beast::error_code& ec) {
      while (remain_ == 0 && total_ > 0 && next_ < body_.segments.size()) {
        const auto& [at, len] = body_.segments[next_++];
        if (len == 0) continue;
        body_.file.seek(at, ec);
        if (ec) return boost::none;
        remain_ = len < total_ ? len : total_;
      }
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
      total_ -= n;
      ec = {};
      return {{const_buffers_type(buf_, n), total_ > 0}};
    }

   private:
    value_type& body_;
    uint64_t remain_ = 0;  // of the current segment
    uint64_t total_ = 0;   // of the whole body
    size_t next_ = 0;      // the next segment
    char buf_[64 * 1024];
  };
};

// A body of exactly `length` bytes pulled from `producer` (registry/body_producer.h). A producer
// error, or a producer that ends early or makes more, fails the write (the session closes the
// connection); `error` keeps the producer's message for the access log.
struct ProducerBody {
  struct value_type {
    std::shared_ptr<BodyProducer> producer;
    uint64_t length = 0;
    std::shared_ptr<std::string> error;  // set on a producer error (may be null)
  };

  static uint64_t size(const value_type& body) { return body.length; }

  class writer {
   public:
    template <bool isRequest, class Fields>
    writer(http::header<isRequest, Fields>&, value_type& body) : body_(body) {}

    using const_buffers_type = net::const_buffer;

    void init(beast::error_code& ec) {
      left_ = body_.length;
      ec = {};
    }

    boost::optional<std::pair<const_buffers_type, bool>> get(beast::error_code& ec) {
      if (left_ == 0) {
        ec = {};
        return boost::none;
      }
      Result<ByteSpan> bytes = body_.producer->Next();
      if (!bytes.ok() || bytes->empty() || bytes->size() > left_) {
        if (body_.error != nullptr) {
          *body_.error = !bytes.ok()      ? bytes.status().ToString()
                         : bytes->empty() ? "the body ended early"
                                          : "the body is longer than announced";
        }
        ec = !bytes.ok() ? beast::error_code(boost::system::errc::io_error,
                                             boost::system::generic_category())
                         : beast::error_code(http::error::short_read);
        return boost::none;
      }
      left_ -= bytes->size();
      ec = {};
      return {{const_buffers_type(bytes->data(), bytes->size()), left_ > 0}};
    }

   private:
    value_type& body_;
    uint64_t left_ = 0;
  };
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_FILE_RANGE_BODY_H_
