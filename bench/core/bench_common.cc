#include "core/bench_common.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

namespace ckpt::bench {
namespace {

constexpr uint64_t kDirectAlign = 4096;

// Writes `total` bytes from `block` (reused) to a new file at `path`, then
// fsyncs; returns the seconds. `direct`: O_DIRECT (the block is aligned).
Result<double> RawWrite(const std::string& path, uint64_t total,
                        const Buffer& block, bool direct) {
  ::unlink(path.c_str());
  const int fd = ::open(
      path.c_str(),
      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return ErrnoError(errno, "raw write: open " + path);
  const auto start = BenchClock::now();
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
  const auto end = BenchClock::now();
  ::close(fd);
  CKPT_RETURN_IF_ERROR(status);
  return Seconds(start, end);
}

// Drops the file's pages from the page cache.
void DropCached(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Reads the file at `path` through `block` (reused); returns the seconds.
Result<double> RawRead(const std::string& path, const Buffer& block,
                       bool direct) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) return ErrnoError(errno, "raw read: open " + path);
  const auto start = BenchClock::now();
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
  const auto end = BenchClock::now();
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

Result<StatePlan> PlanState(const BenchOptions& options) {
  CKPT_ASSIGN_OR_RETURN(const uint64_t requested, ParseSize(options.size));
  const std::optional<DType> dtype = ParseDType(options.dtype);
  if (!dtype) {
    return InvalidArgumentError("--dtype " + options.dtype +
                                ": not a dtype (F32, BF16, F16, F64, U8, ...)");
  }
  if (options.tensors < 1 || options.runs < 1) {
    return InvalidArgumentError("--tensors and --runs must be at least 1");
  }
  const uint64_t elem = DTypeSize(*dtype);
  const uint64_t per_tensor = requested / options.tensors / elem;
  if (per_tensor == 0) {
    return InvalidArgumentError("--size " + options.size +
                                " is too small for " +
                                std::to_string(options.tensors) + " tensors");
  }
  return StatePlan{*dtype, per_tensor, per_tensor * elem * options.tensors};
}

}  // namespace

double Seconds(BenchClock::time_point a, BenchClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

uint64_t MaxRssBytes() {
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

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

Result<MemoryLocation> ParseBenchDevice(const std::string& text) {
  if (text == "host") return MemoryLocation::Host();
  if (text == "cuda") return MemoryLocation::Cuda(0);
  const std::string_view prefix = "cuda:";
  const std::string digits = text.substr(std::min(text.size(), prefix.size()));
  if (text.starts_with(prefix) && !digits.empty() && digits.size() <= 4 &&
      std::all_of(digits.begin(), digits.end(),
                  [](char c) { return std::isdigit(c); })) {
    return MemoryLocation::Cuda(std::stoi(digits));
  }
  return InvalidArgumentError(text +
                              ": not a device (say host, cuda or cuda:1)");
}

std::string BenchTensorName(int t) {
  return "layer" +
         std::string(t < 10    ? "00"
                     : t < 100 ? "0"
                               : "") +
         std::to_string(t) + ".weight";
}

Status Timed(std::vector<double>& out, const std::function<Status()>& step) {
  const auto t0 = BenchClock::now();
  CKPT_RETURN_IF_ERROR(step());
  out.push_back(Seconds(t0, BenchClock::now()));
  return Status();
}

Status Buffer::Map(uint64_t bytes) {
  void* p = ::mmap(nullptr, std::max<uint64_t>(bytes, 1),
                   PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ErrnoError(errno, "map " + std::to_string(bytes) + " bytes");
  }
  data_ = static_cast<std::byte*>(p);
  size_ = bytes;
  std::memset(data_, 0x5a, size_);
  return Status();
}

void Buffer::Free() {
  if (data_ != nullptr) ::munmap(data_, std::max<uint64_t>(size_, 1));
  data_ = nullptr;
  size_ = 0;
}

void DropCachedTree(const std::string& dir) {
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) DropCached(it->path().string());
  }
}

Status DeleteAll(CheckpointManager& mgr) {
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, mgr.List());
  for (const CheckpointInfo& info : infos) {
    CKPT_RETURN_IF_ERROR(mgr.Delete(info.step).status());
  }
  return Status();
}

namespace {

// What a SIGINT, SIGTERM or SIGHUP removes before the process ends as the
// signal says: the workspace a bench made, so that one stopped with Ctrl-C
// leaves no file of the state's size in /var/tmp. The handler makes only
// async-signal-safe calls (fork, execve, waitpid, signal, raise); the paths
// are copied here when the workspace is made.
char g_remove[2][4096];
volatile sig_atomic_t g_armed = 0;

void RemoveWorkspaceAndEnd(int sig) {
  if (g_armed) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      char rm[] = "/bin/rm", rf[] = "-rf", end[] = "--";
      char* argv[] = {rm, rf, end, g_remove[0], g_remove[1], nullptr};
      char* envp[] = {nullptr};
      ::execve(rm, argv, envp);
      ::_exit(127);
    }
    if (pid > 0) {
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Arms the handler for `dir` and `raw` (where a signal's default would end
// the process: a handler of the program's own stays).
void RemoveOnSignal(const std::string& dir, const std::string& raw) {
  if (dir.size() >= sizeof(g_remove[0]) || raw.size() >= sizeof(g_remove[1]))
    return;
  std::memcpy(g_remove[0], dir.c_str(), dir.size() + 1);
  std::memcpy(g_remove[1], raw.c_str(), raw.size() + 1);
  g_armed = 1;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) {
      continue;
    }
    struct sigaction act {};
    act.sa_handler = RemoveWorkspaceAndEnd;
    sigemptyset(&act.sa_mask);
    ::sigaction(sig, &act, nullptr);
  }
}

}  // namespace

Workspace::~Workspace() {
  g_armed = 0;
  if (dir_.empty()) return;
  std::error_code ec;
  ::unlink(raw_path_.c_str());
  if (!keep_) std::filesystem::remove_all(made_ ? dir_ : root_, ec);
}

Status Workspace::Create(const std::string& dir) {
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
  // Made here, so that opening it with create_root starts no new root (and
  // says nothing of one).
  std::error_code ec;
  std::filesystem::create_directories(root_, ec);
  if (ec) return IOError("create " + root_ + ": " + ec.message());
  if (!keep_) RemoveOnSignal(made_ ? dir_ : root_, raw_path_);
  return Status();
}

Status BenchSetup::Start(const BenchOptions& options) {
  CKPT_ASSIGN_OR_RETURN(plan, PlanState(options));
  CKPT_RETURN_IF_ERROR(workspace.Create(options.dir));
  rss.baseline = MaxRssBytes();
  CKPT_RETURN_IF_ERROR(block.Map(kBlock));  // mmap is page-aligned
  direct = DirectWorks(workspace.dir());

  // No retention inside the timed saves: removing the previous step (an
  // unlink of a file of the state's size: half a second for 2 GiB on ext4)
  // is done between them instead, so the disk holds one checkpoint at a time.
  Options open;
  open.create = true;
  open.create_root = true;  // the bench's own root, read at once
  CKPT_ASSIGN_OR_RETURN(mgr, CheckpointManager::Open(workspace.root(), open));
  if (auto latest = mgr->Latest(); latest.ok() && *latest) step = **latest;
  return Status();
}

Status BenchSetup::ReopenForAsync(uint64_t state_bytes, int tensors) {
  mgr.reset();  // gives the lease back
  Options open;
  open.create = true;
  open.async_staging_prepare_bytes =
      state_bytes + static_cast<uint64_t>(tensors) * 4096;
  CKPT_ASSIGN_OR_RETURN(mgr, CheckpointManager::Open(workspace.root(), open));
  // The job's work before its first save. Faulting in fresh pages runs at
  // 2 to 4 GB/s on the machines measured (docs/benchmarks.md), so this
  // leaves the background thread time to finish.
  std::this_thread::sleep_for(std::chrono::duration<double>(
      0.5 + static_cast<double>(state_bytes) / 1e9));
  return Status();
}

Status BenchSetup::MeasureRawDisk(Figures& f) const {
  const std::string& path = workspace.raw_path();
  CKPT_ASSIGN_OR_RETURN(double w,
                        RawWrite(path, plan.state_bytes, block, false));
  f.raw_write_buffered.push_back(w);
  DropCached(path);
  CKPT_ASSIGN_OR_RETURN(double cold, RawRead(path, block, false));
  f.raw_read_cold.push_back(cold);
  CKPT_ASSIGN_OR_RETURN(double warm, RawRead(path, block, false));
  f.raw_read_warm.push_back(warm);
  if (direct) {
    CKPT_ASSIGN_OR_RETURN(double dw,
                          RawWrite(path, plan.state_bytes, block, true));
    f.raw_write_direct.push_back(dw);
    CKPT_ASSIGN_OR_RETURN(double dr, RawRead(path, block, true));
    f.raw_read_direct.push_back(dr);
  }
  ::unlink(path.c_str());
  return Status();
}

nlohmann::json BenchSetup::Config(const BenchOptions& options) const {
  return {{"state_bytes", plan.state_bytes},
          {"tensors", options.tensors},
          {"dtype", std::string(DTypeName(plan.dtype))},
          {"runs", options.runs},
          {"dir", workspace.dir()},
          {"o_direct", direct},
          {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)}};
}

Status MeasureAsyncStall(CheckpointManager& mgr, const State& state, int runs,
                         int64_t& step, Figures& f) {
  for (int r = 0; r <= runs; ++r) {
    CKPT_RETURN_IF_ERROR(DeleteAll(mgr));
    const auto t0 = BenchClock::now();
    SaveHandle h = mgr.SaveAsync(++step, state);
    const auto t1 = BenchClock::now();
    CKPT_RETURN_IF_ERROR(h.Wait().status());
    const auto t2 = BenchClock::now();
    if (r == 0) {
      f.async_first_stall = Seconds(t0, t1);
    } else {
      f.async_stall.push_back(Seconds(t0, t1));
      f.async_total.push_back(Seconds(t0, t2));
    }
  }
  return Status();
}

Result<nlohmann::json> ReadPeers(const std::string& path) {
  // What bench/peers/peers.py --json printed: its savers' median GB/s.
  std::ifstream in(path);
  nlohmann::json peers =
      nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!in.is_open() || peers.is_discarded() || !peers.is_object() ||
      !peers.contains("gbps") || !peers["gbps"].is_object() ||
      !peers.contains("state_bytes")) {
    return InvalidArgumentError(
        "read --peers " + path +
        ": not the JSON of bench/peers/peers.py --json (an object with "
        "gbps and state_bytes)");
  }
  return peers;
}

}  // namespace ckpt::bench
