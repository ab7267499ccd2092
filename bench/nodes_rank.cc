// The ranks of bench_nodes' jobs, started by the driver (bench/nodes.cc)
// under mpirun across the node bed:
//
//   bench_nodes --rank save --dir DIR --mib N --tensors T --out FILE
//               [--storage-mbps R]
//   bench_nodes --rank load --layout replicated|sharded
//               --read-once on|off|auto --dir DIR --mib N --tensors T
//               --out FILE [--storage-mbps R]
//
// `save` writes the state twice under DIR: fully replicated (every rank
// adds every tensor whole, as a data-parallel job does) and sharded (each
// tensor split along dimension 0, one piece a rank). `load` loads one
// layout on this job's ranks, each rank its even split of dimension 0 (the
// whole tensors, for the replicated layout), with read-once on (kOn), off
// (kOff) or as the default decides (kAuto); each mode is a job of its own,
// so that none finds the process warmed by another's load. With
// --storage-mbps, every rank reaches the root through
// NewRateLimitedStorage at R MB/s (10^6 bytes) for reads and writes
// together, the budget shared by the ranks of a node through a file in the
// node's own /dev/shm: a node's link to a network store, which its ranks
// share. The save is paced too. Rank 0 writes what the job measured to FILE,
// one JSON object a line; every loaded byte is compared with the pattern it was
// saved with.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/mpi_communicator.h"
#include "nodes.h"

namespace ckpt_bench_nodes {
namespace {

using Clock = std::chrono::steady_clock;

// Every byte the load gets from storage: ranged reads, ranged reads that
// hand over stretches as they arrive, and whole objects (manifests,
// indexes). ReadRangeFilling goes to the target's own, so that no byte is
// counted twice.
class CountingStorage : public ckpt::StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;

  ckpt::Status ReadRange(std::string_view key, uint64_t offset,
                         std::span<std::byte> out) override {
    ckpt::Status s = target()->ReadRange(key, offset, out);
    if (s.ok()) bytes_ += out.size();
    return s;
  }
  ckpt::Status ReadRangeFilling(std::string_view key, uint64_t offset,
                                std::span<std::byte> out,
                                const FilledFn& filled) override {
    ckpt::Status s = target()->ReadRangeFilling(key, offset, out, filled);
    if (s.ok()) bytes_ += out.size();
    return s;
  }
  ckpt::Result<std::string> ReadAll(std::string_view key) override {
    ckpt::Result<std::string> r = target()->ReadAll(key);
    if (r.ok()) bytes_ += r->size();
    return r;
  }

  uint64_t bytes() const { return bytes_.load(); }

 private:
  std::atomic<uint64_t> bytes_{0};
};

struct RankArgs {
  std::string what, layout, dir, out;
  std::string read_once = "auto";  // or "on", "off"
  int64_t mib = 512;
  int tensors = 32;
  double storage_mbps = 0;  // 0: no limit
};

// The node's link to storage: one budget for the node's ranks, in the
// node's own /dev/shm (the bed gives each node its own, and takes it down
// with the node).
constexpr char kLinkBudget[] = "/dev/shm/ckpt-bench-nodes-link";

// The root's storage as this rank reaches it: paced as the node's link,
// with --storage-mbps.
ckpt::Result<std::unique_ptr<ckpt::Storage>> OpenRoot(const RankArgs& a,
                                                      const std::string& url,
                                                      bool create) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<ckpt::Storage> file,
                        ckpt::OpenStorage(url, {.create = create}));
  return ckpt::NewRateLimitedStorage(
      std::move(file), ckpt::RateLimit{.bytes_per_second = a.storage_mbps * 1e6,
                                       .reads = true,
                                       .shared_file = kLinkBudget});
}

int rank = 0, world = 1;

// This rank's rows of every tensor, or (replicated) every row.
struct Box {
  int64_t first = 0, rows = 0;
};
Box BoxOf(const Shape& s, bool whole) {
  if (whole) return {0, s.rows};
  const int64_t first = FirstRow(s, rank, world);
  return {first, FirstRow(s, rank + 1, world) - first};
}

// The buffers of this rank's box of every tensor, each element holding
// `Pattern` (or, with `inverted`, its complement: a value no element is
// saved with, so a byte the load leaves alone is caught).
std::vector<std::vector<uint32_t>> Buffers(const Shape& s, const Box& box,
                                           bool inverted) {
  std::vector<std::vector<uint32_t>> bufs(s.tensors);
  const uint64_t base = static_cast<uint64_t>(box.first) * s.cols;
  const uint64_t n = static_cast<uint64_t>(box.rows) * s.cols;
  for (int t = 0; t < s.tensors; ++t) {
    bufs[t].resize(n);
    uint32_t* p = bufs[t].data();
    const uint32_t flip = inverted ? ~0u : 0u;
    for (uint64_t i = 0; i < n; ++i) p[i] = Pattern(t, base + i) ^ flip;
  }
  return bufs;
}

ckpt::State StateOf(const Shape& s, const Box& box, bool whole,
                    std::vector<std::vector<uint32_t>>& bufs) {
  ckpt::State state;
  for (int t = 0; t < s.tensors; ++t) {
    if (whole) {
      state.AddTensor(TensorName(t), ckpt::View(std::span<uint32_t>(bufs[t]),
                                                {s.rows, s.cols}));
    } else {
      state.AddTensorPiece(
          TensorName(t), {s.rows, s.cols}, {box.first, 0},
          ckpt::View(std::span<uint32_t>(bufs[t]), {box.rows, s.cols}));
    }
  }
  return state;
}

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double MaxOf(double mine) {
  double all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return all;
}
uint64_t SumOf(uint64_t mine) {
  unsigned long long in = mine, all = 0;
  MPI_Allreduce(&in, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  return all;
}
uint64_t MaxOfU(uint64_t mine) {
  unsigned long long in = mine, all = 0;
  MPI_Allreduce(&in, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return all;
}

// True when every rank's `ok` is.
bool AllOk(bool ok) { return SumOf(ok ? 0 : 1) == 0; }

void Append(const std::string& file, const std::string& line) {
  std::ofstream out(file, std::ios::app);
  out << line << "\n";
}

// Says on stderr what failed on this rank; whether `s` is an error.
bool Failed(const ckpt::Status& s, const std::string& what) {
  if (s.ok()) return false;
  std::fprintf(stderr, "bench_nodes: rank %d: %s: %s\n", rank, what.c_str(),
               s.ToString().c_str());
  return true;
}

std::string RootOf(const RankArgs& a, const std::string& layout) {
  return "file://" + a.dir + "/" + layout;
}

int Save(const RankArgs& a, ckpt::Communicator& comm) {
  const Shape s = ShapeFor(a.mib, a.tensors);
  std::string line = "{\"what\": \"save\"";
  for (const char* layout : {kReplicated, kSharded}) {
    const bool whole = std::string(layout) == kReplicated;
    const Box box = BoxOf(s, whole);
    auto bufs = Buffers(s, box, false);
    const ckpt::State state = StateOf(s, box, whole, bufs);
    auto root = OpenRoot(a, RootOf(a, layout), true);
    if (Failed(root.status(), "opening " + RootOf(a, layout))) return 1;
    auto mgr = ckpt::CheckpointManager::Open(std::move(*root),
                                             {.communicator = &comm});
    if (Failed(mgr.status(), "opening " + RootOf(a, layout))) return 1;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    auto saved = (*mgr)->Save(1, state);
    const double secs = MaxOf(Since(t0));
    if (Failed(saved.status(), "save of " + RootOf(a, layout) + " step 1")) {
      return 1;
    }
    char part[96];
    std::snprintf(part, sizeof(part), ", \"%s_save_s\": %.4f", layout, secs);
    line += part;
  }
  if (rank == 0) Append(a.out, line + "}");
  return 0;
}

// Compares this rank's box with the pattern; wrong elements, and the first
// of them reported on stderr.
uint64_t Check(const Shape& s, const Box& box,
               const std::vector<std::vector<uint32_t>>& bufs,
               const std::string& what) {
  uint64_t wrong = 0;
  const uint64_t base = static_cast<uint64_t>(box.first) * s.cols;
  for (int t = 0; t < s.tensors; ++t) {
    const uint32_t* p = bufs[t].data();
    for (uint64_t i = 0; i < bufs[t].size(); ++i) {
      if (p[i] == Pattern(t, base + i)) continue;
      if (wrong++ == 0) {
        std::fprintf(stderr,
                     "bench_nodes: rank %d: %s: %s element %llu (row %llu) "
                     "is %u, saved as %u\n",
                     rank, what.c_str(), TensorName(t).c_str(),
                     static_cast<unsigned long long>(base + i),
                     static_cast<unsigned long long>((base + i) / s.cols), p[i],
                     Pattern(t, base + i));
      }
    }
  }
  return wrong;
}

int Load(const RankArgs& a, ckpt::Communicator& comm) {
  const Shape s = ShapeFor(a.mib, a.tensors);
  const bool whole = a.layout == kReplicated;
  const Box box = BoxOf(s, whole);
  {
    using ReadOnce = ckpt::LoadOptions::ReadOnce;
    const ReadOnce mode = a.read_once == "off"  ? ReadOnce::kOff
                          : a.read_once == "on" ? ReadOnce::kOn
                                                : ReadOnce::kAuto;
    const char* mode_name = a.read_once.c_str();
    const std::string what = a.layout + " on " + std::to_string(world) +
                             " ranks, read once " + mode_name;
    auto bufs = Buffers(s, box, true);
    ckpt::State state = StateOf(s, box, whole, bufs);
    auto file = OpenRoot(a, RootOf(a, a.layout), false);
    if (Failed(file.status(), "opening " + RootOf(a, a.layout))) return 1;
    auto counting = std::make_unique<CountingStorage>(std::move(*file));
    CountingStorage* counter = counting.get();
    auto mgr = ckpt::CheckpointManager::Open(std::move(counting),
                                             {.communicator = &comm});
    if (Failed(mgr.status(), "opening " + RootOf(a, a.layout))) return 1;
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = Clock::now();
    auto loaded = (*mgr)->Load(1, state, {.read_once = mode});
    const double secs = MaxOf(Since(t0));
    const bool failed =
        Failed(loaded.status(),
               "load of " + RootOf(a, a.layout) + " step 1 (" + what + ")");
    if (!AllOk(!failed)) return 1;
    const uint64_t wrong = Check(s, box, bufs, what) * 4;
    uint64_t verified = 0;
    for (const auto& b : bufs) verified += b.size() * 4;
    const uint64_t read = counter->bytes();
    const uint64_t read_sum = SumOf(read), read_max = MaxOfU(read);
    const uint64_t wrong_sum = SumOf(wrong), verified_sum = SumOf(verified);
    // The nodes the job ran on, by the ranks' host names.
    auto hosts = comm.AllGather(comm.host_name());
    if (!hosts.ok()) return 1;
    const size_t nodes =
        std::set<std::string>(hosts->begin(), hosts->end()).size();
    if (rank == 0) {
      char line[512];
      std::snprintf(
          line, sizeof(line),
          "{\"what\": \"load\", \"layout\": \"%s\", \"ranks\": %d, "
          "\"nodes_used\": %zu, "
          "\"read_once\": \"%s\", \"load_s\": %.4f, \"read_bytes\": %llu, "
          "\"max_rank_read_bytes\": %llu, \"verified_bytes\": %llu, "
          "\"wrong_bytes\": %llu}",
          a.layout.c_str(), world, nodes, mode_name, secs,
          static_cast<unsigned long long>(read_sum),
          static_cast<unsigned long long>(read_max),
          static_cast<unsigned long long>(verified_sum),
          static_cast<unsigned long long>(wrong_sum));
      Append(a.out, line);
    }
  }
  return 0;
}

// The bed's own network, without ckpt: every rank sends its share of the
// state (the state over the ranks, what each reads for the others in the
// replicated load read once) to every other rank and receives theirs, in
// rounds of MPI_Sendrecv (to rank + k, from rank - k) between buffers
// already touched. What the exchange of that load could take at best here.
int Exchange(const RankArgs& a) {
  const uint64_t share = ShapeFor(a.mib, a.tensors).Bytes() / world;
  constexpr uint64_t kPiece = uint64_t{1} << 30;  // MPI counts are ints
  std::vector<char> out(share, 1), in(share, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  const auto t0 = Clock::now();
  for (int k = 1; k < world; ++k) {
    for (uint64_t at = 0; at < share; at += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, share - at));
      if (MPI_Sendrecv(out.data() + at, n, MPI_BYTE, (rank + k) % world, 7,
                       in.data() + at, n, MPI_BYTE, (rank - k + world) % world,
                       7, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        std::fprintf(stderr, "rank %d: MPI_Sendrecv failed\n", rank);
        return 1;
      }
    }
  }
  const double secs = MaxOf(Since(t0));
  if (rank == 0) {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "{\"what\": \"exchange\", \"ranks\": %d, "
                  "\"bytes_per_rank\": %llu, \"exchange_s\": %.4f}",
                  world, static_cast<unsigned long long>(share * (world - 1)),
                  secs);
    Append(a.out, line);
  }
  return 0;
}

}  // namespace

int RankMain(int argc, char** argv) {
  RankArgs a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--rank") {
      a.what = v;
    } else if (f == "--read-once") {
      a.read_once = v;
    } else if (f == "--layout") {
      a.layout = v;
    } else if (f == "--dir") {
      a.dir = v;
    } else if (f == "--out") {
      a.out = v;
    } else if (f == "--mib") {
      a.mib = std::atoll(v.c_str());
    } else if (f == "--tensors") {
      a.tensors = std::atoi(v.c_str());
    } else if (f == "--storage-mbps") {
      a.storage_mbps = std::atof(v.c_str());
    } else {
      std::fprintf(stderr, "bench_nodes --rank: unknown option %s\n",
                   f.c_str());
      return 2;
    }
  }
  // Each load says itself whether it reads once; the environment's switch
  // would turn the measured mode off behind its back.
  unsetenv("CKPT_READ_ONCE");
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int rc = 2;
  {
    std::unique_ptr<ckpt::Communicator> comm = ckpt::NewMpiCommunicator();
    if (a.what == "save") {
      rc = Save(a, *comm);
    } else if (a.what == "exchange") {
      rc = Exchange(a);
    } else if (a.what == "load" &&
               (a.layout == kReplicated || a.layout == kSharded) &&
               (a.read_once == "auto" || a.read_once == "off" ||
                a.read_once == "on")) {
      rc = Load(a, *comm);
    } else {
      std::fprintf(stderr,
                   "bench_nodes --rank: save, or load with --layout "
                   "replicated|sharded\n");
    }
  }
  if (rc != 0) MPI_Abort(MPI_COMM_WORLD, rc);
  MPI_Finalize();
  return rc;
}

}  // namespace ckpt_bench_nodes
