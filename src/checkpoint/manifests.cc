#include "checkpoint/manifests.h"

#include <algorithm>

#include "checkpoint/manager_impl.h"
#include "format/constants.h"
#include "util/log.h"

namespace ckpt {

using format::Manifest;

Result<std::vector<std::pair<int64_t, ObjectInfo>>> ManifestStore::List() {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage_.List(format::kStepPrefix));
  std::vector<std::pair<int64_t, ObjectInfo>> out;
  for (ObjectInfo& o : objects) {
    int64_t step;
    std::string_view file;
    if (format::SplitStepKey(o.key, &step, &file) &&
        file == format::kManifestName) {
      out.emplace_back(step, std::move(o));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Read(
    int64_t step, const ObjectInfo& info) {
  auto it = cache_.find(step);
  if (it != cache_.end() && it->second.first.size == info.size &&
      it->second.first.mtime_unix_ms == info.mtime_unix_ms) {
    return it->second.second;
  }
  const std::string key = format::ManifestKey(step);
  const std::string what = "manifest " + key + " in " + storage_.url();
  if (info.size > format::kMaxManifestBytes) {
    return DataLossError(what + ": " + std::to_string(info.size) +
                         " bytes is beyond the manifest size limit");
  }
  CKPT_ASSIGN_OR_RETURN(std::string bytes, storage_.ReadAll(key));
  CKPT_ASSIGN_OR_RETURN(Manifest m, format::DecodeManifest(bytes, what));
  if (m.step != step) {
    return DataLossError(what + ": records step " + std::to_string(m.step));
  }
  auto shared = std::make_shared<const Manifest>(std::move(m));
  cache_[step] = {info, shared};
  return shared;
}

Result<std::shared_ptr<const Manifest>> ManifestStore::Read(int64_t step) {
  if (step < 0) {
    return InvalidArgumentError("step " + std::to_string(step) +
                                " is negative");
  }
  Result<ObjectInfo> info = storage_.Stat(format::ManifestKey(step));
  if (!info.ok()) {
    if (info.status().code() == ErrorCode::kNotFound) {
      return NotFoundError("step " + std::to_string(step) +
                           " is not a committed checkpoint in " +
                           storage_.url());
    }
    return info.status();
  }
  return Read(step, *info);
}

Result<std::shared_ptr<const Manifest>> ManifestStore::NewestValid() {
  CKPT_ASSIGN_OR_RETURN(auto manifests, List());
  for (const auto& [step, info] : manifests) {
    Result<std::shared_ptr<const Manifest>> m = Read(step, info);
    if (m.ok()) return m;
    // A damaged manifest is not a checkpoint; the one before it may be.
    LogWarning("skipping step " + std::to_string(step) + ": " +
               m.status().ToString());
  }
  return NotFoundError("no committed checkpoint in " + storage_.url());
}

Result<std::map<std::string, uint64_t>> ManifestStore::ObjectSizes() {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage_.List(format::kStepPrefix));
  std::map<std::string, uint64_t> sizes;
  for (ObjectInfo& o : objects) sizes.emplace(std::move(o.key), o.size);
  return sizes;
}

std::string ManifestStore::MissingObject(
    const Manifest& m, const std::map<std::string, uint64_t>& sizes) {
  for (const format::ObjectRecord& o : m.objects) {
    auto it = sizes.find(o.key);
    if (it == sizes.end()) return "data object " + o.key + " is missing";
    if (it->second != o.size) {
      return "data object " + o.key + " is " + std::to_string(it->second) +
             " bytes but the manifest records " + std::to_string(o.size);
    }
  }
  return "";
}

Result<std::shared_ptr<const Manifest>> ManifestStore::NewestComplete() {
  CKPT_ASSIGN_OR_RETURN(auto manifests, List());
  if (manifests.empty()) {
    return NotFoundError("no committed checkpoint in " + storage_.url());
  }
  // Listed after the manifests: an object a manifest names was written
  // before it, so a save committing meanwhile is not judged incomplete.
  CKPT_ASSIGN_OR_RETURN(auto sizes, ObjectSizes());
  for (const auto& [step, info] : manifests) {
    Result<std::shared_ptr<const Manifest>> m = Read(step, info);
    if (!m.ok()) {
      LogWarning("skipping step " + std::to_string(step) + ": " +
                 m.status().ToString());
      continue;
    }
    const std::string missing = MissingObject(**m, sizes);
    if (missing.empty()) return m;
    LogWarning("skipping step " + std::to_string(step) + " in " +
               storage_.url() + ": " + missing +
               "; resuming from an older complete checkpoint");
  }
  return NotFoundError("no complete checkpoint in " + storage_.url());
}

void ManifestStore::Remember(int64_t step, const ObjectInfo& info, Manifest m) {
  m.Reindex();
  cache_[step] = {info, std::make_shared<const Manifest>(std::move(m))};
}

void ManifestStore::UpdateLatestHint() {
  // LATEST is a hint for humans and other tools; readers never trust it, so
  // a failure to write it does not fail anything. It names the newest step
  // that is complete, never a damaged one.
  Result<std::shared_ptr<const Manifest>> newest = NewestComplete();
  Status s;
  if (newest.ok()) {
    s = storage_.PutString(format::kLatestName,
                           std::to_string((*newest)->step) + "\n");
  } else if (newest.status().code() == ErrorCode::kNotFound) {
    s = storage_.Delete(format::kLatestName);
    if (s.code() == ErrorCode::kNotFound) s = Status();
  } else {
    s = newest.status();
  }
  if (!s.ok()) LogWarning("could not update the LATEST hint: " + s.ToString());
}

}  // namespace ckpt
