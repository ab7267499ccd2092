// The checks and error mapping every s3:// request sender shares, and the
// small thread pool that uploads parts and reads ranges side by side.
#include "storage/s3/s3_root.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace ckpt::s3 {

Status Root::CheckKey(std::string_view op, std::string_view key) const {
  CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), Where(op, key));
  if (config().prefix.size() + key.size() > kMaxObjectKey) {
    return InvalidArgumentError(
        Where(op, key) + ": the object key is " +
        std::to_string(config().prefix.size() + key.size()) +
        " bytes, beyond S3's limit of 1024");
  }
  return Status();
}

Status Root::HttpError(std::string_view where, std::string_view full_key,
                       const S3Response& r) const {
  const long status = r.http.status;
  std::string message =
      std::string(where) + ": " + DescribeHttpError(r.http) + " [bucket " +
      Quote(config().bucket) +
      (full_key.empty() ? std::string() : ", object " + Quote(full_key)) + "]";
  if (r.attempts > 1) {
    message += " after " + std::to_string(r.attempts) + " attempts";
  }
  if (status == 404) return NotFoundError(message);
  if (status == 412) return AlreadyExistsError(message);
  if (status == 416) return DataLossError(message);
  if (status >= 500 || status == 429 || status == 409) {
    return UnavailableError(message);
  }
  return IOError(message);
}

Status ParallelFor(size_t n, int threads,
                   const std::function<Status(size_t)>& fn) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first;
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (size_t i; !failed.load() && (i = next.fetch_add(1)) < n;) {
      Status s = fn(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        failed.store(true);
      }
    }
  };
  const size_t count = std::min<size_t>(n, static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return first;
}

}  // namespace ckpt::s3
