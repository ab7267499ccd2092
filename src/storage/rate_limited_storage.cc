// NewRateLimitedStorage: a wrapper that paces writes, and if asked reads,
// to a byte rate.
//
// Writes are paced as util/pacer.h does: a write waits until the budget has
// room for it, then goes; a Put, and a streamed write's Close, return only
// once the budget has let through every byte written (durable once the
// link has carried them, as with a slow store). Reads are paced as a link
// delivers them: a read takes its interval of the budget's timeline before it
// starts and returns no sooner than the interval's end, so a read of n bytes on
// an idle link takes n / rate, and readers on many threads (or processes) share
// the rate. Both kinds take their intervals from one timeline.
//
// The timeline is the time its last reservation ends. A wrapper's own is a
// mutex and a time point; a shared one (RateLimit::shared_file) is one
// 64-bit atomic in a file every sharer maps, advanced with compare and
// swap: the clock is CLOCK_MONOTONIC (steady_clock), which every process of
// the machine reads alike, whatever namespaces it runs in.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "ckpt/storage.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

// Reserves intervals of a timeline shared by everyone who paces with it.
class Budget {
 public:
  explicit Budget(double bytes_per_second) : rate_(bytes_per_second) {}
  virtual ~Budget() = default;

  // The interval [start, end) of `bytes` at the rate: start is the later
  // of now and the end of the last reservation.
  std::pair<Clock::time_point, Clock::time_point> Reserve(uint64_t bytes) {
    const auto length = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(bytes / rate_));
    const Clock::time_point start = Take(length);
    return {start, start + length};
  }

 protected:
  // Moves the timeline's end by `length` past the later of now and it;
  // returns where the new interval starts.
  virtual Clock::time_point Take(Clock::duration length) = 0;

 private:
  const double rate_;
};

class OwnBudget : public Budget {
 public:
  using Budget::Budget;

 protected:
  Clock::time_point Take(Clock::duration length) override {
    std::lock_guard<std::mutex> lock(mu_);
    const Clock::time_point start = std::max(Clock::now(), next_);
    next_ = start + length;
    return start;
  }

 private:
  std::mutex mu_;
  Clock::time_point next_{};
};

// The timeline in a mapped file: its end as steady_clock ticks since the
// clock's epoch. A lock-free std::atomic<int64_t> holds nothing but the
// value, so processes that map the same page share it.
class SharedBudget : public Budget {
 public:
  static_assert(std::atomic<int64_t>::is_always_lock_free);

  static Result<std::unique_ptr<Budget>> Open(const std::string& path,
                                              double bytes_per_second) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ErrnoError(errno, "opening pacing budget " + path);
    // A file just made is empty: growing it fills it with zeros, a
    // timeline that ended long ago. Growing one already grown does nothing.
    struct stat st {};
    if (::fstat(fd, &st) != 0 ||
        (st.st_size < kBytes && ::ftruncate(fd, kBytes) != 0)) {
      const Status s = ErrnoError(errno, "sizing pacing budget " + path);
      ::close(fd);
      return s;
    }
    void* p =
        ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      return ErrnoError(err, "mapping pacing budget " + path);
    return std::unique_ptr<Budget>(new SharedBudget(p, bytes_per_second));
  }

  ~SharedBudget() override { ::munmap(map_, kBytes); }

 protected:
  Clock::time_point Take(Clock::duration length) override {
    int64_t end = next_->load(std::memory_order_relaxed);
    for (;;) {
      const int64_t start =
          std::max<int64_t>(Clock::now().time_since_epoch().count(), end);
      if (next_->compare_exchange_weak(end, start + length.count(),
                                       std::memory_order_relaxed)) {
        return Clock::time_point(Clock::duration(start));
      }
    }
  }

 private:
  static constexpr off_t kBytes = sizeof(int64_t);

  SharedBudget(void* map, double bytes_per_second)
      : Budget(bytes_per_second),
        map_(map),
        next_(static_cast<std::atomic<int64_t>*>(map)) {}

  void* map_;
  std::atomic<int64_t>* next_;
};

class PacedWritable : public WritableObject {
 public:
  PacedWritable(std::unique_ptr<WritableObject> target, Budget* budget)
      : target_(std::move(target)), budget_(budget) {}
  Status Append(std::span<const std::byte> data) override {
    Wait(data.size());
    return target_->Append(data);
  }
  Status AppendRetained(std::span<const std::byte> data) override {
    Wait(data.size());
    return target_->AppendRetained(data);
  }
  // Durable once the link has carried every byte, as with a slow store.
  Status Close() override {
    std::this_thread::sleep_until(end_);
    return target_->Close();
  }
  uint64_t size() const override { return target_->size(); }
  bool KeepPrefix(uint64_t bytes) override {
    return target_->KeepPrefix(bytes);
  }
  Status RewritePrefix(std::span<const std::byte> bytes) override {
    Wait(bytes.size());
    return target_->RewritePrefix(bytes);
  }

 private:
  void Wait(uint64_t bytes) {
    const auto [start, end] = budget_->Reserve(bytes);
    end_ = end;
    std::this_thread::sleep_until(start);
  }

  std::unique_ptr<WritableObject> target_;
  Budget* budget_;
  Clock::time_point end_{};  // of the last reservation
};

class RateLimitedStorage : public StorageWrapper {
 public:
  RateLimitedStorage(std::unique_ptr<Storage> target,
                     std::unique_ptr<Budget> budget, bool reads)
      : StorageWrapper(std::move(target)),
        budget_(std::move(budget)),
        reads_(reads) {}

  StorageCapabilities capabilities() const override {
    StorageCapabilities caps = StorageWrapper::capabilities();
    // Paced reads are reads over a link, however near the bytes lie.
    if (reads_) caps.local_reads = false;
    return caps;
  }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> w,
                          StorageWrapper::NewWritable(key));
    return std::unique_ptr<WritableObject>(
        new PacedWritable(std::move(w), budget_.get()));
  }
  // Durable once the link has carried every byte.
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    std::this_thread::sleep_until(budget_->Reserve(data.size()).second);
    return StorageWrapper::Put(key, data, mode);
  }

  // ReadRangeFilling is not forwarded by StorageWrapper: it comes here.
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    if (!reads_) return StorageWrapper::ReadRange(key, offset, out);
    const Clock::time_point end = budget_->Reserve(out.size()).second;
    const Status s = StorageWrapper::ReadRange(key, offset, out);
    std::this_thread::sleep_until(end);
    return s;
  }
  // Its size is known once read: the interval is taken then, and the call
  // returns at its end.
  Result<std::string> ReadAll(std::string_view key) override {
    Result<std::string> r = StorageWrapper::ReadAll(key);
    if (reads_ && r.ok()) {
      std::this_thread::sleep_until(budget_->Reserve(r->size()).second);
    }
    return r;
  }

 private:
  std::unique_ptr<Budget> budget_;
  const bool reads_;
};

}  // namespace

std::unique_ptr<Storage> NewRateLimitedStorage(std::unique_ptr<Storage> target,
                                               double bytes_per_second) {
  if (!(bytes_per_second > 0)) return target;  // no limit
  return std::make_unique<RateLimitedStorage>(
      std::move(target), std::make_unique<OwnBudget>(bytes_per_second),
      /*reads=*/false);
}

Result<std::unique_ptr<Storage>> NewRateLimitedStorage(
    std::unique_ptr<Storage> target, const RateLimit& limit) {
  if (!(limit.bytes_per_second > 0)) return target;
  std::unique_ptr<Budget> budget;
  if (limit.shared_file.empty()) {
    budget = std::make_unique<OwnBudget>(limit.bytes_per_second);
  } else {
    CKPT_ASSIGN_OR_RETURN(
        budget, SharedBudget::Open(limit.shared_file, limit.bytes_per_second));
  }
  return std::unique_ptr<Storage>(std::make_unique<RateLimitedStorage>(
      std::move(target), std::move(budget), limit.reads));
}

}  // namespace ckpt
