// Listing an s3:// root, and finding the uploads its dead writes left.
//
// ListObjects: GET ?list-type=2&prefix=P (list_page_size keys a page), then
// again with each continuation token while the answer says IsTruncated.
// Objects outside the root's prefix, and names no key can have (other tools'
// "a//b"), are skipped; the result is sorted by key.
//
// AbortIncompleteUploads: GET ?uploads&prefix=P, paged by key-marker and
// upload-id-marker; each upload the caller finds dead is aborted with
// DELETE ?uploadId=ID. Incomplete uploads show in no object listing, but the
// store keeps (and bills) their parts until they are aborted. A store that
// cannot list them (501) is logged once and reported as having none.
#include "storage/s3/s3_listing.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "util/log.h"
#include "util/names.h"

namespace ckpt::s3 {
namespace {

// A prefix is not a key, but it must not carry what no key may hold.
Status CheckPrefix(const Root& root, std::string_view op,
                   std::string_view prefix) {
  if (prefix.empty()) return Status();
  if (Status s = ValidateKey(std::string(prefix) + "x"); !s.ok()) {
    return InvalidArgumentError(std::string(op) + " " + Quote(prefix) + " in " +
                                root.config().url +
                                ": not a key prefix: " + s.message());
  }
  return Status();
}

}  // namespace

Result<std::vector<ObjectInfo>> ListObjects(Root& root,
                                            std::string_view prefix) {
  CKPT_RETURN_IF_ERROR(CheckPrefix(root, "list", prefix));
  const std::string where =
      "list " + Quote(prefix) + " in " + root.config().url;
  std::vector<ObjectInfo> out;
  std::string token;
  do {
    S3Request req{"GET",
                  "",
                  {{"list-type", "2"},
                   {"prefix", root.FullKey(prefix)},
                   {"max-keys", std::to_string(root.config().list_page_size)}}};
    if (!token.empty()) req.query.emplace_back("continuation-token", token);
    CKPT_ASSIGN_OR_RETURN(S3Response r, root.Send(req, where));
    if (!Ok2xx(r.http.status)) return root.HttpError(where, "", r);
    for (std::string_view c : XmlElements(r.http.body, "Contents")) {
      std::string key = XmlValue(c, "Key");
      if (!key.starts_with(root.config().prefix)) continue;
      key.erase(0, root.config().prefix.size());
      // Objects other tools put under the prefix with names that are not
      // keys ("a//b", "../x") are not ours to show.
      if (!ValidateKey(key).ok()) continue;
      out.push_back(
          ObjectInfo{std::move(key),
                     std::strtoull(XmlValue(c, "Size").c_str(), nullptr, 10),
                     ParseS3Time(XmlValue(c, "LastModified"))});
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

Result<std::vector<std::string>> AbortIncompleteUploads(
    Root& root, std::string_view prefix,
    const std::function<bool(const ObjectInfo&)>& dead) {
  CKPT_RETURN_IF_ERROR(CheckPrefix(root, "abort incomplete uploads", prefix));
  const std::string where = "abort incomplete uploads under " + Quote(prefix) +
                            " in " + root.config().url;
  std::vector<std::string> aborted;
  std::string key_marker, id_marker;
  bool more = true;
  while (more) {
    S3Request req{
        "GET",
        "",
        {{"uploads", ""},
         {"prefix", root.FullKey(prefix)},
         {"max-uploads", std::to_string(root.config().list_page_size)}}};
    if (!key_marker.empty()) req.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) {
      req.query.emplace_back("upload-id-marker", id_marker);
    }
    CKPT_ASSIGN_OR_RETURN(S3Response r, root.Send(req, where));
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
    if (!Ok2xx(r.http.status)) return root.HttpError(where, "", r);
    for (std::string_view u : XmlElements(r.http.body, "Upload")) {
      const std::string full = XmlValue(u, "Key");
      const std::string id = XmlValue(u, "UploadId");
      if (!full.starts_with(root.config().prefix) || id.empty()) continue;
      const std::string key = full.substr(root.config().prefix.size());
      if (!ValidateKey(key).ok()) continue;
      if (!dead(ObjectInfo{key, 0, ParseS3Time(XmlValue(u, "Initiated"))})) {
        continue;
      }
      S3Request abort{"DELETE", full, {{"uploadId", id}}};
      const std::string what =
          where + ": abort upload " + id + " of " + Quote(key);
      CKPT_ASSIGN_OR_RETURN(S3Response a, root.Send(abort, what));
      if (!Ok2xx(a.http.status) && a.http.status != 404) {
        return root.HttpError(what, full, a);
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

}  // namespace ckpt::s3
