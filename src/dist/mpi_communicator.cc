#include "ckpt/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ckpt {
namespace {

Status MpiError(int code, const char* what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return IOError(std::string("MPI ") + what + ": " + std::string(text, len));
}

using Clock = std::chrono::steady_clock;

constexpr int kTag = 0x636b;            // "ck": SendRecv's messages
constexpr int kCollectiveTag = 0x636c;  // the timed collectives' messages
// After a timeout: which ranks still answer (a rank waiting in a call
// answers pings, so one that does not is unreachable or stopped).
constexpr int kPingTag = 0x636d;
constexpr int kPongTag = 0x636e;
const char kPingByte = 'p';

// With a timeout, the calls go point to point with MPI_Isend and
// MPI_Irecv, and one that gives up at its deadline returns before MPI is
// done with what it posted: a late rank's message may come seconds later,
// or never. What keeps that from touching freed memory:
//
// - Each call's buffers (sizes, bytes received, and a copy of the bytes
//   sent) are on the heap, shared between the call and its operations
//   (Flight); on the way out it cancels what is still pending (Abandon).
// - What MPI cannot cancel (a send nobody took: Open MPI cancels no send;
//   a receive whose message is arriving) stays the communicator's, with
//   the buffers it uses, until MPI completes it (Sweep).
// - A communicator destroyed before MPI_Finalize frees those requests
//   (MPI completes them on its own) and hands their buffers to KeepForMpi:
//   nothing says when MPI is done with them, so they stay until the
//   process exits (the messages of one call at most, per communicator).
//   One destroyed after MPI_Finalize frees them: MPI touches no buffer
//   then.
// - After a timeout the communicator posts nothing again (every call fails
//   at once, Broken), so no later receive of its takes the late rank's
//   stale message for a new one. Those messages stay queued in MPI, under
//   ckpt's tags on the MPI communicator: a new ckpt communicator over the
//   same one would take them for its own, and must not be made
//   (include/ckpt/mpi_communicator.h).

// Buffers that a pending MPI operation may still use when their
// communicator goes: reachable (not leaked) until the process exits.
void KeepForMpi(std::shared_ptr<const void> buffers) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::shared_ptr<const void>>;
  std::lock_guard lock(mu);
  kept->push_back(std::move(buffers));
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const MpiCommunicatorOptions& options)
      : comm_(comm), timeout_seconds_(options.timeout_seconds) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes, so they become Status values instead of
    // killing the job from inside a collective.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    if (timeout_seconds_ > 0) GatherHosts();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string host_name() const override {
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS) {
      return Communicator::host_name();
    }
    return std::string(name, len);
  }

  Status Barrier() override {
    if (timeout_seconds_ > 0) return TimedAllGather("", "barrier").status();
    const int rc = MPI_Barrier(comm_);
    return rc == MPI_SUCCESS ? Status() : MpiError(rc, "barrier");
  }

  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    if (timeout_seconds_ > 0) return TimedAllGather(mine, "all-gather");
    // Sizes first, then the bytes; MPI counts are ints, so the total must
    // fit in one (plans and results are small: kilobytes per rank).
    long long my_size = static_cast<long long>(mine.size());
    std::vector<long long> sizes(size_);
    int rc = MPI_Allgather(&my_size, 1, MPI_LONG_LONG, sizes.data(), 1,
                           MPI_LONG_LONG, comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "all-gather of sizes");
    std::vector<int> counts(size_), displs(size_);
    long long total = 0;
    for (int r = 0; r < size_; ++r) {
      if (total + sizes[r] > INT_MAX) {
        return InvalidArgumentError(
            "MPI all-gather: more than 2 GiB in one collective");
      }
      counts[r] = static_cast<int>(sizes[r]);
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    std::string all(static_cast<size_t>(total), '\0');
    rc = MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR,
                        all.data(), counts.data(), displs.data(), MPI_CHAR,
                        comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "all-gather");
    std::vector<std::string> out(size_);
    for (int r = 0; r < size_; ++r) out[r] = all.substr(displs[r], counts[r]);
    return out;
  }

  Result<std::string> Broadcast(std::string_view data, int root) override {
    if (root < 0 || root >= size_) {
      return InvalidArgumentError("broadcast root " + std::to_string(root) +
                                  " out of range");
    }
    if (timeout_seconds_ > 0) return TimedBroadcast(data, root);
    long long n = rank_ == root ? static_cast<long long>(data.size()) : 0;
    int rc = MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "broadcast of the size");
    if (n > INT_MAX) {
      return InvalidArgumentError("MPI broadcast: more than 2 GiB");
    }
    std::string out = rank_ == root ? std::string(data)
                                    : std::string(static_cast<size_t>(n), '\0');
    rc = MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "broadcast");
    return out;
  }

  // The size first, then the bytes, each an MPI_Sendrecv (MPI_PROC_NULL
  // for a side that is -1), under a tag of ckpt's own. Messages are under
  // 2 GiB: ckpt sends blocks of a few MiB.
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    if (dest < -1 || dest >= size_ || source < -1 || source >= size_) {
      return InvalidArgumentError("send/receive rank out of range");
    }
    if (data.size() > INT_MAX) {
      return InvalidArgumentError("a point-to-point message over 2 GiB");
    }
    if (timeout_seconds_ > 0) return TimedSendRecv(data, dest, source);
    const int to = dest < 0 ? MPI_PROC_NULL : dest;
    const int from = source < 0 ? MPI_PROC_NULL : source;
    const long long n = static_cast<long long>(data.size());
    CKPT_ASSIGN_OR_RETURN(const long long m, SwapSizes(n, to, from));
    if (m < 0 || m > INT_MAX) {
      return DataLossError("MPI send/receive: rank " + std::to_string(source) +
                           " announced a message of " + std::to_string(m) +
                           " bytes");
    }
    std::string out(static_cast<size_t>(m), '\0');
    const int rc = MPI_Sendrecv(data.data(), static_cast<int>(n), MPI_CHAR, to,
                                kTag, out.data(), static_cast<int>(m), MPI_CHAR,
                                from, kTag, comm_, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "send/receive");
    return out;
  }

  // An untimed send/receive's first half: this side's size `n` to `to`,
  // the size `from` sends (0 where `from` is MPI_PROC_NULL).
  Result<long long> SwapSizes(long long n, int to, int from) {
    long long m = 0;
    const int rc =
        MPI_Sendrecv(&n, 1, MPI_LONG_LONG, to, kTag, &m, 1, MPI_LONG_LONG, from,
                     kTag, comm_, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "send/receive of a size");
    return m;
  }

  // Without a timeout, straight into the caller's memory (with one, as the
  // default: a late message must not land in memory the caller freed).
  Status SendRecvInto(std::span<const std::byte> data, int dest,
                      std::span<std::byte> into, int source) override {
    if (timeout_seconds_ > 0 || dest < -1 || dest >= size_ || source < -1 ||
        source >= size_ || data.size() > INT_MAX || into.size() > INT_MAX) {
      return Communicator::SendRecvInto(data, dest, into, source);
    }
    const int to = dest < 0 ? MPI_PROC_NULL : dest;
    const int from = source < 0 ? MPI_PROC_NULL : source;
    const long long n = static_cast<long long>(data.size());
    CKPT_ASSIGN_OR_RETURN(const long long m, SwapSizes(n, to, from));
    if (source >= 0 && m != static_cast<long long>(into.size())) {
      // The message still comes: taken and dropped, so the next one between
      // the two ranks is not mistaken for it.
      std::string dropped(m > 0 && m <= INT_MAX ? static_cast<size_t>(m) : 0,
                          '\0');
      // Its error, if any, is beside the point: the sizes disagreed.
      MPI_Sendrecv(data.data(), static_cast<int>(n), MPI_CHAR, to, kTag,
                   dropped.data(), static_cast<int>(dropped.size()), MPI_CHAR,
                   from, kTag, comm_, MPI_STATUS_IGNORE);
      return DataLossError("MPI send/receive: rank " + std::to_string(source) +
                           " sent " + std::to_string(m) + " bytes where " +
                           std::to_string(into.size()) + " were expected");
    }
    const int rc =
        MPI_Sendrecv(data.data(), static_cast<int>(n), MPI_CHAR, to, kTag,
                     into.data(), source >= 0 ? static_cast<int>(m) : 0,
                     MPI_CHAR, from, kTag, comm_, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? Status() : MpiError(rc, "send/receive");
  }

  Status BroadcastInto(std::span<std::byte> data, int root) override {
    if (timeout_seconds_ > 0 || root < 0 || root >= size_ ||
        data.size() > INT_MAX) {
      return Communicator::BroadcastInto(data, root);
    }
    long long n = rank_ == root ? static_cast<long long>(data.size()) : 0;
    int rc = MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "broadcast of the size");
    if (n != static_cast<long long>(data.size())) {
      std::string dropped(n > 0 && n <= INT_MAX ? static_cast<size_t>(n) : 0,
                          '\0');
      MPI_Bcast(dropped.data(), static_cast<int>(dropped.size()), MPI_CHAR,
                root, comm_);
      return DataLossError("MPI broadcast: rank " + std::to_string(root) +
                           " sent " + std::to_string(n) + " bytes where " +
                           std::to_string(data.size()) + " were expected");
    }
    rc = MPI_Bcast(data.data(), static_cast<int>(n), MPI_CHAR, root, comm_);
    return rc == MPI_SUCCESS ? Status() : MpiError(rc, "broadcast");
  }

  void Abort(Status why) override { MPI_Abort(comm_, 1); }

  // What a timed call left posted (see Flight) may still be pending. After
  // MPI_Finalize MPI reads and writes no buffer, so the orphans' buffers
  // simply go; before, MPI is left to complete the requests on its own,
  // and their buffers are kept for good (KeepForMpi).
  ~MpiCommunicator() override {
    if (orphans_.empty()) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    Sweep();
    for (Orphan& o : orphans_) {
      MPI_Request_free(&o.request);
      KeepForMpi(std::move(o.buffers));
    }
  }

 private:
  // One posted send or receive and the rank at its other end.
  struct Op {
    MPI_Request request = MPI_REQUEST_NULL;
    int peer = 0;
  };

  // An operation a timed call gave up on and MPI has not completed, with
  // the buffers it reads or writes.
  struct Orphan {
    MPI_Request request = MPI_REQUEST_NULL;
    std::shared_ptr<const void> buffers;
  };

  // One timed call's posted operations and the buffers they read and
  // write. A call that gives up at its deadline (or on an error) returns
  // with operations still posted: a receive from a rank that has not sent
  // yet, written whenever that rank's message comes (seconds later, or
  // never), and a send a rank has not taken, read whenever it does. So the
  // buffers are the call's, on the heap (a copy of the bytes sent too: the
  // caller may free its own as soon as the call returns), and whatever is
  // pending when the call returns, by any path, goes to Abandon with them.
  class Flight {
   public:
    Flight(MpiCommunicator& comm, std::shared_ptr<const void> buffers)
        : comm_(comm), buffers_(std::move(buffers)) {}
    ~Flight() { comm_.Abandon(ops, buffers_); }
    Flight(const Flight&) = delete;
    Flight& operator=(const Flight&) = delete;

    // Posts one operation with `peer` at its other end: `post` calls
    // MPI_Isend or MPI_Irecv with the request it is given.
    template <typename Post>
    Status Add(int peer, const char* what, Post post) {
      ops.push_back({MPI_REQUEST_NULL, peer});
      const int rc = post(&ops.back().request);
      if (rc == MPI_SUCCESS) return Status();
      ops.back().request = MPI_REQUEST_NULL;
      comm_.broken_ = MpiError(rc, what);
      return comm_.broken_;
    }

    std::vector<Op> ops;

   private:
    MpiCommunicator& comm_;
    std::shared_ptr<const void> buffers_;
  };

  // Cancels what a call left pending. A receive not yet matched is then
  // complete and done with its buffer. A receive whose message is arriving
  // cannot be cancelled, nor can a send in Open MPI (in MPI implementations
  // that can, the peer then never gets it, as if this rank had stopped):
  // those stay the communicator's, with their buffers, until MPI completes
  // them (Sweep, ~MpiCommunicator). MPI_Wait instead would wait on the
  // silent rank, which may be forever.
  void Abandon(std::vector<Op>& ops,
               const std::shared_ptr<const void>& buffers) {
    for (Op& op : ops) {
      if (op.request == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&op.request);
      int done = 0;
      MPI_Test(&op.request, &done, MPI_STATUS_IGNORE);
      if (done == 0 && op.request != MPI_REQUEST_NULL) {
        orphans_.push_back({op.request, buffers});
      }
      op.request = MPI_REQUEST_NULL;
    }
  }

  // Lets go of the orphans MPI has completed, and their buffers (each
  // goes with the last operation that uses it).
  void Sweep() {
    size_t kept = 0;
    for (size_t i = 0; i < orphans_.size(); ++i) {
      int done = 0;
      MPI_Test(&orphans_[i].request, &done, MPI_STATUS_IGNORE);
      if (done != 0 || orphans_[i].request == MPI_REQUEST_NULL) continue;
      if (kept != i) orphans_[kept] = std::move(orphans_[i]);
      ++kept;
    }
    orphans_.resize(kept);
  }

  // The error of the timed call that failed, for every later one: the
  // ranks' calls no longer pair up (a late rank's messages for the failed
  // call may still come, under the same tags as a new call's), so none
  // may post anything again.
  Status Broken() {
    Sweep();
    return broken_;
  }

  void GatherHosts() {
    std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
    std::string mine = host_name();
    mine.resize(MPI_MAX_PROCESSOR_NAME, '\0');
    if (MPI_Allgather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(),
                      MPI_MAX_PROCESSOR_NAME, MPI_CHAR, comm_) == MPI_SUCCESS) {
      for (int r = 0; r < size_; ++r) {
        hosts_.emplace_back(all.data() + r * MPI_MAX_PROCESSOR_NAME);
      }
    }
  }

  // "ranks 2, 3 (node1)": the ranks by host.
  std::string NameRanks(const std::vector<int>& ranks) const {
    std::map<std::string, std::vector<int>> by_host;
    for (int r : ranks) {
      by_host[r < static_cast<int>(hosts_.size()) ? hosts_[r] : "?"].push_back(
          r);
    }
    std::string out;
    for (const auto& [host, rs] : by_host) {
      if (!out.empty()) out += ", ";
      out += rs.size() == 1 ? "rank " : "ranks ";
      for (size_t i = 0; i < rs.size(); ++i) {
        out += (i ? ", " : "") + std::to_string(rs[i]);
      }
      out += " (" + host + ")";
    }
    return out;
  }

  // Waits until every op has completed or the call's deadline passed; then
  // every later call fails with the same error (Broken), and the caller's
  // Flight abandons what is still pending.
  Status Await(std::vector<Op>& ops, const char* what,
               Clock::time_point start) {
    const auto deadline =
        start + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(timeout_seconds_));
    for (;;) {
      AnswerPings();
      bool pending = false;
      for (Op& op : ops) {
        if (op.request == MPI_REQUEST_NULL) continue;
        int done = 0;
        const int rc = MPI_Test(&op.request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          broken_ = MpiError(rc, what);
          return broken_;
        }
        pending |= done == 0;
      }
      if (!pending) return Status();
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::vector<int> silent;
    for (const Op& op : ops) {
      if (op.request != MPI_REQUEST_NULL &&
          (silent.empty() || silent.back() != op.peer)) {
        silent.push_back(op.peer);
      }
    }
    std::sort(silent.begin(), silent.end());
    silent.erase(std::unique(silent.begin(), silent.end()), silent.end());
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%g", timeout_seconds_);
    // A silent rank may itself wait on another: the ranks that answer no
    // ping are the ones to look at.
    const std::vector<int> gone = Unanswered();
    broken_ = UnavailableError(
        "MPI " + std::string(what) + ": rank " + std::to_string(rank_) + " (" +
        (rank_ < static_cast<int>(hosts_.size()) ? hosts_[rank_] : "?") +
        ") heard nothing from " + NameRanks(silent) + " in " + seconds +
        " s (the timeout); " +
        (gone.empty() ? std::string("every rank answers a ping (waiting on "
                                    "another, or slow)")
                      : NameRanks(gone) + (gone.size() == 1 ? " does" : " do") +
                            " not answer a ping: unreachable or stopped"));
    return broken_;
  }

  // Answers the pings that have come in.
  void AnswerPings() {
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, comm_, &flag, &st) !=
              MPI_SUCCESS ||
          flag == 0) {
        return;
      }
      char byte = 0;
      MPI_Recv(&byte, 1, MPI_CHAR, st.MPI_SOURCE, kPingTag, comm_,
               MPI_STATUS_IGNORE);
      MPI_Request r;
      if (MPI_Isend(&kPingByte, 1, MPI_CHAR, st.MPI_SOURCE, kPongTag, comm_,
                    &r) == MPI_SUCCESS) {
        MPI_Request_free(&r);
      }
    }
  }

  // Pings every other rank; the ranks whose answer has not come within a
  // second (or the timeout, if shorter), answering theirs meanwhile.
  std::vector<int> Unanswered() {
    // The answers' bytes: a late answer is written after this returns.
    auto pongs = std::make_shared<std::vector<char>>(size_, 0);
    Flight flight(*this, pongs);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request ping;
      if (MPI_Isend(&kPingByte, 1, MPI_CHAR, r, kPingTag, comm_, &ping) ==
          MPI_SUCCESS) {
        MPI_Request_free(&ping);
      }
      (void)flight.Add(r, "ping", [&](MPI_Request* request) {
        return MPI_Irecv(&(*pongs)[r], 1, MPI_CHAR, r, kPongTag, comm_,
                         request);
      });
    }
    const auto deadline =
        Clock::now() +
        std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::min(timeout_seconds_, 1.0)));
    std::vector<int> out;
    for (;;) {
      AnswerPings();
      out.clear();
      for (Op& op : flight.ops) {
        int done = 1;
        if (op.request != MPI_REQUEST_NULL) {
          MPI_Test(&op.request, &done, MPI_STATUS_IGNORE);
        }
        if (done == 0) out.push_back(op.peer);
      }
      if (out.empty() || Clock::now() >= deadline) return out;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  // A timed all-gather's buffers (see Flight).
  struct GatherBuffers {
    long long my_size = 0;
    std::string mine;  // what the others receive
    std::vector<long long> sizes;
    std::vector<std::string> out;
  };

  // Every rank sends its bytes' size, then the bytes, to every other rank.
  Result<std::vector<std::string>> TimedAllGather(std::string_view mine,
                                                  const char* what) {
    if (!broken_.ok()) return Broken();
    const auto start = Clock::now();
    if (mine.size() > INT_MAX) {
      return InvalidArgumentError("MPI all-gather: more than 2 GiB");
    }
    auto b = std::make_shared<GatherBuffers>();
    b->my_size = static_cast<long long>(mine.size());
    b->mine = std::string(mine);
    b->sizes.assign(size_, 0);
    b->sizes[rank_] = b->my_size;
    b->out.resize(size_);
    Flight flight(*this, b);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      CKPT_RETURN_IF_ERROR(flight.Add(r, what, [&](MPI_Request* request) {
        return MPI_Isend(&b->my_size, 1, MPI_LONG_LONG, r, kCollectiveTag,
                         comm_, request);
      }));
      CKPT_RETURN_IF_ERROR(flight.Add(r, what, [&](MPI_Request* request) {
        return MPI_Irecv(&b->sizes[r], 1, MPI_LONG_LONG, r, kCollectiveTag,
                         comm_, request);
      }));
    }
    CKPT_RETURN_IF_ERROR(Await(flight.ops, what, start));
    flight.ops.clear();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const long long size = b->sizes[r];
      if (size < 0 || size > INT_MAX) {
        broken_ = DataLossError("MPI " + std::string(what) + ": rank " +
                                std::to_string(r) + " announced " +
                                std::to_string(size) + " bytes");
        return broken_;
      }
      b->out[r].resize(static_cast<size_t>(size));
      CKPT_RETURN_IF_ERROR(flight.Add(r, what, [&](MPI_Request* request) {
        return MPI_Isend(b->mine.data(), static_cast<int>(b->my_size), MPI_CHAR,
                         r, kCollectiveTag, comm_, request);
      }));
      CKPT_RETURN_IF_ERROR(flight.Add(r, what, [&](MPI_Request* request) {
        return MPI_Irecv(b->out[r].data(), static_cast<int>(size), MPI_CHAR, r,
                         kCollectiveTag, comm_, request);
      }));
    }
    CKPT_RETURN_IF_ERROR(Await(flight.ops, what, start));
    b->out[rank_] = std::move(b->mine);  // every send is done with it
    return std::move(b->out);
  }

  // A timed broadcast's or send/receive's buffers (see Flight): the sizes
  // sent and received, the bytes sent (a copy) and received.
  struct MessageBuffers {
    long long n = 0;
    long long m = 0;
    std::string data;
    std::string out;
  };

  // The root sends the size, then the bytes, to every other rank.
  Result<std::string> TimedBroadcast(std::string_view data, int root) {
    if (!broken_.ok()) return Broken();
    const auto start = Clock::now();
    const char* what = "broadcast";
    if (rank_ == root && data.size() > INT_MAX) {
      return InvalidArgumentError("MPI broadcast: more than 2 GiB");
    }
    auto b = std::make_shared<MessageBuffers>();
    if (rank_ == root) b->n = static_cast<long long>(data.size());
    Flight flight(*this, b);
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r) {
      if (r == root || (rank_ != root && r != rank_)) continue;
      const int peer = rank_ == root ? r : root;
      peers.push_back(peer);
      CKPT_RETURN_IF_ERROR(flight.Add(peer, what, [&](MPI_Request* request) {
        return rank_ == root ? MPI_Isend(&b->n, 1, MPI_LONG_LONG, peer,
                                         kCollectiveTag, comm_, request)
                             : MPI_Irecv(&b->n, 1, MPI_LONG_LONG, peer,
                                         kCollectiveTag, comm_, request);
      }));
    }
    CKPT_RETURN_IF_ERROR(Await(flight.ops, what, start));
    flight.ops.clear();
    const long long n = b->n;
    if (n < 0 || n > INT_MAX) {
      broken_ = DataLossError("MPI broadcast: rank " + std::to_string(root) +
                              " announced " + std::to_string(n) + " bytes");
      return broken_;
    }
    b->out = rank_ == root ? std::string(data)
                           : std::string(static_cast<size_t>(n), '\0');
    for (int peer : peers) {
      CKPT_RETURN_IF_ERROR(flight.Add(peer, what, [&](MPI_Request* request) {
        return rank_ == root
                   ? MPI_Isend(b->out.data(), static_cast<int>(n), MPI_CHAR,
                               peer, kCollectiveTag, comm_, request)
                   : MPI_Irecv(b->out.data(), static_cast<int>(n), MPI_CHAR,
                               peer, kCollectiveTag, comm_, request);
      }));
    }
    CKPT_RETURN_IF_ERROR(Await(flight.ops, what, start));
    return std::move(b->out);
  }

  Result<std::string> TimedSendRecv(std::string_view data, int dest,
                                    int source) {
    if (!broken_.ok()) return Broken();
    const auto start = Clock::now();
    const char* what = "send/receive";
    auto b = std::make_shared<MessageBuffers>();
    b->n = static_cast<long long>(data.size());
    Flight flight(*this, b);
    if (dest >= 0) {
      CKPT_RETURN_IF_ERROR(flight.Add(dest, what, [&](MPI_Request* request) {
        return MPI_Isend(&b->n, 1, MPI_LONG_LONG, dest, kTag, comm_, request);
      }));
    }
    if (source >= 0) {
      CKPT_RETURN_IF_ERROR(flight.Add(source, what, [&](MPI_Request* request) {
        return MPI_Irecv(&b->m, 1, MPI_LONG_LONG, source, kTag, comm_, request);
      }));
    }
    CKPT_RETURN_IF_ERROR(Await(flight.ops, what, start));
    flight.ops.clear();
    const long long m = b->m;
    if (m < 0 || m > INT_MAX) {
      broken_ =
          DataLossError("MPI send/receive: rank " + std::to_string(source) +
                        " announced " + std::to_string(m) + " bytes");
      return broken_;
    }
    b->out.resize(static_cast<size_t>(m));
    if (dest >= 0) {
      // A copy: a rank that takes the message after a timeout here reads it
      // when the caller's may be gone (ckpt sends blocks of a few MiB).
      b->data = std::string(data);
      CKPT_RETURN_IF_ERROR(flight.Add(dest, what, [&](MPI_Request* request) {
        return MPI_Isend(b->data.data(), static_cast<int>(b->n), MPI_CHAR, dest,
                         kTag, comm_, request);
      }));
    }
    if (source >= 0) {
      CKPT_RETURN_IF_ERROR(flight.Add(source, what, [&](MPI_Request* request) {
        return MPI_Irecv(b->out.data(), static_cast<int>(m), MPI_CHAR, source,
                         kTag, comm_, request);
      }));
    }
    CKPT_RETURN_IF_ERROR(Await(flight.ops, what, start));
    return std::move(b->out);
  }

  MPI_Comm comm_;
  double timeout_seconds_ = 0;
  std::vector<std::string> hosts_;  // by rank, with a timeout
  Status broken_;                   // a timed call failed: every later one
  std::vector<Orphan> orphans_;     // see Abandon
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> NewMpiCommunicator(
    MPI_Comm comm, const MpiCommunicatorOptions& options) {
  return std::make_unique<MpiCommunicator>(comm, options);
}

}  // namespace ckpt
