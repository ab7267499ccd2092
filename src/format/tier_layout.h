// The names of a local tier's objects (docs/tiers.md), made and parsed in
// one place, like layout.h's for a root. A node's local root holds one
// folder per rank whose share it keeps; each folder is an ordinary one-rank
// root plus a marker per step that every rank of the job finished:
//
//   <local root>/
//     r00003/                            rank 3's share: a ckpt root
//       step-000000000050/...            an ordinary one-rank checkpoint
//       tier-committed-000000000050-w4   step 50 was committed by all 4 ranks
//     r00001/                            a replica of rank 1's share
//
// Kept in the format layer so that the layers below the tiers (catalog
// sync, inspection) can tell a local tier's root by its names alone.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ckpt::format {

// "r00003": the folder of rank 3's share under a node's local root.
std::string ShareDirName(int rank);

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

}  // namespace ckpt::format
