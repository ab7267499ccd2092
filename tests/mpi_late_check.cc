// A late rank's messages after a timeout go nowhere the others use. Under
// mpirun with 3 ranks or more:
//
//   CKPT_MPI_CHECK_TIMEOUT=S mpi_late_check DIR
//
// Rank 1 stays away from four timed calls of the others, each on a ckpt
// communicator of its own (over an MPI_Comm_dup): an all-gather it leaves
// after the sizes (the others then wait with receives for its MiBs, and
// with sends of theirs), a broadcast from it, a send/receive with it and a
// send to it (left with the MiBs sent pending). Once every other rank's
// calls have failed, naming it, rank 1 sends what each call had posted a
// receive for, with the sizes it posted, then MiBs under every tag the
// communicator uses. Meanwhile the others save and load a state of their
// own (file://DIR/rank-N, no communicator), check it byte for byte, and
// call their failed communicators again, which fail at once with the same
// error. Under valgrind's memcheck, a late message written into memory a
// failed call let go of fails the run.
//
// Exits 0 when every check on every rank held; prints what failed otherwise.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ckpt/ckpt.h"
#include "ckpt/mpi_communicator.h"

namespace {

using Clock = std::chrono::steady_clock;

// The tags of ckpt's MPI communicator (src/dist/mpi_communicator.cc).
constexpr int kTag = 0x636b;            // send/receive
constexpr int kCollectiveTag = 0x636c;  // the timed collectives
constexpr int kPingTag = 0x636d;
constexpr int kPongTag = 0x636e;
// The test's own notices, on MPI_COMM_WORLD (no ckpt communicator uses it).
constexpr int kNoticeTag = 7;

constexpr int kLate = 1;
constexpr int kBig = 4 << 20;   // what rank 1 announces in the all-gather
constexpr int kMine = 2 << 20;  // what the others send it

int rank = 0, size = 1;
int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d of %d: FAILED: %s\n", rank, size,
                 what.c_str());
    ++failures;
  }
}

// One ckpt communicator over an MPI communicator of its own.
struct Timed {
  MPI_Comm mpi = MPI_COMM_NULL;
  std::unique_ptr<ckpt::Communicator> comm;
};

Timed NewTimed(double timeout) {
  Timed t;
  MPI_Comm_dup(MPI_COMM_WORLD, &t.mpi);
  t.comm = ckpt::NewMpiCommunicator(t.mpi, {.timeout_seconds = timeout});
  return t;
}

// A call without rank 1 fails with Unavailable, after the timeout and
// within a second of pings, naming it as not answering; its error.
std::string ExpectSilent(const ckpt::Status& status, Clock::time_point start,
                         double timeout, const std::string& what) {
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();
  Check(status.code() == ckpt::ErrorCode::kUnavailable,
        what + " without rank 1 fails with Unavailable: " + status.ToString());
  Check(
      status.message().find("rank 1 (") != std::string::npos &&
          status.message().find("does not answer a ping") != std::string::npos,
      what + ": the error names rank 1 as not answering: " + status.message());
  Check(took >= timeout && took < timeout + 1 + 5,
        what + " failed after the timeout, within a second of pings (took " +
            std::to_string(took) + " s)");
  return status.message();
}

// The next call fails at once, with the same error.
void ExpectBroken(ckpt::Communicator& comm, const std::string& why,
                  const std::string& what) {
  const auto start = Clock::now();
  const ckpt::Status next =
      comm.SendRecv(std::string(kMine, 'x'), kLate, kLate).status();
  Check(!next.ok() && next.message() == why &&
            Clock::now() - start < std::chrono::milliseconds(500),
        what + ": the next call fails at once with the same error: " +
            next.ToString());
}

// Lets MPI take in what has come (the late messages) in the middle of the
// local work.
void Progress() {
  int flag = 0;
  MPI_Iprobe(MPI_ANY_SOURCE, kNoticeTag + 1, MPI_COMM_WORLD, &flag,
             MPI_STATUS_IGNORE);
}

std::vector<unsigned char> Pattern(size_t n, int seed) {
  std::vector<unsigned char> out(n);
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<unsigned char>((i * 131 + seed * 7 + i / 4093) & 0xff);
  }
  return out;
}

// A save and a load of this rank's own, checked byte for byte.
void LocalWork(const std::string& dir) {
  const std::string root = dir + "/rank-" + std::to_string(rank);
  std::filesystem::remove_all(root);
  auto mgr = ckpt::CheckpointManager::Open("file://" + root);
  Check(mgr.ok(), "open " + root + ": " + mgr.status().ToString());
  if (!mgr.ok()) return;
  std::vector<unsigned char> weights = Pattern(3 << 20, rank);
  std::vector<unsigned char> bias = Pattern(4099, rank + 1);
  ckpt::State state;
  state.AddTensor("weights", ckpt::View(weights))
      .AddTensor("bias", ckpt::View(bias))
      .AddRankLocalBlob("position", "position-of-rank-" + std::to_string(rank));
  auto saved = (*mgr)->Save(1, state);
  Check(saved.ok(), "local save: " + saved.status().ToString());
  Progress();
  std::vector<unsigned char> w(weights.size(), 0), b(bias.size(), 0);
  ckpt::State back;
  back.AddTensor("weights", ckpt::View(w))
      .AddTensor("bias", ckpt::View(b))
      .AddRankLocalBlob("position", "");
  auto loaded = (*mgr)->Load(std::nullopt, back);
  Check(loaded.ok(), "local load: " + loaded.status().ToString());
  Progress();
  Check(std::memcmp(w.data(), weights.data(), w.size()) == 0 &&
            std::memcmp(b.data(), bias.data(), b.size()) == 0,
        "the loaded tensors are the saved ones, byte for byte");
  Check(back.BlobString("position").value_or("") ==
            "position-of-rank-" + std::to_string(rank),
        "the loaded blob is the saved one");
}

// Rank 1: its sides of the four calls, late.
void Late(Timed& gather, Timed& bcast, Timed& sendrecv, Timed& send) {
  // The all-gather's sizes, on time: the others then post receives of
  // kBig bytes for its bytes, which do not come in time.
  long long announced = kBig;
  std::vector<long long> theirs(size);
  std::vector<MPI_Request> sizes;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    sizes.emplace_back();
    MPI_Isend(&announced, 1, MPI_LONG_LONG, r, kCollectiveTag, gather.mpi,
              &sizes.back());
    sizes.emplace_back();
    MPI_Irecv(&theirs[r], 1, MPI_LONG_LONG, r, kCollectiveTag, gather.mpi,
              &sizes.back());
  }
  MPI_Waitall(static_cast<int>(sizes.size()), sizes.data(),
              MPI_STATUSES_IGNORE);
  for (int r = 0; r < size; ++r) {
    Check(r == rank || theirs[r] == kMine, "the others announce their bytes");
  }
  // Away until every other rank's four calls have failed.
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    char done = 0;
    MPI_Recv(&done, 1, MPI_CHAR, r, kNoticeTag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
  }
  // What the calls posted receives for, as large as those receives, then
  // MiBs under every tag.
  const std::vector<char> bytes(kBig, '\xee');
  const long long n = kBig;
  struct Message {
    MPI_Comm comm;
    int tag;
    const void* data;
    int count;
    MPI_Datatype type;
  };
  std::vector<Message> late;
  for (MPI_Comm c : {gather.mpi, bcast.mpi, sendrecv.mpi, send.mpi}) {
    if (c == gather.mpi) {
      late.push_back({c, kCollectiveTag, bytes.data(), kBig, MPI_CHAR});
    } else if (c == bcast.mpi) {
      late.push_back({c, kCollectiveTag, &n, 1, MPI_LONG_LONG});
      late.push_back({c, kCollectiveTag, bytes.data(), kBig, MPI_CHAR});
    } else if (c == sendrecv.mpi) {
      late.push_back({c, kTag, &n, 1, MPI_LONG_LONG});
      late.push_back({c, kTag, bytes.data(), kBig, MPI_CHAR});
    }
    late.push_back({c, kPongTag, bytes.data(), 1, MPI_CHAR});
    for (int tag : {kTag, kCollectiveTag, kPingTag, kPongTag}) {
      late.push_back({c, tag, &n, 1, MPI_LONG_LONG});
      late.push_back({c, tag, bytes.data(), kBig, MPI_CHAR});
    }
  }
  std::vector<MPI_Request> sent;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    for (const Message& m : late) {
      sent.emplace_back();
      MPI_Isend(m.data, m.count, m.type, r, m.tag, m.comm, &sent.back());
    }
    const char done = 1;
    MPI_Send(&done, 1, MPI_CHAR, r, kNoticeTag, MPI_COMM_WORLD);
  }
  // The others take none of the large ones: they stay pending. Wait for
  // the others' work, then let them go.
  MPI_Barrier(MPI_COMM_WORLD);
  for (MPI_Request& r : sent) MPI_Request_free(&r);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* seconds = std::getenv("CKPT_MPI_CHECK_TIMEOUT");
  const double timeout = seconds != nullptr ? std::atof(seconds) : 0;
  if (argc != 2 || timeout <= 0 || size < 2) {
    if (rank == 0) {
      std::fprintf(stderr,
                   "usage: CKPT_MPI_CHECK_TIMEOUT=S mpirun -np N (N >= 2) "
                   "mpi_late_check DIR\n");
    }
    MPI_Finalize();
    return 2;
  }
  const std::string dir = argv[1];
  // One communicator per call that fails: after a timeout a communicator
  // fails every call at once.
  Timed gather = NewTimed(timeout);
  Timed bcast = NewTimed(timeout);
  Timed sendrecv = NewTimed(timeout);
  Timed send = NewTimed(timeout);
  if (rank == kLate) {
    Late(gather, bcast, sendrecv, send);
  } else {
    auto start = Clock::now();
    auto all = gather.comm->AllGather(std::string(kMine, 'a' + rank));
    (void)ExpectSilent(all.status(), start, timeout, "all-gather");
    // Destroyed with its calls' leftovers pending, before the late
    // messages come.
    gather.comm.reset();
    start = Clock::now();
    auto got = bcast.comm->Broadcast("", kLate);
    const std::string bcast_why =
        ExpectSilent(got.status(), start, timeout, "broadcast");
    start = Clock::now();
    {
      // The caller's bytes go as soon as the call returns.
      const std::string mine(kMine, 's');
      got = sendrecv.comm->SendRecv(mine, kLate, kLate);
    }
    const std::string sendrecv_why =
        ExpectSilent(got.status(), start, timeout, "send/receive");
    start = Clock::now();
    {
      const std::string mine(kMine, 't');
      got = send.comm->SendRecv(mine, kLate, -1);
    }
    const std::string send_why =
        ExpectSilent(got.status(), start, timeout, "send");
    const char done = 1;
    MPI_Send(&done, 1, MPI_CHAR, kLate, kNoticeTag, MPI_COMM_WORLD);
    char sent = 0;
    MPI_Recv(&sent, 1, MPI_CHAR, kLate, kNoticeTag, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    // The late messages are in (or coming): local work goes on.
    LocalWork(dir);
    ExpectBroken(*bcast.comm, bcast_why, "broadcast");
    ExpectBroken(*sendrecv.comm, sendrecv_why, "send/receive");
    ExpectBroken(*send.comm, send_why, "send");
    // Destroyed after the late messages came, with MPI running.
    bcast.comm.reset();
    sendrecv.comm.reset();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  int rc = failures > 0 ? 1 : 0;
  int worst = rc;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst == 0) {
    std::printf("mpi_late_check on %d ranks: ok\n", size);
  }
  MPI_Finalize();
  // send.comm (its send to rank 1 still pending) goes after MPI_Finalize,
  // as a job's that outlives it.
  return worst;
}
