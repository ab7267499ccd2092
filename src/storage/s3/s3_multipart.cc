// The multipart upload protocol, as both a large Put and a streamed write
// (NewWritable) use it:
//
//   1. POST ?uploads                        -> upload id (the first part
//                                              that ships starts it)
//   2. PUT ?partNumber=N&uploadId=ID        the parts, max_concurrency at
//                                           once; each answer's ETag is kept
//   3. POST ?uploadId=ID with the part list -> the object appears, whole
//                                              (If-None-Match: * for
//                                              create-if-absent)
//
// On any failure before 3 succeeds (or a writable destroyed without Close):
// DELETE ?uploadId=ID, so no part lingers; nothing was ever visible under the
// key. An abort that itself fails leaves parts that AbortIncompleteWrites
// (s3_listing.cc) or a lifecycle rule removes later.
#include "storage/s3/s3_multipart.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>
#include <utility>
#include <vector>

#include "util/log.h"

namespace ckpt::s3 {
namespace {

// --- The requests of steps 1-3, and the abort.

Result<std::string> StartUpload(Root& root, std::string_view where,
                                const std::string& full_key) {
  S3Request req{"POST", full_key, {{"uploads", ""}}};
  CKPT_ASSIGN_OR_RETURN(S3Response r, root.Send(req, where));
  if (!Ok2xx(r.http.status)) {
    return root.HttpError(std::string(where) + ": start multipart upload",
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
Result<std::string> UploadPart(Root& root, std::string_view where,
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
  CKPT_ASSIGN_OR_RETURN(S3Response r, root.Send(req, what));
  if (!Ok2xx(r.http.status)) return root.HttpError(what, full_key, r);
  auto etag = r.http.headers.find("etag");
  if (etag == r.http.headers.end() || etag->second.empty()) {
    return IOError(what + ": the store returned no ETag");
  }
  return etag->second;
}

Status CompleteUpload(Root& root, std::string_view where,
                      const std::string& full_key, const std::string& upload_id,
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
  CKPT_ASSIGN_OR_RETURN(S3Response r, root.Send(req, what));
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
    return UnavailableError(what + ": " + XmlValue(r.http.body, "Code") + ": " +
                            XmlValue(r.http.body, "Message"));
  }
  return root.HttpError(what, full_key, r);
}

// Best effort (see the top of this file).
void AbortUpload(Root& root, std::string_view where,
                 const std::string& full_key, const std::string& upload_id) {
  S3Request req{"DELETE", full_key, {{"uploadId", upload_id}}};
  const std::string what =
      std::string(where) + ": abort multipart upload " + upload_id;
  Result<S3Response> r = root.Send(req, what);
  if (r.ok() && (Ok2xx(r->http.status) || r->http.status == 404)) return;
  LogWarning(
      (r.ok() ? root.HttpError(what, full_key, *r) : r.status()).ToString() +
      " (its parts stay until gc or a lifecycle rule aborts it)");
}

// --- A streamed write.

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

  // The first part (with the prefix) waits in memory until Close, when it
  // goes up beside the last: a multipart upload takes its parts in any
  // order, and a part once sent is fixed.
  bool KeepPrefix(uint64_t bytes) override {
    if (closed_ || size_ > 0 || bytes > root_->config().options.part_size) {
      return false;
    }
    keep_ = bytes;
    return true;
  }

  Status RewritePrefix(std::span<const std::byte> bytes) override {
    if (closed_)
      return FailedPreconditionError(where_ + ": rewrite after Close");
    CKPT_RETURN_IF_ERROR(status_);
    if (bytes.size() > keep_ || bytes.size() > size_) {
      return InvalidArgumentError(
          where_ + ": a rewrite of " + std::to_string(bytes.size()) +
          " first bytes, where " + std::to_string(std::min(keep_, size_)) +
          " are kept");
    }
    if (bytes.empty()) return Status();
    std::vector<std::byte>& first = etags_.empty() ? current_ : first_;
    std::memcpy(first.data(), bytes.data(), bytes.size());
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
    if (s.ok() && !first_.empty()) s = Ship(1, std::move(first_));
    if (s.ok()) s = WaitAll();
    if (s.ok()) {
      s = CompleteUpload(*root_, where_, full_key_, upload_id_, etags_, false);
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

  // Hands current_ to a part upload of its own (or, the first part of an
  // object whose prefix is kept, to first_) and takes a free buffer.
  Status ShipCurrent() {
    if (upload_id_.empty()) {
      CKPT_ASSIGN_OR_RETURN(upload_id_, StartUpload(*root_, where_, full_key_));
    }
    if (etags_.size() >= kMaxParts) {
      return InvalidArgumentError(
          where_ + ": the object outgrows S3's 10,000 parts of " +
          std::to_string(root_->config().options.part_size) +
          " bytes; raise part_size");
    }
    etags_.emplace_back();
    const int number = static_cast<int>(etags_.size());
    std::vector<std::byte> buffer = std::move(current_);
    current_ = std::move(free_);
    current_.clear();
    free_ = {};
    if (number == 1 && keep_ > 0) {
      first_ = std::move(buffer);
      return Status();
    }
    return Ship(number, std::move(buffer));
  }

  // Uploads `buffer` as part `number`, waiting for the oldest upload when
  // max_concurrency are in flight.
  Status Ship(int number, std::vector<std::byte> buffer) {
    while (in_flight_.size() >=
           static_cast<size_t>(root_->config().options.max_concurrency)) {
      CKPT_RETURN_IF_ERROR(WaitOldest());
    }
    in_flight_.push_back(InFlight{number, std::move(buffer), {}});
    InFlight& f = in_flight_.back();
    f.etag = std::async(
        std::launch::async,
        [root = root_, where = where_, key = full_key_, id = upload_id_,
         number = f.number, data = std::span<const std::byte>(f.buffer)] {
          return UploadPart(*root, where, key, id, number, data);
        });
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
      AbortUpload(*root_, where_, full_key_, upload_id_);
      upload_id_.clear();
    }
    current_ = {};
    free_ = {};
    first_ = {};
  }

  const std::shared_ptr<Root> root_;
  const std::string key_;
  const std::string full_key_;
  const std::string where_;
  std::vector<std::byte> current_;  // the part being filled
  std::vector<std::byte> free_;     // a spare buffer from a finished part
  std::vector<std::byte> first_;    // part 1, held until Close (KeepPrefix)
  uint64_t keep_ = 0;               // the prefix kept rewritable
  std::deque<InFlight> in_flight_;
  std::vector<std::string> etags_;  // of parts 1..N
  std::string upload_id_;           // empty until the first part ships
  uint64_t size_ = 0;
  bool closed_ = false;
  Status status_;  // the first failure; every later call returns it
};

}  // namespace

std::unique_ptr<WritableObject> NewS3Writable(std::shared_ptr<Root> root,
                                              std::string key) {
  return std::make_unique<S3Writable>(std::move(root), std::move(key));
}

Status PutMultipart(Root& root, const std::string& where,
                    const std::string& full, std::span<const std::byte> data,
                    bool conditional) {
  const uint64_t part =
      std::max<uint64_t>(root.config().options.part_size,
                         (data.size() + kMaxParts - 1) / kMaxParts);
  const size_t parts = (data.size() + part - 1) / part;
  CKPT_ASSIGN_OR_RETURN(std::string id, StartUpload(root, where, full));
  std::vector<std::string> etags(parts);
  Status s =
      ParallelFor(parts, root.config().options.max_concurrency, [&](size_t i) {
        const uint64_t begin = i * part;
        Result<std::string> etag = UploadPart(
            root, where, full, id, static_cast<int>(i + 1),
            data.subspan(begin, std::min<uint64_t>(part, data.size() - begin)));
        if (!etag.ok()) return etag.status();
        etags[i] = std::move(etag).value();
        return Status();
      });
  if (s.ok()) s = CompleteUpload(root, where, full, id, etags, conditional);
  if (!s.ok()) AbortUpload(root, where, full, id);
  return s;
}

}  // namespace ckpt::s3
