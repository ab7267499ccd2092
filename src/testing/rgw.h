// A real object store for the S3 tests: Ceph's RADOS Gateway (radosgw) on
// a one-node Ceph cluster of this machine — one monitor, one OSD keeping its
// objects in memory (memstore), one radosgw on a free port of 127.0.0.1 —
// with a test user of fixed keys and one bucket. Everything (ceph.conf,
// monitor store, logs, sockets, pid files) lives in one temporary directory;
// the daemons are killed and the directory removed when the object goes,
// and each daemon asks the kernel for SIGKILL when the thread that started
// it ends (so start it from the main thread: Shared() in a test's body or
// fixture is), so a crashed test leaves nothing running; the next start
// removes the directory a killed test process left.
//
// Nothing is downloaded here: the Debian packages ceph-mon, ceph-osd,
// radosgw and ceph-common (scripts/install-deps.sh installs them) must be
// installed; where they are not, Start fails and says so.
//
// Unlike moto (testing/moto_s3.h), radosgw checks SigV4 signatures and is
// a real store: it honours `If-None-Match: *` on PUT and on multipart
// completion, lists and aborts multipart uploads, and stores objects
// atomically; docs/s3.md
// compares the two.
//
// Thread-safe: Shared(), NewRoot and the accessors may be called from any
// thread; ExportEnvironment, which calls setenv, before other threads start.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/storage.h"

namespace ckpt::testing {

class Rgw {
 public:
  // The test user's keys.
  static constexpr const char* kAccessKeyId = "CKPTTESTACCESSKEY";
  static constexpr const char* kSecretAccessKey = "ckpt-test-secret-key";

  // Starts a cluster and radosgw holding `bucket` (empty).
  static Result<std::unique_ptr<Rgw>> Start(std::string bucket);
  // One server for the whole process, started on first use and stopped at
  // exit; every call after a failed start returns that failure.
  static Result<Rgw*> Shared();

  ~Rgw();
  Rgw(const Rgw&) = delete;
  Rgw& operator=(const Rgw&) = delete;

  const std::string& endpoint() const { return endpoint_; }  // http://IP:PORT
  const std::string& bucket() const { return bucket_; }
  const std::string& dir() const { return dir_; }
  // The daemons' process ids: ceph-mon, ceph-osd, radosgw.
  std::vector<pid_t> pids() const;

  // Options that reach this server: its endpoint, path-style addressing,
  // the test user's credentials; conditional writes on (the default, and
  // radosgw honours them).
  S3Options Options() const;
  StorageOptions MakeStorageOptions() const {
    StorageOptions options;
    options.s3 = Options();
    return options;
  }
  // A root no other caller of this process got: s3://BUCKET/NAME-PID-N.
  std::string NewRoot(std::string_view name);
  // Exports AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  // AWS_REGION and CKPT_S3_ADDRESSING_STYLE into this process's environment
  // and clears CKPT_S3_CONDITIONAL_WRITES, for the programs it starts.
  void ExportEnvironment() const;

 private:
  Rgw() = default;
  Status Boot();
  Status Spawn(const std::vector<std::string>& args, const std::string& log,
               pid_t* pid);
  Status RunStep(const std::vector<std::string>& args, const std::string& log,
                 int timeout_s);
  Status CreateBucket();
  std::string Logs() const;

  pid_t mon_ = -1;
  pid_t osd_ = -1;
  pid_t rgw_ = -1;
  std::string dir_;
  std::string conf_;
  std::string endpoint_;
  std::string bucket_;
};

}  // namespace ckpt::testing
