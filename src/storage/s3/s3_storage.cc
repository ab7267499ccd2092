// The s3:// backend's facade: the Storage calls, each as the requests it
// sends, with the uploads in s3_multipart.cc and the listings in
// s3_listing.cc.
//
//   Put (at most multipart_threshold bytes)   PUT
//   Put (more), NewWritable                   a multipart upload (a streamed
//                                             write that fits one part: PUT)
//   Put(kCreateIfAbsent)    the PUT carries If-None-Match: * (412 ->
//                           AlreadyExists): one PUT up to 5 GiB, whatever
//                           multipart_threshold says, since radosgw ignores
//                           the header on a multipart completion (only
//                           above 5 GiB does the completion carry it);
//                           without conditional writes a HEAD first (not
//                           atomic, and declared so)
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
#include <cstdlib>

#include "storage/s3/s3_listing.h"
#include "storage/s3/s3_multipart.h"
#include "storage/s3/s3_root.h"
#include "util/names.h"

namespace ckpt {
namespace {

using s3::DescribeHttpError;
using s3::Ok2xx;
using s3::Root;
using s3::S3Client;
using s3::S3Request;
using s3::S3Response;
using s3::XmlElements;
using s3::XmlValue;

// A large read is split into ranged GETs of at least this many bytes.
constexpr uint64_t kMinParallelReadPiece = uint64_t{4} << 20;

// A 404 about the object (not about the bucket, whose error names itself).
bool NoSuchKey(const S3Response& r) {
  return r.http.status == 404 &&
         XmlValue(r.http.body, "Code") != "NoSuchBucket";
}

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
    return s3::NewS3Writable(root_, std::string(key));
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
    const uint64_t single_put_limit =
        conditional ? std::max(config().options.multipart_threshold,
                               config().conditional_put_limit)
                    : config().options.multipart_threshold;
    if (data.size() > single_put_limit) {
      return s3::PutMultipart(*root_, where, full, data, conditional);
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
      return s3::ParallelFor(n, threads, [&](size_t i) {
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
    return s3::ListObjects(*root_, prefix);
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
    return s3::AbortIncompleteUploads(*root_, prefix, dead);
  }

 private:
  const s3::S3Config& config() const { return root_->config(); }

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
