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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ckpt/status.h"
#include "ckpt/storage.h"
#include "format/index.h"
#include "format/manifest.h"
#include "util/checksum.h"

namespace ckpt {

// Every step of `storage` with a MANIFEST.json object, newest first, with
// the object's info: a listing, no manifest read (so a damaged manifest is
// listed too). ManifestStore::List, and the tiers' pruning of a local root
// and look at the durable root.
Result<std::vector<std::pair<int64_t, ObjectInfo>>> ListManifests(
    Storage& storage);

class ManifestStore {
 public:
  explicit ManifestStore(Storage& storage) : storage_(storage) {}
  ManifestStore(const ManifestStore&) = delete;
  ManifestStore& operator=(const ManifestStore&) = delete;

  // Steps with a MANIFEST.json object, newest first, with the object's info.
  Result<std::vector<std::pair<int64_t, ObjectInfo>>> List();
  // Reads and validates step `step`'s manifest with every piece (version
  // 3: the commit record, the directory and every index); NotFound if it
  // has none.
  Result<std::shared_ptr<const format::Manifest>> Read(int64_t step);
  // The same, for a manifest object already listed as `info`.
  Result<std::shared_ptr<const format::Manifest>> Read(int64_t step,
                                                       const ObjectInfo& info);
  // Every piece of step `step`, read again (not from the cache) and checked
  // as Read checks them, without holding them all: `each` is called with a
  // Manifest of one rank's pieces at a time (version 3: the commit record
  // and directory once, then each rank's index alone, Manifest::pieces
  // kSome, rank 0 first), or once with the whole manifest (versions 1 and
  // 2). What needs every piece (overlaps across ranks, the directory's
  // sums, every index present) is checked before the first call or after
  // the last (format::IndexWalk); the first error ends the walk.
  Status ForEachRank(
      int64_t step, const std::function<Status(const format::Manifest&)>& each);
  // What listing, completeness checks, retention and garbage collection
  // need: for version 3 the commit record and the directory (every entry
  // without pieces, every data, index and directory object with its size);
  // for versions 1 and 2 the whole manifest, as Read.
  Result<std::shared_ptr<const format::Manifest>> Summary(
      int64_t step, const ObjectInfo& info);
  Result<std::shared_ptr<const format::Manifest>> Summary(int64_t step);

  // A box of an entry that a rank will read: ReadFor reads the indexes of
  // the ranks whose pieces meet it.
  struct Want {
    std::string name;
    int32_t owner = -1;
    std::vector<int64_t> offsets;  // empty: the whole entry
    std::vector<int64_t> lengths;
  };
  // Step `step` with at least the pieces that meet `wants`: for version 3
  // the commit record, the directory and the indexes those pieces are in
  // (Manifest::pieces kSome), each checked against the directory; for
  // versions 1 and 2, Read.
  Result<std::shared_ptr<const format::Manifest>> ReadFor(
      int64_t step, const std::vector<Want>& wants);

  // The newest manifest that validates (damaged ones are skipped with a
  // warning), as Summary gives it; NotFound if there is none.
  Result<std::shared_ptr<const format::Manifest>> NewestValid();

  // The newest manifest that validates and whose objects all exist with
  // their recorded sizes, judged from one listing (no data is read), as
  // Summary gives it. A committed step with a missing or resized object is
  // skipped with a warning naming it: resuming from it would fail, and an
  // older complete one may exist. NotFound if there is none.
  Result<std::shared_ptr<const format::Manifest>> NewestComplete();
  // The first object of `m` (a data object, or version 3's directory or
  // index) missing from `listed` (key -> size) or of another size, as a
  // message; empty if every object is there. With `storage`, an object the
  // listing left out is looked at: one in its place that is no regular file
  // (a symbolic link, a folder) is said to be that, not missing.
  static std::string MissingObject(const format::Manifest& m,
                                   const std::map<std::string, uint64_t>& sizes,
                                   Storage* storage = nullptr);
  // Every object under the step directories, with its size.
  Result<std::map<std::string, uint64_t>> ObjectSizes();

  // Keeps `m`, just written as `step`'s manifest with the bytes of `info`,
  // so the coordinator need not decode what it encoded.
  void Remember(int64_t step, const ObjectInfo& info, format::Manifest m);
  // Keeps the summary of a version 3 checkpoint just committed as `step`
  // (its commit record with the directory, as format::WithDirectory gives
  // it, and the directory), as if read back from the object of `info`.
  void RememberSummary(int64_t step, const ObjectInfo& info, format::Manifest m,
                       std::shared_ptr<const format::Directory> dir);
  // Keeps the index this rank just wrote (encoded as `size` bytes with
  // `checksum`): the next incremental save reads its own rank's index of its
  // parent, and this spares reading and decoding it again (a tenth of a
  // dirty-rows save with 4 KiB chunks). Used once, and only where a
  // committed directory records that index with this size and checksum, so
  // a failed save's index or a rewritten step is read from storage.
  void RememberIndex(uint64_t size, Checksum128 checksum, format::RankIndex x);

  // The chunk rows of `m`, emptied with their memory kept, when the caller
  // held the last reference to it (none otherwise): the next save fills
  // them instead of fresh memory. Every manifest this store hands out is
  // built mutable, which makes taking them from the last holder sound.
  static std::vector<std::vector<format::ChunkRecord>> RecycleRows(
      std::shared_ptr<const format::Manifest> m);

  // The manifest object of `step` (size, mtime) as the last look at a
  // manifest found it, if that was `step`'s and found it: what the read
  // that just failed read, so that a load's damage is kept for that object
  // alone (replace.h).
  std::optional<ObjectInfo> LastSeen(int64_t step) const {
    if (!last_seen_ || last_seen_->first != step) return std::nullopt;
    return last_seen_->second;
  }

  // Drops the cached copy, so the next Read reads the object again.
  void Forget(int64_t step) {
    cache_.erase(step);
    summaries_.erase(step);
  }

  // Rewrites the LATEST hint to name the newest valid step (removes it when
  // there is none). A hint only: failures are warnings. `committed_alone`:
  // a step just committed by the root's only writer (it holds the lease);
  // when it is newer than the step this store last found newest, it is
  // written without listing the root.
  void UpdateLatestHint(std::optional<int64_t> committed_alone = std::nullopt);

  // Warns that step `step`, whose manifest object is `info`, is skipped
  // (`why`): once for each version of the object, however often it is
  // listed (one command lists a root several times).
  void WarnSkipped(int64_t step, const ObjectInfo& info,
                   const std::string& why);

 private:
  // A version 3 checkpoint's commit record and directory, read and checked.
  struct Summarized {
    ObjectInfo info;
    std::shared_ptr<const format::Manifest> manifest;  // WithDirectory
    std::shared_ptr<const format::Directory> directory;
  };
  Result<ObjectInfo> StatManifest(int64_t step);
  // For the error of a step that is not committed: " (N committed, the
  // nearest A and B, the newest C; ...)", or "" if the root cannot be listed.
  std::string NearestSteps(int64_t step);
  // Step `step` with every piece, if read since its object was `info`.
  std::shared_ptr<const format::Manifest> Cached(int64_t step,
                                                 const ObjectInfo& info);
  Result<Summarized> ReadSummary(int64_t step, const ObjectInfo& info);
  // Rank `rank`'s index of `s`, read and checked against the directory.
  Result<format::RankIndex> ReadIndex(const Summarized& s, int32_t rank);
  Result<std::shared_ptr<const format::Manifest>> Assembled(
      const Summarized& s, std::vector<int32_t> ranks, bool all);

  struct OwnIndex {
    uint64_t size = 0;
    Checksum128 checksum;
    format::RankIndex index;
  };

  Storage& storage_;
  std::optional<OwnIndex> own_index_;
  std::optional<std::pair<int64_t, ObjectInfo>> last_seen_;
  // The manifests WarnSkipped has warned of: step, size, mtime.
  std::set<std::tuple<int64_t, uint64_t, int64_t>> warned_;
  // The step UpdateLatestHint last wrote, while it is known to be the
  // newest complete one.
  std::optional<int64_t> hinted_;
  std::map<int64_t, Summarized> summaries_;
  std::map<int64_t,
           std::pair<ObjectInfo, std::shared_ptr<const format::Manifest>>>
      cache_;
};

}  // namespace ckpt
