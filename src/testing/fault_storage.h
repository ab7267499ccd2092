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
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/storage.h"

namespace ckpt::testing {

class FaultStorage : public StorageWrapper {
 public:
  enum class Mode { kCrashBefore, kCrashAfter };

  explicit FaultStorage(Storage* target) : StorageWrapper(target) {}

  // Crash at operation `op` (0-based) in `mode`.
  void CrashAt(uint64_t op, Mode mode);
  // Fail operation `op` with `status`; later operations work.
  void FailOnce(uint64_t op, Status status);
  // Fail operation `op` and every later one with `status`.
  void FailFrom(uint64_t op, Status status);
  // A failed append writes half its bytes first.
  void set_short_writes(bool on) { short_writes_ = on; }
  // What each operation was ("put step-000000000002/MANIFEST.json"), in the
  // order they were numbered.
  std::vector<std::string> log() const;
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
              const std::function<void()>& partial = {});

 private:
  std::atomic<uint64_t> ops_{0};
  std::atomic<bool> crashed_{false};
  mutable std::mutex mu_;
  std::optional<uint64_t> crash_at_;  // guarded by mu_
  Mode mode_ = Mode::kCrashBefore;    // guarded by mu_
  std::optional<uint64_t> fail_at_;   // guarded by mu_
  bool fail_later_ = false;           // guarded by mu_
  Status fail_status_;                // guarded by mu_
  std::vector<std::string> log_;      // guarded by mu_
  std::atomic<bool> short_writes_{false};
};

}  // namespace ckpt::testing
