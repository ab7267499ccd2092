#include "util/boxes.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ckpt {
namespace {

struct Box {
  std::vector<int64_t> offsets, lengths;
};

std::vector<BoxRef> Refs(const std::vector<Box>& boxes) {
  std::vector<BoxRef> refs;
  for (const Box& b : boxes) refs.push_back({&b.offsets, &b.lengths});
  return refs;
}

bool Overlap(const Box& a, const Box& b) {
  return BoxesOverlap({&a.offsets, &a.lengths}, {&b.offsets, &b.lengths});
}

bool AnyOverlap(const std::vector<Box>& boxes) {
  for (size_t i = 0; i < boxes.size(); ++i) {
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      if (Overlap(boxes[i], boxes[j])) return true;
    }
  }
  return false;
}

// FindOverlap agrees with comparing every pair, and a pair it names overlaps.
void ExpectAgrees(const std::vector<Box>& boxes) {
  const auto found = FindOverlap(Refs(boxes));
  ASSERT_EQ(found.has_value(), AnyOverlap(boxes));
  if (found) {
    EXPECT_LT(found->first, found->second);
    EXPECT_TRUE(Overlap(boxes[found->first], boxes[found->second]));
  }
}

// Splits `box` at random into disjoint boxes that fill it.
void Tile(const Box& box, std::mt19937& rng, int depth, std::vector<Box>& out) {
  const size_t dims = box.offsets.size();
  std::vector<size_t> splittable;
  for (size_t d = 0; d < dims; ++d) {
    if (box.lengths[d] > 1) splittable.push_back(d);
  }
  if (depth == 0 || splittable.empty()) {
    out.push_back(box);
    return;
  }
  const size_t d = splittable[rng() % splittable.size()];
  const int64_t cut = 1 + rng() % (box.lengths[d] - 1);
  Box a = box, b = box;
  a.lengths[d] = cut;
  b.offsets[d] += cut;
  b.lengths[d] -= cut;
  Tile(a, rng, depth - 1, out);
  Tile(b, rng, depth - 1, out);
}

TEST(FindOverlapTest, RandomBoxesAgreeWithEveryPair) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20000; ++round) {
    const size_t dims = rng() % 5;
    const size_t n = rng() % 12;
    std::vector<Box> boxes(n);
    for (Box& b : boxes) {
      for (size_t d = 0; d < dims; ++d) {
        b.offsets.push_back(rng() % 8);
        b.lengths.push_back(rng() % 5);
      }
    }
    ExpectAgrees(boxes);
    if (HasFailure()) return;
  }
}

TEST(FindOverlapTest, RandomTilingsAndTheirDamage) {
  std::mt19937 rng(11);
  for (int round = 0; round < 5000; ++round) {
    const size_t dims = 1 + rng() % 4;
    Box whole;
    for (size_t d = 0; d < dims; ++d) {
      whole.offsets.push_back(0);
      whole.lengths.push_back(1 + rng() % 12);
    }
    std::vector<Box> tiles;
    Tile(whole, rng, 1 + rng() % 8, tiles);
    std::shuffle(tiles.begin(), tiles.end(), rng);
    ASSERT_FALSE(FindOverlap(Refs(tiles)));
    // Grow one tile by one element along one dimension, inside the whole.
    Box& grown = tiles[rng() % tiles.size()];
    const size_t d = rng() % dims;
    if (grown.offsets[d] > 0) {
      --grown.offsets[d];
      ++grown.lengths[d];
    } else if (grown.lengths[d] < whole.lengths[d]) {
      ++grown.lengths[d];
    }
    ExpectAgrees(tiles);
    if (HasFailure()) return;
  }
}

// A row split, a split of any other dimension and grids over two or three
// of them: the cases a sharded tensor has, each at a size where comparing
// every pair would take minutes.
TEST(FindOverlapTest, SplitsAlongAnyDimensionAndGrids) {
  const std::vector<std::vector<int64_t>> grids = {
      {200000, 1, 1}, {1, 200000, 1}, {1, 1, 200000},
      {400, 1, 500},  {1, 500, 400},  {50, 60, 70}};
  for (const std::vector<int64_t>& grid : grids) {
    std::vector<Box> boxes;
    for (int64_t a = 0; a < grid[0]; ++a) {
      for (int64_t b = 0; b < grid[1]; ++b) {
        for (int64_t c = 0; c < grid[2]; ++c) {
          boxes.push_back({{a * 2, b * 3, c}, {2, 3, 1}});
        }
      }
    }
    EXPECT_FALSE(FindOverlap(Refs(boxes)));
    boxes.push_back(boxes[boxes.size() / 2]);
    const auto found = FindOverlap(Refs(boxes));
    ASSERT_TRUE(found);
    EXPECT_EQ(found->first, boxes.size() / 2);
    EXPECT_EQ(found->second, boxes.size() - 1);
  }
}

TEST(FindOverlapTest, EmptyAndZeroDimensionalBoxes) {
  EXPECT_FALSE(FindOverlap({}));
  std::vector<Box> scalars = {{{}, {}}, {{}, {}}};
  const std::pair<size_t, size_t> first_two(0, 1);
  EXPECT_EQ(FindOverlap(Refs(scalars)), first_two);
  std::vector<Box> empties = {{{0, 0}, {0, 4}}, {{0, 0}, {4, 4}}};
  EXPECT_FALSE(FindOverlap(Refs(empties)));
}

}  // namespace
}  // namespace ckpt
