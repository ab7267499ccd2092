// Overlap detection among boxes (pieces of a tensor) without comparing every
// pair, which at 16,384 ranks would be 134 million comparisons per tensor.
//
// Dimensions along which all boxes share a point are set aside (every pair
// overlaps there). Boxes varying along one dimension are sorted along it;
// along two, swept along one with the open boxes ordered along the other:
// O(n log n) whatever the dimensions, so a split of any one dimension, or a
// grid over any two, costs the same. Along three or more, the boxes open at
// each start along the sweep dimension are checked as a problem of one
// dimension fewer: O(n log n) per dimension for grids, where each box is open
// at one start; a box spanning m starts is checked m times.
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

// Whether two boxes share an element, by comparing them along every
// dimension: the reference FindOverlap is tested against.
bool BoxesOverlap(const BoxRef& a, const BoxRef& b);

// Indices of two boxes that share an element, the smaller first, or nullopt.
// Empty boxes overlap nothing. All boxes have the same number of dimensions.
std::optional<std::pair<size_t, size_t>> FindOverlap(
    const std::vector<BoxRef>& boxes);

}  // namespace ckpt
