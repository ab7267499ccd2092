#include "util/boxes.h"

#include <algorithm>
#include <numeric>

namespace ckpt {
namespace {

bool Empty(const BoxRef& b) {
  for (int64_t l : *b.lengths) {
    if (l == 0) return true;
  }
  return false;
}

bool Overlap(const BoxRef& a, const BoxRef& b) {
  for (size_t d = 0; d < a.offsets->size(); ++d) {
    const int64_t a0 = (*a.offsets)[d], a1 = a0 + (*a.lengths)[d];
    const int64_t b0 = (*b.offsets)[d], b1 = b0 + (*b.lengths)[d];
    if (a1 <= b0 || b1 <= a0) return false;
  }
  return true;
}

}  // namespace

std::optional<std::pair<size_t, size_t>> FindOverlap(
    const std::vector<BoxRef>& boxes) {
  std::vector<size_t> order;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (!Empty(boxes[i])) order.push_back(i);
  }
  if (order.size() < 2) return std::nullopt;
  if (boxes[order[0]].offsets->empty()) {
    // 0-d: every non-empty box is the single element.
    return std::pair(order[0], order[1]);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return (*boxes[a].offsets)[0] < (*boxes[b].offsets)[0];
  });
  // Sweep along dimension 0, keeping the boxes whose stretch is still open.
  std::vector<size_t> open;
  for (size_t i : order) {
    const int64_t start = (*boxes[i].offsets)[0];
    std::erase_if(open, [&](size_t j) {
      return (*boxes[j].offsets)[0] + (*boxes[j].lengths)[0] <= start;
    });
    for (size_t j : open) {
      if (Overlap(boxes[i], boxes[j])) return std::pair(j, i);
    }
    open.push_back(i);
  }
  return std::nullopt;
}

}  // namespace ckpt
