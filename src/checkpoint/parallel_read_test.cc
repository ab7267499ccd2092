// Loads read slabs of large tensors on several threads: the bytes land where
// they belong whatever the chunk, slab and box edges, and damage is still
// reported.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>

#include "ckpt/checkpoint_manager.h"
#include "data/reader.h"
#include "gtest/gtest.h"
#include "testing/backends.h"

namespace ckpt {
namespace {

// 148-byte rows: chunks and slabs cut rows. 80,000 rows (11.8 MB) make two
// slabs of the loader's 8 MiB at least.
constexpr int64_t kRows = 80000;
constexpr int64_t kCols = 37;

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
  // Rows 50,123 to 61,876: across the two slabs' edge.
  const int64_t r0 = 50123, nr = 11754, c0 = 5, nc = 26;
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

// Counts range reads, the calls that cost an open (file) or a GET (S3).
class CountingReads : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    ++reads;
    return StorageWrapper::ReadRange(key, offset, out);
  }
  std::atomic<int> reads{0};
};

// An optimizer's per-parameter state: many small tensors (some empty, some
// of several chunks), loaded with a few range reads, not one per tensor, and
// still exactly, from one data object or from a chain of two.
class SmallTensorsTest : public ::testing::TestWithParam<int> {
 protected:
  static constexpr int kTensors = 2000;

  void SetUp() override {
    Options o;
    o.chunk_size = 4096;
    o.io_threads = GetParam();
    auto storage = root_.Open();
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    auto counted = std::make_unique<CountingReads>(std::move(storage).value());
    counting_ = counted.get();
    auto mgr = CheckpointManager::Open(std::move(counted), o);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    mgr_ = std::move(mgr).value();
    for (int i = 0; i < kTensors; ++i) {
      // 0 to 3,100 floats: empty, part of a chunk, up to four chunks.
      std::vector<float> t((i * 37) % 3101);
      std::iota(t.begin(), t.end(), static_cast<float>(i));
      values_.push_back(std::move(t));
    }
    ASSERT_TRUE(mgr_->Save(1, Saved()).ok());
  }

  State Saved() {
    State s;
    for (int i = 0; i < kTensors; ++i) {
      s.AddTensor("opt." + std::to_string(i),
                  View(std::span<const float>(values_[i]),
                       {static_cast<int64_t>(values_[i].size())}));
    }
    return s;
  }

  // A state of fresh buffers in `got` (filled with -1), one per tensor.
  State Targets(std::vector<std::vector<float>>& got) {
    got.assign(kTensors, {});
    State s;
    for (int i = 0; i < kTensors; ++i) {
      got[i].assign(values_[i].size(), -1.0f);
      s.AddTensor("opt." + std::to_string(i),
                  View(std::span<float>(got[i]),
                       {static_cast<int64_t>(got[i].size())}));
    }
    return s;
  }

  // Loads `step` into fresh buffers; the range reads it took.
  int LoadAndCheck(int64_t step) {
    std::vector<std::vector<float>> got;
    State s = Targets(got);
    const int before = counting_->reads;
    Result<CheckpointInfo> info = mgr_->Load(step, s);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    for (int i = 0; i < kTensors; ++i) {
      EXPECT_EQ(got[i], values_[i]) << "opt." << i;
    }
    return counting_->reads - before;
  }

  const testing::TestRoot root_{testing::Backend::kFile, "small-tensors"};
  CountingReads* counting_ = nullptr;
  std::unique_ptr<CheckpointManager> mgr_;
  std::vector<std::vector<float>> values_;
};

TEST_P(SmallTensorsTest, ComeBackExactlyInAFewReads) {
  // 12 MB in one object: two spans of 8 MiB at most, however the threads
  // take them.
  EXPECT_LE(LoadAndCheck(1), 3);
}

TEST_P(SmallTensorsTest, SlicesOfOneBufferComeBackExactly) {
  // Targets back to back in one buffer, as a flat parameter buffer's views
  // are: the spans are read straight into it.
  size_t total = 0;
  for (const auto& v : values_) total += v.size();
  std::vector<float> flat(total, -1.0f);
  State s;
  size_t at = 0;
  for (int i = 0; i < kTensors; ++i) {
    const size_t n = values_[i].size();
    s.AddTensor(
        "opt." + std::to_string(i),
        View(std::span<float>(flat.data() + at, n), {static_cast<int64_t>(n)}));
    at += n;
  }
  const int before = counting_->reads;
  Result<CheckpointInfo> info = mgr_->Load(1, s);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_LE(counting_->reads - before, 3);
  at = 0;
  for (int i = 0; i < kTensors; ++i) {
    ASSERT_TRUE(std::equal(values_[i].begin(), values_[i].end(),
                           flat.begin() + static_cast<ptrdiff_t>(at)))
        << "opt." << i;
    at += values_[i].size();
  }
}

TEST_P(SmallTensorsTest, AChainOfTwoComesBackExactlyInAFewReads) {
  for (int i = 0; i < kTensors; i += 3) {
    for (float& x : values_[i]) x = -x;
  }
  ASSERT_TRUE(mgr_->Save(2, Saved(), {.incremental = true}).ok());
  // Step 1's object is read around the changed tensors' old bytes.
  EXPECT_LE(LoadAndCheck(2), 6);
}

TEST_P(SmallTensorsTest, ALargeTensorOfSmallChunksInAChainTakesAFewReads) {
  // 1,024 rows of 4 KiB, one chunk each; every 20th row changed in step 3,
  // so step 3's rows come from two objects, interleaved.
  constexpr int64_t kBigRows = 1024, kBigCols = 1024;
  std::vector<float> big(kBigRows * kBigCols);
  std::iota(big.begin(), big.end(), 0.5f);
  const auto save = [&](int64_t step, bool incremental) {
    State s;
    s.AddTensor("big", View(std::span<const float>(big), {kBigRows, kBigCols}));
    return mgr_->Save(step, s, {.incremental = incremental});
  };
  ASSERT_TRUE(save(2, false).ok());
  for (int64_t r = 0; r < kBigRows; r += 20) {
    for (int64_t c = 0; c < kBigCols; ++c) big[r * kBigCols + c] *= -1.0f;
  }
  ASSERT_TRUE(save(3, true).ok());
  std::vector<float> got(big.size(), 0.0f);
  State s;
  s.AddTensor("big", View(std::span<float>(got), {kBigRows, kBigCols}));
  const int before = counting_->reads;
  Result<CheckpointInfo> info = mgr_->Load(3, s);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(got, big);
  // Step 2's object in one span (the changed rows' old bytes read across),
  // step 3's in another: far fewer than one read per chunk.
  EXPECT_LE(counting_->reads - before, 8);
}

TEST_P(SmallTensorsTest, ADamagedChunkNamesItsEntry) {
  auto desc = mgr_->Describe(1);
  ASSERT_TRUE(desc.ok());
  const std::string key = desc->objects.at(0).key;
  Result<std::string> bytes = mgr_->storage().ReadAll(key);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 1;
  ASSERT_TRUE(mgr_->storage().PutString(key, *bytes).ok());
  std::vector<std::vector<float>> got;
  State s = Targets(got);
  Result<CheckpointInfo> info = mgr_->Load(1, s);
  ASSERT_FALSE(info.ok());
  EXPECT_EQ(info.status().code(), ErrorCode::kDataLoss);
  const std::string m = info.status().message();
  EXPECT_NE(m.find("checksum mismatch"), std::string::npos) << m;
  EXPECT_NE(m.find("of entry \"opt."), std::string::npos) << m;
  EXPECT_NE(m.find(key), std::string::npos) << m;
}

TEST_P(SmallTensorsTest, ATruncatedObjectNamesAnEntryAndItsRange) {
  auto desc = mgr_->Describe(1);
  ASSERT_TRUE(desc.ok());
  const std::string key = desc->objects.at(0).key;
  Result<std::string> bytes = mgr_->storage().ReadAll(key);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(
      mgr_->storage().PutString(key, bytes->substr(0, bytes->size() / 2)).ok());
  Result<LoadedCheckpoint> all = mgr_->LoadAll(1);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), ErrorCode::kDataLoss)
      << all.status().ToString();
  EXPECT_NE(all.status().message().find(key), std::string::npos)
      << all.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Threads, SmallTensorsTest, ::testing::Values(1, 2, 4));

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
