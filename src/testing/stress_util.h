// What the concurrency stress tests share (stress_test.cc runs the parties as
// processes on file:// and s3:// roots; stress_crash_test.cc runs them in one
// process over the crash-simulating storage): the eight operations, the root
// every trial starts from, how a trial picks its two parties, and the
// independent reader that judges what a trial left (Judge).
//
// Every step's content is testing::StepModel(step, 1), so the reader can
// recompute what any checkpoint must hold, bit for bit, whoever saved it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "testing/step_model.h"

namespace ckpt::testing::stress {

// Under a sanitizer every process runs several times slower: the tests run
// fewer trials by default.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// The operations of docs/concurrency.md's table that mutate a root. The
// saves are a party of their own (ckpt_stress_party); delete and gc are the
// ckpt CLI; retention is a save with keep_last.
enum class Op {
  kFull,         // a full save of a new, newest step
  kIncremental,  // an incremental save of a new, newest step
  kAsync,        // SaveAsync, then Wait
  kBelow,        // a save of a step below the newest (a rollback)
  kDelete,       // ckpt delete of a step nothing depends on
  kDeleteForce,  // ckpt delete --force of a step others depend on
  kGc,           // ckpt gc (dead attempts)
  kRetention,    // a save with keep_last, which deletes older steps
};
inline constexpr Op kAllOps[] = {Op::kFull,  Op::kIncremental, Op::kAsync,
                                 Op::kBelow, Op::kDelete,      Op::kDeleteForce,
                                 Op::kGc,    Op::kRetention};

inline const char* OpName(Op op) {
  switch (op) {
    case Op::kFull:
      return "full save";
    case Op::kIncremental:
      return "incremental save";
    case Op::kAsync:
      return "async save";
    case Op::kBelow:
      return "save below the newest";
    case Op::kDelete:
      return "delete";
    case Op::kDeleteForce:
      return "delete --force";
    case Op::kGc:
      return "gc";
    case Op::kRetention:
      return "save with retention";
  }
  return "?";
}

inline bool Saves(Op op) {
  return op != Op::kDelete && op != Op::kDeleteForce && op != Op::kGc;
}

// The root a trial starts from: steps 10 (full), 20 and 30 (incremental, so
// 10 and 20 have dependants), 40 (full), and a dead attempt of step 45 for
// gc to find.
inline constexpr int64_t kPrepared[] = {10, 20, 30, 40};
inline constexpr int kRetentionKeepLast = 2;

inline Options PartyOptions() {
  Options o;
  o.chunk_size = 4096;  // several chunks, so incremental saves refer
  return o;
}

// Saves the prepared steps into `storage` (not owned) and plants the dead
// attempt; the manager is gone (and its lease given back) when it returns.
inline Status Prepare(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(
      std::unique_ptr<CheckpointManager> mgr,
      CheckpointManager::Open(std::make_unique<StorageWrapper>(&storage),
                              PartyOptions()));
  for (int64_t step : kPrepared) {
    StepModel model(step, 1);
    CKPT_RETURN_IF_ERROR(mgr->Save(step, model.ForRank(0),
                                   {.incremental = step == 20 || step == 30})
                             .status());
  }
  mgr.reset();
  return storage.PutString(format::DataObjectKey(45, 0, "00000000deadbeef"),
                           std::string(5000, 'x'));
}

// One party's request.
struct Party {
  Op op = Op::kFull;
  int64_t step = -1;  // saved or deleted; -1 for gc
  bool incremental = false;
  int lease_wait = 0;  // seconds
};

// The two parties of a trial of `a` and `b`. Saves go to their own steps
// (a second save of the same kind to the same step or the next); deletes
// pick among the steps that fit them. With `wait`, each party waits for the
// lease up to 3 s with probability 1/2, else it is refused at once.
inline std::array<Party, 2> PickParties(Op a, Op b, std::mt19937_64& gen,
                                        bool wait) {
  auto pick = [&](Op op, bool second) {
    Party p;
    p.op = op;
    p.lease_wait = wait && gen() % 2 ? 3 : 0;
    switch (op) {
      case Op::kFull:
        p.step = 50;
        break;
      case Op::kIncremental:
        p.step = 60;
        p.incremental = true;
        break;
      case Op::kAsync:
        p.step = 70;
        p.incremental = gen() % 2;
        break;
      case Op::kBelow:
        p.step = 35;
        p.incremental = gen() % 2;
        break;
      case Op::kRetention:
        p.step = 80;
        p.incremental = gen() % 2;
        break;
      case Op::kDelete:  // nothing depends on 30 or 40
        p.step = gen() % 2 ? 30 : 40;
        break;
      case Op::kDeleteForce:  // 20 and 30 depend on 10, 30 on 20
        p.step = gen() % 2 ? 10 : 20;
        break;
      case Op::kGc:
        break;
    }
    if (second && Saves(op) && gen() % 2) ++p.step;
    return p;
  };
  const Party first = pick(a, false);
  return {first, pick(b, a == b)};
}

// How a party ended.
enum class End {
  kDone,    // it reported success
  kFailed,  // it reported failure (and must say why, clearly)
  kCut,     // SIGKILLed, or the power went while it ran: anything between
};

struct Outcome {
  Party party;
  End end = End::kFailed;
  std::vector<int64_t> deleted;  // by retention, when kDone
  std::string error;             // when kFailed
  // A save that succeeded although the power went during its retention:
  // that may have deleted steps it could no longer report.
  bool retention_cut = false;
};

// What kind of refusal `error` is, when it says clearly what happened and
// why; empty when it does not.
inline std::string ErrorKind(const std::string& error) {
  auto has = [&](const char* s) { return error.find(s) != std::string::npos; };
  if (has("FailedPrecondition") && has("another party owns the root")) {
    if (has("cannot be read")) return "lease unreadable";
    // Naming the holder: which process, where.
    return has("pid ") && has("host ") ? "root owned by the other party" : "";
  }
  if (has("FailedPrecondition") && has("taken over")) return "taken over";
  if (has("FailedPrecondition") &&
      (has("depend on it") || has("depends on it"))) {
    return "dependants";
  }
  if (has("AlreadyExists")) return "step already committed";
  if (has("NotFound") && has("not a committed checkpoint")) {
    return "step already deleted";
  }
  if (has("FailedPrecondition")) return "FailedPrecondition";
  return "";
}

// What the reader found.
struct Judgement {
  std::vector<std::string> problems;
  int lost = 0;  // committed, not deleted by a successful request, and gone
  std::set<int64_t> listed;
};

// `reader` is a fresh manager on the root, opened after every party has
// ended. Holds the root to the promises of docs/concurrency.md:
//   - every step committed (prepared, or reported by a save) that no
//     successful (or cut) delete or retention removed is listed, complete,
//     verifies and loads bit-identical;
//   - every listed step is one somebody saved, complete, and loads
//     bit-identical;
//   - a step a successful delete or retention removed stays gone;
//   - every failed party said clearly why (ErrorKind); and where the store
//     creates objects atomically only if absent (`atomic_create`), none
//     found its lease taken over: nobody breaks a lease or stalls past it
//     here, so that would mean that two parties held it at once.
inline Judgement Judge(CheckpointManager& reader,
                       const std::vector<Outcome>& outcomes,
                       bool atomic_create) {
  Judgement j;
  std::set<int64_t> known(std::begin(kPrepared), std::end(kPrepared));
  std::set<int64_t> committed = known;
  std::set<int64_t> may_go;     // a party may have deleted it
  std::set<int64_t> must_go;    // a party reported deleting it
  std::set<int64_t> saved_any;  // steps some party saved
  for (const Outcome& o : outcomes) {
    const Party& p = o.party;
    if (Saves(p.op)) {
      known.insert(p.step);
      saved_any.insert(p.step);
      if (o.end == End::kDone) committed.insert(p.step);
    }
    if (o.end == End::kFailed && ErrorKind(o.error).empty()) {
      j.problems.push_back(std::string(OpName(p.op)) +
                           " failed without a clear reason: " + o.error);
    }
    // Clear, but a lease is written whole or not at all, whoever is killed:
    // a store that left one torn broke its promise (include/ckpt/storage.h).
    if (o.end == End::kFailed && ErrorKind(o.error) == "lease unreadable") {
      j.problems.push_back(std::string(OpName(p.op)) +
                           " found a lease that a write left torn: " + o.error);
    }
    if (o.end == End::kFailed && atomic_create &&
        ErrorKind(o.error) == "taken over") {
      j.problems.push_back(
          std::string(OpName(p.op)) +
          " held the lease beside the other party: " + o.error);
    }
    if (p.op == Op::kDelete || p.op == Op::kDeleteForce) {
      if (o.end != End::kFailed) may_go.insert(p.step);
      if (o.end == End::kDone) must_go.insert(p.step);
    }
    if (p.op == Op::kRetention) {
      if (o.end == End::kDone) {
        may_go.insert(o.deleted.begin(), o.deleted.end());
        must_go.insert(o.deleted.begin(), o.deleted.end());
      }
    }
  }
  // Cut, a retention may have deleted any step but its own (it decides from
  // what it finds committed then).
  for (const Outcome& o : outcomes) {
    if (o.party.op == Op::kRetention &&
        (o.end == End::kCut || o.retention_cut)) {
      for (int64_t s : known) {
        if (s != o.party.step) may_go.insert(s);
      }
    }
  }

  Result<std::vector<CheckpointInfo>> list = reader.List();
  if (!list.ok()) {
    j.problems.push_back("list: " + list.status().ToString());
    return j;
  }
  for (const CheckpointInfo& c : *list) {
    const std::string step = "step " + std::to_string(c.step) + ": ";
    j.listed.insert(c.step);
    if (!known.count(c.step)) {
      j.problems.push_back(step + "listed, but nobody saved it");
    }
    if (!c.incomplete.empty()) {
      j.problems.push_back(step + "listed incomplete: " + c.incomplete);
    }
    if (must_go.count(c.step) && !saved_any.count(c.step)) {
      j.problems.push_back(step +
                           "a successful delete removed it, and it "
                           "is back");
    }
    Result<VerifyReport> report = reader.Verify(c.step);
    if (!report.ok()) {
      j.problems.push_back(step + "verify: " + report.status().ToString());
    } else if (!report->ok()) {
      j.problems.push_back(step + "verify: " + report->problems.front());
    }
    if (std::string diff = CheckStep(reader, c.step, 1); !diff.empty()) {
      j.problems.push_back(step + "does not load bit-identical: " + diff);
    }
  }
  for (int64_t s : committed) {
    if (!may_go.count(s) && !j.listed.count(s)) {
      ++j.lost;
      j.problems.push_back("step " + std::to_string(s) +
                           " was committed, nobody deleted it, and it is "
                           "LOST");
    }
  }
  return j;
}

}  // namespace ckpt::testing::stress
