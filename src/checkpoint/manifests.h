// ManifestStore: the committed manifests of one root, as the protocols see
// them.
//
// A step is committed exactly when step-N/MANIFEST.json exists and validates;
// everything that asks "which checkpoints are there" goes through here. Reads
// are cached: a committed manifest is only ever replaced whole (delete
// --force rewrites a dependant's), so a cached copy is used only while the
// object's size and mtime are those it was read with. Not thread-safe: the
// manager calls it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ckpt/status.h"
#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

class ManifestStore {
 public:
  explicit ManifestStore(Storage& storage) : storage_(storage) {}
  ManifestStore(const ManifestStore&) = delete;
  ManifestStore& operator=(const ManifestStore&) = delete;

  // Steps with a MANIFEST.json object, newest first, with the object's info.
  Result<std::vector<std::pair<int64_t, ObjectInfo>>> List();
  // Reads and validates step `step`'s manifest; NotFound if it has none.
  Result<std::shared_ptr<const format::Manifest>> Read(int64_t step);
  // The same, for a manifest object already listed as `info`.
  Result<std::shared_ptr<const format::Manifest>> Read(int64_t step,
                                                       const ObjectInfo& info);
  // The newest manifest that validates (damaged ones are skipped with a
  // warning); NotFound if there is none.
  Result<std::shared_ptr<const format::Manifest>> NewestValid();

  // The newest manifest that validates and whose objects all exist with
  // their recorded sizes, judged from one listing (no data is read). A
  // committed step with a missing or resized object is skipped with a
  // warning naming it: resuming from it would fail, and an older complete
  // one may exist. NotFound if there is none.
  Result<std::shared_ptr<const format::Manifest>> NewestComplete();
  // The first object of `m` missing from `listed` (key -> size) or of
  // another size, as a message; empty if every object is there.
  static std::string MissingObject(
      const format::Manifest& m, const std::map<std::string, uint64_t>& sizes);
  // Every object under the step directories, with its size.
  Result<std::map<std::string, uint64_t>> ObjectSizes();

  // Keeps `m`, just written as `step`'s manifest with the bytes of `info`,
  // so the coordinator need not decode what it encoded.
  void Remember(int64_t step, const ObjectInfo& info, format::Manifest m);
  // Drops the cached copy, so the next Read reads the object again.
  void Forget(int64_t step) { cache_.erase(step); }

  // Rewrites the LATEST hint to name the newest valid step (removes it when
  // there is none). A hint only: failures are warnings.
  void UpdateLatestHint();

 private:
  Storage& storage_;
  std::map<int64_t,
           std::pair<ObjectInfo, std::shared_ptr<const format::Manifest>>>
      cache_;
};

}  // namespace ckpt
