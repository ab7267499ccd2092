#include "ckpt/runner.h"

#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "ckpt/catalog.h"
#include "ckpt/storage.h"
#include "ckpt/tiered.h"
#include "gtest/gtest.h"
#include "testing/fault_storage.h"
#include "testing/files.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

constexpr uint64_t kSamples = 64;
constexpr uint64_t kBatch = 8;  // 8 steps per epoch

// A job whose state is a function of every sample it trained on, in order:
// any step lost, repeated or reordered by a resume changes `acc`.
class ToyJob : public Job {
 public:
  Status AddState(JobContext& ctx, State& state) override {
    state.AddTensor("acc", View(acc));
    sampler.AddTo(state, "sampler");
    return state.status();
  }
  Status Init(JobContext& ctx) override {
    ++inits;
    std::iota(acc.begin(), acc.end(), 1.0f);
    return Status();
  }
  Status Restore(JobContext& ctx, const State& loaded) override {
    ++restores;
    return sampler.CheckRestored();
  }
  Status Epoch(JobContext& ctx) override {
    if (ctx.epoch() == fail_in_epoch) {
      return AbortedError("the job fails in epoch " +
                          std::to_string(fail_in_epoch));
    }
    ++epochs_run;
    sampler.BeginEpoch(ctx.epoch());
    while (!sampler.done()) {
      const std::vector<uint64_t> batch = sampler.NextBatch(kBatch);
      // The whole batch updates the replicated state; each rank "trains"
      // on its share, recorded in `seen`.
      for (uint64_t s : batch) {
        float& a = acc[s % acc.size()];
        a = a * 0.75f + static_cast<float>(s) + 0.125f * ctx.epoch();
      }
      for (uint64_t s : Sampler::Shard(batch, ctx.rank(), ctx.world_size())) {
        seen.emplace_back(ctx.epoch(), s);
      }
      ctx.SetMetric("loss", 1.0 / (1.0 + ctx.step()));
      if (on_step) on_step(ctx);
      if (!ctx.EndStep()) return Status();
    }
    return Status();
  }
  bool ShouldStop(const JobContext& ctx) override {
    return stop_after_epoch >= 0 && ctx.epoch() >= stop_after_epoch;
  }
  Status Exit(JobContext& ctx) override {
    ++exits;
    return Status();
  }

  std::vector<float> acc = std::vector<float>(8);
  Sampler sampler{kSamples, 7};
  std::vector<std::pair<int64_t, uint64_t>> seen;  // (epoch, sample)
  std::function<void(JobContext&)> on_step;        // before EndStep
  int64_t stop_after_epoch = -1;
  int64_t fail_in_epoch = -1;  // Epoch fails at once in it (a crash)
  int inits = 0, restores = 0, exits = 0, epochs_run = 0;
};

std::unique_ptr<CheckpointManager> OpenRoot(const std::string& root,
                                            Options options = {}) {
  auto mgr = CheckpointManager::Open(root, std::move(options));
  EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
  return std::move(mgr).value();
}

std::vector<int64_t> Steps(CheckpointManager& mgr) {
  std::vector<int64_t> out;
  const std::vector<CheckpointInfo> all = mgr.List().value();
  for (const CheckpointInfo& info : all) out.push_back(info.step);
  return out;
}

// Runs `job` on `root` (one rank); a failed run fails the test.
RunOutcome RunJob(const std::string& root, ToyJob& job, RunnerOptions options) {
  auto mgr = OpenRoot(root);
  JobRunner runner(job, *mgr, std::move(options));
  auto outcome = runner.Run();
  if (!outcome.ok()) {
    ADD_FAILURE() << outcome.status().ToString();
    return {};
  }
  return *outcome;
}

// The state an uninterrupted 1-rank run of `epochs` epochs ends with.
std::vector<float> Reference(int64_t epochs) {
  ToyJob job;
  const testing::TempDir dir("runner-reference");
  RunJob(dir.string(), job, {.max_epochs = epochs});
  return job.acc;
}

// Resumes the job at `root` from `step`, runs it to its end and expects the
// uninterrupted run's state.
void ExpectResumedToReference(const std::string& root, int64_t epochs,
                              int64_t step) {
  const std::vector<float> reference = Reference(epochs);
  ToyJob job;
  const RunOutcome outcome = RunJob(root, job, {.max_epochs = epochs});
  EXPECT_EQ(outcome.kind, RunOutcome::Kind::kFinished);
  EXPECT_EQ(outcome.resumed_from, step);
  EXPECT_EQ(job.inits, 0);
  EXPECT_EQ(job.restores, 1);
  EXPECT_EQ(job.exits, 1);
  // The first sample trained on is the one after the saved step's.
  const int64_t epoch = step / 8;
  ASSERT_FALSE(job.seen.empty());
  EXPECT_EQ(
      job.seen.front(),
      std::make_pair(epoch, job.sampler.SampleAt(epoch, (step % 8) * kBatch)));
  EXPECT_EQ(0, std::memcmp(job.acc.data(), reference.data(),
                           reference.size() * sizeof(float)));
}

TEST(SplitMix64Test, KnownAnswersAndBoundedDraws) {
  SplitMix64 g{0};
  EXPECT_EQ(g.Next(), 0xe220a8397b1dcdafULL);  // the reference sequence
  EXPECT_EQ(g.Next(), 0x6e789e6aa1b965f4ULL);
  SplitMix64 again{g.state};
  EXPECT_EQ(g.Next(), again.Next());  // the state is all there is
  std::vector<int> counts(3);
  for (int i = 0; i < 3000; ++i) {
    const uint64_t v = g.Below(3);
    ASSERT_LT(v, 3u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_GT(c, 900);
  EXPECT_EQ(g.Below(1), 0u);
}

TEST(SamplerTest, EveryEpochIsAPermutationDrawnFromSeedAndEpoch) {
  Sampler a(1000, 5), b(1000, 5), other_seed(1000, 6);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    a.BeginEpoch(epoch);
    b.BeginEpoch(epoch);
    other_seed.BeginEpoch(epoch);
    std::vector<uint64_t> all;
    while (!a.done()) {
      std::vector<uint64_t> batch = a.NextBatch(64);
      EXPECT_LE(batch.size(), 64u);
      EXPECT_EQ(batch, b.NextBatch(64));
      all.insert(all.end(), batch.begin(), batch.end());
    }
    EXPECT_TRUE(a.NextBatch(64).empty());
    std::vector<uint64_t> sorted = all;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> expected(1000);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(sorted, expected) << "epoch " << epoch;
    EXPECT_NE(all, expected) << "epoch " << epoch << " was not shuffled";
    EXPECT_NE(all, other_seed.NextBatch(1000)) << "the seed had no effect";
    for (uint64_t i = 0; i < all.size(); i += 97) {
      EXPECT_EQ(a.SampleAt(epoch, i), all[i]);
    }
  }
  EXPECT_NE(a.SampleAt(0, 0) * 1000 + a.SampleAt(0, 1),
            a.SampleAt(1, 0) * 1000 + a.SampleAt(1, 1));
}

TEST(SamplerTest, ShardsSplitABatchWithoutOverlap) {
  const std::vector<uint64_t> batch = {10, 11, 12, 13, 14, 15, 16};
  std::multiset<uint64_t> joined;
  for (int r = 0; r < 3; ++r) {
    for (uint64_t s : Sampler::Shard(batch, r, 3)) joined.insert(s);
  }
  EXPECT_EQ(joined, std::multiset<uint64_t>(batch.begin(), batch.end()));
  EXPECT_EQ(Sampler::Shard(batch, 1, 3), (std::vector<uint64_t>{11, 14}));
}

TEST(SamplerTest, ContinuesMidEpochAfterALoadAndRejectsAnotherDataSet) {
  const testing::TempDir temp("runner-sampler");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  Sampler s(100, 3);
  s.BeginEpoch(2);
  s.NextBatch(30);
  State saved;
  s.AddTo(saved, "sampler");
  ASSERT_TRUE(mgr->Save(1, saved).ok());
  const std::vector<uint64_t> rest = s.NextBatch(100);

  Sampler resumed(100, 3);
  State load;
  resumed.AddTo(load, "sampler");
  ASSERT_TRUE(mgr->Load(1, load).ok());
  ASSERT_TRUE(resumed.CheckRestored().ok());
  resumed.BeginEpoch(2);  // the epoch it was in: continues
  EXPECT_EQ(resumed.position(), 30u);
  EXPECT_EQ(resumed.NextBatch(100), rest);
  resumed.BeginEpoch(3);
  EXPECT_EQ(resumed.position(), 0u);

  Sampler changed(101, 3);
  State load2;
  changed.AddTo(load2, "sampler");
  ASSERT_TRUE(mgr->Load(1, load2).ok());
  const Status st = changed.CheckRestored();
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("100 samples"), std::string::npos)
      << st.message();
}

TEST(RunnerTest, FreshStartSavesStepZeroAndEveryEpochBoundary) {
  const testing::TempDir temp("runner-fresh");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  ToyJob job;
  JobRunner runner(job, *mgr, {.max_epochs = 3});
  auto outcome = runner.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(outcome->kind, RunOutcome::Kind::kFinished);
  EXPECT_EQ(outcome->exit_code(), 0);
  EXPECT_EQ(outcome->step, 24);
  EXPECT_FALSE(outcome->resumed_from.has_value());
  EXPECT_EQ(job.inits, 1);
  EXPECT_EQ(job.exits, 1);
  EXPECT_EQ(job.epochs_run, 3);
  EXPECT_EQ(Steps(*mgr), (std::vector<int64_t>{0, 8, 16, 24}));
  auto last = mgr->List().value().back();
  EXPECT_EQ(last.epoch, 2);
  EXPECT_EQ(last.metadata["runner.saved_at"], "epoch end");
  EXPECT_DOUBLE_EQ(last.metrics["loss"], 1.0 / 24);
}

// The runner owns its job's root: one that does not exist yet is a new job
// (a plain Latest() of it would be NotFound), which its first save creates.
TEST(RunnerTest, ARootThatDoesNotExistYetStartsFresh) {
  const testing::TempDir temp("runner-new-root");
  const std::string root = temp.string() + "/jobs/run1";
  auto mgr = OpenRoot(root);
  ASSERT_FALSE(std::filesystem::exists(root));
  ToyJob job;
  std::vector<std::string> lines;
  JobRunner runner(job, *mgr,
                   {.max_epochs = 1, .log = [&](const std::string& line) {
                      lines.push_back(line);
                    }});
  auto outcome = runner.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_FALSE(outcome->resumed_from.has_value());
  EXPECT_EQ(job.inits, 1);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "root " + root +
                          " does not exist yet: starting fresh; the first "
                          "save creates it");
  EXPECT_TRUE(std::filesystem::is_directory(root));
  EXPECT_EQ(Steps(*mgr), (std::vector<int64_t>{0, 8}));
}

TEST(RunnerTest, SavesEveryNSteps) {
  const testing::TempDir temp("runner-every-n");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  ToyJob job;
  JobRunner runner(job, *mgr, {.max_epochs = 2, .save_every_steps = 3});
  ASSERT_TRUE(runner.Run().ok());
  EXPECT_EQ(Steps(*mgr), (std::vector<int64_t>{0, 3, 6, 8, 9, 12, 15, 16}));
}

// Rank 0's clock decides; slow steps get mid-epoch saves.
TEST(RunnerTest, SavesEverySSeconds) {
  const testing::TempDir temp("runner-every-s");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  ToyJob job;
  job.on_step = [](JobContext&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  };
  JobRunner runner(job, *mgr, {.max_epochs = 2, .save_every_seconds = 0.05});
  ASSERT_TRUE(runner.Run().ok());
  int mid_epoch = 0;
  for (int64_t s : Steps(*mgr)) mid_epoch += s % 8 != 0;
  EXPECT_GE(mid_epoch, 3);
}

// SIGTERM in the middle of an epoch: the step ends, is saved, the run
// returns kPreempted (exit code 75); the next run resumes at that step and
// ends exactly where an uninterrupted run does.
TEST(RunnerTest, SigtermMidEpochSavesThatStepAndResumesExactly) {
  const testing::TempDir temp("runner-sigterm");
  const std::string root = temp.string();
  {
    auto mgr = OpenRoot(root);
    ToyJob job;
    job.on_step = [](JobContext& ctx) {
      if (ctx.step() == 10) std::raise(SIGTERM);  // during step 11
    };
    JobRunner runner(job, *mgr, {.max_epochs = 3});
    auto outcome = runner.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(outcome->kind, RunOutcome::Kind::kPreempted);
    EXPECT_EQ(outcome->exit_code(), kExitPreempted);
    EXPECT_EQ(kExitPreempted, 75);
    EXPECT_EQ(outcome->step, 11);
    EXPECT_EQ(outcome->epoch, 1);
    EXPECT_EQ(outcome->last_saved, 11);
    EXPECT_EQ(job.exits, 0);
    EXPECT_EQ(mgr->Latest().value(), 11);
    auto info = mgr->List().value().back();
    EXPECT_EQ(info.metadata["runner.saved_at"], "preemption");
    EXPECT_EQ(info.epoch, 1);
  }
  ExpectResumedToReference(root, 3, 11);
}

// Raises SIGTERM at every write of a save once armed.
class SignallingStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    if (armed) {
      ++raised;
      std::raise(SIGTERM);
    }
    return StorageWrapper::NewWritable(key);
  }
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    if (armed) {
      ++raised;
      std::raise(SIGUSR1);
    }
    return StorageWrapper::Put(key, data, mode);
  }
  bool armed = false;
  int raised = 0;
};

// Flips the last byte of every file of step `step` in the file root
// `root` that holds tensor bytes (its data objects).
void DamageStep(const std::string& root, int64_t step) {
  char dir[32];
  std::snprintf(dir, sizeof(dir), "step-%012lld", static_cast<long long>(step));
  ASSERT_GT(
      testing::FlipLastByteOfDataObjects(std::filesystem::path(root) / dir), 0)
      << "no data object in " << dir;
}

// The newest steps damaged: the run resumes from the newest step that
// loads whole, trains the lost steps again, replaces the damaged epoch
// boundary it reaches and ends as an uninterrupted run.
TEST(RunnerTest, AResumeSkipsADamagedNewestStep) {
  const testing::TempDir temp("runner-damaged");
  const std::string root = temp.string();
  {
    auto mgr = OpenRoot(root);
    ToyJob job;
    job.on_step = [](JobContext& ctx) {
      if (ctx.step() == 18) std::raise(SIGTERM);  // during step 19
    };
    JobRunner runner(job, *mgr, {.max_epochs = 3});
    auto outcome = runner.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(Steps(*mgr), (std::vector<int64_t>{0, 8, 16, 19}));
  }
  DamageStep(root, 19);
  DamageStep(root, 16);
  ExpectResumedToReference(root, 3, 8);
  auto mgr = OpenRoot(root);
  EXPECT_TRUE(mgr->Verify(16).value().ok()) << "step 16 was not replaced";
}

TEST(RunnerTest, SignalsDuringThePreemptionSaveChangeNothing) {
  const testing::TempDir temp("runner-second-signal");
  const std::string root = temp.string();
  {
    auto storage =
        std::make_unique<SignallingStorage>(OpenStorage(root).value());
    SignallingStorage* signalling = storage.get();
    auto mgr = CheckpointManager::Open(std::move(storage)).value();
    ToyJob job;
    job.on_step = [&](JobContext& ctx) {
      if (ctx.step() == 4) {
        std::raise(SIGTERM);
        signalling->armed = true;  // every write of the save signals again
      }
    };
    JobRunner runner(job, *mgr, {.max_epochs = 2});
    auto outcome = runner.Run();
    // The runner's handlers are gone: a signal now would end this test (the
    // manager still writes when it gives the root's lease back).
    signalling->armed = false;
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(outcome->exit_code(), kExitPreempted);
    EXPECT_EQ(outcome->step, 5);
    EXPECT_GE(signalling->raised, 2);
    EXPECT_EQ(mgr->Latest().value(), 5);
    auto report = mgr->Verify(5);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok());
  }
  ExpectResumedToReference(root, 2, 5);
}

TEST(RunnerTest, StopPredicateFinishesAndARestartDoesNotTrainAgain) {
  const testing::TempDir temp("runner-stop");
  const std::string root = temp.string();
  for (int run = 0; run < 2; ++run) {
    ToyJob job;
    job.stop_after_epoch = 1;
    const RunOutcome outcome = RunJob(root, job, {.max_epochs = 10});
    EXPECT_EQ(outcome.kind, RunOutcome::Kind::kFinished);
    EXPECT_EQ(job.exits, 1);
    // The restart finds the finished job: no epoch runs, Exit runs again.
    EXPECT_EQ(job.epochs_run, run == 0 ? 2 : 0);
    EXPECT_EQ(outcome.resumed_from,
              run == 0 ? std::nullopt : std::optional<int64_t>(16));
  }
  EXPECT_EQ(Steps(*OpenRoot(root)), (std::vector<int64_t>{0, 8, 16}));
}

// Counts the reads of tensor data (data objects) through it.
class DataReadCounter : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    if (key.ends_with(".safetensors")) ++data_reads;
    return StorageWrapper::ReadRange(key, offset, out);
  }
  Result<std::string> ReadAll(std::string_view key) override {
    if (key.ends_with(".safetensors")) ++data_reads;
    return StorageWrapper::ReadAll(key);
  }
  std::atomic<int> data_reads{0};
};

// A job with tiers saves every step to node memory and each epoch's end
// durably too, then fails early in epoch 1. The restart resumes from the
// local tier at step 8, a step the durable tier also holds: it reads none
// of the durable tier's tensor data, not to load, and not to judge at the
// epoch's end whether the durable step 8 loads whole before saving it again
// (it is not saved again), and ends as an uninterrupted run does.
TEST(RunnerTest, AResumeFromTheLocalTierReadsNoDurableData) {
  const testing::TempDir temp("runner-tiers");
  const std::string local =
      "mem://" + temp.path().filename().string() + "-node{node}";
  auto run = [&](ToyJob& job, int* data_reads) -> Result<RunOutcome> {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> target,
                          OpenStorage(temp.string()));
    auto counted = std::make_unique<DataReadCounter>(std::move(target));
    DataReadCounter& counter = *counted;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> durable,
                          CheckpointManager::Open(std::move(counted), {}));
    TierOptions t;
    t.local_url = local;
    t.node_of_rank = {0};
    t.replicas = 0;
    t.local_every_steps = 1;
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<TieredManager> tiers,
                          TieredManager::Open(*durable, t));
    RunnerOptions options{.max_epochs = 2, .save_every_steps = 1};
    options.tiers = tiers.get();
    JobRunner runner(job, *durable, options);
    Result<RunOutcome> outcome = runner.Run();
    *data_reads = counter.data_reads.load();
    return outcome;
  };
  int data_reads = 0;
  ToyJob first;
  first.fail_in_epoch = 1;
  ASSERT_FALSE(run(first, &data_reads).ok());
  EXPECT_EQ(Steps(*OpenRoot(temp.string())), (std::vector<int64_t>{0, 8}));

  ToyJob resumed;
  Result<RunOutcome> outcome = run(resumed, &data_reads);
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(outcome->resumed_from, 8);
  EXPECT_EQ(data_reads, 0) << "the resume read the durable tier's data";
  EXPECT_EQ(Steps(*OpenRoot(temp.string())), (std::vector<int64_t>{0, 8, 16}));
  const std::vector<float> reference = Reference(2);
  EXPECT_EQ(0, std::memcmp(resumed.acc.data(), reference.data(),
                           reference.size() * sizeof(float)));
}

TEST(RunnerTest, RequestStopFromTheEpoch) {
  const testing::TempDir temp("runner-request-stop");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  ToyJob job;
  job.on_step = [](JobContext& ctx) {
    if (ctx.step() == 3) ctx.RequestStop();
  };
  JobRunner runner(job, *mgr);
  auto outcome = runner.Run();
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->kind, RunOutcome::Kind::kFinished);
  EXPECT_EQ(outcome->step, 8);  // the epoch is finished, then it stops
  EXPECT_EQ(job.exits, 1);
}

TEST(RunnerTest, BackupAndRestoreModeDeletesCheckpointsWhenDone) {
  const testing::TempDir temp("runner-delete");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  ToyJob job;
  JobRunner runner(job, *mgr,
                   {.max_epochs = 2, .delete_checkpoints_when_done = true});
  ASSERT_TRUE(runner.Run().ok());
  EXPECT_EQ(job.exits, 1);
  EXPECT_TRUE(Steps(*mgr).empty());
  EXPECT_FALSE(mgr->Latest().value().has_value());
}

// A job whose Exit saves its final weights incrementally into the root:
// the runner's last checkpoint has dependants, and "backup and restore"
// mode must still delete everything (dependants before what they use).
class ExportingJob : public ToyJob {
 public:
  explicit ExportingJob(CheckpointManager& mgr) : mgr_(mgr) {}
  Status Exit(JobContext& ctx) override {
    CKPT_RETURN_IF_ERROR(ToyJob::Exit(ctx));
    for (int64_t step : {1000, 1001}) {
      State state;
      state.AddTensor("acc", View(acc));
      CKPT_ASSIGN_OR_RETURN(SaveResult saved,
                            mgr_.Save(step, state, {.incremental = true}));
      chained += saved.info.depends_on.empty() ? 0 : 1;
    }
    return Status();
  }

  int chained = 0;  // exports that depend on another checkpoint

 private:
  CheckpointManager& mgr_;
};

TEST(RunnerTest, DeleteWhenDoneDeletesAnIncrementalChain) {
  const testing::TempDir temp("runner-delete-chain");
  const std::string root = temp.string();
  auto mgr = OpenRoot(root);
  ExportingJob job(*mgr);
  JobRunner runner(job, *mgr,
                   {.max_epochs = 2, .delete_checkpoints_when_done = true});
  auto outcome = runner.Run();
  ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
  EXPECT_EQ(job.exits, 1);
  EXPECT_EQ(job.chained, 2);
  EXPECT_TRUE(Steps(*mgr).empty());
  EXPECT_FALSE(mgr->Latest().value().has_value());
}

TEST(RunnerTest, AFailedSaveStopsTheRunWithItsError) {
  const testing::TempDir temp("runner-save-fails");
  const std::string root = temp.string();
  std::unique_ptr<Storage> base = OpenStorage(root).value();
  auto storage = std::make_unique<testing::FaultStorage>(base.get());
  testing::FaultStorage* fault = storage.get();
  auto mgr = CheckpointManager::Open(std::move(storage)).value();
  ToyJob job;
  job.on_step = [&](JobContext& ctx) {
    if (ctx.step() == 2) {
      fault->FailOnce(fault->operations(), IOError("disk on fire"));
    }
  };
  JobRunner runner(job, *mgr, {.max_epochs = 2, .save_every_steps = 3});
  auto outcome = runner.Run();
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.status().message().find("disk on fire"), std::string::npos)
      << outcome.status().ToString();
  EXPECT_EQ(job.epochs_run, 1);
  EXPECT_EQ(job.exits, 0);
}

TEST(RunnerTest, RecordsEverySaveInTheCatalogAndResumesThroughIt) {
  const testing::TempDir temp("runner-catalog");
  const std::string dir = temp.string();
  std::shared_ptr<Catalog> catalog =
      OpenCatalog(dir + "/catalog.sqlite").value();
  const std::string root = dir + "/root";
  {
    auto mgr = OpenRoot(root, {.job_id = "toy", .catalog = catalog});
    ToyJob job;
    job.on_step = [](JobContext& ctx) {
      if (ctx.step() == 12) std::raise(SIGUSR1);
    };
    JobRunner runner(job, *mgr, {.max_epochs = 3});
    ASSERT_EQ(runner.Run()->exit_code(), kExitPreempted);
  }
  auto rows = catalog->List({.job_id = "toy"}).value();
  ASSERT_EQ(rows.size(), 3u);  // steps 0, 8, 13
  EXPECT_EQ(rows[1].step, 8);
  EXPECT_EQ(rows[1].epoch, 0);
  EXPECT_EQ(rows[2].step, 13);
  EXPECT_EQ(rows[2].epoch, 1);
  EXPECT_DOUBLE_EQ(rows[2].metrics["loss"], 1.0 / 13);
  ASSERT_EQ(rows[2].hosts.size(), 1u);
  EXPECT_FALSE(rows[2].hosts[0].empty());

  std::vector<std::string> lines;
  auto mgr = OpenRoot(root, {.job_id = "toy", .catalog = catalog});
  ToyJob job;
  JobRunner runner(job, *mgr,
                   {.max_epochs = 3,
                    .log = [&](const std::string& l) { lines.push_back(l); }});
  auto outcome = runner.Run();
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->resumed_from, 13);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "resumed from step 13: continuing epoch 1");
  EXPECT_EQ(catalog->Latest("toy").value()->step, 24);
}

// A catalog file that cannot be opened (damaged, or a folder in its place)
// does not keep the job from starting: one warning, and the job saves and
// resumes from storage alone. Unless the catalog is required.
TEST(RunnerTest, AJobWhoseCatalogCannotBeOpenedRunsFromStorageAlone) {
  for (const bool folder : {false, true}) {
    SCOPED_TRACE(folder ? "a folder" : "garbage bytes");
    const testing::TempDir temp(folder ? "runner-catalog-dir"
                                       : "runner-catalog-junk");
    const std::string dir = temp.string();
    const std::string path = dir + "/catalog.sqlite";
    if (folder) {
      std::filesystem::create_directory(path);
    } else {
      ASSERT_TRUE(testing::WriteFile(path, std::string(4096, 'x')));
    }
    const std::string root = dir + "/root";
    std::vector<std::string> lines;
    auto log = [&](const std::string& l) { lines.push_back(l); };
    {
      ::testing::internal::CaptureStderr();
      auto catalog = OpenCatalogForJob(path);
      ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
      EXPECT_EQ(*catalog, nullptr);
      auto mgr =
          OpenRoot(root, {.job_id = "toy", .catalog = std::move(*catalog)});
      ToyJob job;
      job.on_step = [](JobContext& ctx) {
        if (ctx.step() == 12) std::raise(SIGUSR1);
      };
      JobRunner runner(job, *mgr, {.max_epochs = 3, .log = log});
      auto outcome = runner.Run();
      const std::string err = ::testing::internal::GetCapturedStderr();
      ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
      EXPECT_EQ(outcome->exit_code(), kExitPreempted);
      size_t warnings = 0;
      for (size_t at = err.find("warning"); at != std::string::npos;
           at = err.find("warning", at + 1)) {
        ++warnings;
      }
      EXPECT_EQ(warnings, 1u) << err;
      EXPECT_NE(err.find(path), std::string::npos) << err;
    }
    auto catalog = OpenCatalogForJob(path);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    auto mgr =
        OpenRoot(root, {.job_id = "toy", .catalog = std::move(*catalog)});
    ToyJob job;
    JobRunner runner(job, *mgr, {.max_epochs = 3, .log = log});
    auto outcome = runner.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(outcome->resumed_from, 13);
    EXPECT_EQ(job.acc, Reference(3));

    auto required = OpenCatalogForJob(path, /*required=*/true);
    ASSERT_FALSE(required.ok());
    EXPECT_NE(required.status().message().find("the catalog is required"),
              std::string::npos)
        << required.status().ToString();
    EXPECT_NE(required.status().message().find(path), std::string::npos)
        << required.status().ToString();
  }
}

// Runs `n` ranks as threads, each with its own manager and runner.
void RunRanks(int n, const std::string& root,
              const std::function<void(int, CheckpointManager&)>& body) {
  auto comms = NewThreadCommunicators(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto mgr = OpenRoot(root, {.communicator = comms[r].get()});
      body(r, *mgr);
    });
  }
  for (auto& t : threads) t.join();
}

// Saved at 4 ranks (one rank asks for the preemption, all stop at the same
// step), resumed at 2: the 2 ranks train on exactly the samples the 4 had
// not seen, and the job ends as a 1-rank run does.
TEST(RunnerTest, PreemptedAtFourRanksResumesAtTwoWithTheUnseenSamples) {
  const std::vector<float> reference = Reference(2);
  const testing::TempDir temp("runner-reshard");
  const std::string root = temp.string();
  std::vector<std::pair<int64_t, uint64_t>> seen_at_4, seen_at_2;
  std::mutex mu;
  RunRanks(4, root, [&](int rank, CheckpointManager& mgr) {
    ToyJob job;
    JobRunner runner(job, mgr, {.max_epochs = 2});
    job.on_step = [&](JobContext& ctx) {
      if (rank == 2 && ctx.step() == 4) runner.Preempt();
    };
    auto outcome = runner.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(outcome->exit_code(), kExitPreempted) << "rank " << rank;
    EXPECT_EQ(outcome->step, 5) << "rank " << rank;
    std::lock_guard<std::mutex> lock(mu);
    seen_at_4.insert(seen_at_4.end(), job.seen.begin(), job.seen.end());
  });
  std::vector<float> acc_at_2;
  RunRanks(2, root, [&](int rank, CheckpointManager& mgr) {
    ToyJob job;
    JobRunner runner(job, mgr, {.max_epochs = 2});
    auto outcome = runner.Run();
    ASSERT_TRUE(outcome.ok()) << outcome.status().ToString();
    EXPECT_EQ(outcome->resumed_from, 5);
    EXPECT_EQ(outcome->kind, RunOutcome::Kind::kFinished);
    std::lock_guard<std::mutex> lock(mu);
    seen_at_2.insert(seen_at_2.end(), job.seen.begin(), job.seen.end());
    if (rank == 0) acc_at_2 = job.acc;
  });
  // Epoch 0: 5 batches at 4 ranks, the other 3 at 2 ranks, no sample
  // twice; epoch 1: every sample at 2 ranks.
  EXPECT_EQ(seen_at_4.size(), 5 * kBatch);
  std::set<uint64_t> epoch0;
  for (const auto& [e, s] : seen_at_4) {
    EXPECT_EQ(e, 0);
    EXPECT_TRUE(epoch0.insert(s).second) << "sample " << s << " twice";
  }
  std::set<uint64_t> epoch1;
  for (const auto& [e, s] : seen_at_2) {
    auto& set = e == 0 ? epoch0 : epoch1;
    EXPECT_TRUE(set.insert(s).second)
        << "sample " << s << " of epoch " << e << " seen again";
  }
  EXPECT_EQ(epoch0.size(), kSamples);
  EXPECT_EQ(epoch1.size(), kSamples);
  EXPECT_EQ(seen_at_2.size(), 3 * kBatch + kSamples);
  EXPECT_EQ(0, std::memcmp(acc_at_2.data(), reference.data(),
                           reference.size() * sizeof(float)));
}

}  // namespace
}  // namespace ckpt
