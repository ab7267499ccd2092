#include <unistd.h>

#include <climits>
#include <cstring>
#include <string>

#include "ckpt/communicator.h"

namespace ckpt {

std::string Communicator::host_name() const {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

Result<std::string> Communicator::SendRecv(std::string_view data, int dest,
                                           int source) {
  return UnavailableError(
      "this communicator cannot send from one rank to another (SendRecv), "
      "which tiers need");
}

namespace {

Status ExactSize(size_t got, size_t want, int from) {
  if (got == want) return Status();
  return DataLossError("rank " + std::to_string(from) + " sent " +
                       std::to_string(got) + " bytes where " +
                       std::to_string(want) + " were expected");
}

}  // namespace

Status Communicator::SendRecvInto(std::span<const std::byte> data, int dest,
                                  std::span<std::byte> into, int source) {
  CKPT_ASSIGN_OR_RETURN(
      std::string got,
      SendRecv(std::string_view(reinterpret_cast<const char*>(data.data()),
                                data.size()),
               dest, source));
  if (source < 0) return Status();
  CKPT_RETURN_IF_ERROR(ExactSize(got.size(), into.size(), source));
  if (!got.empty()) std::memcpy(into.data(), got.data(), got.size());
  return Status();
}

Status Communicator::BroadcastInto(std::span<std::byte> data, int root) {
  CKPT_ASSIGN_OR_RETURN(
      std::string got,
      Broadcast(std::string_view(reinterpret_cast<const char*>(data.data()),
                                 data.size()),
                root));
  if (rank() == root) return Status();
  CKPT_RETURN_IF_ERROR(ExactSize(got.size(), data.size(), root));
  if (!got.empty()) std::memcpy(data.data(), got.data(), got.size());
  return Status();
}

namespace {

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status Barrier() override { return Status(); }
  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    return std::vector<std::string>{std::string(mine)};
  }
  Result<std::string> Broadcast(std::string_view data, int root) override {
    if (root != 0) return InvalidArgumentError("broadcast root out of range");
    return std::string(data);
  }
  // Rank 0 talks only to itself: what it sends is what it receives.
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    if (dest > 0 || source > 0 || dest < -1 || source < -1) {
      return InvalidArgumentError("send/receive rank out of range");
    }
    if (source == -1) return std::string();
    if (dest == -1) {
      return FailedPreconditionError(
          "receive from rank 0 with nothing sent: it would wait forever");
    }
    return std::string(data);
  }
};

}  // namespace

std::unique_ptr<Communicator> NewLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace ckpt
