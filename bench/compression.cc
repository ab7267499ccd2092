// bench_compression: ckpt's chunk compression beside the peers, on trained
// weights (docs/benchmarks.md).
//
//   bench_compression [--weights FILE] [--python PY] [--threads N]
//                     [--runs 3] [--level 1] [--dir DIR] [--slow-mbps 300]
//                     [--fast-mib 1024] [--small] [--no-peers] [--json]
//
// The data: a safetensors file of a model trained for a few hundred steps
// (bench/compression/weights.py makes one under DIR unless --weights names
// one; --small: a small model, for the smoke test): float32 weights with
// their two Adam moments, and the same cast to bfloat16. Random bytes would not
// compress, and zeros would whatever the codec: only trained weights say what
// compression is worth.
//
// For each group (f32, bf16) it measures, best of --runs:
//   - ckpt's codec on the group's chunks (4 MiB, as a save cuts them):
//     stored bytes, compression and decompression speed with --threads
//     threads, every chunk decompressed back bit for bit;
//   - the peers on the same tensors (bench/compression/peers.py with the
//     same threads): zipnn's compress and decompress, and PyTorch DCP's
//     zstd option (bytes on disk, save and load time);
// and on the whole state, saves with ckpt into two roots by turns, each
// save timed alone (median of --runs, after one save of each that is not
// timed):
//   - to a file root whose writes go at --slow-mbps MB/s (a network store's
//     link), raw against compression="zstd";
//   - to a file root under DIR (the local disk), raw against "auto", the
//     state repeated (as more tensors) to at least --fast-mib MiB (default
//     1024; --small: once): a save of the weights alone takes a tenth of a
//     second there, too short to measure a few percent on.
// It prints the figures and `ratios`: size_vs_zipnn (ckpt's stored bytes
// over zipnn's), compress_gbps_vs_zipnn and decompress_gbps_vs_zipnn (ckpt's
// speed over zipnn's), size_vs_dcp_zstd, compress_gbps_vs_dcp_zstd and
// decompress_gbps_vs_dcp_zstd (DCP's save and load with its zstd option
// over ckpt's compressed save and load, to the same disk: DCP compresses
// as it saves), the same per group as save_time_ and load_time_vs_dcp_zstd
// (ckpt's time over DCP's), save_time_vs_raw_slow_storage and
// save_time_vs_raw_fast_storage. A measurement, not a test: it exits 0
// whatever the figures, 1 when something fails, 2 on a usage error.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckpt.h"
#include "codec/chunk_codec.h"
#include "format/safetensors.h"
#include "nlohmann/json.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Args {
  std::string weights;
  std::string python = CKPT_BENCH_PYTHON;
  int threads = 0;  // 0: the machine's cores
  int runs = 3;
  int level = 1;
  std::string dir = "/var/tmp";
  double slow_mbps = 300;
  double fast_mib = -1;  // unset: 1024, or 0 with --small
  bool peers = true;
  bool small = false;  // a small model: for the smoke test
  bool json = false;
};

constexpr uint64_t kChunk = uint64_t{4} << 20;

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_compression: %s\nusage: bench_compression [--weights "
               "FILE] [--python PY] [--threads N] [--runs 3] [--level 1] "
               "[--dir DIR] [--slow-mbps 300] [--fast-mib 1024] [--small] "
               "[--no-peers] [--json]\n",
               why.c_str());
  std::exit(2);
}

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "bench_compression: %s\n", why.c_str());
  std::exit(1);
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs `argv` and returns its standard output; fails the bench otherwise.
std::string Run(const std::vector<std::string>& argv) {
  std::string command;
  for (const std::string& a : argv) command += "'" + a + "' ";
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) Fail("cannot run " + command);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  if (status != 0) Fail(command + "failed (" + std::to_string(status) + ")");
  return out;
}

struct Tensor {
  std::string name;
  ckpt::DType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

struct Group {
  std::vector<Tensor> tensors;
  uint64_t raw = 0;
};

struct CodecFigures {
  uint64_t stored = 0;
  double compress_s = 1e30, decompress_s = 1e30;
};

// ckpt's codec on every 4 MiB chunk of `g`, on `threads` threads.
CodecFigures MeasureCodec(const Group& g, int threads, int runs, int level) {
  struct Piece {
    const Tensor* t;
    std::span<const std::byte> raw;
  };
  std::vector<Piece> pieces;
  for (const Tensor& t : g.tensors) {
    for (uint64_t at = 0; at < t.bytes.size(); at += kChunk) {
      pieces.push_back(
          {&t, t.bytes.subspan(at, std::min(kChunk, t.bytes.size() - at))});
    }
  }
  std::vector<std::vector<std::byte>> stored(pieces.size());
  std::vector<bool> packed(pieces.size());
  auto parallel = [&](auto fn) {
    std::atomic<size_t> next{0};
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&] {
        for (size_t k; (k = next++) < pieces.size();) fn(k);
      });
    }
    for (auto& th : pool) th.join();
  };
  CodecFigures f;
  std::vector<std::vector<std::byte>> back(pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k)
    back[k].resize(pieces[k].raw.size());
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    parallel([&](size_t k) {
      packed[k] =
          ckpt::codec::Compress(ckpt::codec::CodecFor(pieces[k].t->dtype),
                                level, pieces[k].raw, stored[k]);
    });
    f.compress_s = std::min(f.compress_s, Since(t0));
    t0 = Clock::now();
    std::atomic<bool> bad{false};
    parallel([&](size_t k) {
      if (!packed[k]) {
        std::memcpy(back[k].data(), pieces[k].raw.data(), back[k].size());
        return;
      }
      if (!ckpt::codec::Decompress(ckpt::codec::CodecFor(pieces[k].t->dtype),
                                   stored[k], back[k])
               .ok()) {
        bad = true;
      }
    });
    f.decompress_s = std::min(f.decompress_s, Since(t0));
    for (size_t k = 0; k < pieces.size(); ++k) {
      if (bad || std::memcmp(back[k].data(), pieces[k].raw.data(),
                             back[k].size()) != 0) {
        Fail("a chunk of " + pieces[k].t->name + " did not come back");
      }
    }
  }
  f.stored = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    f.stored += packed[k] ? stored[k].size() : pieces[k].raw.size();
  }
  return f;
}

// The groups' tensors as one state, `copies` times (the copies named
// NAME#k, over the same memory).
ckpt::State StateOf(const std::vector<const Group*>& groups, int copies = 1) {
  ckpt::State s;
  for (int k = 0; k < copies; ++k) {
    for (const Group* g : groups) {
      for (const Tensor& t : g->tensors) {
        s.AddTensor(
            k == 0 ? t.name : t.name + "#" + std::to_string(k),
            ckpt::TensorView{t.dtype, t.shape,
                             const_cast<std::byte*>(t.bytes.data()), false});
      }
    }
  }
  return s;
}

struct SaveFigures {
  double seconds = 0;  // median
  uint64_t bytes = 0;  // of the last save
};

// A manager of a fresh root at `path` (its link paced at `bytes_per_second`
// when positive) that keeps one checkpoint.
std::unique_ptr<ckpt::CheckpointManager> OpenFresh(
    const std::string& path, double bytes_per_second,
    ckpt::Compression compression, int threads) {
  fs::remove_all(path);
  auto storage = ckpt::OpenStorage(path);
  if (!storage.ok()) Fail(storage.status().ToString());
  std::unique_ptr<ckpt::Storage> root = std::move(storage).value();
  if (bytes_per_second > 0) {
    root = ckpt::NewRateLimitedStorage(std::move(root), bytes_per_second);
  }
  ckpt::Options o;
  o.compression = compression;
  o.io_threads = threads;
  o.retention.keep_last = 1;
  o.create_root = true;
  auto mgr = ckpt::CheckpointManager::Open(std::move(root), o);
  if (!mgr.ok()) Fail(mgr.status().ToString());
  return std::move(mgr).value();
}

// The median of `runs` saves of `state` into a fresh root at `path`, after
// one untimed save (which kAuto measures the storage with).
SaveFigures MeasureSaves(const std::string& path, double bytes_per_second,
                         ckpt::Compression compression,
                         const ckpt::State& state, int runs, int threads) {
  auto mgr = OpenFresh(path, bytes_per_second, compression, threads);
  std::vector<double> times;
  SaveFigures f;
  for (int r = 0; r <= runs; ++r) {
    const auto t0 = Clock::now();
    auto saved = mgr->Save(r + 1, state);
    if (!saved.ok()) Fail(saved.status().ToString());
    if (r > 0) times.push_back(Since(t0));
    f.bytes = saved->info.bytes;
  }
  std::sort(times.begin(), times.end());
  f.seconds = times[times.size() / 2];
  mgr.reset();
  fs::remove_all(path);
  return f;
}

// MeasureSaves of two settings into two roots by turns, each save timed
// alone, so that what the disk and the machine do meanwhile (write-back
// of the other root's pages, other work) weighs on both alike.
std::pair<SaveFigures, SaveFigures> MeasureByTurns(
    const std::string& a_path, ckpt::Compression a, const std::string& b_path,
    ckpt::Compression b, double bytes_per_second, const ckpt::State& state,
    int runs, int threads) {
  auto ma = OpenFresh(a_path, bytes_per_second, a, threads);
  auto mb = OpenFresh(b_path, bytes_per_second, b, threads);
  std::vector<double> ta, tb;
  SaveFigures fa, fb;
  for (int r = 0; r <= runs; ++r) {
    for (int side = 0; side < 2; ++side) {
      // Which goes first alternates too.
      const bool first_a = (r % 2 == 0) == (side == 0);
      ckpt::CheckpointManager& m = first_a ? *ma : *mb;
      const auto t0 = Clock::now();
      auto saved = m.Save(r + 1, state);
      if (!saved.ok()) Fail(saved.status().ToString());
      const double t = Since(t0);
      if (r > 0) (first_a ? ta : tb).push_back(t);
      (first_a ? fa : fb).bytes = saved->info.bytes;
    }
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  fa.seconds = ta[ta.size() / 2];
  fb.seconds = tb[tb.size() / 2];
  ma.reset();
  mb.reset();
  fs::remove_all(a_path);
  fs::remove_all(b_path);
  return {fa, fb};
}

// Loads `state`'s tensors back from the checkpoint ckpt saved with zstd at
// `path`; the best of `runs`.
double MeasureLoad(const std::string& path, int runs) {
  auto mgr = ckpt::CheckpointManager::Open(path);
  if (!mgr.ok()) Fail(mgr.status().ToString());
  auto loaded = (*mgr)->LoadAll(std::nullopt);  // warm the code paths
  if (!loaded.ok()) Fail(loaded.status().ToString());
  double best = 1e30;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    auto again = (*mgr)->LoadAll(std::nullopt);
    if (!again.ok()) Fail(again.status().ToString());
    best = std::min(best, Since(t0));
  }
  return best;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Usage(f + " needs a value");
      return argv[++i];
    };
    if (f == "--weights") {
      args.weights = value();
    } else if (f == "--python") {
      args.python = value();
    } else if (f == "--threads") {
      args.threads = std::atoi(value().c_str());
    } else if (f == "--runs") {
      args.runs = std::atoi(value().c_str());
    } else if (f == "--level") {
      args.level = std::atoi(value().c_str());
    } else if (f == "--dir") {
      args.dir = value();
    } else if (f == "--slow-mbps") {
      args.slow_mbps = std::atof(value().c_str());
    } else if (f == "--fast-mib") {
      args.fast_mib = std::atof(value().c_str());
      if (args.fast_mib < 0) Usage("--fast-mib must not be negative");
    } else if (f == "--small") {
      args.small = true;
    } else if (f == "--no-peers") {
      args.peers = false;
    } else if (f == "--json") {
      args.json = true;
    } else if (f == "--help") {
      Usage("the figures of ckpt's compression beside zipnn's and DCP's");
    } else {
      Usage("unknown flag " + f);
    }
  }
  if (args.runs < 1 || args.slow_mbps <= 0) {
    Usage("--runs must be at least 1 and --slow-mbps positive");
  }
  if (args.threads <= 0) {
    args.threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  const fs::path work =
      fs::path(args.dir) / ("bench-compression-" + std::to_string(getpid()));
  fs::create_directories(work);
  json out;
  if (args.weights.empty()) {
    args.weights = (work / "weights.safetensors").string();
    std::vector<std::string> argv = {
        args.python,
        std::string(CKPT_SOURCE_DIR) + "/bench/compression/weights.py", "--out",
        args.weights};
    if (args.small) {
      for (const char* a :
           {"--hidden", "256", "--layers", "2", "--steps", "60"}) {
        argv.push_back(a);
      }
    }
    const std::string made = Run(argv);
    out["weights"] = json::parse(made.substr(made.rfind('{')));
  }
  out["weights_file"] = args.weights;

  std::ifstream in(args.weights, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  auto header = ckpt::format::ParseSafetensorsFile(file, args.weights);
  if (!header.ok()) Fail(header.status().ToString());
  std::map<std::string, Group> groups;
  for (const auto& t : header->tensors) {
    const std::string prefix = t.name.substr(0, t.name.find('/'));
    if (prefix != "f32" && prefix != "bf16") continue;
    Group& g = groups[prefix];
    g.tensors.push_back(
        {t.name, t.dtype, t.shape,
         std::span(reinterpret_cast<const std::byte*>(file.data()) +
                       header->data_start + t.begin,
                   t.end - t.begin)});
    g.raw += t.end - t.begin;
  }
  if (groups.size() != 2) Fail(args.weights + " has no f32/ and bf16/ tensors");

  json peers;
  if (args.peers) {
    peers = json::parse(
        Run({args.python,
             std::string(CKPT_SOURCE_DIR) + "/bench/compression/peers.py",
             "--weights", args.weights, "--threads",
             std::to_string(args.threads), "--runs", std::to_string(args.runs),
             "--dir", work.string(), "--json"}));
    out["peers"] = peers;
  }

  json ratios;
  uint64_t all_raw = 0, all_stored = 0, zipnn_stored = 0;
  double ckpt_c = 0, ckpt_d = 0, zipnn_c = 0, zipnn_d = 0;
  // Beside DCP's zstd: bytes, and each side's compressed save and load of
  // the groups to the local disk (its speed is its save's, all told).
  double dcp_stored = 0, dcp_save = 0, dcp_load = 0, our_save = 0, our_load = 0;
  for (auto& [name, g] : groups) {
    const CodecFigures f = MeasureCodec(g, args.threads, args.runs, args.level);
    json& o = out["ckpt"][name];
    o["raw_bytes"] = g.raw;
    o["stored_bytes"] = f.stored;
    o["ratio"] = Ratio(f.stored, g.raw);
    o["compress_gbps"] = g.raw / f.compress_s / 1e9;
    o["decompress_gbps"] = g.raw / f.decompress_s / 1e9;
    all_raw += g.raw;
    all_stored += f.stored;
    ckpt_c += f.compress_s;
    ckpt_d += f.decompress_s;
    const json* z = peers.is_object() && peers.contains("groups")
                        ? &peers["groups"][name]["zipnn"]
                        : nullptr;
    if (z != nullptr && z->value("available", true)) {
      zipnn_stored += (*z)["compressed_bytes"].get<uint64_t>();
      zipnn_c += (*z)["compress_seconds"].get<double>();
      zipnn_d += (*z)["decompress_seconds"].get<double>();
      ratios["size_vs_zipnn_" + name] =
          Ratio(f.stored, (*z)["compressed_bytes"].get<double>());
    }
    // ckpt's compressed save and load of this group to the local disk,
    // beside DCP's with its zstd option.
    const json* d = peers.is_object() && peers.contains("groups")
                        ? &peers["groups"][name]["dcp_zstd"]
                        : nullptr;
    const ckpt::State state = StateOf({&g});
    const std::string path = (work / ("zstd-" + name)).string();
    const SaveFigures saved =
        MeasureSaves(path, 0, {ckpt::Compression::Mode::kZstd, args.level},
                     state, args.runs, args.threads);
    o["save_seconds_zstd"] = saved.seconds;
    {
      // Saved once more to load from (MeasureSaves removes its root).
      ckpt::Options opt;
      opt.compression = {ckpt::Compression::Mode::kZstd, args.level};
      opt.io_threads = args.threads;
      auto mgr = ckpt::CheckpointManager::Open(path, opt);
      if (!mgr.ok() || !(*mgr)->Save(1, state).ok()) Fail("save " + path);
    }
    o["load_seconds_zstd"] = MeasureLoad(path, args.runs);
    fs::remove_all(path);
    if (d != nullptr && d->value("available", true)) {
      dcp_stored += (*d)["stored_bytes"].get<double>();
      dcp_save += (*d)["save_seconds"].get<double>();
      dcp_load += (*d)["load_seconds"].get<double>();
      our_save += saved.seconds;
      our_load += o["load_seconds_zstd"].get<double>();
      ratios["size_vs_dcp_zstd_" + name] =
          Ratio(f.stored, (*d)["stored_bytes"].get<double>());
      ratios["save_time_vs_dcp_zstd_" + name] =
          Ratio(saved.seconds, (*d)["save_seconds"].get<double>());
      ratios["load_time_vs_dcp_zstd_" + name] =
          Ratio(o["load_seconds_zstd"].get<double>(),
                (*d)["load_seconds"].get<double>());
    }
  }
  if (dcp_stored > 0) {
    ratios["size_vs_dcp_zstd"] = Ratio(all_stored, dcp_stored);
    ratios["compress_gbps_vs_dcp_zstd"] = Ratio(dcp_save, our_save);
    ratios["decompress_gbps_vs_dcp_zstd"] = Ratio(dcp_load, our_load);
  }
  if (zipnn_stored > 0) {
    ratios["size_vs_zipnn"] = Ratio(all_stored, zipnn_stored);
    ratios["compress_gbps_vs_zipnn"] = Ratio(zipnn_c, ckpt_c);
    ratios["decompress_gbps_vs_zipnn"] = Ratio(zipnn_d, ckpt_d);
  }
  out["ckpt"]["ratio_all"] = Ratio(all_stored, all_raw);

  // The whole state: raw against compressed, on a slow link and on the
  // local disk.
  const ckpt::State state = StateOf({&groups["f32"], &groups["bf16"]});
  const double slow = args.slow_mbps * 1e6;
  const ckpt::Compression off{},
      zstd{ckpt::Compression::Mode::kZstd, args.level},
      automatic{ckpt::Compression::Mode::kAuto, args.level};
  const auto [slow_raw, slow_zstd] = MeasureByTurns(
      (work / "slow-raw").string(), off, (work / "slow-zstd").string(), zstd,
      slow, state, args.runs, args.threads);
  const double fast_mib =
      args.fast_mib >= 0 ? args.fast_mib : (args.small ? 0 : 1024);
  const int copies = std::max(
      1, static_cast<int>(std::ceil(fast_mib * 1024 * 1024 / all_raw)));
  const auto [fast_raw, fast_auto] = MeasureByTurns(
      (work / "fast-raw").string(), off, (work / "fast-auto").string(),
      automatic, 0, StateOf({&groups["f32"], &groups["bf16"]}, copies),
      args.runs, args.threads);
  out["saves"] = {{"state_bytes", all_raw},
                  {"slow_mbps", args.slow_mbps},
                  {"slow_raw_seconds", slow_raw.seconds},
                  {"slow_zstd_seconds", slow_zstd.seconds},
                  {"slow_zstd_bytes", slow_zstd.bytes},
                  {"fast_state_bytes", all_raw * copies},
                  {"fast_raw_seconds", fast_raw.seconds},
                  {"fast_auto_seconds", fast_auto.seconds},
                  {"fast_auto_bytes", fast_auto.bytes}};
  ratios["save_time_vs_raw_slow_storage"] =
      Ratio(slow_zstd.seconds, slow_raw.seconds);
  ratios["save_time_vs_raw_fast_storage"] =
      Ratio(fast_auto.seconds, fast_raw.seconds);
  out["ratios"] = ratios;
  out["threads"] = args.threads;
  out["runs"] = args.runs;
  out["level"] = args.level;
  fs::remove_all(work);

  if (args.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%-6s %12s %12s %8s %14s %16s\n", "group", "raw", "stored",
              "ratio", "compress GB/s", "decompress GB/s");
  for (const char* name : {"f32", "bf16"}) {
    const json& o = out["ckpt"][name];
    std::printf(
        "%-6s %12llu %12llu %8.3f %14.2f %16.2f\n", name,
        static_cast<unsigned long long>(o["raw_bytes"].get<uint64_t>()),
        static_cast<unsigned long long>(o["stored_bytes"].get<uint64_t>()),
        o["ratio"].get<double>(), o["compress_gbps"].get<double>(),
        o["decompress_gbps"].get<double>());
  }
  for (const auto& [k, v] : ratios.items()) {
    std::printf("%-36s %.3f\n", k.c_str(), v.get<double>());
  }
  return 0;
}
