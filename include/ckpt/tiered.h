// Tiers: save to node-local memory every few steps, copy each rank's share
// to peers on other nodes, persist to durable storage now and then, and
// resume from whichever tier has the newest complete step.
//
//   auto durable = ckpt::CheckpointManager::Open("s3://b/run42", opts).value();
//   auto tiers = ckpt::TieredManager::Open(*durable, {
//       .local_url = "file:///dev/shm/run42", .local_every_steps = 50,
//       .durable_every_steps = 1000}).value();
//   auto restored = tiers->Restore(state).value();  // newest of either tier
//   ... each step: tiers->SaveAsync(step, state) ...
//
// The local tier. Every rank saves its own share of the state (its pieces
// as whole tensors, the replicated tensors it holds, its rank-local
// entries) as an ordinary one-rank ckpt checkpoint in its node's local root,
// under r<rank>/ (same format, same commit, same checksums: `ckpt verify`
// reads it), and streams that checkpoint's objects to `replicas` ranks on
// other nodes through the communicator, which keep it under their own
// node's r<rank>/. Only when every rank's share and every replica is
// committed does each rank write the step's tier marker
// (r<rank>/tier-committed-<step>-w<world size>): a marker anywhere proves
// the step was complete everywhere, so a step without one is never resumed.
//
// The durable tier is an ordinary CheckpointManager: a step chosen for it is
// saved there by the same ranks with its own protocol, catalog and retention,
// from the same staged copy.
//
// Restore. Every rank lists its node's local root; the ranks agree on the
// newest marked step whose every share is on some node; a rank whose node
// lost its share fetches it from a peer that holds a replica. Unless the
// durable tier has a newer step (found by listing it: no object of the
// durable tier is read then), every rank loads its share from its own node.
// A different world size or split, or a share that fails its checksums on
// any rank, loads from the durable tier instead.
//
// What survives what: a process crash keeps the node's local tier (a
// file:///dev/shm root outlives the process); the loss of a node keeps
// every step whose shares are replicated on surviving nodes (replicas ≥ 1);
// the loss of every node keeps the durable tier only. docs/tiers.md.
//
// Threads. Like CheckpointManager: one call at a time; SaveAsync's work
// (local save, replication, durable save) runs on one background thread,
// which uses the communicator (MPI: MPI_THREAD_SERIALIZED), and every other
// call waits for it first.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/state.h"
#include "ckpt/status.h"
#include "ckpt/storage.h"

namespace ckpt {

struct TierOptions {
  // --- Where ----------------------------------------------------------------
  // The local tier's root on each node: file:///dev/shm/<job> (survives the
  // process, not the node) or a node-local disk; mem://NAME inside one
  // process. "{node}" in it is replaced by the node's index, for simulated
  // nodes on one machine. Required.
  std::string local_url = {};
  // Which node each rank is on, by rank (tests, or a launcher that knows
  // better). Empty: ranks with the same Communicator::host_name() share a
  // node, numbered in order of their lowest rank.
  std::vector<int> node_of_rank = {};

  // --- When -----------------------------------------------------------------
  // Save() writes the local tier at steps that are multiples of this (0:
  // never), and the durable tier at multiples of durable_every_steps (0:
  // only when TierSaveOptions::durable asks). Other steps are skipped.
  int64_t local_every_steps = 1;
  int64_t durable_every_steps = 0;

  // --- How much -------------------------------------------------------------
  // Marked steps each local root keeps (at least 1); older ones, and
  // unmarked ones older than the newest marked, are deleted after a step is
  // marked. The durable tier keeps what its own Options::retention says.
  int local_keep = 2;
  // Copies of each rank's share on other nodes (0: none, a node's loss then
  // loses the local tier). Needs at least replicas + 1 nodes.
  // kReplicasAuto (the default): what the job's nodes allow, 1 on several
  // nodes and 0 on one, with a note in the log (info) saying which.
  static constexpr int kReplicasAuto = -1;
  int replicas = kReplicasAuto;
  // Bytes per message of a replication or recovery transfer: what a
  // transfer holds in memory at once on each side.
  uint64_t transfer_block_bytes = uint64_t{8} << 20;
  // The most bytes per second this rank sends to its peers when it
  // replicates a local-tier step (0: as fast as the communicator goes), so
  // that replication leaves the network to training; recovery transfers are
  // never paced. Like the durable tier's budget (NewRateLimitedStorage),
  // a replication then takes at least its bytes ÷ the rate.
  double replication_bytes_per_second = 0;

  // --- Tests ----------------------------------------------------------------
  // Opens each root of the local tier (a wrapper that injects faults or
  // counts calls); default: OpenStorage(url).
  std::function<Result<std::unique_ptr<Storage>>(const std::string& url)>
      open_local = {};
};

enum class Tier { kNone, kLocal, kDurable };
const char* TierName(Tier tier);  // "none", "local", "durable"

struct TierSaveOptions {
  // Passed to the durable tier's save (epoch, metrics, metadata); the local
  // tier records the epoch too.
  SaveOptions save = {};
  // Save to the durable tier at this step whatever the interval says (a
  // final save, a preemption: the node is about to go away).
  bool durable = false;
  // Leave the durable tier alone at this step whatever the interval says
  // (a step saved there already, saved again locally with more progress).
  bool skip_durable = false;
};

struct TierSaveResult {
  int64_t step = -1;
  bool skipped = false;  // no tier was due at this step
  // Local tier: every rank's share and replica committed and the step
  // marked. When it failed, local_error says why (every rank the same);
  // the local tier is a cache, so its failure does not fail the save.
  bool local = false;
  std::string local_error;
  // Durable tier: committed (its failure fails the save).
  bool durable = false;
  SaveResult durable_result;
  uint64_t local_bytes = 0;       // this rank's share written locally
  uint64_t replicated_bytes = 0;  // this rank's share sent to its peers
  // Seconds of the background work: the local tier (save, replication,
  // marking, pruning) and the durable tier's save.
  double local_seconds = 0;
  double durable_seconds = 0;
};

struct TierRestoreResult {
  Tier tier = Tier::kNone;  // kNone: nothing to restore (a fresh start)
  int64_t step = -1;
  CheckpointInfo info;         // of the checkpoint it loaded
  uint64_t fetched_bytes = 0;  // this rank's share fetched from a peer
  int ranks_fetched = 0;       // ranks whose share came from a peer (all)
  // Why a newer local step was not used, when the durable tier was.
  std::string local_skipped;
  // The durable tier lists a committed checkpoint of `step` (by the listing
  // Restore makes anyway; none of its objects read): a restore from the
  // local tier need not save that step durably again.
  bool durable_has_step = false;
};

// The outcome of a SaveAsync. Copies share one outcome. Thread-safe.
class TierSaveHandle {
 public:
  TierSaveHandle() = default;
  bool Done() const;
  // Blocks until the save has ended; every call returns the same result.
  Result<TierSaveResult> Wait() const;

 private:
  friend class TieredManager;
  struct Shared;
  explicit TierSaveHandle(std::shared_ptr<Shared> shared)
      : shared_(std::move(shared)) {}
  std::shared_ptr<Shared> shared_;
};

// What one local root holds, for `ckpt ls` of a local tier.
struct LocalShareInfo {
  int rank = 0;  // whose share
  int64_t step = 0;
  bool marked = false;  // the tier committed this step
  int world_size = 0;   // 0 when not marked
  uint64_t bytes = 0;
};
// Every share in the local root at `url` (one node's), by rank then step.
Result<std::vector<LocalShareInfo>> ListLocalTier(const std::string& url);

class TieredManager {
 public:
  // `durable` is the durable tier (not owned; it must outlive this). Its
  // Options::communicator are the ranks (null: one process); all ranks
  // call Open together.
  static Result<std::unique_ptr<TieredManager>> Open(CheckpointManager& durable,
                                                     TierOptions options);
  ~TieredManager();  // waits for the save in flight
  TieredManager(const TieredManager&) = delete;
  TieredManager& operator=(const TieredManager&) = delete;

  // Saves `state` as `step` to the tiers due at it; all ranks together.
  Result<TierSaveResult> Save(int64_t step, const State& state,
                              const TierSaveOptions& options = {});
  // The same, in the background: returns once the state is copied into
  // staging memory (kept and reused), after which the caller may change it.
  TierSaveHandle SaveAsync(int64_t step, const State& state,
                           const TierSaveOptions& options = {});
  // Loads the newest step complete in either tier into `state` (as
  // CheckpointManager::Load does); all ranks together, after waiting for
  // the save in flight.
  Result<TierRestoreResult> Restore(State& state,
                                    const LoadOptions& options = {});

  // This rank's node (as the tiers see it) and its local root's URL.
  int node() const;
  const std::string& local_url() const;
  CheckpointManager& durable();

 private:
  class Impl;
  explicit TieredManager(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ckpt
