// Overlap detection among boxes (pieces of a tensor), in O(n log n + n·k)
// where k is how many boxes share a stretch of dimension 0 — a row split has
// k = 1, a grid of r × c blocks k = c — rather than comparing every pair,
// which at 16,384 ranks would be 134 million comparisons per tensor.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace ckpt {

struct BoxRef {
  const std::vector<int64_t>* offsets;
  const std::vector<int64_t>* lengths;
};

// Indices of two boxes that share an element, or nullopt. Empty boxes
// overlap nothing. All boxes have the same number of dimensions.
std::optional<std::pair<size_t, size_t>> FindOverlap(
    const std::vector<BoxRef>& boxes);

}  // namespace ckpt
