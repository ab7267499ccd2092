// An emulated S3 server for the S3 tests and the S3 benchmark: moto's (a
// PyPI package that scripts/install-deps.sh installs into the project's
// virtual environment, .venv), run by moto_s3.py on a free port of
// 127.0.0.1 with one empty bucket, in memory, and killed when done. Nothing
// is downloaded here: where moto is not installed, Start fails and says to
// run scripts/install-deps.sh. The real object store of the tests is Ceph's
// radosgw (testing/rgw.h); this one is the quick second.
//
// What it is like (docs/s3.md): it honours `If-None-Match: *` (atomically:
// moto_s3.py runs one change at a time) and lists and aborts multipart
// uploads, but does not check signatures. Options() still turns conditional
// writes off, so that the tests on s3:// roots take the HEAD-then-PUT path
// the backend declares not atomic (radosgw's tests take the atomic one).
//
// Thread-safe: Shared(), NewRoot and the accessors may be called from any
// thread; ExportEnvironment, which calls setenv, before other threads start.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "ckpt/storage.h"

namespace ckpt::testing {

class MotoS3 {
 public:
  // Starts a server holding `bucket` (empty).
  static Result<std::unique_ptr<MotoS3>> Start(std::string bucket);
  // One server for the whole process, started on first use and stopped at
  // exit; every call after a failed start returns that failure.
  static Result<MotoS3*> Shared();

  ~MotoS3();
  MotoS3(const MotoS3&) = delete;
  MotoS3& operator=(const MotoS3&) = delete;

  const std::string& endpoint() const { return endpoint_; }  // http://IP:PORT
  const std::string& bucket() const { return bucket_; }

  // Options that reach this server: its endpoint, path-style addressing,
  // any credentials, and conditional writes off (see above).
  S3Options Options() const;
  StorageOptions MakeStorageOptions() const {
    StorageOptions options;
    options.s3 = Options();
    return options;
  }
  // A root no other caller of this process got: s3://BUCKET/NAME-PID-N.
  std::string NewRoot(std::string_view name);
  // Exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  // AWS_REGION, CKPT_S3_ADDRESSING_STYLE and CKPT_S3_CONDITIONAL_WRITES into
  // this process's environment, for the child processes it starts.
  void ExportEnvironment() const;

 private:
  MotoS3() = default;

  pid_t pid_ = -1;
  std::string dir_;
  std::string endpoint_;
  std::string bucket_;
};

}  // namespace ckpt::testing
