#include "lease/lease.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>

#include "format/layout.h"
#include "util/log.h"
#include "util/names.h"

namespace ckpt {

using format::LeaseRecord;

namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// `ms` as seconds for a message: whole ones as such ("2 s"), else to a
// tenth ("0.5 s"), so that a wait of half a second is not "0 s".
std::string Seconds(int64_t ms) {
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  const int64_t tenths = (ms + 99) / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " s";
}

// A write refused for want of room (ENOSPC, EDQUOT): the storage layer's
// IOError carries the system's words for it.
bool OutOfRoom(const Status& s) {
  return s.code() == ErrorCode::kIOError &&
         (s.message().find(std::strerror(ENOSPC)) != std::string::npos ||
          s.message().find(std::strerror(EDQUOT)) != std::string::npos);
}

int64_t SystemMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The owners of the leases this process holds now: a record of this process
// whose owner is not among them was left by a holder that is gone (a
// manager destroyed without releasing, as a simulated crash leaves it).
Mutex live_mu;
std::set<std::string>& LiveOwners() REQUIRES(live_mu) {
  static std::set<std::string>* owners = new std::set<std::string>();
  return *owners;
}

// A process killed a moment ago lingers as a zombie until its parent (or,
// once the parent is gone too, init) reaps it: kill() still finds it, yet
// it holds nothing and never renews. A job restarted right after a kill
// must not wait out the lease of such a process.
bool ProcessRuns(int64_t pid) {
  if (pid <= 0 || pid > INT_MAX) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no procfs: trust kill()
  // "pid (comm) state ...": comm may hold spaces and parentheses.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  const char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

std::string When(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string LeaseHostName() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

std::string LeaseBootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

RootLease::RootLease(Storage& storage, LeaseSettings settings)
    : storage_(storage),
      settings_(std::move(settings)),
      owner_(format::NewAttemptId()) {}

RootLease::~RootLease() { Release(); }

int64_t RootLease::Now() const {
  return settings_.now_unix_ms ? settings_.now_unix_ms() : SystemMs();
}

int64_t RootLease::generation() const {
  MutexLock lock(&mu_);
  return generation_;
}

Result<RootLease::Current> RootLease::ReadCurrent() {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed,
                        storage_.List(format::LeasePrefix()));
  Current current;
  std::string key;
  for (const ObjectInfo& o : listed) {
    const int64_t g = format::ParseLeaseKey(o.key);
    if (g > current.generation) {
      current.generation = g;
      key = o.key;
    }
  }
  if (current.generation < 0) return current;
  Result<std::string> bytes = storage_.ReadAll(key);
  if (!bytes.ok()) {
    // Its winner removed it on taking a later generation: read again.
    if (bytes.status().code() == ErrorCode::kNotFound) return ReadCurrent();
    return bytes.status();
  }
  Result<LeaseRecord> record = format::DecodeLease(*bytes, key);
  if (record.ok()) {
    current.record = std::move(record).value();
  } else {
    current.damage = record.status();
  }
  return current;
}

bool RootLease::NothingNewer() {
  // A taker creates the generation one above the highest it listed, and
  // its listing always shows this holder's generation (which does not come
  // or go while it is listed): so the first generation newer than this
  // holder's is generation_ + 1. Only a later winner removes that one, and
  // winners remove generations lowest first, stopping at one they cannot
  // remove (Create): generation_ + 1 goes only after generation_ has. So
  // this holder's generation, present with its own record, and the next
  // one absent, means that none is newer; anything else is judged by the
  // listing.
  const Result<ObjectInfo> next =
      storage_.Stat(format::LeaseKey(generation_ + 1));
  if (next.ok() || next.status().code() != ErrorCode::kNotFound) return false;
  const std::string key = format::LeaseKey(generation_);
  const Result<std::string> bytes = storage_.ReadAll(key);
  if (!bytes.ok()) return false;
  const Result<LeaseRecord> record = format::DecodeLease(*bytes, key);
  return record.ok() && record->owner == owner_ && !record->released;
}

namespace {

// Whether `r` was written on this machine since its last boot: only then
// do its pid and owner name a process (and a holder) here.
bool ThisBoot(const LeaseRecord& r) {
  const std::string boot = LeaseBootId();
  return r.host == LeaseHostName() && !boot.empty() && r.boot_id == boot;
}

// Whether `owner` holds a lease in this process now.
bool LiveHere(const std::string& owner) {
  MutexLock lock(&live_mu);
  return LiveOwners().count(owner) > 0;
}

// Whether `r` is held by a live manager of this very process (another
// one than the caller: a manager that holds its own lease never asks).
bool HeldHere(const LeaseRecord& r) {
  return r.pid == getpid() && ThisBoot(r) && LiveHere(r.owner);
}

}  // namespace

std::optional<std::string> RootLease::FreeBecause(const Current& current) {
  if (!current.record) {
    if (settings_.break_lease) return "broken on request";
    return std::nullopt;
  }
  const LeaseRecord& r = *current.record;
  if (r.released) return "released";
  if (Now() > r.expires_unix_ms) return "expired at " + When(r.expires_unix_ms);
  if (ThisBoot(r)) {
    if (r.pid == getpid()) {
      if (!LiveHere(r.owner)) return "its holder in this process is gone";
    } else if (!ProcessRuns(r.pid)) {
      return "its process " + std::to_string(r.pid) + " is gone";
    }
  }
  // Judged by this process's own clock, which another host's cannot skew:
  // a holder that has not renewed for a whole period is gone or stuck.
  const std::string seen = std::to_string(current.generation) + "/" +
                           std::to_string(r.renewed_unix_ms);
  if (watched_ != seen) {
    watched_ = seen;
    watched_since_ms_ = SteadyMs();
  } else if (SteadyMs() - watched_since_ms_ > settings_.period_ms) {
    return "not renewed for " + std::to_string(settings_.period_ms / 1000) +
           " s";
  }
  if (settings_.break_lease) return "broken on request";
  return std::nullopt;
}

Status RootLease::Create(int64_t generation, std::string_view purpose) {
  const std::string key = format::LeaseKey(generation);
  LeaseRecord r;
  r.owner = owner_;
  r.job_id = settings_.job_id;
  r.purpose = std::string(purpose);
  r.host = LeaseHostName();
  r.boot_id = LeaseBootId();
  r.pid = getpid();
  r.started_unix_ms = r.renewed_unix_ms = Now();
  r.expires_unix_ms = r.started_unix_ms + settings_.period_ms;
  const std::string bytes = format::EncodeLease(r);
  if (storage_.capabilities().atomic_create_if_absent) {
    CKPT_RETURN_IF_ERROR(
        storage_.PutString(key, bytes, PutMode::kCreateIfAbsent));
  } else {
    // Check, write, read back: the best a store without an atomic create
    // allows (see the top of lease.h).
    if (storage_.Stat(key).ok()) return AlreadyExistsError(key);
    CKPT_RETURN_IF_ERROR(storage_.PutString(key, bytes));
    CKPT_ASSIGN_OR_RETURN(std::string back, storage_.ReadAll(key));
    if (back != bytes) return AlreadyExistsError(key);
  }
  // A listing is no snapshot: one that ran while another party took the
  // lease (creating one generation, deleting an older one) may have missed
  // both, and shown an older generation as the newest, or none at all; the
  // generation just created is then behind the current one. Listing again
  // settles it, since the newest generation is only deleted once a newer
  // one exists. Behind: withdraw it and start over.
  Result<std::vector<ObjectInfo>> listing =
      storage_.List(format::LeasePrefix());
  if (!listing.ok()) {
    // Unsure it won, it must not hold a generation that keeps others out.
    storage_.Delete(key).IgnoreError();
    return listing.status();
  }
  const std::vector<ObjectInfo>& listed = *listing;
  for (const ObjectInfo& o : listed) {
    if (format::ParseLeaseKey(o.key) > generation) {
      storage_.Delete(key).IgnoreError();
      return AlreadyExistsError(o.key);
    }
  }
  generation_ = generation;
  record_ = r;
  {
    MutexLock lock(&live_mu);
    LiveOwners().insert(owner_);
  }
  // The generations before the previous one are history now. The previous
  // one stays until the next takeover, so that a listing that runs while
  // this one is created still finds a generation no older than it. All of
  // those listed go, not a run down to the first gap: a holder that died
  // part-way through this left older ones behind. Lowest first (the listing
  // is sorted, the digits fixed), stopping at the first that cannot be
  // removed (the next taker's job then): so a generation goes only after
  // every lower one, which the fence's quick check relies on (NothingNewer).
  for (const ObjectInfo& o : listed) {
    const int64_t g = format::ParseLeaseKey(o.key);  // -1: not a generation
    if (g < 1 || g >= generation - 1) continue;
    const Status removed = storage_.Delete(o.key);
    if (!removed.ok() && removed.code() != ErrorCode::kNotFound) break;
  }
  return Status();
}

std::string RootLease::DescribeHolder(const Current& current) const {
  const LeaseRecord& r = *current.record;
  std::string s = "it was held";
  if (!r.job_id.empty()) s += " by job " + Quote(r.job_id);
  return s + " (" + r.purpose + ", host " + r.host + ", pid " +
         std::to_string(r.pid) + ") since " + When(r.started_unix_ms) +
         ", last renewed until " + When(r.expires_unix_ms);
}

std::string RootLease::Describe(const Current& current) const {
  if (!current.record) {
    return format::LeaseKey(current.generation) + " cannot be read (" +
           current.damage.ToString() + ")";
  }
  const LeaseRecord& r = *current.record;
  std::string s = "it is held";
  if (!r.job_id.empty()) s += " by job " + Quote(r.job_id);
  s += " (" + r.purpose + ", host " + r.host + ", pid " +
       std::to_string(r.pid) + ") since " + When(r.started_unix_ms) +
       ", renewed until " + When(r.expires_unix_ms);
  // Two managers of one root in one program wait for each other: said, as
  // the pid alone reads like another program's.
  if (HeldHere(r)) {
    s += "; that pid is this process: another manager of it holds the lease "
         "until it is closed";
  }
  return s;
}

Status RootLease::Acquire(std::string_view purpose, bool* taken, bool wait) {
  if (taken) *taken = false;
  if (!enabled()) return Status();
  MutexLock lock(&mu_);
  const std::string op =
      "take the lease of " + storage_.url() + " to " + std::string(purpose);
  // Held: the renewing thread keeps it, and the fence at commit finds out
  // if it was taken over. Taken over while this process held it, as the
  // renewing thread found: the commit (or deletion) this call is for fails,
  // as the fence's would have, so that a holder judged dead does not go on
  // as if nothing happened once the new holder is done. Lost and said so:
  // start over like anyone else.
  if (generation_ >= 0) return Status();
  if (lost_untold_) {
    lost_untold_ = false;
    return lost_.WithContext(op);
  }
  lost_ = Status();
  const int64_t wait_ms = wait ? settings_.wait_ms : 0;
  const int64_t deadline = SteadyMs() + wait_ms;
  bool told = false;
  bool made_room = false;
  while (true) {
    Result<Current> current = ReadCurrent();
    if (!current.ok()) return current.status().WithContext(op);
    if (current->record && current->record->owner == owner_ &&
        !current->record->released) {
      // Ours, from before a lost renewal: renew it.
      generation_ = current->generation;
      record_ = *current->record;
      CKPT_RETURN_IF_ERROR_CTX(Renew(), op);
      break;
    }
    std::optional<std::string> free =
        current->generation < 0 ? std::optional<std::string>("none yet")
                                : FreeBecause(*current);
    if (free) {
      Status s = Create(std::max<int64_t>(current->generation + 1, 1), purpose);
      if (s.ok()) {
        if (current->generation >= 1 && current->record &&
            !current->record->released) {
          // Said in the past tense: the holder is gone, and this process
          // holds the lease now (read after a restart, it must not look
          // like a refusal).
          const std::string gone =
              settings_.break_lease && *free == "broken on request"
                  ? "the previous holder's lease was broken on request"
                  : "the previous holder is gone (" + *free + ")";
          LogWarning(storage_.url() + ": this process now holds the lease (" +
                     format::LeaseKey(generation_) + ", to " +
                     std::string(purpose) + "); " + gone + ": " +
                     DescribeHolder(*current));
        }
        break;
      }
      if (s.code() == ErrorCode::kAlreadyExists) continue;  // another won
      if (OutOfRoom(s) && (purpose == "gc" || purpose == "delete")) {
        // gc and delete are how a full file system gets room back, and
        // they take the lease before deleting anything: the LATEST hint
        // (which no reader trusts, and which they write again when done)
        // makes room for it. A save or an import gains nothing by it: its
        // data would not fit either.
        if (!made_room && storage_.Delete(format::LatestKey()).ok()) {
          made_room = true;
          LogWarning(storage_.url() + ": no room for the lease (" +
                     s.message() +
                     "): removed the LATEST hint to make some; written "
                     "again once done");
          continue;
        }
        return IOError(op + ": " + s.message() +
                       ": the file system is full, and " +
                       std::string(purpose) +
                       " writes the root's lease (one small file) before "
                       "it deletes anything: free a little room there");
      }
      return s.WithContext(op);
    }
    const int64_t left = deadline - SteadyMs();
    if (left <= 0) {
      const std::string wait =
          wait_ms > 0 ? " after waiting " + Seconds(wait_ms) : "";
      // An unreadable lease names no holder and no expiry, so it never
      // frees itself: the advice says so rather than to wait.
      const bool here = current->record && HeldHere(*current->record);
      const std::string advice =
          here ? "Close that manager first (its lease goes with it), or save "
                 "through it"
          : current->record
              ? "Stop that process (a lease whose holder is gone frees "
                "itself once it expires), or take the lease by force "
                "(--break-lease, break_lease=True) if it is known dead: its "
                "next commit then fails"
              : "A lease that cannot be read never expires: if no process "
                "writes this root, take it by force (--break-lease, "
                "break_lease=True); a live holder's next commit then fails";
      return FailedPreconditionError(
          op + wait + ": another party owns the root: " + Describe(*current) +
          (here ? ". Only one manager may write a root at a time"
                : ". Only one process may write a root at a time") +
          "; loads are always allowed. " + advice);
    }
    if (!told) {
      LogWarning(op + ": waiting up to " + Seconds(left) + ": " +
                 Describe(*current));
      told = true;
    }
    wake_.WaitFor(&mu_,
                  std::chrono::milliseconds(std::min<int64_t>(left, 250)));
  }
  if (taken) *taken = true;
  stop_ = false;
  if (!renewer_.joinable()) renewer_ = std::thread([this] { RenewLoop(); });
  return Status();
}

Status RootLease::Renew(bool only_if_due) {
  Result<Current> current = ReadCurrent();
  if (!current.ok()) return current.status();
  if (current->generation != generation_ || !current->record ||
      current->record->owner != owner_) {
    const std::string lost = "the lease of " + storage_.url() +
                             " was taken over: " + Describe(*current);
    return FailedPreconditionError(lost);
  }
  return Rewrite(only_if_due);
}

Status RootLease::Rewrite(bool only_if_due) {
  const int64_t now = Now();
  if (only_if_due && now - record_.renewed_unix_ms < settings_.period_ms / 3) {
    return Status();
  }
  record_.renewed_unix_ms = now;
  record_.expires_unix_ms = record_.renewed_unix_ms + settings_.period_ms;
  return storage_.PutString(format::LeaseKey(generation_),
                            format::EncodeLease(record_));
}

Status RootLease::Check() {
  if (!enabled()) return Status();
  MutexLock lock(&mu_);
  if (generation_ < 0) {
    if (!lost_.ok()) {
      lost_untold_ = false;
      return lost_;
    }
    return FailedPreconditionError("the lease of " + storage_.url() +
                                   " is not held");
  }
  // Renewing on the way costs a write; the thread renews in time anyway,
  // so only a lease a third spent is rewritten here.
  if (NothingNewer()) return Rewrite(/*only_if_due=*/true);
  Status s = Renew(/*only_if_due=*/true);
  if (s.code() == ErrorCode::kFailedPrecondition) {
    lost_ = s;
    generation_ = -1;
  }
  return s;
}

void RootLease::RenewLoop() {
  // The process's signals (a preemption notice, SIGTERM) are for the
  // application's threads and handlers, never for this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  MutexLock lock(&mu_);
  while (!stop_) {
    wake_.WaitFor(&mu_, std::chrono::milliseconds(settings_.period_ms / 3));
    if (stop_ || generation_ < 0) continue;
    Status s = Renew();
    if (s.code() == ErrorCode::kFailedPrecondition) {
      LogWarning(s.message() + "; this process's next commit will fail");
      lost_ = s;
      lost_untold_ = true;
      generation_ = -1;
    } else if (!s.ok()) {
      LogWarning("renewing the lease of " + storage_.url() + ": " +
                 s.ToString());
    }
  }
}

void RootLease::StopRenewing() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    wake_.SignalAll();
  }
  if (renewer_.joinable()) renewer_.join();
}

void RootLease::Release() {
  if (!enabled()) return;
  StopRenewing();
  MutexLock lock(&mu_);
  {
    MutexLock live(&live_mu);
    LiveOwners().erase(owner_);
  }
  if (generation_ < 0) return;
  Result<Current> current = ReadCurrent();
  if (current.ok() && current->generation == generation_ && current->record &&
      current->record->owner == owner_) {
    record_.released = true;
    record_.renewed_unix_ms = Now();
    Status s = storage_.PutString(format::LeaseKey(generation_),
                                  format::EncodeLease(record_));
    if (!s.ok()) {
      LogWarning("releasing the lease of " + storage_.url() + ": " +
                 s.ToString() + " (it expires by itself)");
    }
  }
  generation_ = -1;
}

}  // namespace ckpt
