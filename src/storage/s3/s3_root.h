// What every handle on one s3:// root shares (s3_storage.cc, the facade;
// s3_multipart.cc, the uploads; s3_listing.cc, the listings): the client,
// the mapping of keys to the bucket's object keys, and the mapping of S3's
// answers to ckpt's errors, so each request sender says the same in the
// same words. Internal to the backend.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/status.h"
#include "storage/s3/s3_client.h"
#include "util/names.h"

namespace ckpt::s3 {

inline bool Ok2xx(long status) { return status >= 200 && status < 300; }

inline std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Writables keep the root alive, so they stay usable after the Storage that
// made them is gone.
struct Root {
  std::unique_ptr<S3Client> client;
  const S3Config& config() const { return client->config(); }

  std::string FullKey(std::string_view key) const {
    return config().prefix + std::string(key);
  }
  // "put \"k\" in s3://bucket/prefix"
  std::string Where(std::string_view op, std::string_view key) const {
    return std::string(op) + " " + Quote(key) + " in " + config().url;
  }

  // A valid key whose object key fits S3's limit.
  Status CheckKey(std::string_view op, std::string_view key) const;

  // The error for an unexpected response: the operation and key, the HTTP
  // status and S3's code and message, the bucket and the full object key.
  Status HttpError(std::string_view where, std::string_view full_key,
                   const S3Response& r) const;

  Result<S3Response> Send(const S3Request& request, std::string_view where) {
    return client->Send(request, where);
  }
};

// Runs fn(i) for i in [0, n) on up to `threads` threads; returns the first
// error (and stops handing out work after it).
Status ParallelFor(size_t n, int threads,
                   const std::function<Status(size_t)>& fn);

}  // namespace ckpt::s3
