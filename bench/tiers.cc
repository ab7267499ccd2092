// bench_tiers: the local (memory) tier beside the durable one, 4 ranks as
// threads on 2 simulated nodes, in one run (docs/benchmarks.md):
//   - memcpy of each rank's bytes (all ranks at once), the baseline;
//   - the stall of a local-tier SaveAsync (the copy into staging) per rank;
//   - the local tier's background work (share written to /dev/shm and
//     replicated to the other node) and the durable tier's save, with
//     their throughputs;
//   - a restore from the memory tier, and a cold restore from the durable
//     tier (local tier wiped, page cache dropped), every byte compared;
//   - for reference, the same bytes read back from plain files on the
//     memory tier's file system and checksummed, without ckpt: what any
//     restore that checks its bytes must do.
//
//   bench_tiers [--gib 1] [--ranks 4] [--local DIR] [--durable DIR]
//               [--runs 3] [--tmpfs-huge-pages] [--json]
//
// --tmpfs-huge-pages runs with CKPT_TMPFS_HUGE_PAGES=1 (docs/tiers.md): the
// local tier's files on tmpfs get 2 MiB pages.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckpt.h"
#include "util/checksum.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Args {
  double gib = 1;
  int ranks = 4;
  std::string local = "/dev/shm";
  std::string durable = "/var/tmp";
  int runs = 3;
  bool json = false;
};

// Runs fn(rank, comm) on `ranks` threads; returns the slowest rank's
// seconds of what fn reports.
double OnRanks(int ranks,
               const std::function<double(int, ckpt::Communicator*)>& fn) {
  auto comms = ckpt::NewThreadCommunicators(ranks);
  std::vector<double> t(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] { t[r] = fn(r, comms[r].get()); });
  }
  for (auto& th : threads) th.join();
  return *std::max_element(t.begin(), t.end());
}

bool DropCaches() {
  ::sync();
  std::ofstream out("/proc/sys/vm/drop_caches");
  out << "3\n";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_tiers: %s needs a value\n", f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--gib") {
      a.gib = std::atof(value());
    } else if (f == "--ranks") {
      a.ranks = std::atoi(value());
    } else if (f == "--local") {
      a.local = value();
    } else if (f == "--durable") {
      a.durable = value();
    } else if (f == "--runs") {
      a.runs = std::atoi(value());
    } else if (f == "--json") {
      a.json = true;
    } else if (f == "--tmpfs-huge-pages") {
      ::setenv("CKPT_TMPFS_HUGE_PAGES", "1", 1);
    } else {
      std::fprintf(stderr,
                   "usage: bench_tiers [--gib 1] [--ranks 4] [--local DIR] "
                   "[--durable DIR] [--runs 3] [--tmpfs-huge-pages] "
                   "[--json]\n");
      return f == "--help" ? 0 : 2;
    }
  }
  if (a.ranks < 2 || a.ranks % 2 != 0 || a.gib <= 0 || a.runs < 1) {
    std::fprintf(stderr, "bench_tiers: an even number of ranks >= 2\n");
    return 2;
  }
  const int W = a.ranks;
  const uint64_t total = static_cast<uint64_t>(a.gib * (1ull << 30)) / 4 * 4;
  const int64_t per_rank = static_cast<int64_t>(total / 4 / W);  // floats
  const std::string tag = "ckpt-bench-tiers-" + std::to_string(getpid());
  const fs::path local_dir = fs::path(a.local) / tag;
  const fs::path durable_dir = fs::path(a.durable) / tag;
  std::vector<int> nodes(W);
  for (int r = 0; r < W; ++r) nodes[r] = r < W / 2 ? 0 : 1;

  // Each rank's rows of one table, random, and a copy to compare with.
  std::vector<std::vector<float>> data(W), loaded(W);
  {
    std::mt19937 gen(7);
    for (int r = 0; r < W; ++r) {
      data[r].resize(per_rank);
      loaded[r].assign(per_rank, 0.0f);
      for (float& x : data[r]) x = static_cast<float>(gen());
    }
  }
  auto make_state = [&](int r, std::vector<float>& buf) {
    ckpt::State s;
    s.AddTensorPiece("table", {static_cast<int64_t>(W) * per_rank},
                     {static_cast<int64_t>(r) * per_rank}, ckpt::View(buf));
    return s;
  };

  // memcpy of each rank's bytes, all ranks at once, into touched memory.
  double memcpy_s = 1e9;
  {
    std::vector<std::vector<float>> dst(W, std::vector<float>(per_rank, 1.0f));
    for (int run = 0; run < a.runs; ++run) {
      memcpy_s = std::min(memcpy_s, OnRanks(W, [&](int r, ckpt::Communicator*) {
                            const auto t0 = Clock::now();
                            std::memcpy(dst[r].data(), data[r].data(),
                                        per_rank * sizeof(float));
                            return Since(t0);
                          }));
    }
  }

  // For reference, what any restore from the memory tier that checks its
  // bytes must do, without ckpt: each rank's bytes in a plain file on the
  // local tier's file system, read back 256 KiB at a time into touched
  // memory and checksummed (xxh3-128, as a load checks them), all ranks at
  // once, one thread each.
  double plain_s = 1e9;
  {
    fs::create_directories(local_dir);
    const uint64_t bytes = static_cast<uint64_t>(per_rank) * sizeof(float);
    auto file = [&](int r) {
      return (local_dir / ("plain-" + std::to_string(r))).string();
    };
    for (int r = 0; r < W; ++r) {
      std::ofstream out(file(r), std::ios::binary);
      out.write(reinterpret_cast<const char*>(data[r].data()), bytes);
    }
    std::vector<std::vector<float>> dst(W, std::vector<float>(per_rank, 1.0f));
    for (int run = 0; run < a.runs; ++run) {
      plain_s = std::min(
          plain_s, OnRanks(W, [&](int r, ckpt::Communicator*) {
            const int fd = ::open(file(r).c_str(), O_RDONLY | O_CLOEXEC);
            auto* into = reinterpret_cast<std::byte*>(dst[r].data());
            const auto t0 = Clock::now();
            ckpt::Xxh3Hasher hasher;
            for (uint64_t at = 0; at < bytes;) {
              const ssize_t n = ::pread(
                  fd, into + at, std::min<uint64_t>(bytes - at, 256 << 10), at);
              if (n <= 0) break;
              hasher.Update({into + at, static_cast<size_t>(n)});
              at += static_cast<uint64_t>(n);
            }
            const double t = Since(t0);
            ::close(fd);
            return hasher.Digest() == ckpt::Xxh3_128({into, bytes}) ? t : 1e9;
          }));
    }
    for (int r = 0; r < W; ++r) fs::remove(file(r));
  }

  ckpt::TierOptions topt;
  topt.local_url = "file://" + (local_dir / "node{node}").string();
  topt.node_of_rank = nodes;
  topt.local_every_steps = 1;
  topt.durable_every_steps = 1000;
  topt.replicas = 1;
  auto open = [&](ckpt::Communicator* comm,
                  std::unique_ptr<ckpt::CheckpointManager>& durable) {
    durable = ckpt::CheckpointManager::Open(
                  "file://" + durable_dir.string(),
                  {.lease_seconds = 0, .communicator = comm})
                  .value();
    return ckpt::TieredManager::Open(*durable, topt).value();
  };

  // Saves: step 1 warms the staging memory; then `runs` local-only saves
  // (stall, background time) and one that also goes to the durable tier.
  // Per run, the slowest rank; then the best run.
  std::vector<double> stalls(a.runs + 3, 0.0), locals(a.runs + 3, 0.0);
  double durable_s = 0;
  uint64_t replicated = 0;
  bool ok = true;
  std::mutex mu;
  OnRanks(W, [&](int r, ckpt::Communicator* comm) {
    std::unique_ptr<ckpt::CheckpointManager> durable;
    auto tiers = open(comm, durable);
    ckpt::State state = make_state(r, data[r]);
    for (int64_t step = 1; step <= a.runs + 2; ++step) {
      ckpt::TierSaveOptions so;
      so.durable = step == a.runs + 2;
      comm->Barrier().IgnoreError();
      const auto t0 = Clock::now();
      ckpt::TierSaveHandle h = tiers->SaveAsync(step, state, so);
      const double stall = Since(t0);
      auto res = h.Wait();
      std::lock_guard<std::mutex> lock(mu);
      if (!res.ok() || !res->local) {
        std::fprintf(stderr, "bench_tiers: save %lld: %s\n",
                     static_cast<long long>(step),
                     res.ok() ? res->local_error.c_str()
                              : res.status().ToString().c_str());
        ok = false;
        return 0.0;
      }
      if (step == 1) continue;
      if (so.durable) {
        durable_s = std::max(durable_s, res->durable_seconds);
      } else {
        stalls[step] = std::max(stalls[step], stall);
        locals[step] = std::max(locals[step], res->local_seconds);
        replicated = std::max(replicated, res->replicated_bytes);
      }
    }
    return 0.0;
  });
  if (!ok) return 1;
  const double stall_s =
      *std::min_element(stalls.begin() + 2, stalls.begin() + a.runs + 2);
  const double local_s =
      *std::min_element(locals.begin() + 2, locals.begin() + a.runs + 2);

  auto restore = [&](ckpt::Tier want) {
    return OnRanks(W, [&](int r, ckpt::Communicator* comm) {
      std::unique_ptr<ckpt::CheckpointManager> durable;
      auto tiers = open(comm, durable);
      std::fill(loaded[r].begin(), loaded[r].end(), 0.0f);
      ckpt::State state = make_state(r, loaded[r]);
      comm->Barrier().IgnoreError();
      const auto t0 = Clock::now();
      auto res = tiers->Restore(state);
      const double t = Since(t0);
      std::lock_guard<std::mutex> lock(mu);
      if (!res.ok() || res->tier != want || loaded[r] != data[r]) {
        std::fprintf(
            stderr, "bench_tiers: restore from the %s tier: %s\n",
            ckpt::TierName(want),
            res.ok() ? "wrong tier or bytes" : res.status().ToString().c_str());
        ok = false;
      }
      return t;
    });
  };
  double memory_s = 1e9;
  for (int run = 0; run < a.runs && ok; ++run) {
    memory_s = std::min(memory_s, restore(ckpt::Tier::kLocal));
  }
  fs::remove_all(local_dir);
  const bool cold = DropCaches();
  const double durable_cold_s = ok ? restore(ckpt::Tier::kDurable) : 0;
  // The cold restore opened the local tiers again, making their folders.
  fs::remove_all(local_dir);
  fs::remove_all(durable_dir);
  if (!ok) return 1;

  const double rank_bytes = per_rank * 4.0;
  const double gb = 1e9;
  const double r_restore = memory_s / durable_cold_s;
  const double r_plain = plain_s / durable_cold_s;
  const double r_stall = stall_s / memcpy_s;
  const char* huge_env = std::getenv("CKPT_TMPFS_HUGE_PAGES");
  const bool huge = huge_env != nullptr && std::strcmp(huge_env, "1") == 0;
  if (a.json) {
    std::printf(
        "{\"ranks\": %d, \"bytes\": %llu, \"page_cache_dropped\": %s, "
        "\"tmpfs_huge_pages\": %s,\n"
        " \"figures\": {\"memcpy_rank_s\": %.4f, \"local_stall_s\": %.4f, "
        "\"local_background_s\": %.4f, \"replication_gbps\": %.3f, "
        "\"durable_save_s\": %.4f, \"persistence_gbps\": %.3f, "
        "\"restore_memory_s\": %.4f, \"restore_durable_cold_s\": %.4f, "
        "\"plain_read_check_s\": %.4f},\n"
        " \"ratios\": {\"restore_memory_vs_durable_cold\": %.3f, "
        "\"local_stall_vs_memcpy\": %.3f, "
        "\"plain_read_check_vs_durable_cold\": %.3f}}\n",
        W, static_cast<unsigned long long>(rank_bytes * W),
        cold ? "true" : "false", huge ? "true" : "false", memcpy_s, stall_s,
        local_s, replicated * W / local_s / gb, durable_s,
        rank_bytes * W / durable_s / gb, memory_s, durable_cold_s, plain_s,
        r_restore, r_stall, r_plain);
    return 0;
  }
  std::printf(
      "bench_tiers: %d ranks on 2 nodes, %.2f GiB in all (%.0f MiB "
      "per rank), best of %d%s\n",
      W, rank_bytes * W / (1 << 30), rank_bytes / (1 << 20), a.runs,
      huge ? ", local tier in 2 MiB tmpfs pages" : "");
  std::printf("  memcpy of a rank's bytes (all at once)  %.4f s\n", memcpy_s);
  std::printf("  local-tier SaveAsync stall per rank     %.4f s\n", stall_s);
  std::printf(
      "  local tier in the background            %.4f s  (replicas "
      "sent at %.2f GB/s in all)\n",
      local_s, replicated * W / local_s / gb);
  std::printf("  durable tier save                       %.4f s  (%.2f GB/s)\n",
              durable_s, rank_bytes * W / durable_s / gb);
  std::printf("  restore from the memory tier            %.4f s\n", memory_s);
  std::printf("  restore from the durable tier, cold     %.4f s%s\n",
              durable_cold_s, cold ? "" : "  (page cache NOT dropped)");
  std::printf("  plain read + checksum, without ckpt     %.4f s\n", plain_s);
  std::printf(
      "  restore memory / durable cold           %.3f  (target <= "
      "0.25)\n",
      r_restore);
  std::printf("  plain read + checksum / durable cold    %.3f\n", r_plain);
  std::printf(
      "  local stall / memcpy                    %.3f  (target <= "
      "1.5)\n",
      r_stall);
  return 0;
}
