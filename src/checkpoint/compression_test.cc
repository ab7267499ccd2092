// Saves with compressed chunks load back bit for bit, whatever the dtype,
// layout, storage, world size or incremental chain; damage in a compressed
// chunk is DataLoss naming it and changes nothing of the caller's; older
// checkpoints without compression still load; kAuto compresses where the
// storage is slow and not where it is fast.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/storage.h"
#include "format/constants.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/run_ranks.h"

namespace ckpt {
namespace {

using testing::Backend;
using testing::RunRanks;
using testing::TestRoot;

// Bytes of `dtype` shaped like trained weights (normal, small spread): what
// compression is for. Random bytes would not compress at all.
std::vector<std::byte> WeightBytes(DType dtype, size_t elements,
                                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t w = DTypeSize(dtype);
  std::vector<std::byte> out(elements * w);
  for (size_t i = 0; i < elements; ++i) {
    const float f = normal(rng);
    std::byte* at = out.data() + i * w;
    switch (dtype) {
      case DType::kF64: {
        const double d = f;
        std::memcpy(at, &d, 8);
        break;
      }
      case DType::kI64:
      case DType::kU64: {
        const int64_t v = static_cast<int64_t>(f * 1e4);
        std::memcpy(at, &v, 8);
        break;
      }
      case DType::kF32: {
        std::memcpy(at, &f, 4);
        break;
      }
      case DType::kI32:
      case DType::kU32: {
        const int32_t v = static_cast<int32_t>(f * 1e4);
        std::memcpy(at, &v, 4);
        break;
      }
      case DType::kBF16: {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint16_t top = static_cast<uint16_t>(u >> 16);
        std::memcpy(at, &top, 2);
        break;
      }
      default: {  // the other 2- and 1-byte types: small integers
        const uint16_t v = static_cast<uint16_t>(std::lround(f * 100) & 0x3f);
        std::memcpy(at, &v, w);
        break;
      }
    }
  }
  return out;
}

Options Compressed(
    Options::MetadataLayout layout = Options::MetadataLayout::kIndexed) {
  Options o;
  o.metadata_layout = layout;
  o.chunk_size = 64 << 10;  // many chunks, some cut inside an element
  o.compression.mode = Compression::Mode::kZstd;
  return o;
}

// One tensor per dtype, 100,003 elements each (not a multiple of any
// element count per chunk), with its own bytes.
struct Model {
  explicit Model(uint64_t seed) {
    for (DType d : AllDTypes())
      bytes.push_back(WeightBytes(d, kElements, seed++));
  }
  State ForSave() {
    State s;
    for (size_t i = 0; i < bytes.size(); ++i) {
      const DType d = AllDTypes()[i];
      s.AddTensor(std::string(DTypeName(d)),
                  TensorView{d, {kElements}, bytes[i].data(), true});
    }
    return s;
  }
  uint64_t RawBytes() const {
    uint64_t n = 0;
    for (const auto& b : bytes) n += b.size();
    return n;
  }
  static constexpr int64_t kElements = 100003;
  std::vector<std::vector<std::byte>> bytes;
};

class CompressionTest : public ::testing::TestWithParam<
                            std::tuple<Backend, Options::MetadataLayout>> {};

TEST_P(CompressionTest, EveryDTypeRoundTripsBitForBit) {
  const auto [backend, layout] = GetParam();
  TestRoot root(backend, "compression");
  Model model(1);
  {
    auto mgr = CheckpointManager::Open(root.url(), Compressed(layout));
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    auto saved = (*mgr)->Save(1, model.ForSave());
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    // Fewer bytes than the tensors hold: the chunks were compressed.
    EXPECT_LT(saved->info.bytes, model.RawBytes() * 3 / 4)
        << saved->info.bytes << " of " << model.RawBytes();
  }
  // A fresh manager without compression reads them: loads read every codec.
  auto mgr = CheckpointManager::Open(root.url());
  ASSERT_TRUE(mgr.ok());
  Model zeros(1);
  for (auto& b : zeros.bytes) std::fill(b.begin(), b.end(), std::byte{0});
  State into = zeros.ForSave();
  for (bool transactional : {true, false}) {
    LoadOptions lo;
    lo.transactional = transactional;
    auto loaded = (*mgr)->Load(1, into, lo);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    for (size_t i = 0; i < model.bytes.size(); ++i) {
      EXPECT_EQ(zeros.bytes[i], model.bytes[i])
          << DTypeName(AllDTypes()[i]) << " transactional " << transactional;
    }
  }
  auto all = (*mgr)->LoadAll(1);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  for (size_t i = 0; i < model.bytes.size(); ++i) {
    const Entry* e = all->state.Find(DTypeName(AllDTypes()[i]));
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(std::memcmp(e->tensor.data, model.bytes[i].data(),
                          model.bytes[i].size()),
              0);
  }
  auto report = (*mgr)->Verify(1);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << report->problems.front();
  EXPECT_EQ(report->bytes_checked, model.RawBytes());
}

INSTANTIATE_TEST_SUITE_P(
    Roots, CompressionTest,
    ::testing::Combine(::testing::Values(Backend::kMemory, Backend::kFile),
                       ::testing::Values(Options::MetadataLayout::kIndexed,
                                         Options::MetadataLayout::kJson)));

// The data object's bytes [begin, end) past its header, where the chunks are.
std::string DataKey(Storage& storage) {
  auto objects = storage.List("step-000000000001/");
  for (const ObjectInfo& o : *objects) {
    if (o.key.ends_with(format::kDataSuffix)) return o.key;
  }
  return "";
}

TEST(Compression, AFlippedByteIsDataLossNamingTheChunkAndLoadChangesNothing) {
  for (Backend backend : {Backend::kMemory, Backend::kFile}) {
    TestRoot root(backend, "compression-damage");
    Model model(2);
    {
      auto mgr = CheckpointManager::Open(root.url(), Compressed());
      ASSERT_TRUE((*mgr)->Save(1, model.ForSave()).ok());
    }
    auto storage = OpenStorage(root.url());
    ASSERT_TRUE(storage.ok());
    const std::string key = DataKey(**storage);
    ASSERT_FALSE(key.empty());
    std::string bytes = (*storage)->ReadAll(key).value();
    // Past the header, in the middle of the chunks.
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x10);
    ASSERT_TRUE((*storage)->PutString(key, bytes).ok());

    auto mgr = CheckpointManager::Open(root.url());
    for (bool transactional : {true, false}) {
      Model sentinel(2);
      for (auto& b : sentinel.bytes)
        std::fill(b.begin(), b.end(), std::byte{7});
      State into = sentinel.ForSave();
      LoadOptions lo;
      lo.transactional = transactional;
      auto loaded = (*mgr)->Load(1, into, lo);
      ASSERT_FALSE(loaded.ok());
      EXPECT_EQ(loaded.status().code(), ErrorCode::kDataLoss);
      EXPECT_NE(loaded.status().message().find(key), std::string::npos)
          << loaded.status().ToString();
      EXPECT_NE(loaded.status().message().find("of entry"), std::string::npos)
          << loaded.status().ToString();
      if (!transactional) continue;  // streaming may have written some
      for (const auto& b : sentinel.bytes) {
        EXPECT_TRUE(std::all_of(b.begin(), b.end(),
                                [](std::byte x) { return x == std::byte{7}; }))
            << BackendName(backend) << ": a failed load changed the state";
      }
    }
    auto report = (*mgr)->Verify(1);
    ASSERT_TRUE(report.ok());
    ASSERT_EQ(report->problems.size(), 1u);
    EXPECT_NE(report->problems[0].find(key), std::string::npos);
  }
}

TEST(Compression, IncrementalSavesReferenceUnchangedCompressedChunks) {
  TestRoot root(Backend::kMemory, "compression-incremental");
  Model model(3);
  auto mgr = CheckpointManager::Open(root.url(), Compressed());
  ASSERT_TRUE((*mgr)->Save(1, model.ForSave()).ok());
  // One element of the F32 tensor changes: one chunk of one tensor.
  const size_t f32 = static_cast<size_t>(DType::kF32);
  model.bytes[f32][1000] ^= std::byte{1};
  SaveOptions inc;
  inc.incremental = true;
  auto second = (*mgr)->Save(2, model.ForSave(), inc);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_GT(second->info.referenced_bytes, 0u);
  EXPECT_LT(second->info.bytes, (64u << 10));  // one chunk, compressed
  Model zeros(3);
  for (auto& b : zeros.bytes) std::fill(b.begin(), b.end(), std::byte{0});
  State into = zeros.ForSave();
  auto fresh = CheckpointManager::Open(root.url());
  ASSERT_TRUE((*fresh)->Load(2, into).ok());
  EXPECT_EQ(zeros.bytes, model.bytes);
}

TEST(Compression, ASaveOfTwoRanksLoadsOntoThree) {
  TestRoot root(Backend::kFile, "compression-reshard");
  constexpr int64_t kRows = 300, kCols = 257;
  const std::vector<std::byte> all = WeightBytes(DType::kF32, kRows * kCols, 4);
  RunRanks(2, [&](int rank, Communicator* comm) {
    Options o = Compressed();
    o.communicator = comm;
    auto mgr = CheckpointManager::Open(root.url(), o);
    ASSERT_TRUE(mgr.ok());
    const int64_t rows = kRows / 2;
    std::vector<std::byte> mine(all.begin() + rank * rows * kCols * 4,
                                all.begin() + (rank + 1) * rows * kCols * 4);
    State s;
    s.AddTensorPiece(
        "w", {kRows, kCols}, {rank * rows, 0},
        TensorView{DType::kF32, {rows, kCols}, mine.data(), false});
    auto saved = (*mgr)->Save(1, s);
    ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  });
  RunRanks(3, [&](int rank, Communicator* comm) {
    Options o;
    o.communicator = comm;
    auto mgr = CheckpointManager::Open(root.url(), o);
    ASSERT_TRUE(mgr.ok());
    const int64_t rows = kRows / 3;
    std::vector<std::byte> mine(rows * kCols * 4);
    State s;
    s.AddTensorPiece("w", {kRows, kCols}, {rank * rows, 0},
                     TensorView{DType::kF32, {rows, kCols}, mine.data(), true});
    auto loaded = (*mgr)->Load(1, s);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_EQ(std::memcmp(mine.data(), all.data() + rank * rows * kCols * 4,
                          mine.size()),
              0)
        << "rank " << rank;
  });
}

TEST(Compression, CheckpointsWithAndWithoutCompressionShareARoot) {
  TestRoot root(Backend::kMemory, "compression-mixed");
  Model first(5), second(6);
  {
    auto plain = CheckpointManager::Open(root.url());
    ASSERT_TRUE((*plain)->Save(1, first.ForSave()).ok());
  }
  auto mgr = CheckpointManager::Open(root.url(), Compressed());
  SaveOptions raw;
  raw.compression = Compression{};  // this save only: off
  auto two = (*mgr)->Save(2, second.ForSave(), raw);
  ASSERT_TRUE(two.ok());
  EXPECT_GE(two->info.bytes, second.RawBytes());
  auto three = (*mgr)->Save(3, second.ForSave());
  ASSERT_TRUE(three.ok());
  EXPECT_LT(three->info.bytes, second.RawBytes() * 3 / 4);
  for (int64_t step : {1, 2, 3}) {
    Model zeros(0);
    State into = zeros.ForSave();
    ASSERT_TRUE((*mgr)->Load(step, into).ok()) << step;
    EXPECT_EQ(zeros.bytes, step == 1 ? first.bytes : second.bytes) << step;
  }
}

// A storage whose objects cannot have their first bytes rewritten (as an
// object store's): the writer compresses every chunk before it writes.
class NoPrefixRewrite : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(auto w, StorageWrapper::NewWritable(key));
    return std::unique_ptr<WritableObject>(new Plain(std::move(w)));
  }

 private:
  class Plain : public WritableObject {
   public:
    explicit Plain(std::unique_ptr<WritableObject> w) : w_(std::move(w)) {}
    Status Append(std::span<const std::byte> d) override {
      return w_->Append(d);
    }
    Status Close() override { return w_->Close(); }
    uint64_t size() const override { return w_->size(); }

   private:
    std::unique_ptr<WritableObject> w_;
  };
};

TEST(Compression, WhereFirstBytesCannotBeRewrittenChunksAreCompressedFirst) {
  TestRoot root(Backend::kMemory, "compression-no-rewrite");
  Model model(10);
  auto storage = OpenStorage(root.url());
  ASSERT_TRUE(storage.ok());
  auto mgr = CheckpointManager::Open(
      std::make_unique<NoPrefixRewrite>(std::move(storage).value()),
      Compressed());
  ASSERT_TRUE(mgr.ok());
  auto saved = (*mgr)->Save(1, model.ForSave());
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_LT(saved->info.bytes, model.RawBytes() * 3 / 4);
  Model zeros(0);
  State into = zeros.ForSave();
  auto fresh = CheckpointManager::Open(root.url());
  ASSERT_TRUE((*fresh)->Load(1, into).ok());
  EXPECT_EQ(zeros.bytes, model.bytes);
  auto report = (*fresh)->Verify(1);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok());
}

TEST(Compression, LevelsOutsideZstdsAreRefused) {
  TestRoot root(Backend::kMemory, "compression-level");
  Options o = Compressed();
  o.compression.level = 40;
  auto bad = CheckpointManager::Open(root.url(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("compression level 40"),
            std::string::npos);
  auto mgr = CheckpointManager::Open(root.url());
  Model model(7);
  SaveOptions save;
  save.compression = Compression{Compression::Mode::kZstd, -20};
  auto saved = (*mgr)->Save(1, model.ForSave(), save);
  ASSERT_FALSE(saved.ok());
  EXPECT_EQ(saved.status().code(), ErrorCode::kInvalidArgument);
}

// kAuto on a storage that writes at 4 MB/s (slower than any compressor)
// compresses from its second save on, once it has measured the writes; on
// memory (faster than any compressor) it writes raw. Its write speed is the
// fastest of the last three writes, so that one write slowed by a busy
// machine (this test beside others) does not turn memory to compressing:
// the fourth save is raw however the first three went.
TEST(Compression, AutoCompressesWhereTheStorageIsSlowOnly) {
  Options o;
  o.compression.mode = Compression::Mode::kAuto;
  Model model(8);
  std::vector<std::vector<std::byte>> bf16 = {
      WeightBytes(DType::kBF16, 3 << 20, 9)};  // 6 MiB
  State s;
  s.AddTensor("w", TensorView{DType::kBF16, {3 << 20}, bf16[0].data(), false});
  for (bool slow : {true, false}) {
    TestRoot root(Backend::kMemory, slow ? "auto-slow" : "auto-fast");
    auto storage = OpenStorage(root.url());
    ASSERT_TRUE(storage.ok());
    auto mgr = CheckpointManager::Open(
        slow ? NewRateLimitedStorage(std::move(storage).value(), 4e6)
             : std::move(storage).value(),
        o);
    ASSERT_TRUE(mgr.ok());
    auto one = (*mgr)->Save(1, s);
    auto two = (*mgr)->Save(2, s);
    ASSERT_TRUE(one.ok() && two.ok());
    EXPECT_GE(one->info.bytes, bf16[0].size()) << "measured first, raw";
    if (slow) {
      EXPECT_LT(two->info.bytes, bf16[0].size() * 4 / 5);
    } else {
      ASSERT_TRUE((*mgr)->Save(3, s).ok());
      auto four = (*mgr)->Save(4, s);
      ASSERT_TRUE(four.ok());
      EXPECT_GE(four->info.bytes, bf16[0].size());
    }
    std::vector<std::byte> back(bf16[0].size());
    State into;
    into.AddTensor("w", TensorView{DType::kBF16, {3 << 20}, back.data(), true});
    ASSERT_TRUE((*mgr)->Load(2, into).ok());
    EXPECT_EQ(back, bf16[0]);
  }
}

}  // namespace
}  // namespace ckpt
