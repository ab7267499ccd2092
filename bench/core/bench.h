// The benchmark behind `ckpt bench`: ckpt's save and load beside the raw
// disk and memcpy, for a state in host memory (bench_host.cc) or on a CUDA
// device (bench_device.cc), in one run. It measures and returns the report;
// printing it, as a table or as JSON, and drawing it into a page are the
// command's (tools/ckpt/bench.cc).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/checkpoint_manager.h"

namespace ckpt::bench {

// What to measure, as `ckpt bench`'s flags give it.
struct BenchOptions {
  std::string size = "2GiB";
  int tensors = 64;
  std::string dtype = "F32";
  int runs = 5;
  std::string dir;  // empty: a fresh directory under /var/tmp
  bool keep = false;
  std::string device = "host";  // or cuda[:N] (ParseBenchDevice)
};

// What one run measured.
struct BenchResult {
  // As `--json` prints it (bench_report.h, MakeReport).
  nlohmann::json report;
  // Each round's rate of every series measured (RoundsJson), for the page.
  nlohmann::json rounds;
};

// Runs the benchmark that `options` describe.
Result<BenchResult> RunBench(const BenchOptions& options);

// "2GiB", "512MiB", "64KiB", "1000" (bytes); K/M/G mean the binary units.
Result<uint64_t> ParseSize(const std::string& text);
// "host", "cuda" (device 0) or "cuda:N".
Result<MemoryLocation> ParseBenchDevice(const std::string& text);

// The output of bench/peers/peers.py --json at `path`, checked.
Result<nlohmann::json> ReadPeers(const std::string& path);

}  // namespace ckpt::bench
