// Loads read slabs of large tensors on several threads: the bytes land where
// they belong whatever the chunk, slab and box edges, and damage is still
// reported.
#include <cstring>
#include <numeric>

#include "checkpoint/reader.h"
#include "ckpt/checkpoint_manager.h"
#include "gtest/gtest.h"
#include "testing/backends.h"

namespace ckpt {
namespace {

constexpr int64_t kRows = 1000;
constexpr int64_t kCols = 37;  // 148-byte rows: chunks and slabs cut rows

std::vector<float> Global() {
  std::vector<float> g(kRows * kCols);
  std::iota(g.begin(), g.end(), 1.0f);
  return g;
}

class ParallelReadTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    Options o;
    o.chunk_size = 4096;
    o.io_threads = GetParam();
    auto mgr = CheckpointManager::Open(root_.url(), o);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    mgr_ = std::move(mgr).value();
    State s;
    s.AddTensor("w", View(std::span<const float>(global_), {kRows, kCols}));
    ASSERT_TRUE(mgr_->Save(1, s).ok());
  }

  const testing::TestRoot root_{testing::Backend::kMemory, "parallel-read"};
  const std::vector<float> global_ = Global();
  std::unique_ptr<CheckpointManager> mgr_;
};

TEST_P(ParallelReadTest, WholeTensorComesBackExactly) {
  std::vector<float> got(kRows * kCols, 0.0f);
  State s;
  s.AddTensor("w", View(std::span<float>(got), {kRows, kCols}));
  Result<CheckpointInfo> info = mgr_->Load(1, s);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(got, global_);
  Result<LoadedCheckpoint> all = mgr_->LoadAll(1);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const Entry* w = all->state.Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(std::memcmp(w->tensor.data, global_.data(),
                        global_.size() * sizeof(float)),
            0);
}

TEST_P(ParallelReadTest, ABoxComesBackExactly) {
  const int64_t r0 = 123, nr = 754, c0 = 5, nc = 26;
  std::vector<float> got(nr * nc, 0.0f);
  State s;
  s.AddTensorPiece("w", {kRows, kCols}, {r0, c0},
                   View(std::span<float>(got), {nr, nc}));
  ASSERT_TRUE(mgr_->Load(1, s).ok());
  for (int64_t i = 0; i < nr; ++i) {
    for (int64_t j = 0; j < nc; ++j) {
      ASSERT_EQ(got[i * nc + j], global_[(r0 + i) * kCols + c0 + j])
          << "row " << i << " col " << j;
    }
  }
}

TEST_P(ParallelReadTest, ADamagedChunkIsDataLoss) {
  auto desc = mgr_->Describe(1);
  ASSERT_TRUE(desc.ok());
  const std::string key = desc->objects.at(0).key;
  Result<std::string> bytes = mgr_->storage().ReadAll(key);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() - 100] ^= 1;  // in the last chunk
  ASSERT_TRUE(mgr_->storage().PutString(key, *bytes).ok());
  std::vector<float> got(kRows * kCols);
  State s;
  s.AddTensor("w", View(std::span<float>(got), {kRows, kCols}));
  Result<CheckpointInfo> info = mgr_->Load(1, s);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(info.status().message().find("checksum mismatch"),
            std::string::npos)
      << info.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Threads, ParallelReadTest, ::testing::Values(1, 2, 4));

TEST(SplitBoxReadTest, SlabsCoverTheBoxOnceInOrder) {
  std::vector<std::byte> dest(kRows * kCols * 4);
  BoxRead whole{nullptr, {10, 0}, {kRows, kCols}, dest};
  std::vector<BoxRead> slabs = SplitBoxRead(whole, 16384);
  ASSERT_GT(slabs.size(), 1u);
  int64_t row = 10;
  std::byte* at = dest.data();
  for (const BoxRead& b : slabs) {
    EXPECT_EQ(b.offsets[0], row);
    EXPECT_EQ(b.offsets[1], 0);
    EXPECT_EQ(b.lengths[1], kCols);
    EXPECT_EQ(b.dest.data(), at);
    EXPECT_EQ(b.dest.size(), static_cast<size_t>(b.lengths[0] * kCols * 4));
    row += b.lengths[0];
    at += b.dest.size();
  }
  EXPECT_EQ(row, 10 + kRows);
  EXPECT_EQ(at, dest.data() + dest.size());
  // Small boxes and scalars stay whole.
  EXPECT_EQ(SplitBoxRead(whole, dest.size()).size(), 1u);
  BoxRead scalar{nullptr, {}, {}, std::span<std::byte>(dest).first(4)};
  EXPECT_EQ(SplitBoxRead(scalar, 1).size(), 1u);
}

}  // namespace
}  // namespace ckpt
