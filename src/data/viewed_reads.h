// An all-or-nothing load from a storage that hands over its objects' bytes
// in place (Storage::ViewObject: file://'s mapped pages, mem://'s own
// buffers) reads every byte twice instead of once through staging memory:
// first every chunk is checked against its checksum where it lies (Check),
// then, once every rank has found its chunks whole, the same bytes are
// copied into the caller's buffers (Copy). Both passes read one view of
// each object, taken in the first, so they see the same bytes even if the
// step is deleted in between. The cost against a streaming load is one
// more pass over the bytes in memory; no memory of the load's own is
// needed (docs/design.md, "Loading").
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "data/reader.h"
#include "util/mutex.h"

namespace ckpt {

class ThreadPool;

// The fraction of the stored bytes of the chunks that `boxes` meet (their
// destinations unused) that are in memory now: file://, in the page cache
// (mincore on the objects' views: only those ranges, so a rank of a large
// job looks at its own share); a storage's own memory (mem://), all of
// them. An object that cannot be viewed counts as not in memory (the
// load's reads report why). Decides how an all-or-nothing load from a disk
// reads (docs/design.md, "Loading"): bytes in the page cache are checked and
// copied where they lie, while cold ones read through the page cache cost
// about twice one O_DIRECT read into staging memory.
double ResidentFraction(Storage& from, const format::Manifest& m,
                        const std::vector<BoxRead>& boxes);

class ViewedReads : public StorageWrapper {
 public:
  // Reads through views of `target`'s objects, which must offer them
  // (capabilities().object_views). `target` outlives this.
  explicit ViewedReads(Storage* target) : StorageWrapper(target) {}

  // Pass 1: every chunk that `reads` touch, checked against its checksum in
  // its object's view. Writes to no destination. DataLoss names the first
  // damaged chunk as ReadBoxes would.
  Status Check(const format::Manifest& manifest,
               const std::vector<BoxRead>& reads, ThreadPool* pool);
  // Pass 2: ReadBoxes of `reads` from the views pass 1 took, without
  // checking the chunks again: they are the bytes pass 1 checked.
  Status Copy(const format::Manifest& manifest,
              const std::vector<BoxRead>& reads, ThreadPool* pool);

  // Copies out of the view of `key` (taken on first use).
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override;
  Status ReadRangeFilling(std::string_view key, uint64_t offset,
                          std::span<std::byte> out,
                          const FilledFn& filled) override;

 private:
  Result<std::shared_ptr<const ObjectView>> Get(std::string_view key);

  Mutex mu_;
  std::map<std::string, std::shared_ptr<const ObjectView>, std::less<>> views_
      GUARDED_BY(mu_);
};

}  // namespace ckpt
