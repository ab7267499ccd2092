// A storage wrapper that simulates a power loss.
//
// It wraps any backend, remembers what was made durable, and on a simulated
// power loss rewrites the backend to hold exactly that (docs/reliability.md,
// "The durability model"). The model works at the level of Storage calls,
// because that is the promise every backend makes (ckpt/storage.h): the
// file:// backend does its temp file, fsync, rename and directory fsync
// inside one call.
//
//   - Put and WritableObject::Close are the durability points: the object
//     is durable once the call has returned OK.
//   - Delete is durable once it has returned OK.
//   - NewWritable and Append make nothing durable (nothing is visible under
//     the key until Close).
//   - A Put, Close or Delete that had begun but not returned OK when the
//     power went (in flight, failed, or cut off by the crash) may or may not
//     have taken effect: the power loss decides, call by call.
//   - Reads change nothing.
//
// Everything in the target when the wrapper was made counts as durable.
//
// CrashAt(n) cuts the power during mutating call n (0-based, counted across
// all threads): that call and every later call — reads too, the process is
// dead — fail without effect. Calls already running in other threads finish
// on the target, but their effect is uncertain and they report failure.
// PowerLoss() then rewrites the target to the durable state, resolving
// each uncertain call as the Damage asks.
//
// Thread-safe: the storage calls and CrashAt/Crash may come from any thread
// (PowerLoss, as it says, once they have stopped).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "util/mutex.h"

namespace ckpt::testing {

// What a power loss does to the calls whose effect is uncertain, and to
// writes that never finished.
struct Damage {
  enum class Uncertain {
    kDrop,    // none took effect
    kApply,   // all took effect
    kRandom,  // each took effect with probability 1/2
  };
  Uncertain uncertain = Uncertain::kRandom;
  // An uncertain Put or Close that takes effect leaves a torn object: its
  // tail zeroed, filled with garbage or cut off. This breaks the storage
  // contract (a device or file system that lies about fsync); ckpt must
  // still never trust what it cannot verify.
  bool torn = false;
  // Streamed writes that never finished leave their temp file behind, as
  // file:// does when a new directory entry was synced by a later fsync of
  // its directory: "<key>.ckpt-tmp-<hex>" holding a prefix of the bytes.
  // Only on a target that declares such names temporaries of `key`
  // (Storage::TemporaryOf); on others there are none to leave.
  bool strays = false;
  uint64_t seed = 0;
};

class CrashStorage : public StorageWrapper {
 public:
  // Reads the whole target: what is there now is durable.
  static Result<std::unique_ptr<CrashStorage>> Wrap(Storage* target);

  // Cuts the power during mutating call `op`.
  void CrashAt(uint64_t op) EXCLUDES(mu_);
  // Cuts the power now.
  void Crash();
  // Mutating calls (NewWritable, Append, Close, Put, Delete) begun so far.
  uint64_t operations() const { return ops_.load(); }
  bool crashed() const { return crashed_.load(); }

  // Rewrites the target to what survives the power loss. Call it once every
  // thread that used this storage has stopped. Returns how many uncertain
  // calls took effect.
  Result<int> PowerLoss(const Damage& damage) EXCLUDES(mu_);

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override;
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override;
  Status Delete(std::string_view key) override;
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override;
  Result<std::string> ReadAll(std::string_view key) override;
  Result<ObjectInfo> Stat(std::string_view key) override;
  Result<std::vector<ObjectInfo>> List(std::string_view prefix) override;

  // --- Used by the writable objects this storage hands out.
  // Starts mutating call `what`; returns its number, or the crash error.
  Result<uint64_t> Begin(std::string_view what) EXCLUDES(mu_);
  // Ends a call that could make `key` hold `value` (nullopt: deleted).
  // Returns `status`, or the crash error when the power went meanwhile.
  Status End(std::string_view key, std::optional<std::string> value,
             Status status) EXCLUDES(mu_);
  // `status`, or the crash error when the power went meanwhile.
  Status Alive(std::string_view what, Status status) const;
  // Records the bytes of a streamed write that never finished.
  void Unfinished(std::string key, std::string prefix) EXCLUDES(mu_);

 private:
  explicit CrashStorage(Storage* target) : StorageWrapper(target) {}
  Status Dead(std::string_view what) const;

  struct Event {
    bool durable;  // else uncertain
    std::string key;
    std::optional<std::string> value;
  };

  std::atomic<uint64_t> ops_{0};
  std::atomic<bool> crashed_{false};
  Mutex mu_;
  std::optional<uint64_t> crash_at_ GUARDED_BY(mu_);
  // The target's objects when it was wrapped (or at the last PowerLoss).
  std::map<std::string, std::string> start_ GUARDED_BY(mu_);
  // Every Put, Close and Delete since, in the order they returned.
  std::vector<Event> events_ GUARDED_BY(mu_);
  // Streamed writes dropped without a successful Close: key, bytes.
  std::vector<std::pair<std::string, std::string>> unfinished_ GUARDED_BY(mu_);
};

}  // namespace ckpt::testing
