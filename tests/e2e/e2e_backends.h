// The backend pair every `blz serve` of an e2e test runs on, chosen by the environment like the
// registry tests' (tests/registry/test_backends.h; CTest variant e2e_test_pg_s3):
//   BLZ_TEST_METADATA=postgres  --metadata postgresql://... : a fresh database per data directory
//                               on one PostgreSQL 15 per binary (tests/store/postgres/), started
//                               on first use;
//   BLZ_TEST_STORAGE=s3         --storage s3://blz-e2e-tests/<fresh prefix>?... per data
//                               directory on one Ceph S3 gateway per binary
//                               (tests/store/s3/ceph_s3_server.h); its AWS_* keys go into the
//                               child's environment, never argv.
// Unset: SQLite <data>/blz.db and the fs driver (the defaults). A server restarted on the same
// --data (or --config) gets the same database and prefix; a serve argv that names --metadata or
// --storage itself keeps it. Linking e2e_backends.cc installs the hook (SetServeBackendHook in
// subprocess.h) before main.
#ifndef BLZ_TESTS_E2E_E2E_BACKENDS_H_
#define BLZ_TESTS_E2E_E2E_BACKENDS_H_

#include <gtest/gtest.h>

#include <string>

namespace blz::testing {

bool E2EStorageIsS3();          // BLZ_TEST_STORAGE=s3
bool E2EMetadataIsPostgres();   // BLZ_TEST_METADATA=postgres

// Is the blob `digest` ("sha256:<hex>") stored by the `blz serve --data data_dir` of this test:
// its file under data_dir/blobs (fs driver) or its object under the serve's bucket prefix (s3,
// a HEAD)? An S3 error other than 404 is a test failure.
bool E2EBlobStored(const std::string& data_dir, const std::string& digest);

}  // namespace blz::testing

// For the cases that are genuinely about the fs driver's blob files / the SQLite file;
// `why`: what the test looks at.
#define E2E_SKIP_UNLESS_FS_STORAGE(why) \
  if (::blz::testing::E2EStorageIsS3()) GTEST_SKIP() << "needs the fs driver's files: " << why
#define E2E_SKIP_UNLESS_SQLITE(why)            \
  if (::blz::testing::E2EMetadataIsPostgres()) \
  GTEST_SKIP() << "needs SQLite metadata: " << why

#endif  // BLZ_TESTS_E2E_E2E_BACKENDS_H_
