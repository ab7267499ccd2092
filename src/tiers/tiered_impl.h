// TieredManager's implementation, shared by the files of its mechanisms:
// tiered_manager.cc (opening, the local-tier save, replication, pruning)
// and tier_restore.cc (agreeing on the step, fetching shares, loading).
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/tiered.h"
#include "messages/messages.h"
#include "staging/staging.h"
#include "util/pacer.h"

namespace ckpt {

struct StagedLoad;  // checkpoint/load.h

// Why `state` cannot be filled from shares saved at another world size
// (an entry that is rank-local, or in device memory); OK if it can.
// tier_reshard.cc.
Status ReshardRefusal(const State& state);

// A bound on the rank numbers read from a local root's names, far above
// any job's world size: a stray folder cannot make a restore size a table
// by it.
inline constexpr int kMaxRanks = 1 << 24;

// "rank R: <error>" for the first rank that failed for a reason of its own
// (a full tier), rather than because a peer did (an aborted transfer);
// "" when no rank failed. Every rank gets the same answer. `errors`: every
// rank's outcome, as AllGatherStatus (messages.h) gathers them.
std::string FirstCause(const std::vector<Status>& errors);

class TieredManager::Impl {
 public:
  Impl(CheckpointManager& durable, TierOptions options)
      : durable_(durable), opt_(std::move(options)) {}

  ~Impl();

  Status Init();
  // `background`: the caller goes on while the save runs (SaveAsync); a
  // save's catalog calls then never hold the next call up.
  TierSaveHandle SaveAsync(int64_t step, const State& state,
                           const TierSaveOptions& options,
                           bool background = true);
  Result<TierRestoreResult> Restore(State& state, const LoadOptions& options);

  int node() const { return node_of_[rank_]; }
  const std::string& node_url() const { return node_url_; }
  CheckpointManager& durable() { return durable_; }

 private:
  Result<std::unique_ptr<Storage>> OpenLocal(const std::string& url) const {
    if (opt_.open_local) return opt_.open_local(url);
    return OpenStorage(url);
  }
  // Refuses two nodes whose local roots would be one (`where`: each rank's
  // place, as Init gathers them).
  Status CheckNodeRootsApart(const std::vector<NodePlace>& where) const;
  Result<CheckpointManager*> Root(int rank);
  Status ClearStep(CheckpointManager& root, int64_t step);
  // Removes every marker of `step` from this node's local root.
  Status ClearMarkers(int64_t step);
  // Writes the marker of `step`, committed by `world` ranks, into `root`.
  // A failure is a warning: other roots hold the step's marker too.
  void Mark(CheckpointManager& root, int64_t step, int world);
  // Copies the share of old rank `share` at `step` from rank `holder`,
  // whose node holds it, into rank `fetcher`'s node, and marks the copy for
  // `world` (the world that saved it). Every rank calls it in the same
  // order; only those two take part. The fetcher gets the outcome in
  // `received` and adds to `out.fetched_bytes`; the returned error (a
  // broken communicator) is every rank's. tier_restore.cc.
  Status FetchShare(int64_t step, int share, int holder, int fetcher, int world,
                    Status& received, TierRestoreResult& out);
  // Keeps the newest local_keep marked steps up to `saved` (the step just
  // marked) and removes the rest; returns the steps it deleted.
  std::vector<int64_t> Prune(CheckpointManager& root, int64_t saved,
                             bool collect_garbage);
  // The catalog rows of local steps, on rank 0 (tier_catalog.cc), made in
  // the durable manager's catalog batch of the save: a failure is a
  // warning, and the save waits for the catalog once at most.
  std::string LocalCatalogRoot() const;
  void RecordLocal(int64_t step, const TierSaveOptions& options,
                   uint64_t bytes);
  void ForgetLocal(const std::vector<int64_t>& steps);
  Result<TierSaveResult> RunSave(int64_t step, const TierSaveOptions& options,
                                 bool local, bool durable, bool background);
  Status LocalSave(int64_t step, const TierSaveOptions& options,
                   TierSaveResult& result);
  Result<NodeShares> ScanNode();
  // The two halves of loading this rank's own share of `step` from its
  // node (checked to be this job's, rank's, world size's and split's) into
  // `state` through `view` (empty): StageShare reads and checks it,
  // changing nothing of `state` (unless `options` stream), and ApplyShare
  // then writes it, once every rank's share is whole.
  Status StageShare(int64_t step, State& state, const LoadOptions& options,
                    State& view, StagedLoad& staged, TierRestoreResult& out);
  Status ApplyShare(State& view, StagedLoad& staged, State& state);
  // CheckpointManager::Load of `step` from the durable tier; on failure
  // `damaged` says whether the step is damaged (then an older one may load).
  Result<CheckpointInfo> LoadDurable(int64_t step, State& state,
                                     const LoadOptions& options, bool& damaged);
  Status LoadLocal(int64_t step, const std::vector<std::set<int>>& have,
                   State& state, const LoadOptions& options,
                   TierRestoreResult& out);
  // The same from a step saved by `old_world` ranks (tier_reshard.cc);
  // `have`: the nodes that hold each old rank's share.
  Status LoadLocalResharded(int64_t step, int old_world,
                            const std::map<int, std::set<int>>& have,
                            State& state, const LoadOptions& options,
                            TierRestoreResult& out);
  // The save in flight runs on one thread kept for the manager's life
  // (a thread per save would cost its start and exit in the next stall).
  void WaitInflight();
  void Submit(std::function<void()> job);

  CheckpointManager& durable_;
  const TierOptions opt_;
  std::unique_ptr<Communicator> own_comm_;
  Communicator* comm_ = nullptr;
  int rank_ = 0, world_ = 1;
  std::vector<int> node_of_;
  std::vector<std::string> hosts_;           // by rank
  std::vector<int> send_to_, receive_from_;  // by replica
  std::string node_url_;
  std::shared_ptr<Storage> node_;  // this node's local root
  std::string job_;  // the durable tier's URL, recorded in every share
  // Roots of this node's shares by rank: its own, and replicas it holds.
  std::map<int, std::unique_ptr<CheckpointManager>> roots_;
  std::unique_ptr<Pacer> replication_pacer_;  // null: unpaced
  StagingArena arena_;
  State staged_;
  std::mutex worker_mu_;
  std::condition_variable worker_cv_;
  std::function<void()> queued_;  // queued, not started
  bool busy_ = false;             // a job is queued or running
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace ckpt
