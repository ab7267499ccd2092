// A real S3 server for the S3 tests and the S3 benchmark: s3rver (an npm
// package that scripts/install-deps.sh installs into .deps/npm), started on
// a free port of 127.0.0.1 with a fresh temporary directory and one bucket,
// and killed when done. Nothing is downloaded here: where s3rver is not
// installed, Start fails and says to run scripts/install-deps.sh.
//
// What s3rver lacks, and what follows (docs/s3.md): it ignores
// `If-None-Match`, so Options() turns conditional writes off and the commit
// takes the non-atomic path the backend then declares; it cannot list or
// abort multipart uploads (HTTP 501 / 405); it checks the access key id
// (S3RVER) but not the signature.
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

class S3rver {
 public:
  // Starts a server holding `bucket` (empty).
  static Result<std::unique_ptr<S3rver>> Start(std::string bucket);
  // One server for the whole process, started on first use and stopped at
  // exit; every call after a failed start returns that failure.
  static Result<S3rver*> Shared();

  ~S3rver();
  S3rver(const S3rver&) = delete;
  S3rver& operator=(const S3rver&) = delete;

  const std::string& endpoint() const { return endpoint_; }  // http://IP:PORT
  const std::string& bucket() const { return bucket_; }

  // Options that reach this server: its endpoint, path-style addressing,
  // its credentials, and conditional writes off (s3rver ignores them).
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
  S3rver() = default;

  pid_t pid_ = -1;
  std::string dir_;
  std::string endpoint_;
  std::string bucket_;
};

}  // namespace ckpt::testing
