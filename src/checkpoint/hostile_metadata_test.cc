// Re-signed hostile metadata: a version 3 checkpoint whose directory or
// index is rewritten and then signed again (every checksum recomputed, the
// index's in the directory and the directory's in the commit record), so
// that integrity checks pass and only the structural checks stand between
// the bytes and a reader. Verify, Load, List and Describe, and `ckpt
// verify`, `ls` and `show`, each refuse it with an error that names what is
// wrong; the CLI runs under an address-space limit, so a reader that sizes
// an allocation or a loop by a hostile count aborts there instead of
// passing; and a refused load leaves the caller's buffers as they were.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <span>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/storage.h"
#include "format/constants.h"
#include "format/index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/scoped_env.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

using format::Directory;
using format::RankIndex;
using testing::Contains;
using testing::RunResult;

constexpr int64_t kStep = 3;
constexpr size_t kFloats = 4096;  // 16 KiB of "w": four 4 KiB chunks
constexpr uint64_t kChunkSize = 4096;
// The CLI's address space: a few times what it needs here, far below what
// a reader sized by a hostile count would ask for.
constexpr uint64_t kAddressSpaceLimit = uint64_t{512} << 20;
constexpr uint64_t kSlack = uint64_t{64} << 20;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

class HostileMetadataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    weights_.resize(kFloats);
    std::iota(weights_.begin(), weights_.end(), 1.0f);
    Options o;
    o.chunk_size = kChunkSize;
    auto mgr = CheckpointManager::Open(url_, o);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    ASSERT_TRUE((*mgr)->Save(kStep, Saved()).ok());
    storage_ = OpenStorage(url_).value();
    auto header = format::DecodeManifest(
        storage_->ReadAll(format::ManifestKey(kStep)).value(), "record");
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    ASSERT_EQ(header->version, format::kScalableManifestVersion);
    header_ = *header;
    auto dir = format::DecodeDirectory(
        storage_->ReadAll(header_.directory.key).value(), "directory");
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = *dir;
    index_key_ = format::IndexObjectKey(kStep, 0, header_.attempt);
    auto index =
        format::DecodeRankIndex(storage_->ReadAll(index_key_).value(), "index");
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    index_ = *index;
    ASSERT_EQ(index_.pieces.size(), 2u);  // "w" and "rng"
    ASSERT_EQ(index_.pieces[0].chunks.size(), kFloats * 4 / kChunkSize);
    metadata_bytes_ = storage_->ReadAll(format::ManifestKey(kStep))->size() +
                      header_.directory.size + dir_.indexes[0].size;
  }

  State Saved() {
    State s;
    s.AddTensor("w", View(weights_)).AddBlob("rng", std::string("seed=42"));
    return s;
  }

  // Writes `dir` and `index` and signs them again: the index's size and
  // checksum go into the directory, the directory's into the commit record,
  // whose envelope checksum is recomputed.
  void Resign(Directory dir, const RankIndex& index) {
    const std::string index_bytes = format::EncodeRankIndex(index);
    ASSERT_TRUE(storage_->PutString(index_key_, index_bytes).ok());
    dir.indexes[0] = {index_bytes.size(), Xxh3_128(index_bytes)};
    const std::string dir_bytes = format::EncodeDirectory(dir);
    ASSERT_TRUE(storage_->PutString(header_.directory.key, dir_bytes).ok());
    format::Manifest header = header_;
    header.directory.size = dir_bytes.size();
    header.directory.checksum = Xxh3_128(dir_bytes);
    ASSERT_TRUE(storage_
                    ->PutString(format::ManifestKey(kStep),
                                format::EncodeManifest(header))
                    .ok());
    metadata_bytes_ = format::EncodeManifest(header).size() + dir_bytes.size() +
                      index_bytes.size();
  }

  // `ckpt ARGS` under the address-space limit (under AddressSanitizer,
  // whose shadow memory no such limit admits, under its RSS limit).
  RunResult Ckpt(const std::vector<std::string>& args) {
    if (kAsan) {
      const char* given = std::getenv("ASAN_OPTIONS");
      const std::string options = std::string(given ? given : "") +
                                  ":hard_rss_limit_mb=512:malloc_limit_mb=512";
      testing::ScopedEnv env("ASAN_OPTIONS", options.c_str());
      return testing::RunProgram(CKPT_CLI_PATH, args, scratch_.path());
    }
    return testing::RunProgram(CKPT_CLI_PATH, args, scratch_.path(),
                               kAddressSpaceLimit);
  }

  // What the CLI runs did: each held little more than `healthy_`.
  void ExpectBounded(const RunResult& r, const std::string& what) {
    ASSERT_LE(r.peak_rss_bytes,
              healthy_.peak_rss_bytes + 2 * metadata_bytes_ + kSlack)
        << what << " held " << r.peak_rss_bytes << " bytes";
    std::printf(
        "[ hostile ] %s: peak RSS %llu KiB (healthy verify %llu KiB, "
        "metadata %llu bytes)\n",
        what.c_str(), static_cast<unsigned long long>(r.peak_rss_bytes >> 10),
        static_cast<unsigned long long>(healthy_.peak_rss_bytes >> 10),
        static_cast<unsigned long long>(metadata_bytes_));
  }

  // Every reader refuses the checkpoint, naming `why`: the CLI first (under
  // the limit, so a regression fails there), then, only if the CLI stayed
  // within its bound, the library in this process (which has no limit); a
  // load leaves the caller's buffer as it was. `in_directory`:
  // the damage is in the directory, which listing and describing read too
  // (they read no index, so damage there is verify's and load's to find).
  void ExpectRefused(const std::string& why, bool in_directory) {
    const std::string step = std::to_string(kStep);
    const RunResult verify = Ckpt({"verify", root_, "--step", step});
    ASSERT_EQ(verify.exit_code, 1) << verify.out << verify.err;
    ASSERT_TRUE(Contains(verify.out + verify.err, why));
    EXPECT_TRUE(Contains(verify.out + verify.err, "step-000000000003/"));
    ASSERT_NO_FATAL_FAILURE(ExpectBounded(verify, "ckpt verify"));
    const RunResult show = Ckpt({"show", root_, "--step", step});
    const RunResult ls = Ckpt({"ls", root_});
    ASSERT_NO_FATAL_FAILURE(ExpectBounded(show, "ckpt show"));
    ASSERT_NO_FATAL_FAILURE(ExpectBounded(ls, "ckpt ls"));
    // ls lists what it can read and warns about the rest.
    ASSERT_EQ(ls.exit_code, 0) << ls.out << ls.err;
    if (in_directory) {
      ASSERT_EQ(show.exit_code, 1) << show.out << show.err;
      EXPECT_TRUE(Contains(show.err, why));
      EXPECT_TRUE(Contains(ls.err, "skipping step 3"));
      EXPECT_TRUE(Contains(ls.err, why));
    } else {
      EXPECT_EQ(show.exit_code, 0) << show.out << show.err;
    }

    auto mgr = CheckpointManager::Open(url_);
    ASSERT_TRUE(mgr.ok());
    auto report = (*mgr)->Verify(kStep);
    ASSERT_FALSE(report.ok());
    EXPECT_EQ(report.status().code(), ErrorCode::kDataLoss);
    EXPECT_TRUE(Contains(report.status().message(), why));

    std::vector<float> target(kFloats, -7.0f);
    State s;
    s.AddTensor("w", View(target));
    auto loaded = (*mgr)->Load(kStep, s);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), ErrorCode::kDataLoss);
    EXPECT_TRUE(Contains(loaded.status().ToString(), why));
    EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](float f) {
      return f == -7.0f;
    })) << "the refused load wrote into the caller's buffer";

    auto described = (*mgr)->Describe(kStep);
    auto listed = (*mgr)->List();
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    const bool is_listed =
        std::any_of(listed->begin(), listed->end(),
                    [](const CheckpointInfo& i) { return i.step == kStep; });
    if (in_directory) {
      ASSERT_FALSE(described.ok());
      EXPECT_EQ(described.status().code(), ErrorCode::kDataLoss);
      EXPECT_TRUE(Contains(described.status().message(), why));
      EXPECT_FALSE(is_listed) << "a refused checkpoint is listed";
    } else {
      EXPECT_TRUE(described.ok()) << described.status().ToString();
      EXPECT_TRUE(is_listed);
    }
  }

  testing::TempDir tmp_{"hostile-metadata"};
  testing::TempDir scratch_{"hostile-metadata-cli"};
  const std::string root_ = (tmp_.path() / "root").string();
  const std::string url_ = "file://" + root_;
  std::vector<float> weights_;
  std::unique_ptr<Storage> storage_;
  format::Manifest header_;
  Directory dir_;
  RankIndex index_;
  std::string index_key_;
  uint64_t metadata_bytes_ = 0;
  RunResult healthy_;
};

TEST_F(HostileMetadataTest, HealthyCheckpointPassesUnderTheLimit) {
  const RunResult r = Ckpt({"verify", root_, "--step", std::to_string(kStep)});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "ok: step 3"));
  // Signed again unchanged, it is still a checkpoint: the helper signs
  // exactly as a save does.
  Resign(dir_, index_);
  EXPECT_EQ(Ckpt({"verify", root_, "--step", "3"}).exit_code, 0);
  auto mgr = CheckpointManager::Open(url_);
  std::vector<float> target(kFloats);
  State s;
  s.AddTensor("w", View(target));
  ASSERT_TRUE((*mgr)->Load(kStep, s).ok());
  EXPECT_EQ(target, weights_);
}

// A run of 2^62 empty boxes, all written by rank 0: it adds no element to
// the coverage count, and a reader that listed the pieces it promises held
// memory until the process died.
TEST_F(HostileMetadataTest, HugeCountOfEmptyPiecesIsRefusedBeforeListing) {
  healthy_ = Ckpt({"verify", root_, "--step", std::to_string(kStep)});
  ASSERT_EQ(healthy_.exit_code, 0) << healthy_.err;
  Directory dir = dir_;
  format::DirectoryEntry& w = dir.entries[0];
  ASSERT_EQ(w.name, "w");
  format::PieceRun run;
  run.first_rank = 0;
  run.rank_stride = 0;
  run.count = uint64_t{1} << 62;
  run.offsets = {0};
  run.lengths = {0};
  run.delta = {0};  // every box at row 0, inside the shape
  w.runs.push_back(run);
  Resign(dir, index_);
  ExpectRefused("promises more pieces than the indexes' recorded bytes", true);
}

// Chunk 1 of "w" re-pointed at chunk 0's bytes (with chunk 0's checksum):
// every checksum matches, and a load that did not look would hand chunk 0's
// bytes to chunk 1's place.
TEST_F(HostileMetadataTest, OverlappingChunksOfOneTensorAreRefused) {
  healthy_ = Ckpt({"verify", root_, "--step", std::to_string(kStep)});
  ASSERT_EQ(healthy_.exit_code, 0) << healthy_.err;
  RankIndex index = index_;
  std::vector<format::ChunkRecord>& chunks = index.pieces[0].chunks;
  chunks[1].offset = chunks[0].offset;
  chunks[1].checksum = chunks[0].checksum;
  // The directory's digest of the entry's pieces agrees, too.
  Directory dir = dir_;
  format::EntryRecord e;
  e.pieces.push_back({index.pieces[0].offsets, index.pieces[0].lengths, 0,
                      index.pieces[0].chunks});
  dir.entries[0].pieces_sum = format::PiecesSum(e);
  Resign(dir, index);
  ExpectRefused("overlap bytes", false);
}

// Chunk 1 of "w" moved past the end of its object, or wrapped so that the
// chunk lengths add up to the box's bytes modulo 2^64.
TEST_F(HostileMetadataTest, ChunksOutsideTheirObjectOrBoxAreRefused) {
  healthy_ = Ckpt({"verify", root_, "--step", std::to_string(kStep)});
  ASSERT_EQ(healthy_.exit_code, 0) << healthy_.err;
  {
    RankIndex index = index_;
    index.pieces[0].chunks[1].offset = index.objects[0].size - 10;
    Resign(dir_, index);
    ExpectRefused("runs past the end of", false);
  }
  if (HasFatalFailure()) return;
  {
    RankIndex index = index_;
    index.objects[0].size = UINT64_MAX;
    Directory dir = dir_;
    dir.objects[0].size = UINT64_MAX;
    std::vector<format::ChunkRecord>& chunks = index.pieces[0].chunks;
    chunks[0].length = uint64_t{1} << 63;
    chunks[1].length = (uint64_t{1} << 63) + kChunkSize;
    Resign(dir, index);
    ExpectRefused("chunks hold more than the 16384 bytes the box needs", false);
  }
}

// A chunk longer than verify's slice (16 MiB) is hashed a slice at a time,
// so what it holds does not follow a chunk length to the size of an
// object: damage in its last slice is still found.
TEST(HostileMetadataSlicesTest, LongChunksAreVerifiedInSlices) {
  testing::TempDir tmp("hostile-metadata-slices");
  const std::string url = tmp.url() + "/root";
  std::vector<float> big((uint64_t{20} << 20) / sizeof(float), 0.5f);
  Options o;
  o.chunk_size = uint64_t{32} << 20;  // one 20 MiB chunk
  auto mgr = CheckpointManager::Open(url, o);
  ASSERT_TRUE(mgr.ok());
  State s;
  s.AddTensor("big", View(big));
  ASSERT_TRUE((*mgr)->Save(1, s).ok());
  auto report = (*mgr)->Verify(1);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok());
  EXPECT_EQ(report->chunks_checked, 1u);
  EXPECT_EQ(report->bytes_checked, uint64_t{20} << 20);
  // The last byte of the data object, in the chunk's second slice.
  for (const auto& e :
       std::filesystem::recursive_directory_iterator(tmp.path() / "root")) {
    if (e.path().extension() != ".safetensors") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  report = (*mgr)->Verify(1);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_TRUE(Contains(report->problems[0], "checksum mismatch"));
  EXPECT_TRUE(Contains(report->problems[0], "entry \"big\""));
}

}  // namespace
}  // namespace ckpt
