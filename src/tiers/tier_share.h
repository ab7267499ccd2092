// A rank's share of the local tier: names in a node's local root, the tier
// marker, and the one-rank State a share is saved as and loaded through.
//
// The layout of a node's local root and its names are in
// format/tier_layout.h.
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
// The root of `rank`'s share: the keys of `node` (a node's local root)
// under "r00003/", as a storage of its own (URL ShareRootUrl). Shares the
// node's storage, which must outlive it.
std::unique_ptr<Storage> NewShareStorage(std::shared_ptr<Storage> node,
                                         int rank);

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
