// One HTTP exchange at a time, behind an interface: the S3 backend speaks
// through an HttpTransport, so a test can wrap the real one (libcurl) to
// inject failures, count requests or answer what the test server lacks.
//
// Thread safety: Send may be called from many threads at once.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/status.h"

namespace ckpt::s3 {

struct HttpRequest {
  std::string method;  // GET, HEAD, PUT, POST, DELETE
  std::string url;     // complete and already percent-encoded
  std::vector<std::pair<std::string, std::string>> headers;
  std::span<const std::byte> body;  // borrowed; must outlive Send
  // When not empty, a 2xx response body is written here (after dropping its
  // first `skip` bytes) instead of into HttpResponse::body; a body longer
  // than skip + into.size() sets HttpResponse::overflow.
  std::span<std::byte> into;
  uint64_t skip = 0;
  int64_t timeout_ms = 0;  // the whole exchange; 0: none
  int64_t connect_timeout_ms = 0;
};

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  uint64_t received = 0;  // bytes written into HttpRequest::into
  bool overflow = false;
  // The body is not all there: the connection ended before the length the
  // headers announced, or the headers announced a range past the object's
  // end (ContentRangePastEnd), which no body can make good.
  bool truncated = false;
};

// Whether `headers` hold a Content-Range "bytes FIRST-LAST/SIZE" that reaches
// past SIZE (some servers answer a range on an empty object that way).
bool ContentRangePastEnd(const std::map<std::string, std::string>& headers);

class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // A response of any status, or Unavailable when no response came (refused
  // connection, timeout, reset), with the reason.
  virtual Result<HttpResponse> Send(const HttpRequest& request) = 0;
};

// The real transport: libcurl, with connections kept alive and reused.
std::shared_ptr<HttpTransport> NewCurlTransport();

}  // namespace ckpt::s3
