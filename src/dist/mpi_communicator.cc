#include "ckpt/mpi_communicator.h"

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

namespace ckpt {
namespace {

Status MpiError(int code, const char* what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return IOError(std::string("MPI ") + what + ": " + std::string(text, len));
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes, so they become Status values instead of
    // killing the job from inside a collective.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
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
    const int rc = MPI_Barrier(comm_);
    return rc == MPI_SUCCESS ? Status() : MpiError(rc, "barrier");
  }

  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
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
    constexpr int kTag = 0x636b;  // "ck"
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
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> NewMpiCommunicator(MPI_Comm comm) {
  return std::make_unique<MpiCommunicator>(comm);
}

}  // namespace ckpt
