// The benchmark of a state in host memory (`ckpt bench`): ckpt's save and
// load beside the raw disk, in one run.
//
// Per round, on a fresh file under DIR and then a fresh step in a root under
// DIR, with the same number of bytes:
//   1. raw write: a plain pwrite loop of 16 MiB blocks, then fsync; once
//      buffered, once with O_DIRECT (an aligned, reused buffer) where the file
//      system allows it;
//   2. raw read: a read loop over the buffered file, cold (its pages dropped
//      from the page cache with posix_fadvise, so the device is read) and
//      warm (again, from the cache); and over the O_DIRECT file with
//      O_DIRECT;
//   3. ckpt Save of the state (fsync and commit included), then Load into the
//      same buffers (checksums checked), cold (the checkpoint's pages
//      dropped the same way) and warm.
// Then memcpy of the state into a reused buffer, by one thread and by as many
// threads as the machine has cores (each copying its share of every tensor:
// what the cores reach together), and SaveAsync: the time the
// caller is stalled (the first save is reported apart) and the time until
// the save is committed. The root is opened again for SaveAsync with
// Options::async_staging_prepare_bytes of the state's size, as a job that
// saves asynchronously opens it, and the first save comes after a pause
// that stands for the job's work before it (0.5 s + 1 s per GB of state):
// the staging memory is faulted in on a background thread meanwhile, and
// the first save copies into it (ratios.first_async_stall_vs_later). Peak
// memory is getrusage's ru_maxrss after the first Save (before any load),
// after the loads (beside the staging memory the manager kept: the
// all-or-nothing load maps it once and reuses it) and after the
// asynchronous phase. Figures are medians over the rounds.
//
// With --device cuda:N the state lives on that device instead
// (bench_device.cc). RunBench chooses between the two.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/bench.h"
#include "core/bench_common.h"
#include "core/bench_report.h"
#include "util/proc_status.h"

namespace ckpt::bench {
namespace {

// The tensors' memory and the State that borrows it.
struct BenchState {
  std::vector<std::unique_ptr<Buffer>> tensors;
  State state;
};

// Every page written (varied bytes, so nothing is all zeros).
Status BuildState(const StatePlan& plan, int num_tensors, BenchState& out) {
  const uint64_t elem = DTypeSize(plan.dtype);
  for (int t = 0; t < num_tensors; ++t) {
    auto b = std::make_unique<Buffer>();
    CKPT_RETURN_IF_ERROR(b->Map(plan.per_tensor * elem));
    for (uint64_t i = 0; i < b->size(); i += 4096) {
      b->data()[i] = static_cast<std::byte>(t * 31 + i / 4096);
    }
    out.state.AddTensor(BenchTensorName(t),
                        TensorView{plan.dtype,
                                   {static_cast<int64_t>(plan.per_tensor)},
                                   b->data(),
                                   true});
    out.tensors.push_back(std::move(b));
  }
  return out.state.status();
}

// One round of ckpt: Save as the next step (alone on the disk), then Load it
// cold and warm (all or nothing, the default), then cold streaming. The
// first round (`rss` given) records the save's peak before
// any load, and the resident memory before the loads in `rss.kept`
// (RunHostBench subtracts it from the memory resident after them: what the
// manager keeps).
Status MeasureSaveLoad(CheckpointManager& mgr, const std::string& root,
                       State& state, int64_t& step, Figures& f, PeakRss* rss) {
  CKPT_RETURN_IF_ERROR(DeleteAll(mgr));
  CKPT_RETURN_IF_ERROR(
      Timed(f.save, [&] { return mgr.Save(++step, state).status(); }));
  if (rss != nullptr) {
    rss->save = MaxRssBytes();
    rss->kept = ProcStatus("VmRSS");
  }
  DropCachedTree(root);
  CKPT_RETURN_IF_ERROR(
      Timed(f.load_cold, [&] { return mgr.Load(step, state).status(); }));
  CKPT_RETURN_IF_ERROR(
      Timed(f.load_warm, [&] { return mgr.Load(step, state).status(); }));
  DropCachedTree(root);
  LoadOptions streaming;
  streaming.transactional = false;
  return Timed(f.load_streaming_cold,
               [&] { return mgr.Load(step, state, streaming).status(); });
}

// Copies share `part` of `parts` of every tensor into `copy`.
void CopyShare(const std::vector<std::unique_ptr<Buffer>>& tensors,
               std::byte* copy, int part, int parts) {
  uint64_t at = 0;
  for (const auto& t : tensors) {
    const uint64_t begin = t->size() * part / parts;
    const uint64_t end = t->size() * (part + 1) / parts;
    std::memcpy(copy + at + begin, t->data() + begin, end - begin);
    at += t->size();
  }
}

// The first touch of a buffer of the state's size, then `runs` copies of
// the state into it by one thread, and `runs` by one thread per core.
Status MeasureMemcpy(const std::vector<std::unique_ptr<Buffer>>& tensors,
                     uint64_t state_bytes, int runs, Figures& f) {
  Buffer copy;
  auto t0 = BenchClock::now();
  CKPT_RETURN_IF_ERROR(copy.Map(state_bytes));
  f.first_touch = Seconds(t0, BenchClock::now());
  for (int r = 0; r < runs; ++r) {
    t0 = BenchClock::now();
    CopyShare(tensors, copy.data(), 0, 1);
    f.memcpy.push_back(Seconds(t0, BenchClock::now()));
  }
  f.parallel_memcpy_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int n = f.parallel_memcpy_threads;
  for (int r = 0; r < runs; ++r) {
    t0 = BenchClock::now();
    std::vector<std::thread> threads;
    for (int part = 1; part < n; ++part) {
      threads.emplace_back(CopyShare, std::cref(tensors), copy.data(), part, n);
    }
    CopyShare(tensors, copy.data(), 0, n);
    for (auto& t : threads) t.join();
    f.parallel_memcpy.push_back(Seconds(t0, BenchClock::now()));
  }
  return Status();
}

Result<BenchResult> RunHostBench(const BenchOptions& options) {
  BenchSetup setup(options.keep);
  CKPT_RETURN_IF_ERROR(setup.Start(options));
  BenchState bench;
  CKPT_RETURN_IF_ERROR(BuildState(setup.plan, options.tensors, bench));
  Figures f;
  for (int r = 0; r < options.runs; ++r) {
    CKPT_RETURN_IF_ERROR(setup.MeasureRawDisk(f));
    CKPT_RETURN_IF_ERROR(MeasureSaveLoad(*setup.mgr, setup.workspace.root(),
                                         bench.state, setup.step, f,
                                         r == 0 ? &setup.rss : nullptr));
  }
  setup.rss.sync = MaxRssBytes();
  // The staging memory the all-or-nothing loads mapped and the manager
  // keeps for later loads and saves: reported apart from what a load adds.
  const uint64_t resident = ProcStatus("VmRSS");
  setup.rss.kept = resident > setup.rss.kept ? resident - setup.rss.kept : 0;
  // Closed before the memcpy and the asynchronous phase, so that neither
  // peak counts the staging memory of this manager beside its own.
  setup.mgr.reset();
  CKPT_RETURN_IF_ERROR(
      MeasureMemcpy(bench.tensors, setup.plan.state_bytes, options.runs, f));
  // Opened as a job that saves asynchronously opens it: its staging memory
  // is faulted in on a background thread during the job's work before its
  // first save (building the model, the first steps), which the bench
  // stands for with a pause.
  CKPT_RETURN_IF_ERROR(
      setup.ReopenForAsync(setup.plan.state_bytes, options.tensors));
  CKPT_RETURN_IF_ERROR(
      MeasureAsyncStall(*setup.mgr, bench.state, options.runs, setup.step, f));
  setup.rss.async = MaxRssBytes();
  setup.mgr.reset();
  const double bytes = static_cast<double>(setup.plan.state_bytes);
  return BenchResult{MakeReport(setup.Config(options), bytes, f, setup.rss),
                     RoundsJson(f, bytes)};
}

}  // namespace

Result<BenchResult> RunBench(const BenchOptions& options) {
  CKPT_ASSIGN_OR_RETURN(const MemoryLocation where,
                        ParseBenchDevice(options.device));
  if (where.is_host()) return RunHostBench(options);
  return RunDeviceBench(options, where.device());
}

}  // namespace ckpt::bench
