// SaveAsync: what is saved is the state at the call, errors are never lost,
// the manager waits for the save in flight, on one rank and on many.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/fault_storage.h"
#include "testing/files.h"
#include "testing/temp_dir.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using testing::ExpectLoads;
using testing::FaultStorage;
using testing::RunRanks;
using testing::SeededModel;

// Holds every data-object write until Open(): a test can keep a background
// save in flight for as long as it needs to, without sleeping.
class GateStorage : public StorageWrapper {
 public:
  explicit GateStorage(Storage* target) : StorageWrapper(target) {}

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++waiting_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    return StorageWrapper::NewWritable(key);
  }

  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Blocks until a writer is held at the gate.
  void AwaitWriter() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ > 0; });
  }
  bool is_open() {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  // A thread that opens the gate a little after a writer reaches it, so
  // that whatever the caller does next must wait for the save.
  std::thread OpenSoon() {
    return std::thread([this] {
      AwaitWriter();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      Open();
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
};

class AsyncSaveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto base = OpenStorage(url_);
    ASSERT_TRUE(base.ok()) << base.status().ToString();
    base_ = std::move(base).value();
  }

  Options SmallChunks() {
    Options o;
    o.chunk_size = 4096;
    return o;
  }

  std::unique_ptr<CheckpointManager> OpenOn(std::unique_ptr<Storage> storage,
                                            Options o) {
    auto mgr = CheckpointManager::Open(std::move(storage), std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return std::move(mgr).value();
  }
  // A manager whose data-object writes wait at gate_ until it opens. The
  // gate belongs to the test, so it outlives the manager.
  std::unique_ptr<CheckpointManager> OpenGated(Options o) {
    gate_ = std::make_unique<GateStorage>(base_.get());
    return OpenOn(std::make_unique<StorageWrapper>(gate_.get()), std::move(o));
  }
  std::unique_ptr<CheckpointManager> OpenUrl(Options o = {}) {
    auto mgr = CheckpointManager::Open(url_, std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return std::move(mgr).value();
  }

  const testing::TestRoot root_{testing::Backend::kMemory, "async"};
  const std::string url_ = root_.url();
  std::unique_ptr<Storage> base_;
  std::unique_ptr<GateStorage> gate_;
};

// Changes every tensor the state borrows, as a training step would (the
// State holds its own copy of the rng blob).
void Scribble(SeededModel& m) {
  for (float& w : m.weights) w = -w - 1;
  for (int64_t& c : m.counters) c = ~c;
}

TEST_F(AsyncSaveTest, SavesTheStateAsItWasAtTheCall) {
  auto mgr = OpenGated(SmallChunks());
  GateStorage* g = gate_.get();
  SeededModel model(1, 50000);
  const SeededModel want(1, 50000);
  State state = model.ToState();
  SaveHandle h = mgr->SaveAsync(7, state, {.epoch = 3});
  EXPECT_EQ(h.step(), 7);
  // SaveAsync has returned; the write has not even started.
  g->AwaitWriter();
  EXPECT_FALSE(h.Done());
  Scribble(model);
  g->Open();
  Result<SaveResult> r = h.Wait();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->skipped);
  EXPECT_EQ(r->info.step, 7);
  EXPECT_EQ(r->info.epoch, 3);
  EXPECT_TRUE(h.Done());
  // Wait gives the same result every time.
  EXPECT_EQ(h.Wait()->info.step, 7);
  ExpectLoads(*mgr, 7, want);
}

TEST_F(AsyncSaveTest, ReusesStagingAcrossSavesAndEveryStepIsItsOwn) {
  auto mgr = OpenUrl(SmallChunks());
  SeededModel model(10, 20000);
  State state = model.ToState();
  std::vector<SaveHandle> handles;
  for (int step = 1; step <= 4; ++step) {
    // Each call waits for the previous save, then stages this state.
    handles.push_back(mgr->SaveAsync(step, state));
    Scribble(model);
  }
  SeededModel want(10, 20000);
  for (int step = 1; step <= 4; ++step) {
    Result<SaveResult> r = handles[step - 1].Wait();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ExpectLoads(*mgr, step, want);
    Scribble(want);
  }
}

TEST_F(AsyncSaveTest, OtherCallsWaitForTheSaveInFlight) {
  auto mgr = OpenGated(SmallChunks());
  GateStorage* g = gate_.get();
  SeededModel model(2);
  State state = model.ToState();
  SaveHandle h = mgr->SaveAsync(1, state);
  std::thread opener = g->OpenSoon();
  // List cannot run before the save ends, so it sees the step committed.
  EXPECT_EQ(testing::ListedSteps(*mgr), std::vector<int64_t>{1});
  EXPECT_TRUE(g->is_open());
  EXPECT_TRUE(h.Done());
  opener.join();
}

TEST_F(AsyncSaveTest, DeleteWithOptionsWaitsForTheSaveInFlight) {
  auto mgr = OpenGated(SmallChunks());
  GateStorage* g = gate_.get();
  SeededModel model(3);
  State state = model.ToState();
  SaveHandle h = mgr->SaveAsync(1, state);
  std::thread opener = g->OpenSoon();
  // Run beside the background save, the delete would find no step 1 (or
  // remove a parent the save references); after it, it deletes step 1.
  Status s = mgr->Delete(1, DeleteOptions{.rewrite_dependants = true}).status();
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(g->is_open());
  EXPECT_TRUE(h.Done());
  EXPECT_TRUE(testing::ListedSteps(*mgr).empty());
  opener.join();
}

TEST_F(AsyncSaveTest, BackgroundErrorSurfacesFromWaitAndFromTheNextSave) {
  auto fault = std::make_unique<FaultStorage>(base_.get());
  FaultStorage* f = fault.get();
  auto mgr = OpenOn(std::move(fault), SmallChunks());
  SeededModel model(3);
  State state = model.ToState();
  // The first mutating operation of the save starts its data object.
  f->FailOnce(f->operations(), IOError("disk on fire"));
  SaveHandle h = mgr->SaveAsync(1, state);
  Result<SaveResult> r = h.Wait();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disk on fire"), std::string::npos)
      << r.status().ToString();

  // Wait() reported it: the next save does not report it again, and saves.
  Result<SaveResult> next = mgr->SaveAsync(2, state).Wait();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  ExpectLoads(*mgr, 2, SeededModel(3));

  // An error nobody waited for is reported by the next save, once, naming
  // the failed step and saying that this one was not saved.
  f->FailOnce(f->operations(), IOError("disk on fire again"));
  SaveHandle unwatched = mgr->SaveAsync(3, state);
  Result<SaveResult> sync = mgr->Save(4, state);
  ASSERT_FALSE(sync.ok());
  EXPECT_EQ(sync.status().code(), ErrorCode::kIOError);
  EXPECT_NE(sync.status().message().find("asynchronous save of step 3"),
            std::string::npos)
      << sync.status().ToString();
  EXPECT_NE(sync.status().message().find("disk on fire again"),
            std::string::npos);
  EXPECT_NE(sync.status().message().find("step 4 was not saved"),
            std::string::npos)
      << sync.status().ToString();
  EXPECT_EQ(testing::ListedSteps(*mgr), (std::vector<int64_t>{2}));
  ASSERT_TRUE(mgr->Save(4, state).ok());
  EXPECT_EQ(testing::ListedSteps(*mgr), (std::vector<int64_t>{2, 4}));
  // Its handle still tells its own outcome.
  EXPECT_FALSE(unwatched.Wait().ok());

  // A SaveAsync reports an uncollected error the same way.
  f->FailOnce(f->operations(), IOError("disk on fire once more"));
  SaveHandle unwatched2 = mgr->SaveAsync(5, state);
  Result<SaveResult> refused = mgr->SaveAsync(6, state).Wait();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("step 6 was not saved"),
            std::string::npos)
      << refused.status().ToString();
  ASSERT_TRUE(mgr->SaveAsync(6, state).Wait().ok());
  EXPECT_EQ(testing::ListedSteps(*mgr), (std::vector<int64_t>{2, 4, 6}));

  // A job that never waits: the SaveAsync that took the error saved
  // nothing, and nobody saw it, so the next one takes it again, naming
  // both steps, rather than save as if nothing had been lost; until a
  // Wait() collects it.
  f->FailOnce(f->operations(), IOError("disk on fire at 7"));
  SaveHandle h7 = mgr->SaveAsync(7, state);
  SaveHandle h8 = mgr->SaveAsync(8, state);
  SaveHandle h9 = mgr->SaveAsync(9, state);
  Result<SaveResult> r9 = h9.Wait();
  ASSERT_FALSE(r9.ok());
  EXPECT_NE(r9.status().message().find("asynchronous save of step 7"),
            std::string::npos)
      << r9.status().ToString();
  EXPECT_NE(r9.status().message().find("disk on fire at 7"), std::string::npos);
  EXPECT_NE(r9.status().message().find("steps 8 and 9 were not saved"),
            std::string::npos)
      << r9.status().ToString();
  EXPECT_EQ(testing::ListedSteps(*mgr), (std::vector<int64_t>{2, 4, 6}));
  // Collected: the next save goes ahead.
  ASSERT_TRUE(mgr->SaveAsync(8, state).Wait().ok());
  EXPECT_FALSE(h7.Wait().ok());
  EXPECT_FALSE(h8.Wait().ok());
  EXPECT_EQ(testing::ListedSteps(*mgr), (std::vector<int64_t>{2, 4, 6, 8}));
}

TEST_F(AsyncSaveTest, ErrorsOfTheSaveItselfComeFromWait) {
  auto mgr = OpenUrl(SmallChunks());
  SeededModel model(4);
  State state = model.ToState();
  ASSERT_TRUE(mgr->Save(1, state).ok());
  Result<SaveResult> dup = mgr->SaveAsync(1, state).Wait();
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().code(), ErrorCode::kAlreadyExists);
  // Wait() reported it: the next save goes ahead, synchronous or not.
  ASSERT_TRUE(mgr->Save(2, state).ok());
  EXPECT_EQ(mgr->SaveAsync(2, state).Wait().status().code(),
            ErrorCode::kAlreadyExists);
  ASSERT_TRUE(mgr->SaveAsync(3, state).Wait().ok());

  State bad;
  std::vector<float> v(4);
  bad.AddTensor("x", View(v)).AddTensor("x", View(v));
  Result<SaveResult> r = mgr->SaveAsync(4, bad).Wait();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("duplicate entry name"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(testing::ListedSteps(*mgr), (std::vector<int64_t>{1, 2, 3}));
}

TEST_F(AsyncSaveTest, DestroyingTheManagerWaitsForTheSaveInFlight) {
  auto mgr = OpenGated(SmallChunks());
  GateStorage* g = gate_.get();
  SeededModel model(5);
  State state = model.ToState();
  SaveHandle h = mgr->SaveAsync(9, state);
  std::thread opener = g->OpenSoon();
  mgr.reset();
  EXPECT_TRUE(g->is_open());
  ASSERT_TRUE(h.Done());
  Result<SaveResult> r = h.Wait();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  opener.join();
  auto reopened = OpenUrl();
  ExpectLoads(*reopened, 9, SeededModel(5));
}

TEST_F(AsyncSaveTest, SkipPolicyReturnsAtOnceWhileASaveIsInFlight) {
  Options o = SmallChunks();
  o.async_policy = AsyncSavePolicy::kSkip;
  auto mgr = OpenGated(o);
  GateStorage* g = gate_.get();
  SeededModel model(6);
  State state = model.ToState();
  SaveHandle first = mgr->SaveAsync(1, state);
  g->AwaitWriter();
  SaveHandle second = mgr->SaveAsync(2, state);
  ASSERT_TRUE(second.Done());
  Result<SaveResult> skipped = second.Wait();
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_TRUE(skipped->skipped);
  g->Open();
  ASSERT_TRUE(first.Wait().ok());
  EXPECT_EQ(testing::ListedSteps(*mgr), std::vector<int64_t>{1});
}

TEST_F(AsyncSaveTest, AStateOverTheStagingBudgetIsSavedSynchronously) {
  Options o = SmallChunks();
  o.async_staging_bytes = 1024;  // far below the model's ~13 KB
  auto mgr = OpenUrl(o);
  SeededModel model(7);
  State state = model.ToState();
  SaveHandle h = mgr->SaveAsync(1, state);
  // Done on return: nothing was left to the background.
  ASSERT_TRUE(h.Done());
  Scribble(model);
  ASSERT_TRUE(h.Wait().ok()) << h.Wait().status().ToString();
  ExpectLoads(*mgr, 1, SeededModel(7));
}

// On file:// the background save writes large staged entries straight from
// the staging memory (no copy; the data section starts on a page). The
// caller's changes after the call must still not reach the checkpoint, and
// the object must read back bit for bit, save after save.
TEST_F(AsyncSaveTest, OnFilesStagedEntriesAreWrittenInPlaceBitIdentical) {
  // On disk, so that the writes really go through O_DIRECT (a tmpfs /tmp
  // may refuse it and get buffered writes).
  const testing::TempDir temp("async-file", "/var/tmp");
  const std::string dir = temp.string();
  {
    auto mgr = CheckpointManager::Open("file://" + dir, Options{});
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    // 12 MB of weights: above the sizes that get page alignment.
    SeededModel model(3, 3'000'000);
    for (int64_t step = 1; step <= 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      const SeededModel want = model;
      State state = model.ToState();
      SaveHandle h = (*mgr)->SaveAsync(step, state);
      Scribble(model);  // while the background save may be writing
      Result<SaveResult> r = h.Wait();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ExpectLoads(**mgr, step, want);
      // The data object's tensors start on a page boundary.
      bool found = false;
      for (const auto& e : std::filesystem::recursive_directory_iterator(
               dir + "/" + format::StepDirName(step))) {
        if (e.path().extension() != ".safetensors") continue;
        std::string len = testing::ReadFile(e.path()).substr(0, 8);
        len.resize(8, '\0');
        uint64_t header = 0;
        for (int i = 7; i >= 0; --i) {
          header = header << 8 | static_cast<unsigned char>(len[i]);
        }
        EXPECT_EQ((8 + header) % format::kSafetensorsPageAlignment, 0u)
            << e.path();
        found = true;
      }
      EXPECT_TRUE(found);
    }
  }
}

TEST(SaveHandleTest, AHandleOfNoSaveFails) {
  SaveHandle h;
  EXPECT_TRUE(h.Done());
  EXPECT_EQ(h.step(), -1);
  EXPECT_EQ(h.Wait().status().code(), ErrorCode::kFailedPrecondition);
}

// Rank r's rows of the global [kRanks * kRows, kCols] tensor at `step`.
constexpr int kRanks = 3;
constexpr int64_t kRows = 64;
constexpr int64_t kCols = 33;
std::vector<float> Rows(int rank, int step) {
  std::vector<float> out(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    out[i] = static_cast<float>(step * 1000000 + rank * kRows * kCols + i);
  }
  return out;
}

TEST_F(AsyncSaveTest, ManyRanksSaveAsynchronouslyTogether) {
  RunRanks(kRanks, [&](int rank, Communicator* comm) {
    Options o = SmallChunks();
    o.communicator = comm;
    auto mgr = OpenUrl(o);
    std::vector<float> rows = Rows(rank, 1);
    std::string loader = "loader-of-rank-" + std::to_string(rank);
    for (int step = 1; step <= 3; ++step) {
      rows = Rows(rank, step);
      State s;
      s.AddTensorPiece("w", {kRanks * kRows, kCols}, {rank * kRows, 0},
                       View(std::span<float>(rows), {kRows, kCols}));
      s.AddRankLocalBlob("loader", loader + "@" + std::to_string(step));
      SaveHandle h = mgr->SaveAsync(step, s, {.epoch = step});
      // The training step overwrites the rows at once.
      std::fill(rows.begin(), rows.end(), -1.0f);
      if (step == 3) {
        Result<SaveResult> r = h.Wait();
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        EXPECT_EQ(r->info.world_size, kRanks);
      }
    }
    // Load waits for the save in flight; every step is complete.
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> got(kRows * kCols);
      State s;
      s.AddTensorPiece("w", {kRanks * kRows, kCols}, {rank * kRows, 0},
                       View(std::span<float>(got), {kRows, kCols}));
      s.AddRankLocalBlob("loader", "");
      Result<CheckpointInfo> info = mgr->Load(step, s);
      ASSERT_TRUE(info.ok()) << info.status().ToString();
      EXPECT_EQ(got, Rows(rank, step)) << "rank " << rank << " step " << step;
      EXPECT_EQ(*s.BlobString("loader"), loader + "@" + std::to_string(step));
    }
  });
}

TEST_F(AsyncSaveTest, OneRankWithABadStateFailsEveryRank) {
  RunRanks(kRanks, [&](int rank, Communicator* comm) {
    Options o = SmallChunks();
    o.communicator = comm;
    auto mgr = OpenUrl(o);
    std::vector<float> rows = Rows(rank, 1);
    State s;
    s.AddTensorPiece("w", {kRanks * kRows, kCols}, {rank * kRows, 0},
                     View(std::span<float>(rows), {kRows, kCols}));
    if (rank == 1) s.AddBlob("w", std::string("duplicate"));
    SaveHandle h = mgr->SaveAsync(1, s);
    if (rank == 0) {
      Result<SaveResult> r = h.Wait();
      ASSERT_FALSE(r.ok()) << "rank " << rank;
      EXPECT_NE(r.status().message().find("duplicate entry name"),
                std::string::npos)
          << r.status().ToString();
    }
    // Rank 0 collected the error and saves on; the others did not, and
    // report it from their next save, which every rank then fails together
    // (none waits for another).
    std::vector<float> good_rows = Rows(rank, 2);
    State good;
    good.AddTensorPiece("w", {kRanks * kRows, kCols}, {rank * kRows, 0},
                        View(std::span<float>(good_rows), {kRows, kCols}));
    Result<SaveResult> next = mgr->Save(2, good);
    EXPECT_FALSE(next.ok()) << "rank " << rank;
    if (rank != 0) {
      EXPECT_NE(next.status().message().find("step 2 was not saved"),
                std::string::npos)
          << next.status().ToString();
    }
    // Reported once: every rank saves the next step.
    Result<SaveResult> again = mgr->Save(3, good);
    EXPECT_TRUE(again.ok())
        << "rank " << rank << ": " << again.status().ToString();
  });
  auto mgr = OpenUrl();
  EXPECT_EQ(testing::ListedSteps(*mgr), std::vector<int64_t>{3});
}

}  // namespace
}  // namespace ckpt
