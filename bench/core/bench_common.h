// What the benchmark measures the same way for a state in host memory
// (bench_host.cc) and on a CUDA device (bench_device.cc): the state's plan,
// the directory it writes under, the raw disk baselines and ckpt's
// asynchronous saves.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "core/bench.h"
#include "core/bench_report.h"

namespace ckpt::bench {

using BenchClock = std::chrono::steady_clock;

double Seconds(BenchClock::time_point a, BenchClock::time_point b);
uint64_t MaxRssBytes();

// "layer007.weight": the name of the state's tensor `t`.
std::string BenchTensorName(int t);

// Runs `step` and, when it succeeds, appends the seconds it took to `out`.
Status Timed(std::vector<double>& out, const std::function<Status()>& step);

// Anonymous memory whose pages are all touched once.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Free(); }

  Status Map(uint64_t bytes);
  void Free();
  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// Drops the pages of every file under `dir` from the page cache, so the next
// read is the device's (only these files: the rest of the machine keeps its
// cache).
void DropCachedTree(const std::string& dir);

// Deletes every committed checkpoint under the bench's root.
Status DeleteAll(CheckpointManager& mgr);

// The state the bench saves, worked out from the arguments.
struct StatePlan {
  DType dtype = DType::kF32;
  uint64_t per_tensor = 0;  // elements of each tensor
  uint64_t state_bytes = 0;
};

// The directory the bench writes under: the raw file and the checkpoint root.
// Going away it removes the raw file, and unless --keep the root (and the
// directory, when the bench made it).
class Workspace {
 public:
  explicit Workspace(bool keep) : keep_(keep) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();

  // `dir` (created if missing), or a fresh directory under /var/tmp.
  Status Create(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& raw_path() const { return raw_path_; }
  const std::string& root() const { return root_; }

 private:
  const bool keep_;
  bool made_ = false;
  std::string dir_, raw_path_, root_;
};

// What every bench run starts from: the state's plan, the workspace, the raw
// loops' block, a manager on the workspace's root, and the peak memory before
// the state was built.
struct BenchSetup {
  explicit BenchSetup(bool keep) : workspace(keep) {}

  // Plans the state, creates the workspace, maps the block and opens the
  // manager.
  Status Start(const BenchOptions& options);

  // One round of the raw disk baselines: buffered write, cold and warm read,
  // then (where the file system takes it) O_DIRECT write and read, of the
  // state's size.
  Status MeasureRawDisk(Figures& f) const;

  // Closes the manager and opens the root again with
  // Options::async_staging_prepare_bytes of `state_bytes` and the state's
  // `tensors` (each placed on a page), as a job that saves asynchronously
  // opens it, then pauses as the job works before its first save (0.5 s +
  // 1 s per GB): the staging memory is faulted in the background meanwhile.
  Status ReopenForAsync(uint64_t state_bytes, int tensors);

  // The configuration the report starts with.
  nlohmann::json Config(const BenchOptions& options) const;

  StatePlan plan;
  Workspace workspace;
  Buffer block;
  bool direct = false;
  std::unique_ptr<CheckpointManager> mgr;
  int64_t step = 0;  // the last step saved
  PeakRss rss;
};

// The first asynchronous save maps the staging memory; the others reuse
// it. Each waits for the previous one first, as a training loop whose
// steps outlast a save would.
Status MeasureAsyncStall(CheckpointManager& mgr, const State& state, int runs,
                         int64_t& step, Figures& f);

// The bench of a state on a CUDA device (bench_device.cc).
Result<BenchResult> RunDeviceBench(const BenchOptions& options, int device);

}  // namespace ckpt::bench
