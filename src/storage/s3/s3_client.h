// The S3 protocol below the Storage interface: where a root's requests go
// (S3Config, resolved from the URL, the options and the environment), and
// sending one request — signed, timed out, retried with backoff on 5xx
// (but 501 and 505), 429 and connection failures, never on another 4xx
// (S3Client).
//
// Thread safety: S3Client::Send may be called from many threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/storage.h"
#include "storage/s3/http.h"
#include "storage/s3/sigv4.h"

namespace ckpt::s3 {

// S3 refuses parts below 5 MiB (but the last), and more than 10,000 parts.
inline constexpr uint64_t kMinPartSize = uint64_t{5} << 20;
inline constexpr uint64_t kMaxPartSize = uint64_t{5} << 30;
inline constexpr uint64_t kMaxParts = 10000;
// S3's longest object key, in bytes.
inline constexpr size_t kMaxObjectKey = 1024;

// An s3:// root, resolved: what the client and the backend act on.
// ResolveS3Config is the one place that makes one, from the URL, the public
// S3Options (include/ckpt/storage.h documents each option) and the
// environment.
struct S3Config {
  std::string url;     // the root URL, as given
  std::string bucket;  // validated
  std::string prefix;  // "" or "run42/": what every key is under
  // The options as they apply: what they leave to the environment or a
  // default is filled in (endpoint, region, the credentials, which may stay
  // empty: unsigned requests), addressing is kPath or kVirtualHosted (never
  // kAuto), conditional_writes is set, and the limits are validated.
  S3Options options;
  // options.endpoint taken apart: "http" or "https", and "host[:port]".
  std::string scheme;
  std::string host;
  // Keys per ListObjectsV2 / ListMultipartUploads page (tests make it small
  // to exercise continuation).
  int list_page_size = 1000;
  // A create-if-absent Put goes as one PUT up to this size (S3's largest
  // PUT), above multipart_threshold too: radosgw honours If-None-Match on a
  // PUT but ignores it on CompleteMultipartUpload and replaces the object.
  // (Tests make it small to reach the conditional completion.)
  uint64_t conditional_put_limit = kMaxPartSize;

  bool path_style() const {
    return options.addressing == S3Options::Addressing::kPath;
  }
  bool conditional_writes() const {
    return options.conditional_writes.value_or(true);
  }
};

// Validates an S3 bucket name (3-63 characters of a-z 0-9 . -, starting and
// ending with a letter or digit, no "..", not an IP address). `url` is quoted
// in the error.
Status ValidateBucketName(std::string_view bucket, std::string_view url);

using GetEnv = std::function<const char*(const char*)>;

// Resolves `s3://bucket[/prefix]` and `options`, reading the environment
// through `getenv` for what the options leave empty. Errors are
// InvalidArgument and quote the URL.
Result<S3Config> ResolveS3Config(const ParsedUrl& url, const S3Options& options,
                                 const GetEnv& getenv);

// One S3 request. `key` is the object's full key in the bucket (the root's
// prefix included), or empty for a request on the bucket.
struct S3Request {
  std::string method;
  std::string key;
  std::vector<std::pair<std::string, std::string>> query;  // decoded
  std::vector<std::pair<std::string, std::string>> headers;
  std::span<const std::byte> body;
  std::span<std::byte> into;  // as HttpRequest::into
  uint64_t skip = 0;
};

struct S3Response {
  HttpResponse http;
  int attempts = 0;
  // An earlier attempt may have taken effect on the store (it timed out or
  // got a 5xx), so a conditional request's refusal may be our own doing.
  bool ambiguous = false;
};

class S3Client {
 public:
  S3Client(S3Config config, std::shared_ptr<HttpTransport> transport);

  const S3Config& config() const { return config_; }

  // Sends `request`, retrying as the config says. A response of any status
  // is returned; an error only when no response came after every attempt
  // (Unavailable, with the last reason). `what` ("put \"k\" in s3://b/p")
  // prefixes that error.
  Result<S3Response> Send(const S3Request& request, std::string_view what);

  // Requests sent so far (attempts included).
  uint64_t requests() const { return requests_.load(); }

 private:
  std::string Url(const S3Request& request) const;

  const S3Config config_;
  const SigV4Credentials credentials_;  // no access key id: unsigned
  const std::shared_ptr<HttpTransport> transport_;
  std::atomic<uint64_t> requests_{0};
};

// " (HTTP 403 AccessDenied: Access Denied)" style details of an S3 error
// response: its status, and the Code and Message of its XML body if any.
std::string DescribeHttpError(const HttpResponse& response);

// The text of the first <tag>...</tag> in `xml`, entities decoded; empty if
// there is none.
std::string XmlValue(std::string_view xml, std::string_view tag);
// The raw contents of every <tag>...</tag> in `xml`, in order.
std::vector<std::string_view> XmlElements(std::string_view xml,
                                          std::string_view tag);

// Milliseconds since 1970 from "2024-05-01T12:34:56.789Z" (S3's XML) or
// "Wed, 01 May 2024 12:34:56 GMT" (HTTP headers); 0 if unparsable.
int64_t ParseS3Time(std::string_view s);

}  // namespace ckpt::s3
