// The save and load protocols across real processes under mpirun.
//
//   mpi_check save DIR       every rank saves its row piece of "weights",
//                            a replicated "bias" and a rank-local "loader"
//   mpi_check load DIR N     every rank loads a different split of what N
//                            ranks saved, and the rank-local entries
//   mpi_check fail DIR       rank 1's storage fails: every rank must get the
//                            same error and nothing may be committed
//   mpi_check silent -       (with CKPT_MPI_CHECK_TIMEOUT) rank 1 misses an
//                            all-gather: the others fail within the timeout,
//                            naming it
//
// Exits 0 when every check on every rank held; prints what failed otherwise.
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/mpi_communicator.h"

namespace {

constexpr int64_t kRows = 24;  // divisible by 1, 2, 3, 4, 6, 8
constexpr int64_t kCols = 6;

double Value(int64_t i, int64_t j) { return i * 1000.0 + j; }

std::vector<double> Box(int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<double> out;
  for (int64_t i = r0; i < r0 + nr; ++i) {
    for (int64_t j = c0; j < c0 + nc; ++j) out.push_back(Value(i, j));
  }
  return out;
}

int rank = 0, size = 1;
int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d of %d: FAILED: %s\n", rank, size,
                 what.c_str());
    ++failures;
  }
}

std::string Loader(int r) {
  return "loader-position-of-rank-" + std::to_string(r);
}

int Save(const std::string& dir, ckpt::Communicator& comm) {
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  auto mgr = ckpt::CheckpointManager::Open(dir, {.communicator = &comm});
  Check(mgr.ok(), "open: " + mgr.status().ToString());
  if (!mgr.ok()) return 1;
  const int64_t rows = kRows / size;
  std::vector<double> piece = Box(rank * rows, rows, 0, kCols);
  std::vector<float> bias(kCols, 0.5f);
  ckpt::State state;
  state
      .AddTensorPiece("weights", {kRows, kCols}, {rank * rows, 0},
                      ckpt::View(std::span<double>(piece), {rows, kCols}))
      .AddTensor("bias", ckpt::View(bias))
      .AddRankLocalBlob("loader", Loader(rank));
  auto saved = (*mgr)->Save(1, state, {.epoch = 0});
  Check(saved.ok(), "save: " + saved.status().ToString());
  if (saved.ok()) {
    Check(saved->info.world_size == size, "world size in the manifest");
    Check(saved->info.hosts.size() == static_cast<size_t>(size),
          "one host name per rank");
  }
  return 0;
}

// Bulk bytes straight into the caller's memory (SendRecvInto, BroadcastInto:
// a read-once load's chunks): around the ring and from rank 1, each byte
// where it belongs; a message of another size than the receiver expects is
// DataLoss, and the next message between the two ranks still arrives whole.
void BulkBytes(ckpt::Communicator& comm) {
  const auto fill = [](int from, size_t n) {
    std::vector<std::byte> v(n);
    for (size_t i = 0; i < n; ++i) {
      v[i] = static_cast<std::byte>((from * 131 + i * 7) & 0xff);
    }
    return v;
  };
  const int next = (rank + 1) % size, prev = (rank - 1 + size) % size;
  constexpr size_t kBytes = (size_t{3} << 20) + 5;
  const std::vector<std::byte> mine = fill(rank, kBytes);
  std::vector<std::byte> got(kBytes);
  ckpt::Status s = comm.SendRecvInto(mine, next, got, prev);
  Check(s.ok() && got == fill(prev, kBytes),
        "SendRecvInto around the ring: " + s.ToString());
  std::vector<std::byte> shorter(kBytes - 1);
  s = comm.SendRecvInto(mine, next, shorter, prev);
  Check(s.code() == ckpt::ErrorCode::kDataLoss,
        "SendRecvInto of an unexpected size: " + s.ToString());
  std::vector<std::byte> again(kBytes);
  s = comm.SendRecvInto(mine, next, again, prev);
  Check(s.ok() && again == fill(prev, kBytes),
        "SendRecvInto after one of an unexpected size: " + s.ToString());
  const int root = size > 1 ? 1 : 0;
  std::vector<std::byte> bytes =
      rank == root ? fill(root, kBytes) : std::vector<std::byte>(kBytes);
  s = comm.BroadcastInto(bytes, root);
  Check(s.ok() && bytes == fill(root, kBytes),
        "BroadcastInto: " + s.ToString());
}

int Load(const std::string& dir, int saved_ranks, ckpt::Communicator& comm) {
  BulkBytes(comm);
  auto mgr = ckpt::CheckpointManager::Open(
      dir, {.create = false, .communicator = &comm});
  Check(mgr.ok(), "open: " + mgr.status().ToString());
  if (!mgr.ok()) return 1;
  // A split unlike the saver's: by columns when that divides, else by rows
  // in the opposite order.
  int64_t r0 = 0, nr = kRows, c0 = 0, nc = kCols;
  if (kCols % size == 0) {
    nc = kCols / size;
    c0 = rank * nc;
  } else {
    nr = kRows / size;
    r0 = (size - 1 - rank) * nr;
  }
  std::vector<double> mine(nr * nc, -1);
  std::vector<float> bias(kCols, 0);
  ckpt::State state;
  state
      .AddTensorPiece("weights", {kRows, kCols}, {r0, c0},
                      ckpt::View(std::span<double>(mine), {nr, nc}))
      .AddTensor("bias", ckpt::View(bias));
  auto info = (*mgr)->Load(std::nullopt, state);
  Check(info.ok(), "load: " + info.status().ToString());
  Check(mine == Box(r0, nr, c0, nc), "resharded weights");
  Check(bias == std::vector<float>(kCols, 0.5f), "replicated bias");

  ckpt::State local;
  local.AddRankLocalBlob("loader", "");
  auto own = (*mgr)->Load(std::nullopt, local);
  if (saved_ranks == size) {
    Check(own.ok(), "rank-local load: " + own.status().ToString());
    Check(local.BlobString("loader").value_or("") == Loader(rank),
          "own rank-local value");
  } else {
    Check(own.status().code() == ckpt::ErrorCode::kFailedPrecondition,
          "rank-local load at another world size must be refused");
    auto all = (*mgr)->LoadRankLocal(std::nullopt, "loader");
    Check(all.ok(), "LoadRankLocal: " + all.status().ToString());
    if (all.ok()) {
      Check(all->state.size() == static_cast<size_t>(saved_ranks),
            "one rank-local value per saving rank");
      for (int r = 0; r < saved_ranks; ++r) {
        Check(
            all->state.BlobString(std::to_string(r)).value_or("") == Loader(r),
            "rank-local value of rank " + std::to_string(r));
      }
    }
  }
  return 0;
}

// Fails every write of rank 1.
class BrokenStorage : public ckpt::StorageWrapper {
 public:
  using ckpt::StorageWrapper::StorageWrapper;
  ckpt::Result<std::unique_ptr<ckpt::WritableObject>> NewWritable(
      std::string_view key) override {
    return ckpt::IOError("write " + std::string(key) + ": device unplugged");
  }
};

int Fail(const std::string& dir, ckpt::Communicator& comm) {
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  auto storage = ckpt::OpenStorage(dir);
  Check(storage.ok(), "open storage");
  if (!storage.ok()) return 1;
  std::unique_ptr<ckpt::Storage> s = std::move(*storage);
  if (rank == 1) s = std::make_unique<BrokenStorage>(std::move(s));
  auto mgr =
      ckpt::CheckpointManager::Open(std::move(s), {.communicator = &comm});
  const int64_t rows = kRows / size;
  std::vector<double> piece = Box(rank * rows, rows, 0, kCols);
  ckpt::State state;
  state.AddTensorPiece("weights", {kRows, kCols}, {rank * rows, 0},
                       ckpt::View(std::span<double>(piece), {rows, kCols}));
  auto saved = (*mgr)->Save(9, state);
  Check(!saved.ok(), "a save with a broken rank must fail");
  const std::string message = saved.status().ToString();
  Check(message.find("rank 1") != std::string::npos &&
            message.find("device unplugged") != std::string::npos,
        "the error names the rank and the cause: " + message);
  // Every rank got the same error.
  auto all = comm.AllGather(message);
  for (const std::string& m : all.value()) {
    Check(m == message, "ranks disagree: " + m + " vs " + message);
  }
  auto latest = (*mgr)->Latest();
  Check(latest.ok() && !latest->has_value(), "nothing was committed");
  return 0;
}

// Rank 1 stays away from an all-gather for longer than the communicator's
// timeout: every other rank's fails with Unavailable within the timeout and
// a second of pings, naming rank 1 as the rank that does not answer, and
// their next call fails at once.
int Silent(double timeout, ckpt::Communicator& comm) {
  using Clock = std::chrono::steady_clock;
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>(2 * timeout + 1));
    (void)comm.AllGather("late");
    return 0;
  }
  const auto start = Clock::now();
  auto all = comm.AllGather("here");
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();
  const std::string why = all.ok() ? "" : all.status().message();
  Check(!all.ok() && all.status().code() == ckpt::ErrorCode::kUnavailable,
        "the all-gather without rank 1 failed with Unavailable: " +
            all.status().ToString());
  Check(why.find("rank 1 (") != std::string::npos &&
            why.find("does not answer a ping") != std::string::npos,
        "the error names rank 1 as not answering: " + why);
  Check(took >= timeout && took < timeout + 1 + 5,
        "it failed after the timeout, within a second of pings (took " +
            std::to_string(took) + " s)");
  const auto again = Clock::now();
  const ckpt::Status next = comm.Barrier();
  Check(!next.ok() && next.message() == why &&
            Clock::now() - again < std::chrono::milliseconds(100),
        "the next call fails at once with the same error: " + next.ToString());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  // CKPT_MPI_CHECK_TIMEOUT: the communicator's timeout (its timed calls).
  const char* timeout = std::getenv("CKPT_MPI_CHECK_TIMEOUT");
  auto comm = ckpt::NewMpiCommunicator(
      MPI_COMM_WORLD,
      {.timeout_seconds = timeout != nullptr ? std::atof(timeout) : 0});
  const std::string mode = argc > 2 ? argv[1] : "";
  int rc = 2;
  if (mode == "save") {
    rc = Save(argv[2], *comm);
  } else if (mode == "load" && argc > 3) {
    rc = Load(argv[2], std::atoi(argv[3]), *comm);
  } else if (mode == "fail") {
    rc = Fail(argv[2], *comm);
  } else if (mode == "silent" && timeout != nullptr && size > 1) {
    rc = Silent(std::atof(timeout), *comm);
  } else if (rank == 0) {
    std::fprintf(stderr,
                 "usage: mpi_check save|load N|fail DIR, or "
                 "CKPT_MPI_CHECK_TIMEOUT=S mpi_check silent -\n");
  }
  if (rc == 0 && failures > 0) rc = 1;
  // Any rank's failure fails the run.
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst == 0) {
    std::printf("mpi_check %s on %d ranks: ok\n", mode.c_str(), size);
  }
  MPI_Finalize();
  return worst;
}
