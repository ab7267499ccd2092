// N ranks as threads of one process: the many-rank protocol, deterministic
// and fast, without MPI. Every collective is a rendezvous of all N threads
// on a shared slot table; the last thread to arrive publishes the results
// and starts the next round.
#include <deque>

#include "ckpt/communicator.h"
#include "util/mutex.h"

namespace ckpt {
namespace {

// Thread-safe: each rank's thread calls Exchange, any thread Abort.
class Group {
 public:
  explicit Group(int size)
      : size_(size), slots_(size), boxes_(static_cast<size_t>(size) * size) {}

  // Deposits `mine` for `rank` and returns every rank's deposit of the same
  // round. An aborted group fails every waiting and later call.
  Result<std::vector<std::string>> Exchange(int rank, std::string mine)
      EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    const uint64_t round = round_;
    slots_[rank] = std::move(mine);
    if (++arrived_ == size_) {
      result_ = std::move(slots_);
      slots_.assign(size_, std::string());
      arrived_ = 0;
      ++round_;
      round_done_.SignalAll();
    } else {
      while (round_ == round && aborted_.ok()) round_done_.Wait(&mu_);
      if (round_ == round) return aborted_;
    }
    // result_ stays valid until the next round completes, which needs this
    // thread to arrive again.
    return result_;
  }

  // Queues `data` from `from` to `to`. With `wait_for_room`, first waits
  // until the receiver has taken all but one earlier message (a plain send,
  // so a sender cannot run far ahead); a send paired with a receive never
  // waits, as MPI_Sendrecv does not, so a ring of them cannot deadlock.
  Status Send(int from, int to, std::string data, bool wait_for_room)
      EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    std::deque<std::string>& box = Box(from, to);
    while (wait_for_room && box.size() >= 2 && aborted_.ok()) {
      mail_.Wait(&mu_);
    }
    if (!aborted_.ok()) return aborted_;
    box.push_back(std::move(data));
    mail_.SignalAll();
    return Status();
  }

  // The next message from `from` to `to`, once there is one.
  Result<std::string> Receive(int from, int to) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    std::deque<std::string>& box = Box(from, to);
    while (box.empty() && aborted_.ok()) mail_.Wait(&mu_);
    if (!aborted_.ok()) return aborted_;
    std::string out = std::move(box.front());
    box.pop_front();
    mail_.SignalAll();
    return out;
  }

  void Abort(Status why) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (aborted_.ok()) aborted_ = std::move(why);
    round_done_.SignalAll();
    mail_.SignalAll();
  }

  int size() const { return size_; }

 private:
  std::deque<std::string>& Box(int from, int to) REQUIRES(mu_) {
    return boxes_[static_cast<size_t>(from) * size_ + to];
  }

  const int size_;
  Mutex mu_;
  CondVar mail_;  // a message was queued or taken, or the group was aborted
  CondVar round_done_;  // a round completed, or the group was aborted
  std::vector<std::string> slots_ GUARDED_BY(mu_);
  std::vector<std::string> result_ GUARDED_BY(mu_);
  int arrived_ GUARDED_BY(mu_) = 0;
  uint64_t round_ GUARDED_BY(mu_) = 0;
  Status aborted_ GUARDED_BY(mu_);
  // Point-to-point messages not yet received, by (sender, receiver).
  std::vector<std::deque<std::string>> boxes_ GUARDED_BY(mu_);
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  // Distinct per rank, so tests can see every rank's host in a manifest.
  std::string host_name() const override {
    return Communicator::host_name() + "/thread" + std::to_string(rank_);
  }

  Status Barrier() override { return group_->Exchange(rank_, {}).status(); }

  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    return group_->Exchange(rank_, std::string(mine));
  }

  Result<std::string> Broadcast(std::string_view data, int root) override {
    if (root < 0 || root >= size()) {
      return InvalidArgumentError("broadcast root " + std::to_string(root) +
                                  " out of range");
    }
    // Only the root's bytes travel.
    CKPT_ASSIGN_OR_RETURN(
        std::vector<std::string> all,
        group_->Exchange(rank_, rank_ == root ? std::string(data) : ""));
    return std::move(all[root]);
  }

  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    if (dest < -1 || dest >= size() || source < -1 || source >= size()) {
      return InvalidArgumentError("send/receive rank out of range");
    }
    if (dest >= 0) {
      CKPT_RETURN_IF_ERROR(group_->Send(rank_, dest, std::string(data),
                                        /*wait_for_room=*/source < 0));
    }
    if (source < 0) return std::string();
    return group_->Receive(source, rank_);
  }

  void Abort(Status why) override { group_->Abort(std::move(why)); }

 private:
  std::shared_ptr<Group> group_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> NewThreadCommunicators(int size) {
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < size; ++r) {
    out.push_back(std::make_unique<ThreadCommunicator>(group, r));
  }
  return out;
}

}  // namespace ckpt
