#include "core/bench_report.h"

#include <algorithm>
#include <string>

namespace ckpt::bench {

using nlohmann::json;

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

namespace {

// --- Figures and ratios.

// `bytes` moved in the median of `secs`; null when not measured.
json Gbps(const std::vector<double>& secs, double bytes) {
  if (secs.empty()) return nullptr;
  return bytes / Median(secs) / 1e9;
}

json MedianSeconds(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  return Median(v);
}

// [slowest, fastest] GB/s of the rounds.
json Spread(const std::vector<double>& v, double bytes) {
  if (v.empty()) return nullptr;
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return json::array({bytes / *hi / 1e9, bytes / *lo / 1e9});
}

json Ratio(const json& a, const json& b) {
  if (!a.is_number() || !b.is_number() || b.get<double>() == 0) {
    return nullptr;
  }
  return a.get<double>() / b.get<double>();
}

json AtLeast(const json& v, double limit) {
  if (!v.is_number()) return nullptr;
  return v.get<double>() >= limit;
}

json AtMost(const json& v, double limit) {
  if (!v.is_number()) return nullptr;
  return v.get<double>() <= limit;
}

// The raw disk baselines, the same for a state anywhere.
json RawDiskFigures(const Figures& f, double bytes) {
  json figures = {
      {"raw_write_buffered_gbps", Gbps(f.raw_write_buffered, bytes)},
      {"raw_write_direct_gbps", Gbps(f.raw_write_direct, bytes)},
      {"raw_read_cold_gbps", Gbps(f.raw_read_cold, bytes)},
      {"raw_read_warm_gbps", Gbps(f.raw_read_warm, bytes)},
      {"raw_read_direct_gbps", Gbps(f.raw_read_direct, bytes)},
  };
  json raw_write_best = figures["raw_write_buffered_gbps"];
  if (figures["raw_write_direct_gbps"].is_number() &&
      figures["raw_write_direct_gbps"].get<double>() >
          raw_write_best.get<double>()) {
    raw_write_best = figures["raw_write_direct_gbps"];
  }
  figures["raw_write_best_gbps"] = raw_write_best;
  return figures;
}

json RawDiskRanges(const Figures& f, double bytes) {
  return {
      {"raw_write_buffered_gbps", Spread(f.raw_write_buffered, bytes)},
      {"raw_write_direct_gbps", Spread(f.raw_write_direct, bytes)},
      {"raw_read_cold_gbps", Spread(f.raw_read_cold, bytes)},
      {"raw_read_warm_gbps", Spread(f.raw_read_warm, bytes)},
      {"raw_read_direct_gbps", Spread(f.raw_read_direct, bytes)},
  };
}

json RssFigures(const PeakRss& rss) {
  return {{"baseline_rss_mib", rss.baseline / kMiB},
          {"peak_rss_sync_mib", rss.sync / kMiB},
          {"peak_rss_async_mib", rss.async / kMiB}};
}

// MiB of `peak` beyond the process before the state was built, the bench's
// own buffers (the 16 MiB raw-I/O block and any other) and `held` bytes of
// copies of the state that are expected: what ckpt added.
double PeakAbove(uint64_t peak, const PeakRss& rss, double held) {
  const double own = static_cast<double>(rss.baseline + kBlock + rss.own);
  return (static_cast<double>(peak) - held - own) / kMiB;
}

json FiguresJson(const Figures& f, double bytes, const PeakRss& rss) {
  json figures = RawDiskFigures(f, bytes);
  figures.update(RssFigures(rss));
  figures.update({
      {"memcpy_gbps", Gbps(f.memcpy, bytes)},
      {"memcpy_seconds", MedianSeconds(f.memcpy)},
      {"parallel_memcpy_gbps", Gbps(f.parallel_memcpy, bytes)},
      {"parallel_memcpy_seconds", MedianSeconds(f.parallel_memcpy)},
      {"parallel_memcpy_threads", f.parallel_memcpy_threads},
      {"first_touch_gbps", bytes / f.first_touch / 1e9},
      {"save_gbps", Gbps(f.save, bytes)},
      {"save_seconds", MedianSeconds(f.save)},
      {"load_cold_gbps", Gbps(f.load_cold, bytes)},
      {"load_cold_seconds", MedianSeconds(f.load_cold)},
      {"load_warm_gbps", Gbps(f.load_warm, bytes)},
      {"load_warm_seconds", MedianSeconds(f.load_warm)},
      {"load_streaming_cold_gbps", Gbps(f.load_streaming_cold, bytes)},
      {"load_streaming_cold_seconds", MedianSeconds(f.load_streaming_cold)},
      // What an all-or-nothing load cannot do without: the state read from
      // the disk, and one copy of it (on every core) into the caller's
      // tensors once all of it is checked.
      {"load_floor_seconds",
       f.raw_read_cold.empty() || f.parallel_memcpy.empty()
           ? json(nullptr)
           : json(Median(f.raw_read_cold) + Median(f.parallel_memcpy))},
      {"async_first_stall_seconds", f.async_first_stall},
      {"async_stall_seconds", MedianSeconds(f.async_stall)},
      {"async_total_seconds", MedianSeconds(f.async_total)},
      {"sync_peak_above_state_mib", PeakAbove(rss.save, rss, bytes)},
      {"load_kept_mib", static_cast<double>(rss.kept) / kMiB},
      {"load_peak_above_state_and_kept_mib",
       PeakAbove(rss.sync, rss, bytes + static_cast<double>(rss.kept))},
      {"async_peak_above_state_and_staging_mib",
       PeakAbove(rss.async, rss, 2 * bytes)},
  });
  return figures;
}

json RangesJson(const Figures& f, double bytes) {
  json ranges = RawDiskRanges(f, bytes);
  ranges.update({
      {"save_gbps", Spread(f.save, bytes)},
      {"load_cold_gbps", Spread(f.load_cold, bytes)},
      {"load_warm_gbps", Spread(f.load_warm, bytes)},
      {"load_streaming_cold_gbps", Spread(f.load_streaming_cold, bytes)},
      {"memcpy_gbps", Spread(f.memcpy, bytes)},
      {"parallel_memcpy_gbps", Spread(f.parallel_memcpy, bytes)},
  });
  return ranges;
}

// Save beside the raw write, for a state anywhere.
json SaveRatios(const json& figures) {
  return {
      {"save_vs_raw_write_best",
       Ratio(figures.at("save_gbps"), figures.at("raw_write_best_gbps"))},
      {"save_vs_raw_write_buffered",
       Ratio(figures.at("save_gbps"), figures.at("raw_write_buffered_gbps"))},
      {"save_vs_raw_write_direct",
       Ratio(figures.at("save_gbps"), figures.at("raw_write_direct_gbps"))},
  };
}

json RatiosJson(const json& figures) {
  auto fig = [&figures](const char* key) -> const json& {
    return figures.at(key);
  };
  json ratios = SaveRatios(figures);
  ratios.update({
      {"load_cold_vs_raw_read_cold",
       Ratio(fig("load_cold_gbps"), fig("raw_read_cold_gbps"))},
      {"load_streaming_cold_vs_raw_read_cold",
       Ratio(fig("load_streaming_cold_gbps"), fig("raw_read_cold_gbps"))},
      {"load_cold_vs_floor",
       Ratio(fig("load_cold_seconds"), fig("load_floor_seconds"))},
      {"load_cold_vs_raw_read_direct",
       Ratio(fig("load_cold_gbps"), fig("raw_read_direct_gbps"))},
      {"load_warm_vs_raw_read_warm",
       Ratio(fig("load_warm_gbps"), fig("raw_read_warm_gbps"))},
      {"async_stall_vs_memcpy",
       Ratio(fig("async_stall_seconds"), fig("memcpy_seconds"))},
      {"async_stall_vs_parallel_memcpy",
       Ratio(fig("async_stall_seconds"), fig("parallel_memcpy_seconds"))},
      {"async_first_stall_vs_memcpy",
       Ratio(fig("async_first_stall_seconds"), fig("memcpy_seconds"))},
      {"first_async_stall_vs_later",
       Ratio(fig("async_first_stall_seconds"), fig("async_stall_seconds"))},
  });
  return ratios;
}

json TargetsJson(const json& figures, const json& ratios) {
  return {
      {"save_vs_raw_write_best >= 0.90",
       AtLeast(ratios.at("save_vs_raw_write_best"), 0.90)},
      // The streaming load reads at the disk's speed; the all-or-nothing
      // one (the default) adds only its copy to that.
      {"load_streaming_cold_vs_raw_read_cold >= 0.90",
       AtLeast(ratios.at("load_streaming_cold_vs_raw_read_cold"), 0.90)},
      {"load_cold_vs_floor <= 1.10",
       AtMost(ratios.at("load_cold_vs_floor"), 1.10)},
      {"async_stall_vs_memcpy <= 1.5",
       AtMost(ratios.at("async_stall_vs_memcpy"), 1.5)},
      {"async_stall_vs_parallel_memcpy <= 1.5",
       AtMost(ratios.at("async_stall_vs_parallel_memcpy"), 1.5)},
      {"first_async_stall_vs_later <= 2.0",
       AtMost(ratios.at("first_async_stall_vs_later"), 2.0)},
      {"sync_peak_above_state_mib <= 64",
       AtMost(figures.at("sync_peak_above_state_mib"), 64)},
      {"load_peak_above_state_and_kept_mib <= 64",
       AtMost(figures.at("load_peak_above_state_and_kept_mib"), 64)},
      {"async_peak_above_state_and_staging_mib <= 64",
       AtMost(figures.at("async_peak_above_state_and_staging_mib"), 64)},
  };
}

// --- A state on a device: pinned copies, not memcpy, are the bar.

json DeviceFiguresJson(const Figures& f, double bytes, const PeakRss& rss) {
  json figures = RawDiskFigures(f, bytes);
  figures.update(RssFigures(rss));
  figures.update({
      {"pinned_d2h_gbps", Gbps(f.pinned_d2h, bytes)},
      {"pinned_d2h_seconds", MedianSeconds(f.pinned_d2h)},
      {"pinned_h2d_gbps", Gbps(f.pinned_h2d, bytes)},
      {"pinned_h2d_seconds", MedianSeconds(f.pinned_h2d)},
      {"save_gbps", Gbps(f.save, bytes)},
      {"save_seconds", MedianSeconds(f.save)},
      {"load_device_cold_gbps", Gbps(f.load_cold, bytes)},
      {"load_device_cold_seconds", MedianSeconds(f.load_cold)},
      {"async_first_stall_seconds", f.async_first_stall},
      {"async_stall_seconds", MedianSeconds(f.async_stall)},
      {"async_total_seconds", MedianSeconds(f.async_total)},
      {"async_background_return_seconds",
       MedianSeconds(f.async_background_return)},
      {"async_background_staged_seconds",
       MedianSeconds(f.async_background_staged)},
      {"async_background_total_seconds",
       MedianSeconds(f.async_background_total)},
      // SaveAsync and Load of a device state hold one host copy of it (the
      // staging memory, reused); Save only the 32 MiB of blocks it streams
      // through.
      {"sync_peak_above_staging_mib", PeakAbove(rss.sync, rss, bytes)},
      {"async_peak_above_staging_mib", PeakAbove(rss.async, rss, bytes)},
  });
  return figures;
}

json DeviceRangesJson(const Figures& f, double bytes) {
  json ranges = RawDiskRanges(f, bytes);
  ranges.update({
      {"pinned_d2h_gbps", Spread(f.pinned_d2h, bytes)},
      {"pinned_h2d_gbps", Spread(f.pinned_h2d, bytes)},
      {"save_gbps", Spread(f.save, bytes)},
      {"load_device_cold_gbps", Spread(f.load_cold, bytes)},
  });
  return ranges;
}

json DeviceRatiosJson(const json& figures) {
  auto fig = [&figures](const char* key) -> const json& {
    return figures.at(key);
  };
  json ratios = SaveRatios(figures);
  ratios.update({
      {"load_device_vs_raw_read_cold",
       Ratio(fig("load_device_cold_gbps"), fig("raw_read_cold_gbps"))},
      {"load_device_vs_raw_read_direct",
       Ratio(fig("load_device_cold_gbps"), fig("raw_read_direct_gbps"))},
      {"async_stall_vs_pinned_d2h",
       Ratio(fig("async_stall_seconds"), fig("pinned_d2h_seconds"))},
      {"async_first_stall_vs_pinned_d2h",
       Ratio(fig("async_first_stall_seconds"), fig("pinned_d2h_seconds"))},
      {"async_background_staged_vs_pinned_d2h",
       Ratio(fig("async_background_staged_seconds"),
             fig("pinned_d2h_seconds"))},
  });
  return ratios;
}

json DeviceTargetsJson(const json& ratios) {
  return {
      {"async_stall_vs_pinned_d2h <= 1.3",
       AtMost(ratios.at("async_stall_vs_pinned_d2h"), 1.3)},
      {"save_vs_raw_write_best >= 0.90",
       AtLeast(ratios.at("save_vs_raw_write_best"), 0.90)},
      {"load_device_vs_raw_read_cold >= 0.85",
       AtLeast(ratios.at("load_device_vs_raw_read_cold"), 0.85)},
  };
}

json Report(json config, json figures, json ranges, json ratios, json targets) {
  return {{"config", std::move(config)},
          {"figures", std::move(figures)},
          {"ranges", std::move(ranges)},
          {"ratios", std::move(ratios)},
          {"targets", std::move(targets)}};
}

}  // namespace

json MakeReport(json config, double bytes, const Figures& f,
                const PeakRss& rss) {
  json figures = FiguresJson(f, bytes, rss);
  json ratios = RatiosJson(figures);
  json targets = TargetsJson(figures, ratios);
  return Report(std::move(config), std::move(figures), RangesJson(f, bytes),
                std::move(ratios), std::move(targets));
}

json MakeDeviceReport(json config, double bytes, const Figures& f,
                      const PeakRss& rss) {
  json figures = DeviceFiguresJson(f, bytes, rss);
  json ratios = DeviceRatiosJson(figures);
  json targets = DeviceTargetsJson(ratios);
  json report =
      Report(std::move(config), std::move(figures), DeviceRangesJson(f, bytes),
             std::move(ratios), std::move(targets));
  report["load_verified"] = true;
  return report;
}

json RoundsJson(const Figures& f, double bytes) {
  json out = json::object();
  const std::pair<const char*, const std::vector<double>*> series[] = {
      {"raw_write_buffered", &f.raw_write_buffered},
      {"raw_write_direct", &f.raw_write_direct},
      {"raw_read_cold", &f.raw_read_cold},
      {"raw_read_warm", &f.raw_read_warm},
      {"raw_read_direct", &f.raw_read_direct},
      {"save", &f.save},
      {"load_cold", &f.load_cold},
      {"load_warm", &f.load_warm},
      {"memcpy", &f.memcpy},
      {"parallel_memcpy", &f.parallel_memcpy},
      {"pinned_d2h", &f.pinned_d2h},
      {"pinned_h2d", &f.pinned_h2d}};
  for (const auto& [name, secs] : series) {
    if (secs->empty()) continue;
    json rates = json::array();
    for (double s : *secs) rates.push_back(s > 0 ? bytes / s / 1e9 : 0.0);
    out[name] = std::move(rates);
  }
  return out;
}

}  // namespace ckpt::bench
