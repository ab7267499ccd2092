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
// Then memcpy of the state into a reused buffer, and SaveAsync: the time the
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
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kBlock = uint64_t{16} << 20;
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

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
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

struct Figures {
  std::vector<double> raw_write_buffered, raw_write_direct, raw_read_cold,
      raw_read_warm, raw_read_direct, save, load_cold, load_warm, memcpy,
      async_stall, async_total;
  double first_touch = 0;
  double async_first_stall = 0;
};

Status RunBench(const BenchArgs& args) {
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
  const uint64_t state_bytes = per_tensor * elem * args.tensors;

  std::string dir = args.dir;
  bool made_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/var/tmp/ckpt-bench-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      return ErrnoError(errno, "create a directory under /var/tmp");
    }
    dir = tmpl;
    made_dir = true;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return IOError("create " + dir + ": " + ec.message());
  }
  const std::string raw_path = dir + "/raw-bytes";
  const std::string root = dir + "/root";
  struct Cleanup {
    std::string dir, raw, root;
    bool made, keep;
    ~Cleanup() {
      std::error_code ec;
      ::unlink(raw.c_str());
      if (!keep) std::filesystem::remove_all(made ? dir : root, ec);
    }
  } cleanup{dir, raw_path, root, made_dir, args.keep};

  const uint64_t baseline_rss = MaxRssBytes();
  // The state: every page written (varied bytes, so nothing is all zeros).
  std::vector<std::unique_ptr<Buffer>> tensors;
  State state;
  for (int t = 0; t < args.tensors; ++t) {
    auto b = std::make_unique<Buffer>();
    CKPT_RETURN_IF_ERROR(b->Map(per_tensor * elem));
    for (uint64_t i = 0; i < b->size(); i += 4096) {
      b->data()[i] = static_cast<std::byte>(t * 31 + i / 4096);
    }
    state.AddTensor(
        fmt::format("layer{:03d}.weight", t),
        TensorView{
            *dtype, {static_cast<int64_t>(per_tensor)}, b->data(), true});
    tensors.push_back(std::move(b));
  }
  CKPT_RETURN_IF_ERROR(state.status());

  Buffer block;
  CKPT_RETURN_IF_ERROR(block.Map(kBlock));  // mmap is page-aligned
  const bool direct = DirectWorks(dir);

  // No retention inside the timed saves: removing the previous step (an
  // unlink of a file of the state's size: half a second for 2 GiB on ext4)
  // is done between them instead, so the disk holds one checkpoint at a time.
  Options options;
  options.create = true;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> mgr,
                        CheckpointManager::Open(root, options));
  int64_t step = 0;
  if (auto latest = mgr->Latest(); latest.ok() && *latest) step = **latest;

  Figures f;
  for (int r = 0; r < args.runs; ++r) {
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

    CKPT_RETURN_IF_ERROR(DeleteAll(*mgr));
    auto t0 = Clock::now();
    CKPT_ASSIGN_OR_RETURN(SaveResult saved, mgr->Save(++step, state));
    auto t1 = Clock::now();
    f.save.push_back(Seconds(t0, t1));
    DropCachedTree(root);
    t0 = Clock::now();
    CKPT_RETURN_IF_ERROR(mgr->Load(step, state).status());
    t1 = Clock::now();
    f.load_cold.push_back(Seconds(t0, t1));
    t0 = Clock::now();
    CKPT_RETURN_IF_ERROR(mgr->Load(step, state).status());
    t1 = Clock::now();
    f.load_warm.push_back(Seconds(t0, t1));
  }
  const uint64_t sync_peak = MaxRssBytes();

  {
    Buffer copy;
    auto t0 = Clock::now();
    CKPT_RETURN_IF_ERROR(copy.Map(state_bytes));
    f.first_touch = Seconds(t0, Clock::now());
    for (int r = 0; r < args.runs; ++r) {
      t0 = Clock::now();
      uint64_t at = 0;
      for (const auto& t : tensors) {
        std::memcpy(copy.data() + at, t->data(), t->size());
        at += t->size();
      }
      f.memcpy.push_back(Seconds(t0, Clock::now()));
    }
  }

  // The first asynchronous save maps the staging memory; the others reuse
  // it. Each waits for the previous one first, as a training loop whose
  // steps outlast a save would.
  for (int r = 0; r <= args.runs; ++r) {
    CKPT_RETURN_IF_ERROR(DeleteAll(*mgr));
    const auto t0 = Clock::now();
    SaveHandle h = mgr->SaveAsync(++step, state);
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
  const uint64_t async_peak = MaxRssBytes();
  mgr.reset();

  // --- Figures and ratios.
  const double bytes = static_cast<double>(state_bytes);
  const double own = static_cast<double>(baseline_rss + kBlock);
  auto gbps = [&](const std::vector<double>& secs) -> json {
    if (secs.empty()) return nullptr;
    return bytes / Median(secs) / 1e9;
  };
  auto secs = [&](const std::vector<double>& v) -> json {
    if (v.empty()) return nullptr;
    return Median(v);
  };
  auto ratio = [](const json& a, const json& b) -> json {
    if (!a.is_number() || !b.is_number() || b.get<double>() == 0) {
      return nullptr;
    }
    return a.get<double>() / b.get<double>();
  };
  auto spread = [&](const std::vector<double>& v) -> json {
    if (v.empty()) return nullptr;
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return json::array({bytes / *hi / 1e9, bytes / *lo / 1e9});
  };
  json figures = {
      {"raw_write_buffered_gbps", gbps(f.raw_write_buffered)},
      {"raw_write_direct_gbps", gbps(f.raw_write_direct)},
      {"raw_read_cold_gbps", gbps(f.raw_read_cold)},
      {"raw_read_warm_gbps", gbps(f.raw_read_warm)},
      {"raw_read_direct_gbps", gbps(f.raw_read_direct)},
      {"memcpy_gbps", gbps(f.memcpy)},
      {"memcpy_seconds", secs(f.memcpy)},
      {"first_touch_gbps", bytes / f.first_touch / 1e9},
      {"save_gbps", gbps(f.save)},
      {"save_seconds", secs(f.save)},
      {"load_cold_gbps", gbps(f.load_cold)},
      {"load_cold_seconds", secs(f.load_cold)},
      {"load_warm_gbps", gbps(f.load_warm)},
      {"load_warm_seconds", secs(f.load_warm)},
      {"async_first_stall_seconds", f.async_first_stall},
      {"async_stall_seconds", secs(f.async_stall)},
      {"async_total_seconds", secs(f.async_total)},
      {"baseline_rss_mib", baseline_rss / kMiB},
      {"peak_rss_sync_mib", sync_peak / kMiB},
      {"peak_rss_async_mib", async_peak / kMiB},
      // Beyond the process before the state was built, the state itself
      // and this program's own 16 MiB raw-I/O block: what ckpt added.
      {"sync_peak_above_state_mib", (double(sync_peak) - bytes - own) / kMiB},
      {"async_peak_above_state_and_staging_mib",
       (double(async_peak) - 2 * bytes - own) / kMiB},
  };
  json raw_write_best = gbps(f.raw_write_buffered);
  if (figures["raw_write_direct_gbps"].is_number() &&
      figures["raw_write_direct_gbps"].get<double>() >
          raw_write_best.get<double>()) {
    raw_write_best = figures["raw_write_direct_gbps"];
  }
  figures["raw_write_best_gbps"] = raw_write_best;
  json ranges = {
      {"raw_write_buffered_gbps", spread(f.raw_write_buffered)},
      {"raw_write_direct_gbps", spread(f.raw_write_direct)},
      {"raw_read_cold_gbps", spread(f.raw_read_cold)},
      {"raw_read_warm_gbps", spread(f.raw_read_warm)},
      {"raw_read_direct_gbps", spread(f.raw_read_direct)},
      {"save_gbps", spread(f.save)},
      {"load_cold_gbps", spread(f.load_cold)},
      {"load_warm_gbps", spread(f.load_warm)},
      {"memcpy_gbps", spread(f.memcpy)},
  };
  json ratios = {
      {"save_vs_raw_write_best", ratio(figures["save_gbps"], raw_write_best)},
      {"save_vs_raw_write_buffered",
       ratio(figures["save_gbps"], figures["raw_write_buffered_gbps"])},
      {"save_vs_raw_write_direct",
       ratio(figures["save_gbps"], figures["raw_write_direct_gbps"])},
      {"load_cold_vs_raw_read_cold",
       ratio(figures["load_cold_gbps"], figures["raw_read_cold_gbps"])},
      {"load_cold_vs_raw_read_direct",
       ratio(figures["load_cold_gbps"], figures["raw_read_direct_gbps"])},
      {"load_warm_vs_raw_read_warm",
       ratio(figures["load_warm_gbps"], figures["raw_read_warm_gbps"])},
      {"async_stall_vs_memcpy",
       ratio(figures["async_stall_seconds"], figures["memcpy_seconds"])},
      {"async_first_stall_vs_memcpy",
       ratio(figures["async_first_stall_seconds"], figures["memcpy_seconds"])},
  };
  auto at_least = [](const json& v, double limit) -> json {
    if (!v.is_number()) return nullptr;
    return v.get<double>() >= limit;
  };
  auto at_most = [](const json& v, double limit) -> json {
    if (!v.is_number()) return nullptr;
    return v.get<double>() <= limit;
  };
  json targets = {
      {"save_vs_raw_write_best >= 0.90",
       at_least(ratios["save_vs_raw_write_best"], 0.90)},
      {"load_cold_vs_raw_read_cold >= 0.90",
       at_least(ratios["load_cold_vs_raw_read_cold"], 0.90)},
      {"async_stall_vs_memcpy <= 1.5",
       at_most(ratios["async_stall_vs_memcpy"], 1.5)},
      {"sync_peak_above_state_mib <= 64",
       at_most(figures["sync_peak_above_state_mib"], 64)},
      {"async_peak_above_state_and_staging_mib <= 64",
       at_most(figures["async_peak_above_state_and_staging_mib"], 64)},
  };
  json config = {{"state_bytes", state_bytes},
                 {"tensors", args.tensors},
                 {"dtype", std::string(DTypeName(*dtype))},
                 {"runs", args.runs},
                 {"dir", dir},
                 {"o_direct", direct},
                 {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)}};

  if (args.json) {
    PrintJson({{"config", config},
               {"figures", figures},
               {"ranges", ranges},
               {"ratios", ratios},
               {"targets", targets}});
    return Status();
  }
  auto num = [](const json& v, const char* fmt_spec) -> std::string {
    if (!v.is_number()) return "-";
    return fmt::format(fmt::runtime(fmt_spec), v.get<double>());
  };
  fmt::print(
      "ckpt bench: {:.2f} GiB in {} {} tensors, {} rounds (medians), {}\n",
      bytes / kMiB / 1024, args.tensors, DTypeName(*dtype), args.runs, dir);
  std::vector<std::vector<std::string>> rows = {{"figure", "value", "range"}};
  auto range_text = [&](const char* key) -> std::string {
    const json& r = ranges[key];
    if (!r.is_array()) return "";
    return fmt::format("{:.2f}-{:.2f}", r[0].get<double>(), r[1].get<double>());
  };
  for (const char* key :
       {"raw_write_buffered_gbps", "raw_write_direct_gbps",
        "raw_read_cold_gbps", "raw_read_warm_gbps", "raw_read_direct_gbps",
        "memcpy_gbps", "save_gbps", "load_cold_gbps", "load_warm_gbps"}) {
    rows.push_back({key, num(figures[key], "{:.3f}"), range_text(key)});
  }
  for (const char* key :
       {"first_touch_gbps", "memcpy_seconds", "save_seconds",
        "load_cold_seconds", "load_warm_seconds", "async_first_stall_seconds",
        "async_stall_seconds", "async_total_seconds", "peak_rss_sync_mib",
        "peak_rss_async_mib", "sync_peak_above_state_mib",
        "async_peak_above_state_and_staging_mib"}) {
    rows.push_back({key, num(figures[key], "{:.3f}"), ""});
  }
  for (auto& [key, value] : ratios.items()) {
    rows.push_back({key, num(value, "{:.2f}"), ""});
  }
  PrintTable(rows);
  for (auto& [key, value] : targets.items()) {
    fmt::print("target {}: {}\n", key,
               value.is_boolean() ? (value.get<bool>() ? "met" : "NOT met")
                                  : "not measured");
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
