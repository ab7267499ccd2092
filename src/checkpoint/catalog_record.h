// What the coordinator tells the catalog (DESIGN.md, save step 6): a
// committed checkpoint after its commit, a deleted one after its manifest is
// gone. A catalog failure never undoes either: it is logged as a warning,
// and `ckpt catalog sync` repairs the catalog later.
#pragma once

#include <string>
#include <string_view>

#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"

namespace ckpt {

// The xxh3-128 hex digits an encoded manifest's envelope carries (the
// checksum of its body); empty if `manifest_bytes` is not an envelope.
std::string ManifestChecksum(std::string_view manifest_bytes);

// The catalog row of the committed checkpoint `info` under `root`.
CatalogCheckpoint CatalogRecordFor(const CheckpointInfo& info,
                                   std::string_view root,
                                   std::string manifest_checksum);

// Records a checkpoint just committed; logs a failure as a warning.
void RecordCommitted(Catalog& catalog, const CheckpointInfo& info,
                     std::string_view root, std::string_view manifest_bytes);

// Marks a checkpoint just deleted; logs a failure as a warning.
void RecordDeleted(Catalog& catalog, std::string_view root, int64_t step);

}  // namespace ckpt
