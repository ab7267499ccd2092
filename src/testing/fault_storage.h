// A storage wrapper that fails or "crashes" at a chosen call.
//
// Every mutating step a backend performs — starting a streamed object,
// appending to it, closing (publishing) it, a whole-object put, a delete —
// is one numbered operation. A test first counts the operations of a save,
// then replays the save crashing at each operation in turn:
//   - kCrashBefore: operation N and every later one fail without effect, as if
//     the process died just before N;
//   - kCrashAfter: operation N takes effect, then it and every later one
//     report failure, as if the process died just after N.
// A one-shot error (FailOnce) instead fails a single operation with a chosen
// status, to check that each error surfaces cleanly; FailFrom fails it and
// every later one (a disk that stays full). With short writes on, a failed
// append first hands the target half of its bytes, as a write(2) that stops
// part way does.
//
// Thread-safe: the storage calls and the setters may come from any thread;
// operations of concurrent threads are numbered in the order they start.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "util/mutex.h"

namespace ckpt::testing {

class FaultStorage : public StorageWrapper {
 public:
  enum class Mode { kCrashBefore, kCrashAfter };

  explicit FaultStorage(Storage* target) : StorageWrapper(target) {}

  // Crash at operation `op` (0-based) in `mode`.
  void CrashAt(uint64_t op, Mode mode) EXCLUDES(mu_);
  // Fail operation `op` with `status`; later operations work.
  void FailOnce(uint64_t op, Status status) EXCLUDES(mu_);
  // Fail operation `op` and every later one with `status`.
  void FailFrom(uint64_t op, Status status) EXCLUDES(mu_);
  // A failed append writes half its bytes first.
  void set_short_writes(bool on) { short_writes_ = on; }
  // What each operation was ("put step-000000000002/MANIFEST.json"), in the
  // order they were numbered.
  std::vector<std::string> log() const EXCLUDES(mu_);
  // Mutating operations seen so far.
  uint64_t operations() const { return ops_.load(); }
  bool crashed() const { return crashed_.load(); }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override;
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override;
  Status Delete(std::string_view key) override;

  // Runs `op` as operation number N (taking effect or not as configured).
  // `partial`, if given, is what an injected failure does first.
  template <typename F>
  Status Step(std::string_view what, F&& op,
              const std::function<void()>& partial = {}) EXCLUDES(mu_);

 private:
  std::atomic<uint64_t> ops_{0};
  std::atomic<bool> crashed_{false};
  mutable Mutex mu_;
  std::optional<uint64_t> crash_at_ GUARDED_BY(mu_);
  Mode mode_ GUARDED_BY(mu_) = Mode::kCrashBefore;
  std::optional<uint64_t> fail_at_ GUARDED_BY(mu_);
  bool fail_later_ GUARDED_BY(mu_) = false;
  Status fail_status_ GUARDED_BY(mu_);
  std::vector<std::string> log_ GUARDED_BY(mu_);
  std::atomic<bool> short_writes_{false};
};

}  // namespace ckpt::testing
