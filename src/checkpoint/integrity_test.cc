// Every single-bit flip, and every truncation, of every file of a small
// checkpoint (two ranks' data files and the manifest; with the indexed
// layout also the directory and the two ranks' indexes) is caught: Verify
// reports it, and Load never returns a wrong byte. Load fails (DataLoss) on
// damage to anything it reads: the manifest and the tensor bytes. A data
// file's safetensors header is for other readers — ckpt reads its bytes
// where the checksummed manifest says — so damage there is Verify's to
// report, and Load still returns every byte right.
#include <string>
#include <tuple>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/safetensors.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/step_model.h"

namespace ckpt {
namespace {

using testing::CheckStep;
using testing::RunRanks;
using testing::StepModel;

constexpr int kRanks = 2;
constexpr int64_t kRows = 1;  // 96 floats per rank: a small checkpoint

// The layout, and whether the chunks are compressed.
using Variant = std::tuple<Options::MetadataLayout, bool>;

class IntegrityTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    StepModel model(1, kRanks, kRows);
    RunRanks(kRanks, [&](int rank, Communicator* comm) {
      Options o;
      o.communicator = comm;
      o.metadata_layout = std::get<0>(GetParam());
      if (std::get<1>(GetParam())) {
        o.compression.mode = Compression::Mode::kZstd;
      }
      auto mgr = CheckpointManager::Open(url_, o);
      ASSERT_TRUE(mgr.ok());
      auto saved = (*mgr)->Save(1, model.ForRank(rank));
      ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    });
    auto storage = OpenStorage(url_);
    ASSERT_TRUE(storage.ok());
    storage_ = std::move(storage).value();
    auto objects = storage_->List("step-");
    ASSERT_TRUE(objects.ok());
    for (const ObjectInfo& o : *objects) keys_.push_back(o.key);
    // The manifest and 2 data files; indexed: also the directory and 2
    // indexes.
    if (std::get<1>(GetParam())) {
      // Each rank's weights compressed (their exponents shrink): the
      // flips below land in compressed chunks too.
      int compressed = 0;
      for (const std::string& key : keys_) {
        if (!key.ends_with(format::kDataSuffix)) continue;
        compressed += storage_->ReadAll(key).value().find("ckpt.compressed") !=
                      std::string::npos;
      }
      ASSERT_EQ(compressed, kRanks);
    }
    const bool indexed =
        std::get<0>(GetParam()) == Options::MetadataLayout::kIndexed;
    ASSERT_EQ(keys_.size(), indexed ? 2u + 2 * kRanks : 1u + kRanks);
  }

  // What Verify and Load make of the checkpoint as it is now; `in_header`:
  // the damage is in a data file's safetensors header.
  void Check(const std::string& what, bool in_header) {
    auto mgr = CheckpointManager::Open(url_);  // nothing cached
    ASSERT_TRUE(mgr.ok());
    auto report = (*mgr)->Verify(1);
    EXPECT_TRUE(!report.ok() || !report->ok()) << what << ": Verify missed it";
    ++checked_;
    const std::string loaded = CheckStep(**mgr, 1, kRanks, kRows);
    if (in_header) {
      EXPECT_EQ(loaded, "") << what << ": Load returned wrong bytes";
    } else {
      EXPECT_NE(loaded, "") << what << ": Load missed it";
      EXPECT_EQ(loaded.find("differ"), std::string::npos)
          << what << ": Load returned wrong bytes: " << loaded;
    }
  }

  // Bytes [0, end) of a data file are its length prefix and header.
  uint64_t HeaderEnd(const std::string& key, const std::string& bytes) {
    if (!key.ends_with(format::kDataSuffix)) return 0;
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) {
      len = (len << 8) | static_cast<unsigned char>(bytes[i]);
    }
    return 8 + len;
  }

  const testing::TestRoot root_{testing::Backend::kMemory, "integrity"};
  const std::string url_ = root_.url();
  std::unique_ptr<Storage> storage_;
  std::vector<std::string> keys_;
  uint64_t checked_ = 0;
};

TEST_P(IntegrityTest, EverySingleBitFlip) {
  uint64_t bits = 0;
  for (const std::string& key : keys_) {
    const std::string original = storage_->ReadAll(key).value();
    const uint64_t header_end = HeaderEnd(key, original);
    for (size_t i = 0; i < original.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string bytes = original;
        bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
        ASSERT_TRUE(storage_->PutString(key, bytes).ok());
        Check(
            key + " byte " + std::to_string(i) + " bit " + std::to_string(bit),
            i < header_end);
        if (HasFatalFailure()) return;
        ++bits;
      }
    }
    ASSERT_TRUE(storage_->PutString(key, original).ok());
  }
  auto mgr = CheckpointManager::Open(url_);
  EXPECT_EQ(CheckStep(**mgr, 1, kRanks, kRows), "");
  std::printf("[ integrity ] %llu single-bit flips in %zu files, each caught\n",
              static_cast<unsigned long long>(bits), keys_.size());
}

TEST_P(IntegrityTest, EveryTruncation) {
  uint64_t cuts = 0;
  for (const std::string& key : keys_) {
    const std::string original = storage_->ReadAll(key).value();
    for (size_t len = 0; len < original.size(); ++len) {
      ASSERT_TRUE(storage_->PutString(key, original.substr(0, len)).ok());
      Check(key + " cut to " + std::to_string(len) + " bytes", false);
      if (HasFatalFailure()) return;
      ++cuts;
    }
    ASSERT_TRUE(storage_->PutString(key, original).ok());
  }
  std::printf("[ integrity ] %llu truncations, each caught\n",
              static_cast<unsigned long long>(cuts));
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, IntegrityTest,
    ::testing::Combine(::testing::Values(Options::MetadataLayout::kIndexed,
                                         Options::MetadataLayout::kJson),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) ==
                                 Options::MetadataLayout::kIndexed
                             ? "Indexed"
                             : "Json") +
             (std::get<1>(info.param) ? "Compressed" : "");
    });

}  // namespace
}  // namespace ckpt
