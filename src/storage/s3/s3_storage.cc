// The s3:// backend. The requests behind each Storage call:
//
//   Put (at most multipart_threshold bytes)   PUT
//   Put (more), NewWritable (outgrowing a part):
//     1. POST ?uploads                        -> upload id
//     2. PUT ?partNumber=N&uploadId=ID        parts, max_concurrency at once
//     3. POST ?uploadId=ID with the part list -> the object appears, whole
//     On any failure before 3 succeeds: DELETE ?uploadId=ID (abort), so no
//     part lingers; nothing was ever visible under the key.
//   Put(kCreateIfAbsent)    the PUT (or step 3) carries If-None-Match: *
//                           (412 -> AlreadyExists); without conditional
//                           writes a HEAD first (not atomic, and declared so)
//   ReadRange               GET with Range (large reads: several at once)
//   ReadAll                 GET
//   Stat                    HEAD
//   List                    GET ?list-type=2, following continuation tokens
//   Delete                  HEAD (NotFound if absent: S3's DELETE succeeds
//                           on a missing key), then DELETE
//   AbortIncompleteWrites   GET ?uploads, then DELETE ?uploadId= for each
//                           upload the caller finds dead
//
// A conditional PUT retried after an attempt that may have reached the store
// (a timeout, a 5xx) can be refused because of that attempt itself; the
// object's ETag (the MD5 of what we sent) tells whether it is ours.
#include "storage/s3/s3_storage.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "util/log.h"
#include "util/names.h"

namespace ckpt {
namespace {

using s3::DescribeHttpError;
using s3::S3Client;
using s3::S3Request;
using s3::S3Response;
using s3::XmlElements;
using s3::XmlValue;

// A large read is split into ranged GETs of at least this many bytes.
constexpr uint64_t kMinParallelReadPiece = uint64_t{4} << 20;

bool Ok2xx(long status) { return status >= 200 && status < 300; }

// A 404 about the object (not about the bucket, whose error names itself).
bool NoSuchKey(const S3Response& r) {
  return r.http.status == 404 &&
         XmlValue(r.http.body, "Code") != "NoSuchBucket";
}

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// Everything a root's handles and writables share; writables keep it alive.
struct Root {
  std::unique_ptr<S3Client> client;
  const s3::S3Config& config() const { return client->config(); }

  std::string FullKey(std::string_view key) const {
    return config().prefix + std::string(key);
  }
  // "put \"k\" in s3://bucket/prefix"
  std::string Where(std::string_view op, std::string_view key) const {
    return std::string(op) + " " + Quote(key) + " in " + config().url;
  }

  Status CheckKey(std::string_view op, std::string_view key) const {
    CKPT_RETURN_IF_ERROR_CTX(ValidateKey(key), Where(op, key));
    if (config().prefix.size() + key.size() > s3::kMaxObjectKey) {
      return InvalidArgumentError(
          Where(op, key) + ": the object key is " +
          std::to_string(config().prefix.size() + key.size()) +
          " bytes, beyond S3's limit of 1024");
    }
    return Status();
  }

  // The error for an unexpected response: the operation and key, the HTTP
  // status and S3's code and message, the bucket and the full object key.
  Status HttpError(std::string_view where, std::string_view full_key,
                   const S3Response& r) const {
    const long status = r.http.status;
    std::string message =
        std::string(where) + ": " + DescribeHttpError(r.http) + " [bucket " +
        Quote(config().bucket) +
        (full_key.empty() ? std::string() : ", object " + Quote(full_key)) +
        "]";
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

  Result<S3Response> Send(const S3Request& request, std::string_view where) {
    return client->Send(request, where);
  }

  // --- Multipart uploads (steps 1-3 at the top of this file).

  Result<std::string> StartUpload(std::string_view where,
                                  const std::string& full_key) {
    S3Request req{"POST", full_key, {{"uploads", ""}}};
    CKPT_ASSIGN_OR_RETURN(S3Response r, Send(req, where));
    if (!Ok2xx(r.http.status)) {
      return HttpError(std::string(where) + ": start multipart upload",
                       full_key, r);
    }
    std::string id = XmlValue(r.http.body, "UploadId");
    if (id.empty()) {
      return IOError(std::string(where) +
                     ": the store's answer to starting a multipart upload "
                     "has no UploadId");
    }
    return id;
  }

  // Returns the part's ETag.
  Result<std::string> UploadPart(std::string_view where,
                                 const std::string& full_key,
                                 const std::string& upload_id, int number,
                                 std::span<const std::byte> data) {
    S3Request req{
        "PUT",
        full_key,
        {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}},
        {},
        data};
    const std::string what =
        std::string(where) + ": upload part " + std::to_string(number);
    CKPT_ASSIGN_OR_RETURN(S3Response r, Send(req, what));
    if (!Ok2xx(r.http.status)) return HttpError(what, full_key, r);
    auto etag = r.http.headers.find("etag");
    if (etag == r.http.headers.end() || etag->second.empty()) {
      return IOError(what + ": the store returned no ETag");
    }
    return etag->second;
  }

  Status CompleteUpload(std::string_view where, const std::string& full_key,
                        const std::string& upload_id,
                        const std::vector<std::string>& etags,
                        bool if_none_match) {
    std::string xml = "<CompleteMultipartUpload>";
    for (size_t i = 0; i < etags.size(); ++i) {
      xml += "<Part><PartNumber>" + std::to_string(i + 1) +
             "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
    }
    xml += "</CompleteMultipartUpload>";
    S3Request req{"POST", full_key, {{"uploadId", upload_id}}};
    req.headers.emplace_back("Content-Type", "application/xml");
    if (if_none_match) req.headers.emplace_back("If-None-Match", "*");
    req.body = AsBytes(xml);
    const std::string what = std::string(where) + ": complete multipart upload";
    CKPT_ASSIGN_OR_RETURN(S3Response r, Send(req, what));
    // A 200 may still carry an error: S3 reports failures that happen after
    // it started answering in the body.
    if (Ok2xx(r.http.status) &&
        r.http.body.find("<Error>") == std::string::npos) {
      return Status();
    }
    if (r.http.status == 412 && if_none_match) {
      return AlreadyExistsError(std::string(where) + ": object already exists");
    }
    if (Ok2xx(r.http.status)) {
      return UnavailableError(what + ": " + XmlValue(r.http.body, "Code") +
                              ": " + XmlValue(r.http.body, "Message"));
    }
    return HttpError(what, full_key, r);
  }

  // Best effort: a failed abort leaves parts that gc (AbortIncompleteWrites)
  // or a lifecycle rule removes later.
  void AbortUpload(std::string_view where, const std::string& full_key,
                   const std::string& upload_id) {
    S3Request req{"DELETE", full_key, {{"uploadId", upload_id}}};
    const std::string what =
        std::string(where) + ": abort multipart upload " + upload_id;
    Result<S3Response> r = Send(req, what);
    if (r.ok() && (Ok2xx(r->http.status) || r->http.status == 404)) return;
    LogWarning(
        (r.ok() ? HttpError(what, full_key, *r) : r.status()).ToString() +
        " (its parts stay until gc or a lifecycle rule aborts it)");
  }
};

// Runs fn(i) for i in [0, n) on up to `threads` threads; returns the first
// error (and stops handing out work after it).
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

class S3Writable : public WritableObject {
 public:
  S3Writable(std::shared_ptr<Root> root, std::string key)
      : root_(std::move(root)),
        key_(std::move(key)),
        full_key_(root_->FullKey(key_)),
        where_(root_->Where("write", key_)) {}

  ~S3Writable() override {
    if (!closed_) Discard();
  }

  Status Append(std::span<const std::byte> data) override {
    if (closed_) {
      return FailedPreconditionError(where_ + ": append after Close");
    }
    CKPT_RETURN_IF_ERROR(status_);
    const uint64_t part = root_->config().options.part_size;
    while (!data.empty()) {
      if (current_.size() == part) {
        // Full, and more follows: it is not the last part.
        if (Status s = ShipCurrent(); !s.ok()) return Fail(s);
      }
      const size_t n = std::min<uint64_t>(data.size(), part - current_.size());
      if (current_.capacity() < current_.size() + n) {
        // Grow as a vector would, but never past one part.
        current_.reserve(std::min<uint64_t>(
            part, std::max(2 * current_.capacity(), current_.size() + n)));
      }
      current_.insert(current_.end(), data.begin(), data.begin() + n);
      data = data.subspan(n);
      size_ += n;
    }
    return Status();
  }

  Status Close() override {
    if (closed_) return FailedPreconditionError(where_ + ": Close twice");
    closed_ = true;
    if (!status_.ok()) {
      Discard();
      return status_;
    }
    if (upload_id_.empty()) {
      S3Request req{"PUT", full_key_, {}, {}, current_};
      CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send(req, where_));
      if (!Ok2xx(r.http.status)) return root_->HttpError(where_, full_key_, r);
      return Status();
    }
    Status s = ShipCurrent();
    if (s.ok()) s = WaitAll();
    if (s.ok()) {
      s = root_->CompleteUpload(where_, full_key_, upload_id_, etags_, false);
    }
    if (!s.ok()) {
      Discard();
      return s;
    }
    upload_id_.clear();
    return Status();
  }

  uint64_t size() const override { return size_; }

 private:
  struct InFlight {
    int number;
    std::vector<std::byte> buffer;
    std::future<Result<std::string>> etag;
  };

  Status Fail(Status s) {
    status_ = s;
    return s;
  }

  // Hands current_ to a part upload of its own and takes a free buffer,
  // waiting for the oldest upload when max_concurrency are in flight.
  Status ShipCurrent() {
    if (upload_id_.empty()) {
      CKPT_ASSIGN_OR_RETURN(upload_id_, root_->StartUpload(where_, full_key_));
    }
    if (etags_.size() >= s3::kMaxParts) {
      return InvalidArgumentError(
          where_ + ": the object outgrows S3's 10,000 parts of " +
          std::to_string(root_->config().options.part_size) +
          " bytes; raise part_size");
    }
    while (in_flight_.size() >=
           static_cast<size_t>(root_->config().options.max_concurrency)) {
      CKPT_RETURN_IF_ERROR(WaitOldest());
    }
    etags_.emplace_back();
    in_flight_.push_back(
        InFlight{static_cast<int>(etags_.size()), std::move(current_), {}});
    InFlight& f = in_flight_.back();
    f.etag = std::async(
        std::launch::async,
        [root = root_, where = where_, key = full_key_, id = upload_id_,
         number = f.number, data = std::span<const std::byte>(f.buffer)] {
          return root->UploadPart(where, key, id, number, data);
        });
    current_ = std::move(free_);
    current_.clear();
    free_ = {};
    return Status();
  }

  Status WaitOldest() {
    InFlight f = std::move(in_flight_.front());
    in_flight_.pop_front();
    Result<std::string> etag = f.etag.get();
    // Keep one spare buffer: the next part reuses its pages.
    if (free_.capacity() < f.buffer.capacity()) free_ = std::move(f.buffer);
    if (!etag.ok()) return etag.status();
    etags_[f.number - 1] = std::move(etag).value();
    return Status();
  }

  Status WaitAll() {
    Status first;
    while (!in_flight_.empty()) {
      Status s = WaitOldest();
      if (first.ok()) first = s;
    }
    return first;
  }

  // Waits for the parts in flight and aborts the upload: nothing is left.
  void Discard() {
    WaitAll().IgnoreError();
    if (!upload_id_.empty()) {
      root_->AbortUpload(where_, full_key_, upload_id_);
      upload_id_.clear();
    }
    current_ = {};
    free_ = {};
  }

  const std::shared_ptr<Root> root_;
  const std::string key_;
  const std::string full_key_;
  const std::string where_;
  std::vector<std::byte> current_;  // the part being filled
  std::vector<std::byte> free_;     // a spare buffer from a finished part
  std::deque<InFlight> in_flight_;
  std::vector<std::string> etags_;  // of parts 1..N
  std::string upload_id_;           // empty until the first part ships
  uint64_t size_ = 0;
  bool closed_ = false;
  Status status_;  // the first failure; every later call returns it
};

class S3Storage : public Storage {
 public:
  explicit S3Storage(std::shared_ptr<Root> root) : root_(std::move(root)) {}

  const std::string& url() const override { return config().url; }

  StorageCapabilities capabilities() const override {
    StorageCapabilities caps;
    caps.atomic_create_if_absent = config().conditional_writes();
    caps.range_reads = true;
    return caps;
  }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_RETURN_IF_ERROR(root_->CheckKey("write", key));
    return std::unique_ptr<WritableObject>(
        new S3Writable(root_, std::string(key)));
  }

  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    CKPT_RETURN_IF_ERROR(root_->CheckKey("put", key));
    const std::string where = root_->Where("put", key);
    const std::string full = root_->FullKey(key);
    const bool create = mode == PutMode::kCreateIfAbsent;
    const bool conditional = create && config().conditional_writes();
    if (create && !conditional) {
      // Not atomic, and the capabilities say so.
      Result<ObjectInfo> existing = Head(where, key, full);
      if (existing.ok()) {
        return AlreadyExistsError(where + ": object already exists");
      }
      if (existing.status().code() != ErrorCode::kNotFound) {
        return existing.status();
      }
    }
    if (data.size() > config().options.multipart_threshold) {
      return PutMultipart(where, full, data, conditional);
    }
    S3Request req{"PUT", full, {}, {}, data};
    if (conditional) req.headers.emplace_back("If-None-Match", "*");
    CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send(req, where));
    if (Ok2xx(r.http.status)) return Status();
    if (r.http.status == 412 && conditional) {
      if (r.ambiguous && HoldsOurBytes(where, key, full, data)) {
        return Status();
      }
      return AlreadyExistsError(where + ": object already exists");
    }
    return root_->HttpError(where, full, r);
  }

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    CKPT_RETURN_IF_ERROR(root_->CheckKey("read", key));
    const std::string where = root_->Where("read", key);
    const std::string full = root_->FullKey(key);
    if (out.empty() || offset > UINT64_MAX - out.size()) {
      // Nothing to GET (or no such range): the size alone answers.
      CKPT_ASSIGN_OR_RETURN(ObjectInfo info, Head(where, key, full));
      if (out.empty() && offset <= info.size) return Status();
      return PastTheEnd(where, offset, out.size(), info.size);
    }
    const int threads = config().options.max_concurrency;
    if (threads > 1 && out.size() >= 2 * kMinParallelReadPiece) {
      const uint64_t piece = std::max<uint64_t>(
          kMinParallelReadPiece, (out.size() + threads - 1) / threads);
      const size_t n = (out.size() + piece - 1) / piece;
      return ParallelFor(n, threads, [&](size_t i) {
        const uint64_t begin = i * piece;
        const uint64_t len = std::min<uint64_t>(piece, out.size() - begin);
        return GetRange(where, full, offset, out.size(), offset + begin,
                        out.subspan(begin, len));
      });
    }
    return GetRange(where, full, offset, out.size(), offset, out);
  }

  // One GET, so size and bytes come from one version of the object.
  Result<std::string> ReadAll(std::string_view key) override {
    CKPT_RETURN_IF_ERROR(root_->CheckKey("read", key));
    const std::string where = root_->Where("read", key);
    const std::string full = root_->FullKey(key);
    CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send({"GET", full}, where));
    if (NoSuchKey(r)) return NotFoundError(where + ": no such object");
    if (!Ok2xx(r.http.status)) return root_->HttpError(where, full, r);
    return std::move(r.http.body);
  }

  Result<ObjectInfo> Stat(std::string_view key) override {
    CKPT_RETURN_IF_ERROR(root_->CheckKey("stat", key));
    return Head(root_->Where("stat", key), key, root_->FullKey(key));
  }

  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    CKPT_RETURN_IF_ERROR(CheckPrefix("list", prefix));
    const std::string where = "list " + Quote(prefix) + " in " + url();
    std::vector<ObjectInfo> out;
    std::string token;
    do {
      S3Request req{"GET",
                    "",
                    {{"list-type", "2"},
                     {"prefix", root_->FullKey(prefix)},
                     {"max-keys", std::to_string(config().list_page_size)}}};
      if (!token.empty()) req.query.emplace_back("continuation-token", token);
      CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send(req, where));
      if (!Ok2xx(r.http.status)) return root_->HttpError(where, "", r);
      for (std::string_view c : XmlElements(r.http.body, "Contents")) {
        std::string key = XmlValue(c, "Key");
        if (!key.starts_with(config().prefix)) continue;
        key.erase(0, config().prefix.size());
        // Objects other tools put under the prefix with names that are not
        // keys ("a//b", "../x") are not ours to show.
        if (!ValidateKey(key).ok()) continue;
        out.push_back(
            ObjectInfo{std::move(key),
                       std::strtoull(XmlValue(c, "Size").c_str(), nullptr, 10),
                       s3::ParseS3Time(XmlValue(c, "LastModified"))});
      }
      token = XmlValue(r.http.body, "IsTruncated") == "true"
                  ? XmlValue(r.http.body, "NextContinuationToken")
                  : "";
    } while (!token.empty());
    std::sort(
        out.begin(), out.end(),
        [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  Status Delete(std::string_view key) override {
    CKPT_RETURN_IF_ERROR(root_->CheckKey("delete", key));
    const std::string where = root_->Where("delete", key);
    const std::string full = root_->FullKey(key);
    CKPT_RETURN_IF_ERROR(Head(where, key, full).status());
    CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send({"DELETE", full}, where));
    if (Ok2xx(r.http.status)) return Status();
    return root_->HttpError(where, full, r);
  }

  Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) override {
    CKPT_RETURN_IF_ERROR(CheckPrefix("abort incomplete uploads", prefix));
    const std::string where =
        "abort incomplete uploads under " + Quote(prefix) + " in " + url();
    std::vector<std::string> aborted;
    std::string key_marker, id_marker;
    bool more = true;
    while (more) {
      S3Request req{"GET",
                    "",
                    {{"uploads", ""},
                     {"prefix", root_->FullKey(prefix)},
                     {"max-uploads", std::to_string(config().list_page_size)}}};
      if (!key_marker.empty()) req.query.emplace_back("key-marker", key_marker);
      if (!id_marker.empty()) {
        req.query.emplace_back("upload-id-marker", id_marker);
      }
      CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send(req, where));
      if (r.http.status == 501) {
        static std::once_flag warned;
        std::call_once(warned, [&] {
          LogWarning(where + ": the store cannot list multipart uploads (" +
                     DescribeHttpError(r.http) +
                     "); incomplete uploads of dead attempts are left to a "
                     "lifecycle rule");
        });
        return aborted;
      }
      if (!Ok2xx(r.http.status)) return root_->HttpError(where, "", r);
      for (std::string_view u : XmlElements(r.http.body, "Upload")) {
        const std::string full = XmlValue(u, "Key");
        const std::string id = XmlValue(u, "UploadId");
        if (!full.starts_with(config().prefix) || id.empty()) continue;
        const std::string key = full.substr(config().prefix.size());
        if (!ValidateKey(key).ok()) continue;
        if (!dead(ObjectInfo{key, 0,
                             s3::ParseS3Time(XmlValue(u, "Initiated"))})) {
          continue;
        }
        S3Request abort{"DELETE", full, {{"uploadId", id}}};
        const std::string what =
            where + ": abort upload " + id + " of " + Quote(key);
        CKPT_ASSIGN_OR_RETURN(S3Response a, root_->Send(abort, what));
        if (!Ok2xx(a.http.status) && a.http.status != 404) {
          return root_->HttpError(what, full, a);
        }
        aborted.push_back(key);
      }
      more = XmlValue(r.http.body, "IsTruncated") == "true";
      key_marker = XmlValue(r.http.body, "NextKeyMarker");
      id_marker = XmlValue(r.http.body, "NextUploadIdMarker");
      if (more && key_marker.empty() && id_marker.empty()) {
        return IOError(where + ": a truncated listing without markers");
      }
    }
    return aborted;
  }

 private:
  const s3::S3Config& config() const { return root_->config(); }

  // A prefix is not a key, but it must not carry what no key may hold.
  Status CheckPrefix(std::string_view op, std::string_view prefix) const {
    if (prefix.empty()) return Status();
    if (Status s = ValidateKey(std::string(prefix) + "x"); !s.ok()) {
      return InvalidArgumentError(std::string(op) + " " + Quote(prefix) +
                                  " in " + url() +
                                  ": not a key prefix: " + s.message());
    }
    return Status();
  }

  Result<ObjectInfo> Head(const std::string& where, std::string_view key,
                          const std::string& full) {
    CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send({"HEAD", full}, where));
    if (r.http.status == 404) {
      return NotFoundError(where + ": no such object");
    }
    if (!Ok2xx(r.http.status)) return root_->HttpError(where, full, r);
    ObjectInfo info;
    info.key = std::string(key);
    auto length = r.http.headers.find("content-length");
    if (length == r.http.headers.end()) {
      return IOError(where + ": the store's HEAD answer has no Content-Length");
    }
    info.size = std::strtoull(length->second.c_str(), nullptr, 10);
    auto modified = r.http.headers.find("last-modified");
    if (modified != r.http.headers.end()) {
      info.mtime_unix_ms = s3::ParseS3Time(modified->second);
    }
    return info;
  }

  static Status PastTheEnd(const std::string& where, uint64_t offset,
                           uint64_t length, uint64_t size) {
    const std::string end = offset > UINT64_MAX - length
                                ? "beyond 2^64"
                                : std::to_string(offset + length);
    return DataLossError(where + ": range [" + std::to_string(offset) + ", " +
                         end + ") runs past the end of the object (" +
                         std::to_string(size) + " bytes)");
  }

  // Reads [at, at + out.size()) of the object, part of the caller's range
  // [offset, offset + length).
  Status GetRange(const std::string& where, const std::string& full,
                  uint64_t offset, uint64_t length, uint64_t at,
                  std::span<std::byte> out) {
    S3Request req{"GET", full};
    req.headers.emplace_back("Range", "bytes=" + std::to_string(at) + "-" +
                                          std::to_string(at + out.size() - 1));
    req.into = out;
    CKPT_ASSIGN_OR_RETURN(S3Response r, root_->Send(req, where));
    const long status = r.http.status;
    if (NoSuchKey(r)) return NotFoundError(where + ": no such object");
    if (status == 416) {
      // "bytes */SIZE", or S3's ActualObjectSize in the error body.
      std::string size = XmlValue(r.http.body, "ActualObjectSize");
      auto cr = r.http.headers.find("content-range");
      if (size.empty() && cr != r.http.headers.end()) {
        size = cr->second.substr(cr->second.find('/') + 1);
      }
      return PastTheEnd(where, offset, length,
                        std::strtoull(size.c_str(), nullptr, 10));
    }
    if (status == 206 && !r.http.overflow) {
      if (r.http.received == out.size() && !r.http.truncated) return Status();
      auto cr = r.http.headers.find("content-range");
      const uint64_t size =
          cr == r.http.headers.end()
              ? at + r.http.received
              : std::strtoull(
                    cr->second.substr(cr->second.find('/') + 1).c_str(),
                    nullptr, 10);
      return PastTheEnd(where, offset, length, size);
    }
    if (status == 200) {
      return IOError(where + ": the store ignored the Range header (HTTP 200)");
    }
    return root_->HttpError(where, full, r);
  }

  Status PutMultipart(const std::string& where, const std::string& full,
                      std::span<const std::byte> data, bool conditional) {
    const uint64_t part =
        std::max<uint64_t>(config().options.part_size,
                           (data.size() + s3::kMaxParts - 1) / s3::kMaxParts);
    const size_t parts = (data.size() + part - 1) / part;
    CKPT_ASSIGN_OR_RETURN(std::string id, root_->StartUpload(where, full));
    std::vector<std::string> etags(parts);
    Status s =
        ParallelFor(parts, config().options.max_concurrency, [&](size_t i) {
          const uint64_t begin = i * part;
          Result<std::string> etag = root_->UploadPart(
              where, full, id, static_cast<int>(i + 1),
              data.subspan(begin,
                           std::min<uint64_t>(part, data.size() - begin)));
          if (!etag.ok()) return etag.status();
          etags[i] = std::move(etag).value();
          return Status();
        });
    if (s.ok()) s = root_->CompleteUpload(where, full, id, etags, conditional);
    if (!s.ok()) root_->AbortUpload(where, full, id);
    return s;
  }

  // Whether the object under `full` holds exactly `data`: its ETag is the
  // MD5 of a single PUT's body.
  bool HoldsOurBytes(const std::string& where, std::string_view key,
                     const std::string& full, std::span<const std::byte> data) {
    Result<S3Response> r = root_->Send({"HEAD", full}, where);
    if (!r.ok() || !Ok2xx(r->http.status)) return false;
    auto etag = r->http.headers.find("etag");
    return etag != r->http.headers.end() &&
           etag->second == "\"" + s3::Md5Hex(data) + "\"";
  }

  const std::shared_ptr<Root> root_;
};

}  // namespace

Result<std::unique_ptr<Storage>> OpenS3Storage(
    s3::S3Config config, std::shared_ptr<s3::HttpTransport> transport,
    bool create) {
  auto root = std::make_shared<Root>();
  root->client =
      std::make_unique<S3Client>(std::move(config), std::move(transport));
  const s3::S3Config& c = root->config();
  if (!create) {
    // No folders to find: the root exists if the prefix holds an object
    // (or, without a prefix, if the bucket exists).
    const std::string where = "open " + c.url;
    S3Request req{
        "GET",
        "",
        {{"list-type", "2"}, {"prefix", c.prefix}, {"max-keys", "1"}}};
    CKPT_ASSIGN_OR_RETURN(S3Response r, root->Send(req, where));
    if (r.http.status == 404) {
      return NotFoundError(where + ": no such bucket (" +
                           DescribeHttpError(r.http) + ")");
    }
    if (!Ok2xx(r.http.status)) return root->HttpError(where, "", r);
    if (!c.prefix.empty() && XmlElements(r.http.body, "Contents").empty()) {
      return NotFoundError(where + ": no object under the prefix " +
                           Quote(c.prefix) + " of bucket " + Quote(c.bucket));
    }
  }
  return std::unique_ptr<Storage>(new S3Storage(std::move(root)));
}

Result<std::unique_ptr<Storage>> OpenS3Storage(const ParsedUrl& url,
                                               const StorageOptions& options) {
  CKPT_ASSIGN_OR_RETURN(
      s3::S3Config config,
      s3::ResolveS3Config(url, options.s3,
                          [](const char* name) { return std::getenv(name); }));
  static const std::shared_ptr<s3::HttpTransport> transport =
      s3::NewCurlTransport();
  return OpenS3Storage(std::move(config), transport, options.create);
}

}  // namespace ckpt
