#include "ckpt/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
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
    long long n = static_cast<long long>(data.size());
    long long m = 0;
    int rc = MPI_Sendrecv(&n, 1, MPI_LONG_LONG, to, kTag, &m, 1, MPI_LONG_LONG,
                          from, kTag, comm_, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "send/receive of a size");
    if (m < 0 || m > INT_MAX) {
      return DataLossError("MPI send/receive: rank " + std::to_string(source) +
                           " announced a message of " + std::to_string(m) +
                           " bytes");
    }
    std::string out(static_cast<size_t>(m), '\0');
    rc = MPI_Sendrecv(data.data(), static_cast<int>(n), MPI_CHAR, to, kTag,
                      out.data(), static_cast<int>(m), MPI_CHAR, from, kTag,
                      comm_, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "send/receive");
    return out;
  }

  void Abort(Status why) override { MPI_Abort(comm_, 1); }

 private:
  // One posted send or receive and the rank at its other end.
  struct Op {
    MPI_Request request = MPI_REQUEST_NULL;
    int peer = 0;
  };

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

  Status Posted(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return Status();
    broken_ = MpiError(rc, what);
    return broken_;
  }

  // Waits until every op has completed or the call's deadline passed; then
  // every later call fails with the same error (their messages may still
  // be in flight, so the ranks' calls no longer pair up).
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
    pongs_.assign(size_, 0);
    std::vector<Op> ops;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      MPI_Request ping;
      if (MPI_Isend(&kPingByte, 1, MPI_CHAR, r, kPingTag, comm_, &ping) ==
          MPI_SUCCESS) {
        MPI_Request_free(&ping);
      }
      ops.push_back({MPI_REQUEST_NULL, r});
      MPI_Irecv(&pongs_[r], 1, MPI_CHAR, r, kPongTag, comm_,
                &ops.back().request);
    }
    const auto deadline =
        Clock::now() +
        std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(std::min(timeout_seconds_, 1.0)));
    std::vector<int> out;
    for (;;) {
      AnswerPings();
      out.clear();
      for (Op& op : ops) {
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

  // Every rank sends its bytes' size, then the bytes, to every other rank.
  Result<std::vector<std::string>> TimedAllGather(std::string_view mine,
                                                  const char* what) {
    if (!broken_.ok()) return broken_;
    const auto start = Clock::now();
    long long my_size = static_cast<long long>(mine.size());
    if (my_size > INT_MAX) {
      return InvalidArgumentError("MPI all-gather: more than 2 GiB");
    }
    std::vector<long long> sizes(size_, 0);
    sizes[rank_] = my_size;
    std::vector<Op> ops;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      ops.push_back({MPI_REQUEST_NULL, r});
      CKPT_RETURN_IF_ERROR(
          Posted(MPI_Isend(&my_size, 1, MPI_LONG_LONG, r, kCollectiveTag, comm_,
                           &ops.back().request),
                 what));
      ops.push_back({MPI_REQUEST_NULL, r});
      CKPT_RETURN_IF_ERROR(
          Posted(MPI_Irecv(&sizes[r], 1, MPI_LONG_LONG, r, kCollectiveTag,
                           comm_, &ops.back().request),
                 what));
    }
    CKPT_RETURN_IF_ERROR(Await(ops, what, start));
    std::vector<std::string> out(size_);
    out[rank_] = std::string(mine);
    ops.clear();
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (sizes[r] < 0 || sizes[r] > INT_MAX) {
        broken_ = DataLossError("MPI " + std::string(what) + ": rank " +
                                std::to_string(r) + " announced " +
                                std::to_string(sizes[r]) + " bytes");
        return broken_;
      }
      out[r].resize(static_cast<size_t>(sizes[r]));
      ops.push_back({MPI_REQUEST_NULL, r});
      CKPT_RETURN_IF_ERROR(
          Posted(MPI_Isend(mine.data(), static_cast<int>(my_size), MPI_CHAR, r,
                           kCollectiveTag, comm_, &ops.back().request),
                 what));
      ops.push_back({MPI_REQUEST_NULL, r});
      CKPT_RETURN_IF_ERROR(
          Posted(MPI_Irecv(out[r].data(), static_cast<int>(sizes[r]), MPI_CHAR,
                           r, kCollectiveTag, comm_, &ops.back().request),
                 what));
    }
    CKPT_RETURN_IF_ERROR(Await(ops, what, start));
    return out;
  }

  // The root sends the size, then the bytes, to every other rank.
  Result<std::string> TimedBroadcast(std::string_view data, int root) {
    if (!broken_.ok()) return broken_;
    const auto start = Clock::now();
    const char* what = "broadcast";
    long long n = static_cast<long long>(data.size());
    if (rank_ == root && n > INT_MAX) {
      return InvalidArgumentError("MPI broadcast: more than 2 GiB");
    }
    std::vector<Op> ops;
    for (int r = 0; r < size_; ++r) {
      if (r == root || (rank_ != root && r != rank_)) continue;
      const int peer = rank_ == root ? r : root;
      ops.push_back({MPI_REQUEST_NULL, peer});
      CKPT_RETURN_IF_ERROR(Posted(
          rank_ == root ? MPI_Isend(&n, 1, MPI_LONG_LONG, peer, kCollectiveTag,
                                    comm_, &ops.back().request)
                        : MPI_Irecv(&n, 1, MPI_LONG_LONG, peer, kCollectiveTag,
                                    comm_, &ops.back().request),
          what));
    }
    CKPT_RETURN_IF_ERROR(Await(ops, what, start));
    if (n < 0 || n > INT_MAX) {
      broken_ = DataLossError("MPI broadcast: rank " + std::to_string(root) +
                              " announced " + std::to_string(n) + " bytes");
      return broken_;
    }
    std::string out = rank_ == root ? std::string(data)
                                    : std::string(static_cast<size_t>(n), '\0');
    for (Op& op : ops) {
      CKPT_RETURN_IF_ERROR(
          Posted(rank_ == root
                     ? MPI_Isend(out.data(), static_cast<int>(n), MPI_CHAR,
                                 op.peer, kCollectiveTag, comm_, &op.request)
                     : MPI_Irecv(out.data(), static_cast<int>(n), MPI_CHAR,
                                 op.peer, kCollectiveTag, comm_, &op.request),
                 what));
    }
    CKPT_RETURN_IF_ERROR(Await(ops, what, start));
    return out;
  }

  Result<std::string> TimedSendRecv(std::string_view data, int dest,
                                    int source) {
    if (!broken_.ok()) return broken_;
    const auto start = Clock::now();
    const char* what = "send/receive";
    long long n = static_cast<long long>(data.size());
    long long m = 0;
    std::vector<Op> ops;
    if (dest >= 0) {
      ops.push_back({MPI_REQUEST_NULL, dest});
      CKPT_RETURN_IF_ERROR(Posted(MPI_Isend(&n, 1, MPI_LONG_LONG, dest, kTag,
                                            comm_, &ops.back().request),
                                  what));
    }
    if (source >= 0) {
      ops.push_back({MPI_REQUEST_NULL, source});
      CKPT_RETURN_IF_ERROR(Posted(MPI_Irecv(&m, 1, MPI_LONG_LONG, source, kTag,
                                            comm_, &ops.back().request),
                                  what));
    }
    CKPT_RETURN_IF_ERROR(Await(ops, what, start));
    if (m < 0 || m > INT_MAX) {
      broken_ =
          DataLossError("MPI send/receive: rank " + std::to_string(source) +
                        " announced " + std::to_string(m) + " bytes");
      return broken_;
    }
    std::string out(static_cast<size_t>(m), '\0');
    ops.clear();
    if (dest >= 0) {
      ops.push_back({MPI_REQUEST_NULL, dest});
      CKPT_RETURN_IF_ERROR(
          Posted(MPI_Isend(data.data(), static_cast<int>(n), MPI_CHAR, dest,
                           kTag, comm_, &ops.back().request),
                 what));
    }
    if (source >= 0) {
      ops.push_back({MPI_REQUEST_NULL, source});
      CKPT_RETURN_IF_ERROR(
          Posted(MPI_Irecv(out.data(), static_cast<int>(m), MPI_CHAR, source,
                           kTag, comm_, &ops.back().request),
                 what));
    }
    CKPT_RETURN_IF_ERROR(Await(ops, what, start));
    return out;
  }

  MPI_Comm comm_;
  double timeout_seconds_ = 0;
  std::vector<std::string> hosts_;  // by rank, with a timeout
  Status broken_;                   // a timed call failed: every later one
  std::vector<char> pongs_;  // the answers' bytes (kept: receives pending)
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> NewMpiCommunicator(
    MPI_Comm comm, const MpiCommunicatorOptions& options) {
  return std::make_unique<MpiCommunicator>(comm, options);
}

}  // namespace ckpt
