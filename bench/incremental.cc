// bench_incremental: what an incremental save of embedding tables costs
// beside a full one, and what loading the end of a chain costs beside
// loading a full checkpoint.
//
//   bench_incremental [--gib N] [--dim D] [--changed F] [--chain L]
//                     [--chunk BYTES] [--dir DIR] [--keep] [--json]
//
// Its roots go in a fresh folder made inside DIR (default /var/tmp), which
// alone is removed at the end unless --keep.
//
// It builds N GiB (default 2) of F32 embedding tables of D (default 1024)
// columns, saves them in full to a file:// root, then L (default 10) times
// changes a fraction F (default 0.05) of the rows, drawn uniformly at random,
// and saves incrementally twice per round: once comparing every chunk
// (hashing the state) and once told the changed rows (dirty rows, no
// hashing), into two roots so that each forms its own chain. Then it loads the
// newest checkpoint of the dirty-rows chain, and a full save of the same
// state, into the same buffers, and checks every byte. It prints bytes
// written and seconds per save, and the ratios the targets of docs/
// benchmarks.md name. A measurement, not a test: it exits 1 only when a
// save or a load fails or loads wrong bytes.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"

namespace {

struct Args {
  double gib = 2.0;
  int64_t dim = 1024;
  double changed = 0.05;
  int chain = 10;
  uint64_t chunk = 4096;
  std::string dir;
  bool keep = false;
  bool json = false;
};

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

[[noreturn]] void Die(const std::string& what, const ckpt::Status& s) {
  std::fprintf(stderr, "bench_incremental: %s: %s\n", what.c_str(),
               s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_incremental: %s needs a value\n",
                     f.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--gib") {
      a.gib = std::atof(next().c_str());
    } else if (f == "--dim") {
      a.dim = std::atoll(next().c_str());
    } else if (f == "--changed") {
      a.changed = std::atof(next().c_str());
    } else if (f == "--chain") {
      a.chain = std::atoi(next().c_str());
    } else if (f == "--chunk") {
      a.chunk = std::strtoull(next().c_str(), nullptr, 10);
    } else if (f == "--dir") {
      a.dir = next();
    } else if (f == "--keep") {
      a.keep = true;
    } else if (f == "--json") {
      a.json = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench_incremental [--gib N] [--dim D] [--changed "
                   "F] [--chain L] [--chunk BYTES] [--dir DIR] [--keep] "
                   "[--json]\n");
      return 2;
    }
  }
  if (a.dim < 1 || a.chain < 1 || a.gib <= 0 || a.changed < 0 ||
      a.changed > 1) {
    std::fprintf(stderr, "bench_incremental: bad arguments\n");
    return 2;
  }
  // Always a fresh folder inside --dir, which alone is removed at the end:
  // a folder the user names (/var/tmp) is never deleted.
  std::string tmpl = (a.dir.empty() ? std::string("/var/tmp") : a.dir) +
                     "/ckpt-bench-incr-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("bench_incremental: mkdtemp " + tmpl).c_str());
    return 1;
  }
  const std::string dir = tmpl;
  // Tables of at most 256 MiB each.
  const uint64_t total = static_cast<uint64_t>(a.gib * (1ull << 30));
  const uint64_t row_bytes = a.dim * sizeof(float);
  const int64_t rows_per_table =
      static_cast<int64_t>(std::min<uint64_t>(256ull << 20, total) / row_bytes);
  const int tables = static_cast<int>((total + rows_per_table * row_bytes - 1) /
                                      (rows_per_table * row_bytes));
  std::vector<std::vector<float>> data(tables);
  std::mt19937_64 gen(1);
  for (auto& t : data) {
    t.resize(rows_per_table * a.dim);
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(i % 977);
  }
  ckpt::State state;
  for (int t = 0; t < tables; ++t) {
    state.AddTensor(
        "emb" + std::to_string(t),
        ckpt::View(std::span<float>(data[t]), {rows_per_table, a.dim}));
  }
  const uint64_t state_bytes = tables * rows_per_table * row_bytes;

  ckpt::Options o;
  o.chunk_size = a.chunk;
  o.gc_after_save = false;
  auto open = [&](const std::string& name) {
    auto m = ckpt::CheckpointManager::Open("file://" + dir + "/" + name, o);
    if (!m.ok()) Die("open", m.status());
    return std::move(m).value();
  };
  auto hashed = open("hashed");
  auto dirty = open("dirty");
  auto full = open("full");

  auto save = [&](ckpt::CheckpointManager& m, int64_t step,
                  const ckpt::SaveOptions& s, double* secs) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = m.Save(step, state, s);
    *secs = Seconds(t0);
    if (!r.ok()) Die("save", r.status());
    return r->info.bytes;
  };
  double full_secs = 0, t = 0;
  const uint64_t full_bytes = save(*full, 0, {}, &full_secs);
  save(*hashed, 0, {}, &t);
  save(*dirty, 0, {}, &t);

  double sum_hash_s = 0, sum_dirty_s = 0;
  uint64_t sum_hash_b = 0, sum_dirty_b = 0;
  const int64_t changed_rows = static_cast<int64_t>(a.changed * rows_per_table);
  for (int step = 1; step <= a.chain; ++step) {
    ckpt::SaveOptions by_hash;
    by_hash.incremental = true;
    ckpt::SaveOptions by_rows = by_hash;
    for (int tb = 0; tb < tables; ++tb) {
      auto& rows = by_rows.dirty_rows["emb" + std::to_string(tb)];
      for (int64_t i = 0; i < changed_rows; ++i) {
        const int64_t r = static_cast<int64_t>(gen() % rows_per_table);
        for (int64_t d = 0; d < a.dim; ++d) data[tb][r * a.dim + d] += 1;
        rows.emplace_back(r, r + 1);
      }
    }
    double s1 = 0, s2 = 0;
    sum_hash_b += save(*hashed, step, by_hash, &s1);
    sum_dirty_b += save(*dirty, step, by_rows, &s2);
    sum_hash_s += s1;
    sum_dirty_s += s2;
  }
  // The newest state, in full, to load beside the chain's end.
  double t_full2 = 0;
  save(*full, a.chain, {}, &t_full2);

  std::vector<std::vector<float>> want = data;
  auto load = [&](ckpt::CheckpointManager& m) {
    for (auto& tb : data) std::memset(tb.data(), 0, tb.size() * sizeof(float));
    const auto t0 = std::chrono::steady_clock::now();
    auto r = m.Load(a.chain, state);
    const double secs = Seconds(t0);
    if (!r.ok()) Die("load", r.status());
    for (int tb = 0; tb < tables; ++tb) {
      if (std::memcmp(data[tb].data(), want[tb].data(),
                      data[tb].size() * sizeof(float)) != 0) {
        std::fprintf(stderr, "bench_incremental: loaded wrong bytes\n");
        std::exit(1);
      }
    }
    return secs;
  };
  const double load_full = load(*full);
  const double load_chain = load(*dirty);
  const double load_full2 = load(*full);
  const double load_chain2 = load(*dirty);
  const double lf = std::min(load_full, load_full2);
  const double lc = std::min(load_chain, load_chain2);

  const double n = a.chain;
  const double hb = sum_hash_b / n / full_bytes,
               db = sum_dirty_b / n / full_bytes;
  const double hs = sum_hash_s / n / full_secs,
               ds = sum_dirty_s / n / full_secs;
  if (a.json) {
    std::printf(
        "{\"state_bytes\":%llu,\"tables\":%d,\"dim\":%lld,\"changed\":%g,"
        "\"chunk\":%llu,\"full_save_s\":%.4f,\"full_bytes\":%llu,"
        "\"hashed_bytes_ratio\":%.4f,\"hashed_time_ratio\":%.4f,"
        "\"dirty_bytes_ratio\":%.4f,\"dirty_time_ratio\":%.4f,"
        "\"load_full_s\":%.4f,\"load_chain_s\":%.4f,\"load_ratio\":%.3f}\n",
        (unsigned long long)state_bytes, tables, (long long)a.dim, a.changed,
        (unsigned long long)a.chunk, full_secs, (unsigned long long)full_bytes,
        hb, hs, db, ds, lf, lc, lc / lf);
  } else {
    std::printf(
        "ckpt incremental: %.2f GiB in %d F32 tables of %lld columns, %.1f%% "
        "of rows changed per save, chunk %llu B, root %s%s\n",
        state_bytes / double(1ull << 30), tables, (long long)a.dim,
        100 * a.changed, (unsigned long long)a.chunk, dir.c_str(),
        a.keep ? "" : " (removed)");
    std::printf("  full save                      %8.3f s  %12llu B\n",
                full_secs, (unsigned long long)full_bytes);
    std::printf(
        "  incremental, hashed (mean)     %8.3f s  %12.0f B   bytes %.4f  "
        "time %.4f of full\n",
        sum_hash_s / n, sum_hash_b / n, hb, hs);
    std::printf(
        "  incremental, dirty rows (mean) %8.3f s  %12.0f B   bytes %.4f  "
        "time %.4f of full\n",
        sum_dirty_s / n, sum_dirty_b / n, db, ds);
    std::printf(
        "  load step %d of the chain       %8.3f s   full %.3f s   ratio "
        "%.3f\n",
        a.chain, lc, lf, lc / lf);
  }
  if (!a.keep) std::filesystem::remove_all(dir);
  return 0;
}
