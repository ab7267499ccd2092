// One test server for the whole process (s3rver, radosgw): started on first
// use, stopped at exit, and after a failed start every later call returns
// that failure at once instead of trying again.
#pragma once

#include <memory>
#include <string>

#include "ckpt/status.h"
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

}  // namespace ckpt::testing
