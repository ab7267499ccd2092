#include "storage/s3/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "util/mutex.h"

namespace ckpt::s3 {
namespace {

// Idle handles kept for reuse: each holds its open connections.
constexpr size_t kMaxIdleHandles = 64;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Exchange {
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  CURL* curl = nullptr;
  size_t sent = 0;    // bytes of the body handed to curl
  uint64_t seen = 0;  // body bytes of a 2xx response seen so far
};

size_t ReadBody(char* buffer, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const std::span<const std::byte> body = x->request->body;
  const size_t len = std::min(size * n, body.size() - x->sent);
  std::memcpy(buffer, body.data() + x->sent, len);
  x->sent += len;
  return len;
}

size_t WriteBody(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
  const HttpRequest& req = *x->request;
  if (req.into.empty() || status < 200 || status >= 300) {
    x->response->body.append(data, len);
    return len;
  }
  // Bytes [seen, seen + len) of the body; keep those in [skip, skip + into).
  const uint64_t begin = x->seen, end = x->seen + len;
  x->seen = end;
  const uint64_t lo = std::max(begin, req.skip);
  const uint64_t hi = std::min<uint64_t>(end, req.skip + req.into.size());
  if (lo < hi) {
    std::memcpy(req.into.data() + (lo - req.skip), data + (lo - begin),
                hi - lo);
    x->response->received += hi - lo;
  }
  if (end > req.skip + req.into.size()) {
    x->response->overflow = true;
    return 0;  // stops the transfer
  }
  return len;
}

size_t WriteHeader(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  const size_t len = size * n;
  std::string_view line(data, len);
  if (line.starts_with("HTTP/")) {
    x->response->headers.clear();  // a new response (after 100 Continue)
    return len;
  }
  if (line == "\r\n" || line == "\n") {
    long status = 0;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status == 206 && ContentRangePastEnd(x->response->headers)) {
      // Do not wait for a body that cannot be right.
      x->response->truncated = true;
      return 0;
    }
    return len;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return len;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(c));
  std::string_view value = line.substr(colon + 1);
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
    value.remove_prefix(1);
  }
  while (!value.empty() && (value.back() == '\r' || value.back() == '\n' ||
                            value.back() == ' ')) {
    value.remove_suffix(1);
  }
  x->response->headers[name] = std::string(value);
  return len;
}

class CurlTransport : public HttpTransport {
 public:
  CurlTransport() { GlobalInit(); }
  ~CurlTransport() override {
    for (CURL* c : idle_) curl_easy_cleanup(c);
  }

  Result<HttpResponse> Send(const HttpRequest& request) override {
    CURL* curl = Acquire();
    if (curl == nullptr) return UnavailableError("curl_easy_init failed");
    HttpResponse response;
    Exchange x{&request, &response, curl};
    curl_slist* headers = nullptr;
    for (const auto& [name, value] : request.headers) {
      headers = curl_slist_append(headers, (name + ": " + value).c_str());
    }
    // No "Expect: 100-continue" round trip, and no body encoding we did not
    // ask for.
    headers = curl_slist_append(headers, "Expect:");
    headers = curl_slist_append(headers, "Accept:");

    curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, WriteHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(request.timeout_ms));
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(request.connect_timeout_ms));
    if (request.method == "HEAD") {
      curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    } else if (request.method == "PUT") {
      curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
      curl_easy_setopt(curl, CURLOPT_READDATA, &x);
      curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
    } else if (request.method == "POST") {
      curl_easy_setopt(curl, CURLOPT_POST, 1L);
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                       static_cast<curl_off_t>(request.body.size()));
    } else if (request.method != "GET") {
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    char error[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
    const CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
    curl_slist_free_all(headers);
    const bool overflow = rc == CURLE_WRITE_ERROR && response.overflow;
    if (rc == CURLE_PARTIAL_FILE && response.status != 0) {
      response.truncated = true;
    }
    if (rc != CURLE_OK && !overflow && !response.truncated) {
      curl_easy_cleanup(curl);  // its connection may be in any state
      return UnavailableError(
          std::string(curl_easy_strerror(rc)) +
          (error[0] != '\0' ? std::string(" (") + error + ")" : ""));
    }
    Release(curl);
    return response;
  }

 private:
  CURL* Acquire() {
    {
      MutexLock lock(&mu_);
      if (!idle_.empty()) {
        CURL* c = idle_.back();
        idle_.pop_back();
        curl_easy_reset(c);  // keeps the connection cache
        return c;
      }
    }
    return curl_easy_init();
  }

  void Release(CURL* curl) {
    MutexLock lock(&mu_);
    if (idle_.size() < kMaxIdleHandles) {
      idle_.push_back(curl);
    } else {
      curl_easy_cleanup(curl);
    }
  }

  Mutex mu_;
  std::vector<CURL*> idle_ GUARDED_BY(mu_);
};

}  // namespace

bool ContentRangePastEnd(const std::map<std::string, std::string>& headers) {
  auto it = headers.find("content-range");
  if (it == headers.end()) return false;
  unsigned long long first = 0, last = 0, size = 0;
  return std::sscanf(it->second.c_str(), "bytes %llu-%llu/%llu", &first, &last,
                     &size) == 3 &&
         last >= size;
}

std::shared_ptr<HttpTransport> NewCurlTransport() {
  return std::make_shared<CurlTransport>();
}

}  // namespace ckpt::s3
