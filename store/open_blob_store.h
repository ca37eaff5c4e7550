// Picks the blob driver named by a storage URL (`blz serve --storage`, issue 25):
//   "" or "file:"           the fs driver on the data directory (today's layout, the default)
//   "file:DIR"              the fs driver on DIR (blobs, uploads and quarantine under DIR)
//   "s3://BUCKET[/PREFIX]?endpoint=URL&region=R[&path_style=1]"
//                           the S3 driver; credentials from AWS_ACCESS_KEY_ID /
//                           AWS_SECRET_ACCESS_KEY [/ AWS_SESSION_TOKEN] (store/s3/s3_config.h);
//                           its temporary files and cache under the data directory
// A new driver is one folder under store/ and one branch in OpenBlobStore.
#ifndef BLZ_STORE_OPEN_BLOB_STORE_H_
#define BLZ_STORE_OPEN_BLOB_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "store/blob_store.h"
#include "store/s3/s3_config.h"

namespace blz::store {

struct BlobStoreOptions {
  // Bound of the local cache of remote drivers (<data>/cache/blobs).
  uint64_t cache_bytes = 8ull << 30;
};

// Opens (does not contact) the store. Errors: kInvalidArgument (unknown scheme, a malformed
// URL; the message names the URL, never credentials), kUnauthorized (S3 credentials missing
// from the environment), kIOError (local directories).
Result<std::unique_ptr<BlobStore>> OpenBlobStore(std::string_view url,
                                                 const std::string& data_dir,
                                                 const BlobStoreOptions& options = {},
                                                 const s3::EnvReader& getenv_fn = nullptr);

}  // namespace blz::store

#endif  // BLZ_STORE_OPEN_BLOB_STORE_H_
