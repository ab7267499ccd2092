#include <unistd.h>

#include <climits>

#include "ckpt/communicator.h"

namespace ckpt {

std::string Communicator::host_name() const {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
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
};

}  // namespace

std::unique_ptr<Communicator> NewLocalCommunicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace ckpt
