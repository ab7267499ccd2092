// The benchmark's report: the figures a run measured, turned into the JSON
// object `ckpt bench --json` prints (figures, ranges, ratios, targets). Kept
// apart from the measuring in bench_host.cc and bench_device.cc.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace ckpt::bench {

// The raw loops' block, and the memory the bench itself holds beside the
// state.
inline constexpr uint64_t kBlock = uint64_t{16} << 20;
inline constexpr double kMiB = 1024.0 * 1024.0;

// The median of `v` (empty: 0).
double Median(std::vector<double> v);

struct Figures {
  std::vector<double> raw_write_buffered, raw_write_direct, raw_read_cold,
      raw_read_warm, raw_read_direct, save, load_cold, load_warm, memcpy,
      parallel_memcpy, async_stall, async_total;
  // The host bench's streaming load (LoadOptions::transactional = false),
  // cold: what the all-or-nothing load adds its checks and copy to.
  std::vector<double> load_streaming_cold;
  // A state on a device: its copies to and from a registered host block,
  // and SaveAsync with the copy staged in the background: its return, its
  // WaitStaged() and its commit, from the call.
  std::vector<double> pinned_d2h, pinned_h2d, async_background_return,
      async_background_staged, async_background_total;
  int parallel_memcpy_threads = 1;
  double first_touch = 0;
  double async_first_stall = 0;
};

// getrusage's ru_maxrss before the state was built, after the synchronous
// phases and after the asynchronous one (and, host bench, after its first
// Save).
struct PeakRss {
  uint64_t baseline = 0;
  uint64_t save = 0;  // after the first Save, before any load
  uint64_t sync = 0;
  // Resident memory the loads left mapped (host bench): the staging memory
  // of the all-or-nothing load, which the manager keeps.
  uint64_t kept = 0;
  uint64_t async = 0;
  // Host memory the bench holds beside the raw loops' block: a device run's
  // registered block.
  uint64_t own = 0;
};

// Everything the bench reports, as `--json` prints it: `config` as given,
// then the figures, their ranges, the ratios and the targets.
nlohmann::json MakeReport(nlohmann::json config, double bytes, const Figures& f,
                          const PeakRss& rss);
// The same for a state on a device (config names it in "device"), whose
// load was checked ("load_verified").
nlohmann::json MakeDeviceReport(nlohmann::json config, double bytes,
                                const Figures& f, const PeakRss& rss);

// Each round's rate (GB/s) of the series --html draws round by round (the
// streaming load is left to the medians: the page has ten colours).
nlohmann::json RoundsJson(const Figures& f, double bytes);

}  // namespace ckpt::bench
