// One test server for the whole process (moto, radosgw): started on first
// use, stopped at exit, and after a failed start every later call returns
// that failure at once instead of trying again; and what the S3 test
// servers share beside it: fresh roots, and the environment that reaches
// a server.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>

#include "ckpt/status.h"
#include "ckpt/storage.h"
#include "util/mutex.h"

namespace ckpt::testing {

// Server::Start(std::string bucket) -> Result<std::unique_ptr<Server>>.
template <typename Server>
Result<Server*> SharedServer() {
  static Mutex mu;
  static std::unique_ptr<Server> server GUARDED_BY(mu);
  static Status failed GUARDED_BY(mu);
  MutexLock lock(&mu);
  if (server) return server.get();
  if (!failed.ok()) return failed;
  Result<std::unique_ptr<Server>> started = Server::Start("ckpt-test");
  if (!started.ok()) {
    failed = started.status();
    return failed;
  }
  server = std::move(started).value();
  return server.get();
}

// A root no other caller of this process got: s3://BUCKET/NAME-PID-N.
inline std::string UniqueS3Root(std::string_view bucket,
                                std::string_view name) {
  static std::atomic<int> counter{0};
  return "s3://" + std::string(bucket) + "/" + std::string(name) + "-" +
         std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

// Exports AWS_ENDPOINT_URL, the keys, AWS_REGION and
// CKPT_S3_ADDRESSING_STYLE of `o` (path-style) into this process's
// environment, for the programs it starts; CKPT_S3_CONDITIONAL_WRITES is
// "0" where `o` has them off, and cleared where on.
inline void ExportS3Environment(const S3Options& o) {
  ::setenv("AWS_ENDPOINT_URL", o.endpoint.c_str(), 1);
  ::setenv("AWS_ACCESS_KEY_ID", o.access_key_id.c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", o.secret_access_key.c_str(), 1);
  ::setenv("AWS_REGION", o.region.c_str(), 1);
  ::unsetenv("AWS_SESSION_TOKEN");
  ::setenv("CKPT_S3_ADDRESSING_STYLE", "path", 1);
  if (o.conditional_writes.value_or(true)) {
    ::unsetenv("CKPT_S3_CONDITIONAL_WRITES");
  } else {
    ::setenv("CKPT_S3_CONDITIONAL_WRITES", "0", 1);
  }
}

}  // namespace ckpt::testing
