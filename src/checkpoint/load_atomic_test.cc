// A load either completes at one step or changes nothing, and a resume
// lands on the newest step that loads whole: damage (a flipped byte in the
// last chunk, a truncated or removed object, a damaged manifest) and every
// kind of mismatch (shape, dtype, a missing entry, strict) leave every
// tensor, blob and metadata entry of the target bit for bit as it was; a
// resume skips damaged steps, an explicit step never does; the streaming
// opt-out names the entries it changed; with many ranks, one rank's damage
// leaves every rank unchanged. Each on the ways a load reads: mem:// and
// file:// (on disk and in memory) check every chunk in place before copying
// it (object views), a storage without views (a wrapper, as s3://) goes
// through the staging memory; and a cold file:// root goes through the
// staging memory when the manager has it (LoadPathTest).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "testing/run_ranks.h"
#include "testing/temp_dir.h"
#include "util/proc_status.h"

namespace ckpt {
namespace {

using testing::RunRanks;

std::string UniqueUrl(const std::string& what) {
  static int n = 0;
  return "mem://load-atomic-" + what + "-" + std::to_string(getpid()) + "-" +
         std::to_string(n++);
}

// A state whose bytes depend on `seed`. The blob comes first, so that a
// data object ends with a tensor's last chunk (4 KiB chunks: weights is
// three of them, counters two).
struct Model {
  explicit Model(int seed) : weights(3000), counters(700) {
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i] = static_cast<float>(seed * 10000 + static_cast<int>(i));
    }
    for (size_t i = 0; i < counters.size(); ++i) {
      counters[i] = seed * 1000000 + static_cast<int64_t>(i);
    }
    rng = "rng-" + std::to_string(seed);
    info = std::to_string(seed);
  }

  State Make() {
    State s;
    s.AddBlob("rng", rng);
    s.AddTensor("weights", View(weights));
    s.AddTensor("counters", View(counters));
    s.AddMetadata("info", {{"seed", info}});
    return s;
  }

  std::vector<float> weights;
  std::vector<int64_t> counters;
  std::string rng, info;
};

// Everything a load may change: tensor bytes, blob bytes, metadata JSON.
struct Snapshot {
  std::vector<std::byte> weights, counters;
  std::string rng, info;

  static Snapshot Of(const Model& m, const State& s) {
    Snapshot out;
    const auto* w = reinterpret_cast<const std::byte*>(m.weights.data());
    out.weights.assign(w, w + m.weights.size() * sizeof(float));
    const auto* c = reinterpret_cast<const std::byte*>(m.counters.data());
    out.counters.assign(c, c + m.counters.size() * sizeof(int64_t));
    if (s.Find("rng") != nullptr) out.rng = s.BlobString("rng").value();
    if (const Entry* e = s.Find("info")) out.info = e->json;
    return out;
  }
  bool operator==(const Snapshot&) const = default;
};

// Where the root lies, and so how a transactional load reads it.
// kAfterAsync: mem://, saved with SaveAsync, whose staging memory the
// loads then reuse instead of views.
enum class Root { kMemory, kDisk, kTmpfs, kStaged, kAfterAsync };

class LoadAtomicTest : public ::testing::TestWithParam<Root> {
 protected:
  void SetUp() override {
    Options o;
    o.chunk_size = 4096;
    o.lease_seconds = 0;
    switch (GetParam()) {
      case Root::kMemory:
        url_ = UniqueUrl("root");
        break;
      case Root::kDisk:
        dir_.emplace("load-atomic", "/var/tmp");
        url_ = dir_->url();
        break;
      case Root::kTmpfs:
        dir_.emplace("load-atomic", "/dev/shm");
        url_ = dir_->url();
        break;
      case Root::kStaged:
        url_ = UniqueUrl("staged");
        break;
      case Root::kAfterAsync:
        url_ = UniqueUrl("after-async");
        break;
    }
    if (GetParam() == Root::kStaged) {
      mgr_ = CheckpointManager::Open(
                 std::make_unique<StorageWrapper>(OpenStorage(url_).value()), o)
                 .value();
    } else {
      mgr_ = CheckpointManager::Open(url_, o).value();
    }
    // The staged root must really go through the staging memory, the
    // others through views.
    ASSERT_EQ(mgr_->storage().capabilities().object_views,
              GetParam() != Root::kStaged);
    for (int step = 1; step <= 3; ++step) {
      Model m(step);
      if (GetParam() == Root::kAfterAsync) {
        ASSERT_TRUE(mgr_->SaveAsync(step, m.Make()).Wait().ok());
      } else {
        ASSERT_TRUE(mgr_->Save(step, m.Make()).ok());
      }
    }
    storage_ = OpenStorage(url_).value();
  }

  std::string DataKey(int64_t step, int rank = 0) {
    const std::vector<ObjectInfo> listed =
        storage_->List(format::StepDirName(step) + "/").value();
    for (const ObjectInfo& o : listed) {
      int r = -1;
      if (format::ParseDataObjectKey(o.key, nullptr, &r, nullptr) &&
          r == rank) {
        return o.key;
      }
    }
    ADD_FAILURE() << "no data object of rank " << rank << " at " << step;
    return "";
  }

  void FlipLastByte(int64_t step) {
    const std::string key = DataKey(step);
    std::string bytes = storage_->ReadAll(key).value();
    bytes.back() ^= 0x5a;
    ASSERT_TRUE(storage_->PutString(key, bytes).ok());
  }
  void Truncate(int64_t step) {
    const std::string key = DataKey(step);
    std::string bytes = storage_->ReadAll(key).value();
    bytes.resize(bytes.size() - 100);
    ASSERT_TRUE(storage_->PutString(key, bytes).ok());
  }
  void Remove(int64_t step) {
    ASSERT_TRUE(storage_->Delete(DataKey(step)).ok());
  }
  void DamageManifest(int64_t step) {
    ASSERT_TRUE(storage_->PutString(format::ManifestKey(step), "{").ok());
  }

  // Loads into a target of seed 99 and checks it is bit for bit as before;
  // returns the error.
  Status FailsUnchanged(std::optional<int64_t> step, LoadOptions options = {},
                        Model target = Model(99)) {
    State s = target.Make();
    const Snapshot before = Snapshot::Of(target, s);
    Result<CheckpointInfo> r = mgr_->Load(step, s, options);
    EXPECT_FALSE(r.ok()) << "loaded step " << r.value().step;
    EXPECT_TRUE(Snapshot::Of(target, s) == before)
        << "a failed load changed the target";
    return r.status();
  }

  // Resumes into a fresh target and checks it holds step `want`.
  void ResumesAt(int64_t want) {
    Model target(99);
    State s = target.Make();
    Result<CheckpointInfo> r = mgr_->Load(std::nullopt, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->step, want);
    Model w(static_cast<int>(want));
    State ws = w.Make();
    EXPECT_TRUE(Snapshot::Of(target, s) == Snapshot::Of(w, ws));
  }

  std::optional<testing::TempDir> dir_;
  std::string url_;
  std::unique_ptr<CheckpointManager> mgr_;
  std::unique_ptr<Storage> storage_;
};

TEST_P(LoadAtomicTest, DamageAtAnExplicitStepChangesNothing) {
  FlipLastByte(3);
  EXPECT_EQ(FailsUnchanged(3).code(), ErrorCode::kDataLoss);
  Truncate(2);
  EXPECT_EQ(FailsUnchanged(2).code(), ErrorCode::kDataLoss);
  Remove(1);
  EXPECT_EQ(FailsUnchanged(1).code(), ErrorCode::kDataLoss);
}

TEST_P(LoadAtomicTest, ResumeFallsBackPastDamagedStepsToTheNewestWholeOne) {
  FlipLastByte(3);
  ResumesAt(2);
  // Latest() judges by a listing, without reading data: still step 3.
  EXPECT_EQ(mgr_->Latest().value(), 3);
  Truncate(2);
  ResumesAt(1);
  DamageManifest(2);
  ResumesAt(1);
  Remove(1);
  const Status s = FailsUnchanged(std::nullopt);
  EXPECT_EQ(s.code(), ErrorCode::kDataLoss);
  for (const char* step : {"step 3", "step 2", "step 1"}) {
    EXPECT_NE(s.message().find(step), std::string::npos) << s.ToString();
  }
}

TEST_P(LoadAtomicTest, MismatchesChangeNothingAndNeverFallBack) {
  FlipLastByte(3);  // a resume would skip it: a mismatch must not
  {
    Model target(99);
    target.weights.resize(2999);  // another shape
    EXPECT_EQ(FailsUnchanged(std::nullopt, {}, target).code(),
              ErrorCode::kInvalidArgument);
  }
  {
    Model target(99);
    State s;
    std::vector<double> weights(3000, 1.5);  // another dtype
    s.AddBlob("rng", "x").AddTensor("weights", View(weights));
    Result<CheckpointInfo> r = mgr_->Load(std::nullopt, s);
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(weights, std::vector<double>(3000, 1.5));
    EXPECT_EQ(s.BlobString("rng").value(), "x");
  }
  {
    Model target(99);
    State s = target.Make();
    std::vector<int32_t> extra(4, 7);
    s.AddTensor("not-saved", View(extra));  // an entry the step lacks
    const Snapshot before = Snapshot::Of(target, s);
    Result<CheckpointInfo> r = mgr_->Load(std::nullopt, s);
    EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
    EXPECT_TRUE(Snapshot::Of(target, s) == before);
    EXPECT_EQ(extra, std::vector<int32_t>(4, 7));
  }
  {
    Model target(99);
    State s;  // lacks "counters": strict refuses
    s.AddBlob("rng", target.rng)
        .AddTensor("weights", View(target.weights))
        .AddMetadata("info", {{"seed", "99"}});
    const Snapshot before = Snapshot::Of(target, s);
    Result<CheckpointInfo> r = mgr_->Load(std::nullopt, s, {.strict = true});
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(Snapshot::Of(target, s) == before);
  }
}

TEST_P(LoadAtomicTest, StreamingNamesTheEntriesItChanged) {
  FlipLastByte(3);
  Model target(99);
  State s = target.Make();
  Result<CheckpointInfo> r =
      mgr_->Load(3, s, LoadOptions{.transactional = false});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  const std::string m = r.status().message();
  EXPECT_NE(m.find("entries changed before the failure"), std::string::npos)
      << m;
  EXPECT_NE(m.find("weights"), std::string::npos) << m;
  EXPECT_NE(m.find("counters"), std::string::npos) << m;
  // The blob and metadata are only set once everything is read.
  EXPECT_EQ(s.BlobString("rng").value(), "rng-99");
  // A streaming resume still lands on the newest whole step, all of it.
  Model again(99);
  State t = again.Make();
  Result<CheckpointInfo> resumed =
      mgr_->Load(std::nullopt, t, LoadOptions{.transactional = false});
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->step, 2);
  Model two(2);
  State ts = two.Make();
  EXPECT_TRUE(Snapshot::Of(again, t) == Snapshot::Of(two, ts));
}

TEST_P(LoadAtomicTest, LoadAllFallsBackOnResumeButNotAtAnExplicitStep) {
  FlipLastByte(3);
  Result<LoadedCheckpoint> all = mgr_->LoadAll(std::nullopt);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->info.step, 2);
  EXPECT_EQ(all->state.BlobString("rng").value(), "rng-2");
  EXPECT_EQ(mgr_->LoadAll(3).status().code(), ErrorCode::kDataLoss);
  // A name the checkpoint lacks is a mismatch: no fallback.
  EXPECT_EQ(mgr_->LoadAll(std::nullopt, {"nope"}).status().code(),
            ErrorCode::kNotFound);
}

INSTANTIATE_TEST_SUITE_P(Reads, LoadAtomicTest,
                         ::testing::Values(Root::kMemory, Root::kDisk,
                                           Root::kTmpfs, Root::kStaged,
                                           Root::kAfterAsync),
                         [](const ::testing::TestParamInfo<Root>& p) {
                           switch (p.param) {
                             case Root::kMemory:
                               return "MemoryViews";
                             case Root::kDisk:
                               return "DiskViews";
                             case Root::kTmpfs:
                               return "TmpfsViews";
                             case Root::kStaged:
                               return "Staged";
                             case Root::kAfterAsync:
                               return "StagedAfterAsyncSave";
                           }
                           return "Unknown";
                         });

// The two passes of a load from views read the same bytes: a view keeps
// the bytes it was taken with when its object is replaced or deleted.
TEST(ObjectViewTest, KeepsItsBytesWhenTheObjectIsReplacedOrDeleted) {
  testing::TempDir disk("object-view", "/var/tmp");
  testing::TempDir tmpfs("object-view", "/dev/shm");
  for (const std::string& url : {UniqueUrl("view"), disk.url(), tmpfs.url()}) {
    SCOPED_TRACE(url);
    auto storage = OpenStorage(url).value();
    ASSERT_TRUE(storage->capabilities().object_views);
    const std::string first(10000, 'a');
    ASSERT_TRUE(storage->PutString("obj", first).ok());
    std::shared_ptr<const ObjectView> view = storage->ViewObject("obj").value();
    ASSERT_NE(view, nullptr);
    auto text = [&] {
      return std::string(reinterpret_cast<const char*>(view->bytes().data()),
                         view->bytes().size());
    };
    view->WillRead(0, 10000);
    EXPECT_EQ(text(), first);
    view->DoneReading(0, 10000);
    ASSERT_TRUE(storage->PutString("obj", std::string(20000, 'b')).ok());
    EXPECT_EQ(text(), first);
    ASSERT_TRUE(storage->Delete("obj").ok());
    EXPECT_EQ(text(), first);
    EXPECT_EQ(storage->ViewObject("obj").status().code(), ErrorCode::kNotFound);
    // A wrapper's reads go through its ReadRange: it offers no views.
    StorageWrapper wrapped(storage.get());
    EXPECT_FALSE(wrapped.capabilities().object_views);
    EXPECT_EQ(wrapped.ViewObject("any").value(), nullptr);
  }
}

// Runs `then` once, the first time a data object of step `step` is read.
class OnFirstReadOf : public StorageWrapper {
 public:
  OnFirstReadOf(std::unique_ptr<Storage> target, int64_t step,
                std::function<void()> then)
      : StorageWrapper(std::move(target)),
        dir_(format::StepDirName(step) + "/"),
        then_(std::move(then)) {}
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    if (key.starts_with(dir_)) std::call_once(once_, then_);
    return StorageWrapper::ReadRange(key, offset, out);
  }

 private:
  std::string dir_;
  std::function<void()> then_;
  std::once_flag once_;
};

// A job saving beside a resume (another process's manager on the same
// root, with retention) commits step 4 and deletes step 3 while the resume
// reads step 3: no damage, and no reason to fail or to fall back to step
// 2; the resume lists the steps again and loads step 4.
TEST(LoadResumeTest, AStepDeletedWhileAResumeReadsItSendsItToTheNewest) {
  const std::string url = UniqueUrl("deleted-while-read");
  Options o;
  o.chunk_size = 4096;
  auto saver = CheckpointManager::Open(url, o).value();
  for (int step = 1; step <= 3; ++step) {
    Model m(step);
    ASSERT_TRUE(saver->Save(step, m.Make()).ok());
  }
  auto reader =
      CheckpointManager::Open(std::make_unique<OnFirstReadOf>(
                                  OpenStorage(url).value(), 3,
                                  [&] {
                                    Model m(4);
                                    ASSERT_TRUE(saver->Save(4, m.Make()).ok());
                                    ASSERT_TRUE(saver->Delete(3).ok());
                                  }),
                              o)
          .value();
  Model target(99);
  State s = target.Make();
  Result<CheckpointInfo> r = reader->Load(std::nullopt, s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->step, 4);
  Model want(4);
  State ws = want.Make();
  EXPECT_TRUE(Snapshot::Of(target, s) == Snapshot::Of(want, ws));
  // At an explicit step, the step's absence is the answer.
  Model again(99);
  State as = again.Make();
  EXPECT_EQ(reader->Load(3, as).status().code(), ErrorCode::kNotFound);
}

// Two ranks, each holding half of "table" and a replicated "bias"; only
// rank 1's data object of step 2 is damaged.
TEST(LoadAtomicMultiRankTest, OneRanksDamageLeavesEveryRankUnchanged) {
  const std::string url = UniqueUrl("ranks");
  constexpr int64_t kRows = 2048;  // 4 KiB chunks: 4 per rank's half
  auto half = [](int rank, int seed) {
    std::vector<float> v(kRows / 2 * 4);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = static_cast<float>(seed * 100000 + rank * 50000 + i);
    }
    return v;
  };
  auto open = [&](Communicator* comm) {
    Options o;
    o.communicator = comm;
    o.chunk_size = 4096;
    o.lease_seconds = 0;
    return CheckpointManager::Open(url, o).value();
  };
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = open(comm);
    for (int step = 1; step <= 2; ++step) {
      std::vector<float> mine = half(rank, step);
      std::vector<double> bias(8, step);
      State s;
      s.AddTensorPiece("table", {kRows, 4}, {rank * kRows / 2, 0},
                       View(std::span<float>(mine), {kRows / 2, 4}))
          .AddTensor("bias", View(bias));
      ASSERT_TRUE(mgr->Save(step, s).ok());
    }
  });
  auto storage = OpenStorage(url).value();
  const std::vector<ObjectInfo> listed =
      storage->List(format::StepDirName(2) + "/").value();
  for (const ObjectInfo& o : listed) {
    int r = -1;
    if (format::ParseDataObjectKey(o.key, nullptr, &r, nullptr) && r == 1) {
      std::string bytes = storage->ReadAll(o.key).value();
      bytes.back() ^= 0x5a;
      ASSERT_TRUE(storage->PutString(o.key, bytes).ok());
    }
  }
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = open(comm);
    std::vector<float> mine = half(rank, 99);
    std::vector<double> bias(8, 99);
    State s;
    s.AddTensorPiece("table", {kRows, 4}, {rank * kRows / 2, 0},
                     View(std::span<float>(mine), {kRows / 2, 4}))
        .AddTensor("bias", View(bias));
    Result<CheckpointInfo> r = mgr->Load(2, s);
    EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss) << "rank " << rank;
    EXPECT_EQ(mine, half(rank, 99)) << "rank " << rank << " changed";
    EXPECT_EQ(bias, std::vector<double>(8, 99)) << "rank " << rank;
    // Resuming, every rank falls back to step 1 together.
    r = mgr->Load(std::nullopt, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->step, 1);
    EXPECT_EQ(mine, half(rank, 1)) << "rank " << rank;
    EXPECT_EQ(bias, std::vector<double>(8, 1));
  });
}

// Calls `visit` with each regular file under `dir`, open for reading, and
// its size.
void ForEachFile(const std::filesystem::path& dir,
                 const std::function<void(int fd, size_t size)>& visit) {
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (!f.is_regular_file()) continue;
    const int fd = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    visit(fd, f.file_size());
    ::close(fd);
  }
}

// The bytes of the files under `dir` that lie in the page cache, over all
// their bytes.
double CachedFraction(const std::filesystem::path& dir) {
  uint64_t total = 0, cached = 0;
  ForEachFile(dir, [&](int fd, size_t size) {
    if (size == 0) return;
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return;
    std::vector<unsigned char> in((size + 4095) / 4096);
    if (::mincore(p, size, in.data()) == 0) {
      for (unsigned char c : in) cached += (c & 1) ? 4096 : 0;
    }
    ::munmap(p, size);
    total += size;
  });
  return total == 0 ? 0 : static_cast<double>(std::min(cached, total)) / total;
}

// Drops the files under `dir` from the page cache (after a restart), or
// reads them into it (`warm`).
void SetCache(const std::filesystem::path& dir, bool warm) {
  ForEachFile(dir, [&](int fd, size_t) {
    ::posix_fadvise(fd, 0, 0, warm ? POSIX_FADV_WILLNEED : POSIX_FADV_DONTNEED);
    std::vector<char> buffer(warm ? 1 << 20 : 0);
    while (warm && ::read(fd, buffer.data(), buffer.size()) > 0) {
    }
  });
}

// The files under `dir` of at least `bytes` bytes: the data objects of a
// state of that size (manifests and markers are smaller).
std::vector<std::filesystem::path> DataObjects(const std::filesystem::path& dir,
                                               uint64_t bytes) {
  std::vector<std::filesystem::path> out;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir)) {
    if (f.is_regular_file() && f.file_size() >= bytes) out.push_back(f.path());
  }
  return out;
}

// Why `dir` takes no O_DIRECT, or "" if it does.
std::string NoDirectIo(const testing::TempDir& dir) {
  const std::string probe = dir.string() + "/probe";
  const int fd = ::open(probe.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0600);
  if (fd < 0) {
    return dir.string() + " takes no O_DIRECT (" + std::strerror(errno) +
           "): its loads go through the page cache either way";
  }
  ::close(fd);
  std::filesystem::remove(probe);
  return "";
}

// How a transactional load reads a file:// root on a disk: with the
// objects not in the page cache, O_DIRECT into staging memory (prepared at
// Open, or mapped by the load), at the disk's speed, leaving the page cache
// as it was; with the objects in the page cache, through their mapped
// pages. Every way loads the saved bytes, and a damaged chunk changes
// nothing.
TEST(LoadPathTest, ColdObjectsGoThroughStagingMemoryWarmOnesThroughViews) {
  testing::TempDir dir("load-path", "/var/tmp");
  if (const std::string why = NoDirectIo(dir); !why.empty())
    GTEST_SKIP() << why;
  std::vector<float> saved(size_t{2} << 20);  // 8 MiB
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<float>(i);
  Options o;
  o.lease_seconds = 0;
  o.chunk_size = 1 << 20;
  {
    State s;
    s.AddTensor("w", View(saved));
    ASSERT_TRUE(CheckpointManager::Open(dir.url(), o).value()->Save(1, s).ok());
  }
  Options prepared = o;
  prepared.async_staging_prepare_bytes = saved.size() * sizeof(float);
  std::unique_ptr<CheckpointManager> mgr =
      CheckpointManager::Open(dir.url(), prepared).value();
  std::vector<float> target(saved.size());
  State s;
  s.AddTensor("w", View(target));
  auto load = [&](CheckpointManager& m) {
    std::fill(target.begin(), target.end(), -1.0f);
    Result<CheckpointInfo> r = m.Load(1, s);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(target == saved) << "the load's bytes differ from the saved";
  };

  SetCache(dir.path(), false);
  load(*mgr);
  EXPECT_LT(CachedFraction(dir.path()), 0.2)
      << "a cold load with staging memory read through the page cache";

  SetCache(dir.path(), true);
  load(*mgr);

  // A manager without staging memory maps it for a cold load (this
  // machine has the memory free), and keeps it.
  std::unique_ptr<CheckpointManager> plain =
      CheckpointManager::Open(dir.url(), o).value();
  SetCache(dir.path(), false);
  load(*plain);
  EXPECT_LT(CachedFraction(dir.path()), 0.2)
      << "a cold load without staging memory read through the page cache";
  SetCache(dir.path(), false);
  load(*plain);
  EXPECT_LT(CachedFraction(dir.path()), 0.2);

  // A manager whose staging memory is bounded below the state
  // (Options::async_staging_bytes) maps none for it: a cold load checks
  // the chunks in views, through the page cache.
  Options bounded = o;
  bounded.async_staging_bytes = 1 << 20;
  SetCache(dir.path(), false);
  load(*CheckpointManager::Open(dir.url(), bounded).value());
  EXPECT_GT(CachedFraction(dir.path()), 0.8)
      << "a load bounded to 1 MiB of staging memory mapped 8 MiB of it";
  // Storage without views (s3://, a wrapper) loads through staging memory
  // in any case; a bounded manager unmaps it after the load, an unbounded
  // one keeps it for the next.
  auto resident_growth = [&](const Options& opts) {
    std::unique_ptr<CheckpointManager> m =
        CheckpointManager::Open(
            std::make_unique<StorageWrapper>(OpenStorage(dir.url()).value()),
            opts)
            .value();
    const uint64_t before = ProcStatus("VmRSS");
    load(*m);
    const uint64_t after = ProcStatus("VmRSS");
    return after - std::min(before, after);
  };
  EXPECT_LT(resident_growth(bounded), uint64_t{4} << 20)
      << "a bounded manager kept the load's 8 MiB of staging memory";
  EXPECT_GE(resident_growth(o), uint64_t{6} << 20)
      << "an unbounded manager did not keep its staging memory";

  // A damaged chunk, cold, through the staging memory: nothing changes.
  for (const std::filesystem::path& f :
       DataObjects(dir.path(), saved.size() * sizeof(float))) {
    const int fd = ::open(f.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    char byte = 0;
    const off_t at = static_cast<off_t>(std::filesystem::file_size(f) / 2);
    ASSERT_EQ(::pread(fd, &byte, 1, at), 1);
    byte ^= 0x5a;
    ASSERT_EQ(::pwrite(fd, &byte, 1, at), 1);
    ::close(fd);
  }
  SetCache(dir.path(), false);
  std::fill(target.begin(), target.end(), -1.0f);
  EXPECT_EQ(mgr->Load(1, s).status().code(), ErrorCode::kDataLoss);
  EXPECT_TRUE(std::all_of(target.begin(), target.end(), [](float v) {
    return v == -1.0f;
  })) << "a failed load changed the target";
  EXPECT_LT(CachedFraction(dir.path()), 0.2)
      << "the damaged cold load did not read through the staging memory";
}

// The same choice for a state of 4 KiB chunks (an incremental chain's
// rows), which the load looks at in runs of chunks side by side: all in
// the page cache, they are checked where they lie and no staging memory
// is mapped; cold, or half of them cold, they are read into staging memory.
TEST(LoadPathTest, SmallChunksAreLookedAtInRunsAndChosenAlike) {
  testing::TempDir dir("load-path-small", "/var/tmp");
  if (const std::string why = NoDirectIo(dir); !why.empty())
    GTEST_SKIP() << why;
  std::vector<float> saved(size_t{2} << 20);  // 8 MiB, 2,048 chunks
  for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<float>(i);
  Options o;
  o.lease_seconds = 0;
  o.chunk_size = 4096;
  // Two tensors, each half of `whole`.
  const auto halves = [](std::vector<float>& whole) {
    const size_t half = whole.size() / 2;
    const std::vector<int64_t> shape{static_cast<int64_t>(half)};
    State s;
    s.AddTensor("a", View(std::span(whole).first(half), shape));
    s.AddTensor("b", View(std::span(whole).subspan(half), shape));
    return s;
  };
  {
    State s = halves(saved);
    ASSERT_TRUE(CheckpointManager::Open(dir.url(), o).value()->Save(1, s).ok());
  }
  // The anonymous memory a fresh manager's load of the state leaves (its
  // staging memory, if it maps any; views are the page cache's pages).
  auto staged = [&] {
    std::unique_ptr<CheckpointManager> m =
        CheckpointManager::Open(dir.url(), o).value();
    std::vector<float> target(saved.size(), -1.0f);
    State s = halves(target);
    const uint64_t before = ProcStatus("RssAnon");
    Result<CheckpointInfo> r = m->Load(1, s);
    const uint64_t after = ProcStatus("RssAnon");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(target == saved) << "the load's bytes differ from the saved";
    return after - std::min(before, after);
  };
  SetCache(dir.path(), true);
  EXPECT_LT(staged(), uint64_t{4} << 20)
      << "a load of small chunks all in the page cache mapped staging memory";
  SetCache(dir.path(), false);
  EXPECT_GE(staged(), uint64_t{6} << 20)
      << "a cold load of small chunks did not read into staging memory";
  // Half of the data in the page cache: its first half.
  SetCache(dir.path(), false);
  const std::vector<std::filesystem::path> objects =
      DataObjects(dir.path(), saved.size() * sizeof(float));
  ASSERT_EQ(objects.size(), 1u) << "the state's data is not one object";
  for (const std::filesystem::path& f : objects) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    // No read-ahead: it would bring in the rest (8 MiB of it on this VM).
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    std::vector<char> half(std::filesystem::file_size(f) / 2);
    ASSERT_EQ(::pread(fd, half.data(), half.size(), 0),
              static_cast<ssize_t>(half.size()));
    ::close(fd);
  }
  EXPECT_GE(staged(), uint64_t{6} << 20)
      << "a load of small chunks half of them cold checked them in views";
}

}  // namespace
}  // namespace ckpt
