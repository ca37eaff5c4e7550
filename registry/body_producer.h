// A response body made while it is sent: the bytes come from a producer the handler sets up
// (Response::producer, registry/http_message.h) and the session pulls, one buffer at a time,
// as the socket takes them (registry/file_range_body.h ProducerBody). Used for the files of a
// model version stored as a full patch, decoded chunk by chunk (registry/hub/version_files.h),
// so that no file is ever held in memory or written to disk to be served.
#ifndef BLZ_REGISTRY_BODY_PRODUCER_H_
#define BLZ_REGISTRY_BODY_PRODUCER_H_

#include "core/bytes.h"
#include "core/status.h"

namespace blz::registry {

class BodyProducer {
 public:
  virtual ~BodyProducer() = default;
  // The next bytes of the body, in order; valid until the next call or the producer's
  // destruction. An empty span: the body is complete. An error, or fewer bytes in all than the
  // response announced, ends the response early: the session closes the connection (the client
  // sees a short body) and logs the error, which should say what failed where.
  // Called on the session's I/O thread: each call should do a bounded amount of work.
  virtual Result<ByteSpan> Next() = 0;
};

}  // namespace blz::registry

#endif  // BLZ_REGISTRY_BODY_PRODUCER_H_
