// Root ownership: one writer at a time on a root, through a lease object
// (docs/concurrency.md). Whoever mutates a root (a job's coordinator while it
// saves, Delete, GarbageCollect, `ckpt import`) holds the lease first; loads
// never take it.
//
// The lease is a sequence of generations, "LEASE-<12 digits>" at the root
// (format/layout.h), each written once with create-if-absent by the holder
// that won it and rewritten only by that holder (to renew or release it). The
// highest generation present is the current one:
//
//   1. Acquire: list the generations and read the highest. None: create
//      generation 1. Ours: held already. Otherwise it is free when released,
//      expired (its expiry has passed, or its content has not changed for a
//      whole lease period as this process's own clock sees it, which no
//      clock skew can fool), held by a process of this host that is gone
//      (same host name and boot id, pid not running; or this process, by a
//      holder that no longer exists), or broken on request. Free: create the
//      next generation with create-if-absent; of two takers exactly one wins,
//      and the loser starts over. Then list again: a listing that ran while
//      another party took over may have missed its new generation, and a
//      taker that finds a newer one than it created withdraws it and starts
//      over too. Not free: wait (up to the wait allowed) for
//      it to become free, then refuse with FailedPrecondition naming the
//      root, the holder (job, purpose, host, pid, since when, until when) and
//      how to proceed.
//   2. Renew: a thread rewrites the holder's generation with a new expiry
//      every third of the lease period. Finding a higher generation, it
//      stops: the lease was taken over.
//   3. Fence (Check): before a commit, and before a delete or a collection
//      removes anything, the holder checks that its generation is still the
//      highest and names it. A holder that was taken over commits and
//      deletes nothing. The common case needs no listing: its own
//      generation, still its own, and no generation above it.
//   4. Release: the holder rewrites its generation as released, so the next
//      party takes it at once; the winner of a later generation removes the
//      ones before the previous one (kept, so that a listing racing with a
//      takeover still sees a generation no older than the one it replaced),
//      lowest first.
//
// On a store that cannot create-if-absent atomically (some S3-compatible
// servers ignore If-None-Match), step 1 checks for the generation first and
// reads it back after writing; two takers racing within one round trip may
// both believe they won; the one whose record was overwritten fails its next
// fence, which narrows what that can cost to the round trip after a fence.
//
// Acquire and Release are called by one thread at a time (the manager's
// turn); Check and generation from any.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "ckpt/storage.h"
#include "format/lease_record.h"
#include "util/mutex.h"
#include "util/thread_annotations.h"

namespace ckpt {

struct LeaseSettings {
  // How long a lease lasts unless renewed; 0: no ownership (every Acquire
  // and Check succeeds and nothing is written).
  int64_t period_ms = 60'000;
  // How long Acquire waits for another holder's lease to become free.
  int64_t wait_ms = 0;
  // Take the lease whoever holds it (`--break-lease`): that holder's next
  // commit fails.
  bool break_lease = false;
  std::string job_id;
  // Wall clock in ms since 1970 (tests); default the system clock.
  std::function<int64_t()> now_unix_ms;
};

class RootLease {
 public:
  RootLease(Storage& storage, LeaseSettings settings);
  ~RootLease();  // releases
  RootLease(const RootLease&) = delete;
  RootLease& operator=(const RootLease&) = delete;

  bool enabled() const { return settings_.period_ms > 0; }

  // Step 1 for `purpose` ("save", "delete", "gc", "import"): OK once this
  // holder holds the lease (at once if it does already). `taken`, when
  // given, says whether it was taken now: the root may have changed since
  // this holder last looked. `wait` false: refused at once when another
  // party holds it, whatever the wait setting.
  Status Acquire(std::string_view purpose, bool* taken = nullptr,
                 bool wait = true) EXCLUDES(mu_);
  // Step 3: OK while this holder's generation is the current one.
  Status Check() EXCLUDES(mu_);
  // Step 4 (best effort: a failure leaves a lease that expires).
  void Release() EXCLUDES(mu_);

  // The generation held, or -1.
  int64_t generation() const EXCLUDES(mu_);

 private:
  struct Current {
    int64_t generation = -1;                    // -1: no lease object at all
    std::optional<format::LeaseRecord> record;  // unset: damaged
    Status damage;                              // why, when damaged
  };
  Result<Current> ReadCurrent() REQUIRES(mu_);
  // Why `current` is free to take, or nullopt while its holder may live.
  std::optional<std::string> FreeBecause(const Current& current) REQUIRES(mu_);
  // Creates `generation`; AlreadyExists when another party won it.
  Status Create(int64_t generation, std::string_view purpose) REQUIRES(mu_);
  // FailedPrecondition when taken over.
  Status Renew(bool only_if_due = false) REQUIRES(mu_);
  // Renew's write, after its check.
  Status Rewrite(bool only_if_due) REQUIRES(mu_);
  // True when, without listing the generations (a listing of the root,
  // which holds every checkpoint), this holder's is surely the newest;
  // false when only the listing can tell.
  bool NothingNewer() REQUIRES(mu_);
  void RenewLoop() EXCLUDES(mu_);
  void StopRenewing() EXCLUDES(mu_);
  std::string Describe(const Current& current) const;
  // The same, in the past tense, of a holder whose lease was taken over.
  std::string DescribeHolder(const Current& current) const;
  int64_t Now() const;

  Storage& storage_;
  const LeaseSettings settings_;
  const std::string owner_;  // this holder's id, in every record it writes
  mutable Mutex mu_;
  int64_t generation_ GUARDED_BY(mu_) = -1;
  // Why the lease was lost (taken over), once it was.
  Status lost_ GUARDED_BY(mu_);
  // The renewing thread found the lease taken over and no call has said so
  // yet: the next Acquire fails with lost_ (the fence's promise that the
  // holder's next commit fails) rather than start over.
  bool lost_untold_ GUARDED_BY(mu_) = false;
  format::LeaseRecord record_ GUARDED_BY(mu_);
  // Of a lease seen held by another: since when (steady clock) its content
  // has not changed.
  std::string watched_ GUARDED_BY(mu_);
  int64_t watched_since_ms_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  CondVar wake_;
  // Started by Acquire and joined by Release, which one thread at a time
  // calls.
  std::thread renewer_;
};

// The host identity a lease records: gethostname() and the boot id.
std::string LeaseHostName();
std::string LeaseBootId();

}  // namespace ckpt
