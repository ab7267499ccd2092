#include "util/boxes.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>

namespace ckpt {
namespace {

using Pair = std::optional<std::pair<size_t, size_t>>;

class Finder {
 public:
  explicit Finder(const std::vector<BoxRef>& boxes) : boxes_(boxes) {}

  // An overlapping pair among `ids`, looking only along `dims`: the boxes are
  // known to overlap along every other dimension.
  Pair Find(const std::vector<size_t>& ids, std::vector<size_t> dims) const {
    if (ids.size() < 2) return std::nullopt;
    std::erase_if(dims, [&](size_t d) { return SharePoint(ids, d); });
    if (dims.empty()) return Ordered(ids[0], ids[1]);
    if (dims.size() == 1) return Sweep1(ids, dims[0]);
    if (dims.size() == 2) return Sweep2(ids, dims[0], dims[1]);
    return SweepStarts(ids, dims);
  }

 private:
  int64_t Start(size_t i, size_t d) const { return (*boxes_[i].offsets)[d]; }
  int64_t End(size_t i, size_t d) const {
    return (*boxes_[i].offsets)[d] + (*boxes_[i].lengths)[d];
  }
  static Pair Ordered(size_t a, size_t b) {
    return std::pair(std::min(a, b), std::max(a, b));
  }

  // Whether one point of dimension `d` lies in every box.
  bool SharePoint(const std::vector<size_t>& ids, size_t d) const {
    int64_t last_start = Start(ids[0], d), first_end = End(ids[0], d);
    for (size_t i : ids) {
      last_start = std::max(last_start, Start(i, d));
      first_end = std::min(first_end, End(i, d));
    }
    return last_start < first_end;
  }

  std::vector<size_t> SortedByStart(std::vector<size_t> ids, size_t d) const {
    std::sort(ids.begin(), ids.end(),
              [&](size_t a, size_t b) { return Start(a, d) < Start(b, d); });
    return ids;
  }

  // Intervals: a box overlaps an earlier-starting one exactly when it starts
  // before the furthest end so far.
  Pair Sweep1(const std::vector<size_t>& ids, size_t d) const {
    const std::vector<size_t> order = SortedByStart(ids, d);
    size_t furthest = order[0];
    for (size_t k = 1; k < order.size(); ++k) {
      const size_t i = order[k];
      if (Start(i, d) < End(furthest, d)) return Ordered(furthest, i);
      if (End(i, d) > End(furthest, d)) furthest = i;
    }
    return std::nullopt;
  }

  // Along s, keeping the open boxes (those across the current start) by
  // their start along t. Open boxes overlap along s, so, overlapping no
  // other, their t-intervals are disjoint and sorted by start also by end:
  // only the last one starting before the new box ends can reach into it.
  Pair Sweep2(const std::vector<size_t>& ids, size_t s, size_t t) const {
    std::map<int64_t, size_t> open;
    using Closing = std::pair<int64_t, size_t>;  // (end along s, box)
    std::priority_queue<Closing, std::vector<Closing>, std::greater<>> ends;
    for (size_t i : SortedByStart(ids, s)) {
      while (!ends.empty() && ends.top().first <= Start(i, s)) {
        open.erase(Start(ends.top().second, t));
        ends.pop();
      }
      auto after = open.lower_bound(End(i, t));
      if (after != open.begin()) {
        const size_t j = std::prev(after)->second;
        if (End(j, t) > Start(i, t)) return Ordered(j, i);
      }
      open.emplace(Start(i, t), i);
      ends.emplace(End(i, s), i);
    }
    return std::nullopt;
  }

  // How many (box, start) pairs SweepStarts would check along `d`: for each
  // distinct start, the boxes open across it.
  uint64_t OpenCount(const std::vector<size_t>& ids, size_t d) const {
    std::vector<int64_t> starts, ends;
    for (size_t i : ids) {
      starts.push_back(Start(i, d));
      ends.push_back(End(i, d));
    }
    std::sort(starts.begin(), starts.end());
    std::sort(ends.begin(), ends.end());
    uint64_t total = 0;
    size_t ended = 0;
    for (size_t k = 0; k < starts.size(); ++k) {
      if (k + 1 < starts.size() && starts[k + 1] == starts[k]) continue;
      while (ended < ends.size() && ends[ended] <= starts[k]) ++ended;
      total += k + 1 - ended;
    }
    return total;
  }

  // Two boxes that overlap are both open across the later of their starts
  // along the sweep dimension, so checking the boxes open across each start,
  // along the other dimensions, finds every overlap. The sweep dimension is
  // the one that makes the fewest such checks.
  Pair SweepStarts(const std::vector<size_t>& ids,
                   std::vector<size_t> dims) const {
    auto best = dims.begin();
    uint64_t fewest = UINT64_MAX;
    for (auto d = dims.begin(); d != dims.end(); ++d) {
      if (const uint64_t n = OpenCount(ids, *d); n < fewest) {
        fewest = n;
        best = d;
      }
    }
    const size_t s = *best;
    dims.erase(best);
    const std::vector<size_t> order = SortedByStart(ids, s);
    std::vector<size_t> open;
    for (size_t k = 0; k < order.size();) {
      const int64_t x = Start(order[k], s);
      std::erase_if(open, [&](size_t j) { return End(j, s) <= x; });
      for (; k < order.size() && Start(order[k], s) == x; ++k) {
        open.push_back(order[k]);
      }
      if (Pair p = Find(open, dims)) return p;
    }
    return std::nullopt;
  }

  const std::vector<BoxRef>& boxes_;
};

}  // namespace

bool BoxesOverlap(const BoxRef& a, const BoxRef& b) {
  const std::vector<int64_t>& ao = *a.offsets;
  const std::vector<int64_t>& al = *a.lengths;
  const std::vector<int64_t>& bo = *b.offsets;
  const std::vector<int64_t>& bl = *b.lengths;
  for (size_t d = 0; d < ao.size(); ++d) {
    if (al[d] == 0 || bl[d] == 0 || ao[d] + al[d] <= bo[d] ||
        bo[d] + bl[d] <= ao[d]) {
      return false;
    }
  }
  return true;
}

std::optional<std::pair<size_t, size_t>> FindOverlap(
    const std::vector<BoxRef>& boxes) {
  std::vector<size_t> ids;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (std::find(boxes[i].lengths->begin(), boxes[i].lengths->end(), 0) ==
        boxes[i].lengths->end()) {
      ids.push_back(i);
    }
  }
  if (ids.empty()) return std::nullopt;
  std::vector<size_t> dims(boxes[ids[0]].offsets->size());
  for (size_t d = 0; d < dims.size(); ++d) dims[d] = d;
  return Finder(boxes).Find(ids, std::move(dims));
}

}  // namespace ckpt
