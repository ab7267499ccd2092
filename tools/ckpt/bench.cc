// ckpt bench: ckpt's save and load beside the raw disk, in one run.
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
// caller is stalled (the first save, which maps the staging memory, is
// reported apart) and the time until the save is committed. Peak memory is
// getrusage's ru_maxrss after the synchronous phases and after the
// asynchronous one. Figures are medians over the rounds.
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_report.h"
#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kDirectAlign = 4096;
constexpr double kMiB = 1024.0 * 1024.0;

struct BenchArgs {
  std::string size = "2GiB";
  int tensors = 64;
  std::string dtype = "F32";
  int runs = 5;
  std::string dir;  // empty: a fresh directory under /var/tmp
  bool keep = false;
  bool json = false;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint64_t MaxRssBytes() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

// "2GiB", "512MiB", "64KiB", "1000" (bytes); K/M/G mean the binary units.
Result<uint64_t> ParseSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && (std::isdigit(text[pos]) || text[pos] == '.')) {
    ++pos;
  }
  std::string unit = text.substr(pos);
  double number = 0;
  try {
    number = std::stod(text.substr(0, pos));
  } catch (const std::exception&) {
    return InvalidArgumentError("--size " + text + ": not a size");
  }
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kib") scale = 1024.0;
  if (unit == "m" || unit == "mib") scale = kMiB;
  if (unit == "g" || unit == "gib") scale = kMiB * 1024;
  if (scale == 0 || !(number > 0) || number * scale > 1e13) {
    return InvalidArgumentError("--size " + text +
                                ": not a size (say 2GiB, 512MiB or 4096)");
  }
  return static_cast<uint64_t>(number * scale);
}

// Anonymous memory whose pages are all touched once.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Free(); }

  Status Map(uint64_t bytes) {
    void* p =
        ::mmap(nullptr, std::max<uint64_t>(bytes, 1), PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return ErrnoError(errno, "map " + std::to_string(bytes) + " bytes");
    }
    data_ = static_cast<std::byte*>(p);
    size_ = bytes;
    std::memset(data_, 0x5a, size_);
    return Status();
  }
  void Free() {
    if (data_ != nullptr) ::munmap(data_, std::max<uint64_t>(size_, 1));
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  uint64_t size_ = 0;
};

// Writes `total` bytes from `block` (reused) to a new file at `path`, then
// fsyncs; returns the seconds. `direct`: O_DIRECT (the block is aligned).
Result<double> RawWrite(const std::string& path, uint64_t total,
                        const Buffer& block, bool direct) {
  ::unlink(path.c_str());
  const int fd = ::open(
      path.c_str(),
      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return ErrnoError(errno, "raw write: open " + path);
  const auto start = Clock::now();
  uint64_t done = 0;
  Status status;
  while (done < total && status.ok()) {
    uint64_t n = std::min(kBlock, total - done);
    // O_DIRECT needs whole blocks; the file is cut back to size below.
    if (direct) n = (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    const ssize_t w = ::pwrite(fd, block.data(), n, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) status = ErrnoError(w < 0 ? errno : EIO, "raw write " + path);
    done += w > 0 ? static_cast<uint64_t>(w) : 0;
  }
  if (status.ok() && direct && done != total &&
      ::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    status = ErrnoError(errno, "raw write: truncate " + path);
  }
  if (status.ok() && ::fsync(fd) != 0) {
    status = ErrnoError(errno, "raw write: fsync " + path);
  }
  const auto end = Clock::now();
  ::close(fd);
  CKPT_RETURN_IF_ERROR(status);
  return Seconds(start, end);
}

// Drops the file's pages from the page cache, so the next read is the
// device's (only this file: the rest of the machine keeps its cache).
void DropCached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void DropCachedTree(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) DropCached(it->path().string());
  }
}

// Reads the file at `path` through `block` (reused); returns the seconds.
Result<double> RawRead(const std::string& path, const Buffer& block,
                       bool direct) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return ErrnoError(errno, "raw read: open " + path);
  const auto start = Clock::now();
  uint64_t offset = 0;
  Status status;
  for (;;) {
    const ssize_t r =
        ::pread(fd, block.data(), kBlock, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) status = ErrnoError(errno, "raw read " + path);
    if (r <= 0) break;
    offset += static_cast<uint64_t>(r);
  }
  const auto end = Clock::now();
  ::close(fd);
  CKPT_RETURN_IF_ERROR(status);
  return Seconds(start, end);
}

// Whether `dir`'s file system takes O_DIRECT (tmpfs does not).
bool DirectWorks(const std::string& dir) {
  const std::string path = dir + "/direct-probe";
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(path.c_str());
  return fd >= 0;
}

// Deletes every committed checkpoint under the bench's root.
Status DeleteAll(CheckpointManager& mgr) {
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, mgr.List());
  for (const CheckpointInfo& info : infos) {
    CKPT_RETURN_IF_ERROR(mgr.Delete(info.step));
  }
  return Status();
}

// The state the bench saves, worked out from the arguments.
struct StatePlan {
  DType dtype = DType::kF32;
  uint64_t per_tensor = 0;  // elements of each tensor
  uint64_t state_bytes = 0;
};

Result<StatePlan> PlanState(const BenchArgs& args) {
  CKPT_ASSIGN_OR_RETURN(const uint64_t requested, ParseSize(args.size));
  const std::optional<DType> dtype = ParseDType(args.dtype);
  if (!dtype) {
    return InvalidArgumentError("--dtype " + args.dtype +
                                ": not a dtype (F32, BF16, F16, F64, U8, ...)");
  }
  if (args.tensors < 1 || args.runs < 1) {
    return InvalidArgumentError("--tensors and --runs must be at least 1");
  }
  const uint64_t elem = DTypeSize(*dtype);
  const uint64_t per_tensor = requested / args.tensors / elem;
  if (per_tensor == 0) {
    return InvalidArgumentError("--size " + args.size + " is too small for " +
                                std::to_string(args.tensors) + " tensors");
  }
  return StatePlan{*dtype, per_tensor, per_tensor * elem * args.tensors};
}

// The directory the bench writes under: the raw file and the checkpoint root.
// Going away it removes the raw file, and unless --keep the root (and the
// directory, when the bench made it).
class Workspace {
 public:
  explicit Workspace(bool keep) : keep_(keep) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() {
    if (dir_.empty()) return;
    std::error_code ec;
    ::unlink(raw_path_.c_str());
    if (!keep_) std::filesystem::remove_all(made_ ? dir_ : root_, ec);
  }

  // `dir` (created if missing), or a fresh directory under /var/tmp.
  Status Create(const std::string& dir) {
    std::string path = dir;
    if (path.empty()) {
      char tmpl[] = "/var/tmp/ckpt-bench-XXXXXX";
      if (::mkdtemp(tmpl) == nullptr) {
        return ErrnoError(errno, "create a directory under /var/tmp");
      }
      path = tmpl;
      made_ = true;
    } else {
      std::error_code ec;
      std::filesystem::create_directories(path, ec);
      if (ec) return IOError("create " + path + ": " + ec.message());
    }
    dir_ = path;
    raw_path_ = dir_ + "/raw-bytes";
    root_ = dir_ + "/root";
    return Status();
  }

  const std::string& dir() const { return dir_; }
  const std::string& raw_path() const { return raw_path_; }
  const std::string& root() const { return root_; }

 private:
  const bool keep_;
  bool made_ = false;
  std::string dir_, raw_path_, root_;
};

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
    out.state.AddTensor(fmt::format("layer{:03d}.weight", t),
                        TensorView{plan.dtype,
                                   {static_cast<int64_t>(plan.per_tensor)},
                                   b->data(),
                                   true});
    out.tensors.push_back(std::move(b));
  }
  return out.state.status();
}

// One round of the raw disk baselines: buffered write, cold and warm read,
// then (where the file system takes it) O_DIRECT write and read.
Status MeasureRawDisk(const std::string& raw_path, uint64_t state_bytes,
                      const Buffer& block, bool direct, Figures& f) {
  CKPT_ASSIGN_OR_RETURN(double w,
                        RawWrite(raw_path, state_bytes, block, false));
  f.raw_write_buffered.push_back(w);
  DropCached(raw_path);
  CKPT_ASSIGN_OR_RETURN(double cold, RawRead(raw_path, block, false));
  f.raw_read_cold.push_back(cold);
  CKPT_ASSIGN_OR_RETURN(double warm, RawRead(raw_path, block, false));
  f.raw_read_warm.push_back(warm);
  if (direct) {
    CKPT_ASSIGN_OR_RETURN(double dw,
                          RawWrite(raw_path, state_bytes, block, true));
    f.raw_write_direct.push_back(dw);
    CKPT_ASSIGN_OR_RETURN(double dr, RawRead(raw_path, block, true));
    f.raw_read_direct.push_back(dr);
  }
  ::unlink(raw_path.c_str());
  return Status();
}

// One round of ckpt: Save as the next step (alone on the disk), then Load it
// cold and warm.
Status MeasureSaveLoad(CheckpointManager& mgr, const std::string& root,
                       State& state, int64_t& step, Figures& f) {
  CKPT_RETURN_IF_ERROR(DeleteAll(mgr));
  auto t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(mgr.Save(++step, state).status());
  auto t1 = Clock::now();
  f.save.push_back(Seconds(t0, t1));
  DropCachedTree(root);
  t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(mgr.Load(step, state).status());
  t1 = Clock::now();
  f.load_cold.push_back(Seconds(t0, t1));
  t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(mgr.Load(step, state).status());
  t1 = Clock::now();
  f.load_warm.push_back(Seconds(t0, t1));
  return Status();
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
  auto t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(copy.Map(state_bytes));
  f.first_touch = Seconds(t0, Clock::now());
  for (int r = 0; r < runs; ++r) {
    t0 = Clock::now();
    CopyShare(tensors, copy.data(), 0, 1);
    f.memcpy.push_back(Seconds(t0, Clock::now()));
  }
  f.parallel_memcpy_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int n = f.parallel_memcpy_threads;
  for (int r = 0; r < runs; ++r) {
    t0 = Clock::now();
    std::vector<std::thread> threads;
    for (int part = 1; part < n; ++part) {
      threads.emplace_back(CopyShare, std::cref(tensors), copy.data(), part, n);
    }
    CopyShare(tensors, copy.data(), 0, n);
    for (auto& t : threads) t.join();
    f.parallel_memcpy.push_back(Seconds(t0, Clock::now()));
  }
  return Status();
}

// The first asynchronous save maps the staging memory; the others reuse
// it. Each waits for the previous one first, as a training loop whose
// steps outlast a save would.
Status MeasureAsyncStall(CheckpointManager& mgr, const State& state, int runs,
                         int64_t& step, Figures& f) {
  for (int r = 0; r <= runs; ++r) {
    CKPT_RETURN_IF_ERROR(DeleteAll(mgr));
    const auto t0 = Clock::now();
    SaveHandle h = mgr.SaveAsync(++step, state);
    const auto t1 = Clock::now();
    CKPT_RETURN_IF_ERROR(h.Wait().status());
    const auto t2 = Clock::now();
    if (r == 0) {
      f.async_first_stall = Seconds(t0, t1);
    } else {
      f.async_stall.push_back(Seconds(t0, t1));
      f.async_total.push_back(Seconds(t0, t2));
    }
  }
  return Status();
}

Status RunBench(const BenchArgs& args) {
  CKPT_ASSIGN_OR_RETURN(const StatePlan plan, PlanState(args));
  Workspace workspace(args.keep);
  CKPT_RETURN_IF_ERROR(workspace.Create(args.dir));
  PeakRss rss;
  rss.baseline = MaxRssBytes();
  BenchState bench;
  CKPT_RETURN_IF_ERROR(BuildState(plan, args.tensors, bench));
  Buffer block;
  CKPT_RETURN_IF_ERROR(block.Map(kBlock));  // mmap is page-aligned
  const bool direct = DirectWorks(workspace.dir());

  // No retention inside the timed saves: removing the previous step (an
  // unlink of a file of the state's size: half a second for 2 GiB on ext4)
  // is done between them instead, so the disk holds one checkpoint at a time.
  Options options;
  options.create = true;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> mgr,
                        CheckpointManager::Open(workspace.root(), options));
  int64_t step = 0;
  if (auto latest = mgr->Latest(); latest.ok() && *latest) step = **latest;

  Figures f;
  for (int r = 0; r < args.runs; ++r) {
    CKPT_RETURN_IF_ERROR(MeasureRawDisk(workspace.raw_path(), plan.state_bytes,
                                        block, direct, f));
    CKPT_RETURN_IF_ERROR(
        MeasureSaveLoad(*mgr, workspace.root(), bench.state, step, f));
  }
  rss.sync = MaxRssBytes();
  CKPT_RETURN_IF_ERROR(
      MeasureMemcpy(bench.tensors, plan.state_bytes, args.runs, f));
  CKPT_RETURN_IF_ERROR(
      MeasureAsyncStall(*mgr, bench.state, args.runs, step, f));
  rss.async = MaxRssBytes();
  mgr.reset();

  json config = {{"state_bytes", plan.state_bytes},
                 {"tensors", args.tensors},
                 {"dtype", std::string(DTypeName(plan.dtype))},
                 {"runs", args.runs},
                 {"dir", workspace.dir()},
                 {"o_direct", direct},
                 {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)}};
  const json report = MakeReport(std::move(config),
                                 static_cast<double>(plan.state_bytes), f, rss);
  if (args.json) {
    PrintJson(report);
  } else {
    PrintReport(report);
  }
  return Status();
}

}  // namespace

void AddBenchCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = AddSubcommand(
      app, "bench", "Save and load throughput beside the raw disk",
      "Builds a state (--size bytes in --tensors tensors of --dtype) and, in "
      "one run, measures the raw sequential write (pwrite loop + fsync, "
      "buffered and O_DIRECT) and read bandwidth (cold and warm) of the file "
      "system under "
      "--dir with the same bytes, memcpy of the state, then ckpt's Save, "
      "Load and SaveAsync stall. Prints medians over --runs rounds, their "
      "ratios and the targets; --json prints them all as JSON. Needs free "
      "space for twice the state.",
      "ckpt bench\n"
      "ckpt bench --size 512MiB --tensors 16 --runs 7 --json\n"
      "ckpt bench --dir /data/scratch --dtype BF16");
  cmd->add_option("--size", args->size,
                  "state size: 2GiB (default), 512MiB, 4096, ...")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            Result<uint64_t> n = ParseSize(text);
            return n.ok() ? "" : n.status().message();
          },
          "SIZE"));
  cmd->add_option("--tensors", args->tensors, "number of tensors (64)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--dtype", args->dtype, "element type (F32)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return ParseDType(text) ? "" : "not a dtype: " + text;
          },
          "DTYPE"));
  cmd->add_option("--runs", args->runs, "rounds; figures are medians (5)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--dir", args->dir,
                  "where to write (default: a fresh directory under "
                  "/var/tmp, removed afterwards)");
  cmd->add_flag("--keep", args->keep, "keep the files written");
  AddJsonFlag(*cmd, args->json);
  cmd->callback([&selected, args] {
    selected.name = "bench";
    selected.run = [args] { return RunBench(*args); };
  });
}

}  // namespace ckpt::cli
