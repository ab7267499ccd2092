// A rank's share of the local tier: names in a node's local root, the tier
// marker, and the one-rank State a share is saved as and loaded through.
//
// Layout of one node's local root (docs/tiers.md):
//
//   <local root>/
//     r00003/                            rank 3's share: a ckpt root
//       step-000000000050/...            an ordinary one-rank checkpoint
//       tier-committed-000000000050-w4   step 50 was committed by all 4 ranks
//     r00001/                            a replica of rank 1's share
//
// A share holds the rank's entries as its State has them, except that a
// piece of a sharded tensor is saved as a whole tensor of the box's shape
// (a one-rank checkpoint must cover its tensors), and one metadata entry,
// kShareEntry, records the rank, the world size and every piece's box, so
// a restore can tell whether the share fits the State it fills.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ckpt/state.h"
#include "ckpt/status.h"
#include "ckpt/storage.h"

namespace ckpt {

inline constexpr char kShareEntry[] = "ckpt.tier.share";
// The durable tier's URL: a share left by another job is never loaded.
inline constexpr char kShareJobEntry[] = "ckpt.tier.job";

// The node's local root: `pattern` with "{node}" replaced by `node`.
std::string NodeRootUrl(const std::string& pattern, int node);
// The root of `rank`'s share under a node's local root.
std::string ShareRootUrl(const std::string& node_url, int rank);
// "r00003".
std::string ShareDirName(int rank);

// The root of `rank`'s share: the keys of `node` (a node's local root)
// under "r00003/", as a storage of its own (URL ShareRootUrl). Shares the
// node's storage, which must outlive it.
std::unique_ptr<Storage> NewShareStorage(std::shared_ptr<Storage> node,
                                         int rank);

// Every marker's key starts with it.
inline constexpr std::string_view kTierMarkerPrefix = "tier-committed-";
// The marker of a committed step in a share's root.
std::string TierMarkerKey(int64_t step, int world_size);
// What the keys of `step`'s markers (of any world size) start with.
std::string TierMarkerPrefix(int64_t step);
// Parses a key of a share's root; false if it is no marker.
bool ParseTierMarkerKey(std::string_view key, int64_t* step, int* world_size);

// One key of a node-level listing: whose share it is in, and the rest.
// False for keys outside any share's root.
bool SplitShareKey(std::string_view key, int* rank, std::string_view* rest);

// Whether `storage` is a local tier's root: a node's (share folders) or a
// share's (tier markers).
Result<bool> IsLocalTierRoot(Storage& storage);

// What kShareEntry holds for `state` saved by `rank` of `world_size`.
std::string ShareDescription(const State& state, int rank, int world_size);

// The fields of a kShareEntry (or kShareJobEntry) JSON object; empty if it
// does not parse.
std::map<std::string, std::string> ShareDescriptionFields(
    const std::string& json);

// A piece's box as ShareDescription records it in its "boxes" field.
struct ShareBox {
  std::vector<int64_t> offsets, global;
};
// The boxes of the "boxes" field, by entry name; DataLoss naming share
// `rank` for a line that does not parse.
Result<std::map<std::string, ShareBox>> ParseShareBoxes(
    const std::string& boxes, int rank);

// `out` (empty) borrows the buffers of `state` as the share saves them,
// plus kShareEntry.
Status BuildShareState(const State& state, int rank, int world_size,
                       State& out);

// Load into `state` through `view` (empty): tensors borrow the caller's
// buffers; blobs and metadata are copied back by CopyBackLoaded.
Status BuildShareLoadView(State& state, State& view);
Status CopyBackLoaded(const State& view, State& state);

}  // namespace ckpt
