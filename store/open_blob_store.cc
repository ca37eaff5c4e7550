#include "store/open_blob_store.h"

#include <utility>

#include "store/fs/fs_blob_store.h"
#include "store/s3/s3_blob_store.h"

namespace blz::store {

Result<std::unique_ptr<BlobStore>> OpenBlobStore(std::string_view url,
                                                 const std::string& data_dir,
                                                 const BlobStoreOptions& options,
                                                 const s3::EnvReader& getenv_fn) {
  if (url.empty() || url == "file:") {
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<FsBlobStore> fs, FsBlobStore::Open(data_dir));
    return std::unique_ptr<BlobStore>(std::move(fs));
  }
  if (url.rfind("file:", 0) == 0) {
    std::string dir(url.substr(5));
    if (dir.rfind("//", 0) == 0) dir = dir.substr(2);  // file:///abs -> /abs
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<FsBlobStore> fs, FsBlobStore::Open(dir));
    return std::unique_ptr<BlobStore>(std::move(fs));
  }
  if (url.rfind("s3://", 0) == 0) {
    BLZ_ASSIGN_OR_RETURN(s3::S3Config config, s3::ParseS3Url(url));
    BLZ_RETURN_IF_ERROR(s3::ApplyS3Environment(&config, getenv_fn));
    s3::S3BlobStoreOptions o;
    o.cache_bytes = options.cache_bytes;
    BLZ_ASSIGN_OR_RETURN(std::unique_ptr<s3::S3BlobStore> s,
                         s3::S3BlobStore::Open(data_dir, std::move(config), o));
    return std::unique_ptr<BlobStore>(std::move(s));
  }
  const std::string shown(url.substr(0, url.find('?')));
  return InvalidArgument("--storage " + shown +
                         ": unknown storage; expected file:DIR or s3://BUCKET/PREFIX?endpoint=URL");
}

}  // namespace blz::store
