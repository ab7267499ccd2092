// TieredManager: the local tier (one-rank shares in node-local roots,
// replicated to peers) and the durable tier (a CheckpointManager), saved
// from one staged copy and restored from whichever has the newest complete
// step. ckpt/tiered.h states the promises; docs/tiers.md the layout.
//
// A local-tier save (every rank, on the background thread):
//   1. Save the rank's share as a one-rank checkpoint in its own root
//      r<rank>/ of its node (a leftover of an earlier attempt at the step
//      is deleted first).
//   2. For each replica j: stream the share to peer j (TransferStep) while
//      receiving peer j's source's share into this node's r<source>/.
//   3. All-gather every rank's outcome. Any failure: the step is not
//      committed on the local tier (no marker anywhere), every rank reports
//      the same error, and the previous marked step stays whole.
//   4. Write the marker tier-committed-<step>-w<W> into every root this rank
//      wrote for the step: from now on the step is restorable.
//   5. Prune each such root to the newest local_keep marked steps.
// Then, when the durable tier is due, the same staged state is saved there
// by its own protocol.
//
// Restore (every rank):
//   1. List the node's local root; all-gather which shares and markers each
//      node holds.
//   2. Pick the newest step with a marker for this world size whose every
//      share is on some node. Rank 0 lists the durable tier: if it has a
//      newer committed step, it wins; rank 0 broadcasts the choice.
//   3. Local: each rank whose node lacks its share fetches it from the
//      lowest rank of a node that holds a replica; each rank checks that its
//      share was saved for its rank, world size and boxes, and loads it.
//      All-gather the outcome; any failure loads the durable tier instead.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/manager_access.h"
#include "checkpoint/manifests.h"
#include "ckpt/catalog_sync.h"
#include "ckpt/tiered.h"
#include "format/layout.h"
#include "format/tier_layout.h"
#include "tiers/tier_share.h"
#include "tiers/tier_transfer.h"
#include "tiers/tiered_impl.h"
#include "util/log.h"

namespace ckpt {

using format::ManifestKey;

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kLocal:
      return "local";
    case Tier::kDurable:
      return "durable";
    case Tier::kNone:
      break;
  }
  return "none";
}

struct TierSaveHandle::Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Result<TierSaveResult> result = TierSaveResult{};
};

bool TierSaveHandle::Done() const {
  if (!shared_) return true;
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->done;
}

Result<TierSaveResult> TierSaveHandle::Wait() const {
  if (!shared_) return FailedPreconditionError("a handle of no save");
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->cv.wait(lock, [&] { return shared_->done; });
  return shared_->result;
}

std::string FirstCause(const std::vector<Status>& errors) {
  int first = -1;
  for (int r = 0; r < static_cast<int>(errors.size()); ++r) {
    if (errors[r].ok()) continue;
    if (errors[r].code() != ErrorCode::kAborted) {
      return "rank " + std::to_string(r) + ": " + errors[r].ToString();
    }
    if (first < 0) first = r;
  }
  return first < 0 ? ""
                   : "rank " + std::to_string(first) + ": " +
                         errors[first].ToString();
}

namespace {

// Whether one root is the other or lies inside it (a plain path and its
// file:// URL are the same root).
bool RootsOverlap(const std::string& first, const std::string& second) {
  const std::string x = CatalogRootUrl(first), y = CatalogRootUrl(second);
  std::string_view a = x, b = y;
  while (a.ends_with('/')) a.remove_suffix(1);
  while (b.ends_with('/')) b.remove_suffix(1);
  if (a.size() > b.size()) std::swap(a, b);
  return b.starts_with(a) && (b.size() == a.size() || b[a.size()] == '/');
}

}  // namespace

Status TieredManager::Impl::Init() {
  if (opt_.local_url.empty()) {
    return InvalidArgumentError("tiers: TierOptions::local_url is empty");
  }
  std::vector<std::string> bad;
  if (opt_.local_keep < 1) {
    bad.push_back("local_keep " + std::to_string(opt_.local_keep) +
                  " (at least 1)");
  }
  if (opt_.replicas < TierOptions::kReplicasAuto) {
    bad.push_back("replicas " + std::to_string(opt_.replicas) +
                  " (0 or more, or kReplicasAuto)");
  }
  if (opt_.local_every_steps < 0) {
    bad.push_back("local_every_steps " +
                  std::to_string(opt_.local_every_steps) + " (0 or more)");
  }
  if (opt_.durable_every_steps < 0) {
    bad.push_back("durable_every_steps " +
                  std::to_string(opt_.durable_every_steps) + " (0 or more)");
  }
  if (!(opt_.replication_bytes_per_second >= 0)) {
    bad.push_back("replication_bytes_per_second " +
                  std::to_string(opt_.replication_bytes_per_second) +
                  " (0 or more)");
  }
  if (!bad.empty()) {
    std::string list;
    for (const std::string& b : bad) list += (list.empty() ? "" : ", ") + b;
    return InvalidArgumentError("tiers: " + list);
  }
  if (opt_.replication_bytes_per_second > 0) {
    replication_pacer_ =
        std::make_unique<Pacer>(opt_.replication_bytes_per_second);
  }
  comm_ = durable_.options().communicator;
  if (!comm_) {
    own_comm_ = NewLocalCommunicator();
    comm_ = own_comm_.get();
  }
  rank_ = comm_->rank();
  world_ = comm_->size();
  job_ = durable_.storage().url();
  if (!opt_.node_of_rank.empty()) {
    if (static_cast<int>(opt_.node_of_rank.size()) != world_) {
      return InvalidArgumentError("tiers: node_of_rank names " +
                                  std::to_string(opt_.node_of_rank.size()) +
                                  " ranks of " + std::to_string(world_));
    }
    node_of_ = opt_.node_of_rank;
    for (int n : node_of_) {
      if (n < 0) return InvalidArgumentError("tiers: a negative node index");
    }
  }
  // Each rank's host name as the communicator gives it (which makes the
  // nodes), and the machine and process it really runs in (a thread
  // communicator names each rank's thread a host of its own), which tell
  // whether two nodes would share one local root.
  CKPT_ASSIGN_OR_RETURN(
      std::vector<std::string> gathered,
      comm_->AllGather(
          EncodeNodePlace({comm_->host_name(), comm_->Communicator::host_name(),
                           static_cast<int64_t>(getpid())})));
  std::vector<NodePlace> where;
  hosts_.clear();
  for (const std::string& bytes : gathered) {
    CKPT_ASSIGN_OR_RETURN(NodePlace place, DecodeNodePlace(bytes));
    hosts_.push_back(place.host);
    where.push_back(std::move(place));
  }
  if (opt_.node_of_rank.empty()) {
    std::map<std::string, int> index;
    for (const std::string& h : hosts_) {
      node_of_.push_back(
          index.emplace(h, static_cast<int>(index.size())).first->second);
    }
  }
  CKPT_RETURN_IF_ERROR(CheckNodeRootsApart(where));
  // Replicas go around the ranks ordered by node: a shift by the size of
  // the largest node lands on the next node for nodes of equal size.
  std::vector<int> order(world_);
  for (int r = 0; r < world_; ++r) order[r] = r;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return node_of_[a] < node_of_[b]; });
  std::map<int, int> per_node;
  for (int n : node_of_) ++per_node[n];
  int largest = 0;
  for (const auto& [n, count] : per_node) largest = std::max(largest, count);
  const int nodes = static_cast<int>(per_node.size());
  int replicas = opt_.replicas;
  if (replicas == TierOptions::kReplicasAuto) {
    // One copy on another node where there is one; on one node no copy can
    // survive the node's loss, and asking for one would fail every save.
    replicas = nodes > 1 ? 1 : 0;
    if (rank_ == 0) {
      LogInfo(nodes > 1
                  ? "tiers: replicas 1 (the default): each share is copied to "
                    "one other node of the job's " +
                        std::to_string(nodes) +
                        ", so the local tier survives the loss of one node"
                  : "tiers: replicas 0 (the default on one node): the job "
                    "runs on one node, so no share can be copied to "
                    "another; the local tier survives a crash of the "
                    "processes, not the node's loss (the durable tier "
                    "does)");
    }
  }
  if (replicas > nodes - 1) {
    return InvalidArgumentError(
        "tiers: " + std::to_string(replicas) + " replicas need " +
        std::to_string(replicas + 1) + " nodes; the job has " +
        std::to_string(nodes) +
        (nodes == 1 ? " (replicas 0 keeps the local tier on this node only: "
                      "it survives a crash of the processes, not the node's "
                      "loss)"
                    : ""));
  }
  std::vector<int> position(world_);
  for (int p = 0; p < world_; ++p) position[order[p]] = p;
  for (int j = 1; j <= replicas; ++j) {
    const int shift = (j * largest) % world_;
    for (int r = 0; r < world_; ++r) {
      const int to = order[(position[r] + shift) % world_];
      if (node_of_[to] == node_of_[r]) {
        return InvalidArgumentError(
            "tiers: replica " + std::to_string(j) + " of rank " +
            std::to_string(r) + " would land on its own node " +
            std::to_string(node_of_[r]) +
            " (nodes of unequal size); give node_of_rank or fewer replicas");
      }
    }
    send_to_.push_back(order[(position[rank_] + shift) % world_]);
    receive_from_.push_back(order[(position[rank_] - shift + world_) % world_]);
  }
  node_url_ = NodeRootUrl(opt_.local_url, node());
  // The local tier inside the durable root, or around it, would mix the two
  // tiers' objects: each tier's pruning and garbage collection would see
  // the other's as its own or as garbage. Refused before anything is made.
  Status mine;
  if (RootsOverlap(node_url_, durable_.storage().url())) {
    mine = InvalidArgumentError("the local root " + node_url_ +
                                " and the durable root " +
                                durable_.storage().url() +
                                " overlap: give the local tier a place of its "
                                "own");
  }
  // Every rank opens its node's root; all fail if one cannot, so that no
  // rank waits in a collective for one that gave up.
  if (mine.ok()) {
    Result<std::unique_ptr<Storage>> opened = OpenLocal(node_url_);
    mine = opened.status();
    if (opened.ok()) {
      node_ = std::move(*opened);
      mine = Root(rank_).status();
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<Status> all, AllGatherStatus(*comm_, mine));
  if (std::string why = FirstCause(all); !why.empty()) {
    return Status(
        mine.ok() ? ErrorCode::kAborted : mine.code(),
        "tiers: opening the local tier " + opt_.local_url + ", " + why);
  }
  return Status();
}

Status TieredManager::Impl::CheckNodeRootsApart(
    const std::vector<NodePlace>& where) const {
  // Two nodes whose local roots resolve to the same place (the same URL on
  // one machine; for mem://, in one process) would write each other's
  // shares and replicas, and every local save would fail confusingly. That
  // happens when node_of_rank simulates several nodes on one machine and
  // local_url has no {node}.
  const bool in_process = opt_.local_url.starts_with("mem://");
  std::map<std::pair<std::string, std::string>, int> node_at;
  for (int r = 0; r < world_; ++r) {
    // The machine, or for mem:// the machine and process.
    const std::string place =
        in_process ? where[r].machine + '\n' + std::to_string(where[r].pid)
                   : where[r].machine;
    const auto [it, fresh] = node_at.emplace(
        std::make_pair(place, NodeRootUrl(opt_.local_url, node_of_[r])), r);
    const int other = it->second;
    if (!fresh && node_of_[other] != node_of_[r]) {
      return InvalidArgumentError(
          "tiers: ranks " + std::to_string(other) + " and " +
          std::to_string(r) + " are on nodes " +
          std::to_string(node_of_[other]) + " and " +
          std::to_string(node_of_[r]) + " but on one machine (" +
          place.substr(0, place.find('\n')) +
          "), where both nodes' local root is " + it->first.second +
          ": put {node} in local_url so that each node has its own");
    }
  }
  return Status();
}

Result<CheckpointManager*> TieredManager::Impl::Root(int rank) {
  auto it = roots_.find(rank);
  if (it != roots_.end()) return it->second.get();
  const std::string url = ShareRootUrl(node_url_, rank);
  std::unique_ptr<Storage> storage = NewShareStorage(node_, rank);
  Options o;
  o.job_id = url;
  // The tiered manager is the only writer of its local roots; a share's
  // root changes hands with its rank (a replica is written by a peer).
  o.lease_seconds = 0;
  o.gc_after_save = true;
  o.chunk_size = durable_.options().chunk_size;
  o.metadata_layout = durable_.options().metadata_layout;
  o.io_threads = durable_.options().io_threads;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointManager> m,
                        CheckpointManager::Open(std::move(storage), o));
  CheckpointManager* out = m.get();
  roots_[rank] = std::move(m);
  return out;
}

Status TieredManager::Impl::ClearStep(CheckpointManager& root, int64_t step) {
  // Markers first: a step must never look committed while it is replaced.
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> markers,
                        root.storage().List(format::TierMarkerPrefix(step)));
  for (const ObjectInfo& m : markers) {
    CKPT_RETURN_IF_ERROR(root.storage().Delete(m.key));
  }
  if (!root.storage().Stat(ManifestKey(step)).ok()) return Status();
  Status s = root.Delete(step).status();
  return s.code() == ErrorCode::kNotFound ? Status() : s;
}

Status TieredManager::Impl::ClearMarkers(int64_t step) {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> keys, node_->List("r"));
  for (const ObjectInfo& o : keys) {
    int rank = 0;
    std::string_view rest;
    int64_t marked = 0;
    int w = 0;
    if (!format::SplitShareKey(o.key, &rank, &rest) ||
        !format::ParseTierMarkerKey(rest, &marked, &w) || marked != step) {
      continue;
    }
    // Ranks of one node clear the same root: one's delete may find the
    // marker gone already.
    if (Status s = node_->Delete(o.key);
        !s.ok() && s.code() != ErrorCode::kNotFound) {
      return s;
    }
  }
  return Status();
}

void TieredManager::Impl::Mark(CheckpointManager& root, int64_t step,
                               int world) {
  Status s = root.storage().Put(format::TierMarkerKey(step, world), {},
                                PutMode::kCreateIfAbsent);
  if (!s.ok() && s.code() != ErrorCode::kAlreadyExists) {
    // Other roots hold the step's marker too; one missing is no loss.
    LogWarning("tiers: marking step " + std::to_string(step) + " in " +
               root.storage().url() + ": " + s.ToString());
  }
}

std::vector<int64_t> TieredManager::Impl::Prune(CheckpointManager& root,
                                                int64_t saved,
                                                bool collect_garbage) {
  std::vector<int64_t> deleted;
  Result<std::vector<ObjectInfo>> listed =
      root.storage().List(format::kTierMarkerPrefix);
  if (!listed.ok()) return deleted;
  std::map<int64_t, std::string> marked;  // step -> marker key
  for (const ObjectInfo& o : *listed) {
    int64_t step = 0;
    int w = 0;
    if (format::ParseTierMarkerKey(o.key, &step, &w)) marked[step] = o.key;
  }
  // Steps above the one just saved are of a timeline the job has left: it
  // restored an older step (theirs were damaged, or are another job's in a
  // reused folder). Kept, they would count as the newest and evict every
  // save of this one, and a restore could pick them over its steps.
  std::vector<std::string> abandoned;
  for (auto it = marked.upper_bound(saved); it != marked.end();) {
    abandoned.push_back(it->second);
    it = marked.erase(it);
  }
  // Their markers first: from then on nothing restores them, whatever
  // becomes of their data below.
  for (const std::string& key : abandoned) {
    root.storage().Delete(key).IgnoreError();
  }
  if (marked.empty()) return deleted;
  auto kept = marked.rbegin();
  for (int i = 1; i < opt_.local_keep && std::next(kept) != marked.rend(); ++i)
    ++kept;
  const int64_t oldest_kept = kept->first;
  const int64_t newest = marked.rbegin()->first;
  // Every committed step by its manifest's key, not by reading the
  // manifests: a step whose manifest is damaged (one that a restore fell
  // back from) is no checkpoint to List, yet it is the local tier's to
  // remove, and would otherwise stay in memory and be warned about by every
  // later prune.
  Status failed;
  if (auto steps = ListManifests(root.storage()); steps.ok()) {
    for (const auto& [step, manifest] : *steps) {
      if (step < oldest_kept || step > saved ||
          (!marked.count(step) && step < newest)) {
        if (Status s = root.Delete(step).status(); !s.ok()) {
          failed = s;
        } else {
          deleted.push_back(step);
        }
      }
    }
  }
  for (const auto& [step, key] : marked) {
    if (step < oldest_kept) root.storage().Delete(key).IgnoreError();
  }
  if (collect_garbage) root.GarbageCollect().status().IgnoreError();
  if (!failed.ok()) {
    LogWarning("tiers: pruning " + root.storage().url() + ": " +
               failed.ToString());
  }
  return deleted;
}

Status TieredManager::Impl::LocalSave(int64_t step,
                                      const TierSaveOptions& options,
                                      TierSaveResult& result) {
  CheckpointManager& own = *roots_.at(rank_);
  // One incarnation of the job writes its local tier at a time: rank 0 (the
  // durable tier's coordinator) takes the durable root's lease, as a
  // durable save does, and keeps it. A second launch of the same job (a
  // process left from before a restart, two schedulers) is refused here
  // before any rank touches the local tier, instead of writing shares into
  // the same steps as the first, which a marker could then pass off as one
  // save. The lease is checked again before the step is marked. It is not
  // waited for: a job restarted on other machines while its killed
  // incarnation's lease runs out trains on, skipping the local tier until
  // the lease is free, rather than stalling behind it.
  Status lease = rank_ == 0 ? ManagerAccess::Of(durable_).HoldLease(
                                  "save to the local tier", /*wait=*/false)
                            : Status();
  CKPT_ASSIGN_OR_RETURN(RankStatus refused, BroadcastStatus(*comm_, lease, 0));
  if (!refused.status.ok()) {
    return AbortedError("local tier, step " + std::to_string(step) +
                        ", rank 0: " + refused.status.ToString());
  }
  // No marker of this step may survive anywhere once a rank starts writing
  // it: a marker proves that every share is of one save, and a step saved
  // again (after a restore from an older one) would otherwise mix old and
  // new shares if the save were cut short. Every rank removes the step's
  // markers from its node's root, and all wait for all.
  Status mine = ClearMarkers(step);
  CKPT_ASSIGN_OR_RETURN(std::vector<Status> cleared,
                        AllGatherStatus(*comm_, mine));
  if (std::string why = FirstCause(cleared); !why.empty()) {
    return AbortedError("local tier, step " + std::to_string(step) +
                        ", clearing its markers: " + why);
  }
  State share;
  mine = BuildShareState(staged_, rank_, world_, share);
  if (mine.ok()) {
    // The share metadata names the durable tier: a share left in the local
    // root by another job is never taken for this one's.
    share.AddMetadata(kShareJobEntry, {{"durable", job_}});
    mine = ClearStep(own, step);
  }
  if (mine.ok()) {
    SaveOptions so;
    so.epoch = options.save.epoch;
    Result<SaveResult> saved = own.Save(step, share, so);
    if (saved.ok()) {
      result.local_bytes = saved->info.bytes;
    } else {
      mine = saved.status();
    }
  }
  std::vector<CheckpointManager*> received;
  for (size_t j = 0; j < send_to_.size(); ++j) {
    TransferSide send{&own, send_to_[j]};
    TransferSide receive{nullptr, receive_from_[j]};
    Result<CheckpointManager*> into = Root(receive_from_[j]);
    receive.status = into.ok() ? ClearStep(**into, step) : into.status();
    if (receive.status.ok()) receive.root = *into;
    CKPT_RETURN_IF_ERROR(TransferStep(*comm_, step, opt_.transfer_block_bytes,
                                      send, receive, replication_pacer_.get()));
    result.replicated_bytes += send.bytes;
    if (mine.ok() && !send.status.ok()) mine = send.status;
    if (mine.ok() && !receive.status.ok()) mine = receive.status;
    if (receive.status.ok() && receive.root) received.push_back(receive.root);
  }
  // The fence: a lease taken over meanwhile marks nothing.
  if (mine.ok() && rank_ == 0) {
    mine = ManagerAccess::Of(durable_).CheckLease().WithContext(
        "the durable root's lease");
  }
  // Each rank's outcome: its share's bytes (for the catalog's row), or its
  // error.
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> outcomes,
                        comm_->AllGather(EncodeShareOutcome(
                            {mine, mine.ok() ? result.local_bytes : 0})));
  uint64_t bytes = 0;
  std::vector<Status> all;
  for (const std::string& encoded : outcomes) {
    CKPT_ASSIGN_OR_RETURN(ShareOutcome outcome, DecodeShareOutcome(encoded));
    if (outcome.status.ok()) bytes += outcome.bytes;
    all.push_back(std::move(outcome.status));
  }
  if (std::string why = FirstCause(all); !why.empty()) {
    return AbortedError("local tier, step " + std::to_string(step) + ", " +
                        why);
  }
  Mark(own, step, world_);
  for (CheckpointManager* root : received) Mark(*root, step, world_);
  RecordLocal(step, options, bytes);
  ForgetLocal(Prune(own, step, false));
  for (CheckpointManager* root : received) Prune(*root, step, true);
  return Status();
}

Result<TierSaveResult> TieredManager::Impl::RunSave(
    int64_t step, const TierSaveOptions& options, bool local, bool durable,
    bool background) {
  // Every catalog call of the save, local and durable, in one batch: one
  // wait for a catalog that does not answer, one warning; none at all for
  // a save in the background.
  CatalogRecorder::Batch catalog_batch(ManagerAccess::Of(durable_).catalog,
                                       !background);
  TierSaveResult result;
  result.step = step;
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  if (local) {
    const Clock::time_point t0 = Clock::now();
    Status s = LocalSave(step, options, result);
    result.local_seconds = seconds_since(t0);
    result.local = s.ok();
    if (!s.ok()) {
      result.local_error = s.ToString();
      if (rank_ == 0) LogWarning("tiers: " + result.local_error);
      // The step's markers are gone: a row of an earlier save of it is
      // no longer true.
      ForgetLocal({step});
      // A broken communicator fails every later collective too.
      if (s.code() != ErrorCode::kAborted) return s;
    }
  }
  if (durable) {
    const Clock::time_point t0 = Clock::now();
    CKPT_ASSIGN_OR_RETURN(result.durable_result,
                          durable_.Save(step, staged_, options.save));
    result.durable = !result.durable_result.skipped;
    result.durable_seconds = seconds_since(t0);
  }
  return result;
}

TierSaveHandle TieredManager::Impl::SaveAsync(int64_t step, const State& state,
                                              const TierSaveOptions& options,
                                              bool background) {
  WaitInflight();
  auto shared = std::make_shared<TierSaveHandle::Shared>();
  const bool local =
      opt_.local_every_steps > 0 && step % opt_.local_every_steps == 0;
  const bool durable =
      !options.skip_durable &&
      (options.durable ||
       (opt_.durable_every_steps > 0 && step % opt_.durable_every_steps == 0));
  if (!local && !durable) {
    TierSaveResult skipped;
    skipped.step = step;
    skipped.skipped = true;
    shared->result = skipped;
    shared->done = true;
    return TierSaveHandle(shared);
  }
  // A rank that cannot stage still takes part, with a state that fails:
  // every rank then fails the same way.
  staged_ = State();
  Status staged = state.status();
  if (staged.ok()) {
    Result<std::span<std::byte>> memory = arena_.Reserve(StagingBytes(state));
    staged =
        memory.ok() ? StageState(state, *memory, staged_) : memory.status();
  }
  if (!staged.ok()) {
    staged_ = State();
    staged_.SetError(staged);
  }
  Submit([this, shared, step, options, local, durable, background] {
    Result<TierSaveResult> r =
        RunSave(step, options, local, durable, background);
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->result = std::move(r);
    shared->done = true;
    shared->cv.notify_all();
  });
  return TierSaveHandle(shared);
}

TieredManager::Impl::~Impl() {
  WaitInflight();
  {
    std::lock_guard<std::mutex> lock(worker_mu_);
    stop_ = true;
  }
  worker_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void TieredManager::Impl::WaitInflight() {
  std::unique_lock<std::mutex> lock(worker_mu_);
  worker_cv_.wait(lock, [&] { return !busy_; });
}

void TieredManager::Impl::Submit(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(worker_mu_);
  queued_ = std::move(job);
  busy_ = true;
  worker_cv_.notify_all();
  if (worker_.joinable()) return;
  worker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(worker_mu_);
    for (;;) {
      worker_cv_.wait(lock, [&] { return queued_ || stop_; });
      if (!queued_) return;  // stopping
      std::function<void()> job = std::move(queued_);
      queued_ = nullptr;
      lock.unlock();
      job();
      job = nullptr;
      lock.lock();
      busy_ = false;
      worker_cv_.notify_all();
    }
  });
}

// --- TieredManager -----------------------------------------------------------

Result<std::unique_ptr<TieredManager>> TieredManager::Open(
    CheckpointManager& durable, TierOptions options) {
  auto impl = std::make_unique<Impl>(durable, std::move(options));
  CKPT_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<TieredManager>(new TieredManager(std::move(impl)));
}

TieredManager::TieredManager(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
TieredManager::~TieredManager() = default;

Result<TierSaveResult> TieredManager::Save(int64_t step, const State& state,
                                           const TierSaveOptions& options) {
  return impl_->SaveAsync(step, state, options, /*background=*/false).Wait();
}

TierSaveHandle TieredManager::SaveAsync(int64_t step, const State& state,
                                        const TierSaveOptions& options) {
  return impl_->SaveAsync(step, state, options);
}

Result<TierRestoreResult> TieredManager::Restore(State& state,
                                                 const LoadOptions& options) {
  return impl_->Restore(state, options);
}

int TieredManager::node() const { return impl_->node(); }
const std::string& TieredManager::local_url() const {
  return impl_->node_url();
}
CheckpointManager& TieredManager::durable() { return impl_->durable(); }

}  // namespace ckpt
