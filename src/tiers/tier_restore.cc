// Restore from the tiers (TieredManager::Restore) and what `ckpt ls` shows
// of a local tier: the numbered protocol is at the top of
// tiered_manager.cc.
#include <algorithm>
#include <map>
#include <set>

#include "checkpoint/load.h"
#include "checkpoint/manager_access.h"
#include "checkpoint/manifests.h"
#include "format/layout.h"
#include "format/tier_layout.h"
#include "tiers/tier_share.h"
#include "tiers/tier_transfer.h"
#include "tiers/tiered_impl.h"
#include "util/log.h"

namespace ckpt {

using format::ManifestKey;
using format::SplitStepKey;

Result<NodeShares> TieredManager::Impl::ScanNode() {
  // Every share's committed step and every marker in this node's local
  // root.
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> keys, node_->List("r"));
  NodeShares lines;
  for (const ObjectInfo& o : keys) {
    int rank = 0;
    std::string_view rest;
    // Shares of ranks past this world size too: a step saved by more ranks
    // can be resharded.
    if (!format::SplitShareKey(o.key, &rank, &rest) || rank >= kMaxRanks)
      continue;
    int64_t step = 0;
    int w = 0;
    if (format::ParseTierMarkerKey(rest, &step, &w)) {
      lines.items.push_back({true, rank, step, w});
    } else if (std::string_view file;
               SplitStepKey(rest, &step, &file) && rest == ManifestKey(step)) {
      lines.items.push_back({false, rank, step, 0});
    }
  }
  return lines;
}

Status TieredManager::Impl::FetchShare(int64_t step, int share, int holder,
                                       int fetcher, int world, Status& received,
                                       TierRestoreResult& out) {
  TransferSide send, receive;
  if (rank_ == holder) {
    Result<CheckpointManager*> root = Root(share);
    send.root = root.ok() ? *root : nullptr;
    send.peer = fetcher;
  }
  if (rank_ == fetcher) {
    receive.peer = holder;
    Result<CheckpointManager*> into = Root(share);
    receive.status = into.ok() ? ClearStep(**into, step) : into.status();
    if (receive.status.ok()) receive.root = *into;
  }
  if (send.peer < 0 && receive.peer < 0) return Status();
  CKPT_RETURN_IF_ERROR(
      TransferStep(*comm_, step, opt_.transfer_block_bytes, send, receive));
  if (rank_ != fetcher) return Status();
  out.fetched_bytes += receive.bytes;
  received = receive.status;
  // The copy is the share as its rank committed it: marked for the world
  // that saved it, as on the node it came from.
  if (received.ok()) Mark(*receive.root, step, world);
  return Status();
}

Status TieredManager::Impl::StageShare(int64_t step, State& state,
                                       const LoadOptions& options, State& view,
                                       StagedLoad& staged,
                                       TierRestoreResult& out) {
  CheckpointManager& own = *roots_.at(rank_);
  CKPT_ASSIGN_OR_RETURN(CheckpointDescription d, own.Describe(step));
  std::string saved_for, job;
  for (const EntryInfo& e : d.entries) {
    if (e.name == kShareEntry) saved_for = e.json;
    if (e.name == kShareJobEntry) job = e.json;
  }
  if (ShareDescriptionFields(saved_for) !=
          ShareDescriptionFields(ShareDescription(state, rank_, world_)) ||
      ShareDescriptionFields(job)["durable"] != job_) {
    return FailedPreconditionError(
        "the share of step " + std::to_string(step) +
        " was saved by another job, rank, world size or split");
  }
  view = State();
  staged = StagedLoad();
  CKPT_RETURN_IF_ERROR(BuildShareLoadView(state, view));
  view.AddMetadataJson(kShareEntry, "{}");
  view.AddMetadataJson(kShareJobEntry, "{}");
  out.info = d.info;
  // The share's own manager, whose staged load holds the share (checked in
  // place, or in its staging memory) until every rank's is whole; the tiers
  // use it alone, and no save of it is in flight (Restore waited).
  RootContext& root = ManagerAccess::Of(own);
  MutexLock lock(&root.mu);
  root.WaitIdle();
  bool damaged = false;
  return Guard("load", [&] {
    return Loader(root).StageLoad(step, view, options, staged, damaged);
  });
}

Status TieredManager::Impl::ApplyShare(State& view, StagedLoad& staged,
                                       State& state) {
  RootContext& root = ManagerAccess::Of(*roots_.at(rank_));
  MutexLock lock(&root.mu);
  root.WaitIdle();
  CKPT_RETURN_IF_ERROR(
      Guard("load", [&] { return Loader(root).ApplyLoad(staged, view); }));
  return CopyBackLoaded(view, state);
}

Result<CheckpointInfo> TieredManager::Impl::LoadDurable(
    int64_t step, State& state, const LoadOptions& options, bool& damaged) {
  RootContext& root = ManagerAccess::Of(durable_);
  MutexLock lock(&root.mu);
  root.WaitIdle();
  damaged = false;
  return Guard("load", [&]() -> Result<CheckpointInfo> {
    return Loader(root).Load(step, state, options, &damaged);
  });
}

Status TieredManager::Impl::LoadLocal(int64_t step,
                                      const std::vector<std::set<int>>& have,
                                      State& state, const LoadOptions& options,
                                      TierRestoreResult& out) {
  // Fetch, in rank order, the shares whose own node lost them.
  Status mine;
  for (int q = 0; q < world_; ++q) {
    if (have[q].count(node_of_[q])) continue;
    ++out.ranks_fetched;
    int holder = -1;
    for (int r = 0; r < world_ && holder < 0; ++r) {
      if (have[q].count(node_of_[r])) holder = r;
    }
    Status received;
    CKPT_RETURN_IF_ERROR(FetchShare(step, q, holder, q, world_, received, out));
    if (rank_ == q && mine.ok()) mine = received;
  }
  State view;
  StagedLoad staged;
  if (mine.ok()) mine = StageShare(step, state, options, view, staged, out);
  CKPT_ASSIGN_OR_RETURN(std::vector<Status> all, AllGatherStatus(*comm_, mine));
  // A share whose bytes are damaged in its node's memory (DataLoss) comes
  // again from a replica on another node, if every failed share has one
  // (and was not itself fetched from one just now); otherwise, or if that
  // fails too, the durable tier.
  std::vector<std::pair<int, int>> again;  // (share, holder)
  bool all_again = true;
  for (int q = 0; q < world_ && all_again; ++q) {
    if (all[q].ok()) continue;
    int holder = -1;
    if (have[q].count(node_of_[q]) && all[q].code() == ErrorCode::kDataLoss) {
      for (int r = 0; r < world_ && holder < 0; ++r) {
        if (node_of_[r] != node_of_[q] && have[q].count(node_of_[r])) {
          holder = r;
        }
      }
    }
    all_again = holder >= 0;
    again.emplace_back(q, holder);
  }
  if (!again.empty() && all_again) {
    for (const auto& [q, holder] : again) {
      if (rank_ == q) {
        LogWarning("tiers: step " + std::to_string(step) + ": rank " +
                   std::to_string(q) +
                   "'s share is damaged on its node; fetching its replica "
                   "from rank " +
                   std::to_string(holder) + ": " + all[q].ToString());
      }
      ++out.ranks_fetched;
      Status received;
      CKPT_RETURN_IF_ERROR(
          FetchShare(step, q, holder, q, world_, received, out));
      if (rank_ == q) {
        mine = received.ok()
                   ? StageShare(step, state, options, view, staged, out)
                   : received;
      }
    }
    CKPT_ASSIGN_OR_RETURN(all, AllGatherStatus(*comm_, mine));
  }
  if (std::string why = FirstCause(all); !why.empty()) {
    return AbortedError(why);
  }
  // Every rank's share is whole: only now does any state change.
  return ApplyShare(view, staged, state);
}

Result<TierRestoreResult> TieredManager::Impl::Restore(
    State& state, const LoadOptions& options) {
  WaitInflight();
  Result<NodeShares> scanned = ScanNode();
  if (!scanned.ok()) {
    LogWarning("tiers: listing the local tier " + node_url_ + ": " +
               scanned.status().ToString());
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        comm_->AllGather(EncodeNodeShares(
                            scanned.ok() ? *scanned : NodeShares{})));
  // (step -> which nodes hold each rank's share), and the world sizes that
  // marked each step.
  std::map<int64_t, std::map<int, std::set<int>>> have;
  std::map<int64_t, std::set<int>> marked;
  for (int r = 0; r < world_; ++r) {
    CKPT_ASSIGN_OR_RETURN(NodeShares node, DecodeNodeShares(all[r]));
    for (const NodeShares::Item& i : node.items) {
      if (i.marker) {
        if (i.world > 0 && i.world <= kMaxRanks) marked[i.step].insert(i.world);
      } else if (i.rank >= 0 && i.rank < kMaxRanks) {
        have[i.step][i.rank].insert(node_of_[r]);
      }
    }
  }
  // The local steps whose every share is on some node, newest first: at
  // this world size, or resharded from another (unless this rank's state
  // must load at the world size that saved it, which the durable tier
  // handles).
  const bool reshardable = ReshardRefusal(state).ok();
  auto whole = [&](int64_t step, int w) {
    const auto& held = have[step];
    for (int q = 0; q < w; ++q) {
      if (!held.count(q)) return false;
    }
    return true;
  };
  // (step, tier, the world that saved it), newest first; at one step the
  // local tier before the durable one.
  struct Candidate {
    int64_t step;
    Tier tier;
    int world;
  };
  std::vector<Candidate> candidates;
  for (auto it = marked.rbegin(); it != marked.rend(); ++it) {
    if (it->second.count(world_) && whole(it->first, world_)) {
      candidates.push_back({it->first, Tier::kLocal, world_});
      continue;
    }
    for (int w : it->second) {
      if (reshardable && w != world_ && whole(it->first, w)) {
        candidates.push_back({it->first, Tier::kLocal, w});
        break;
      }
    }
  }
  // The durable tier's committed steps, by a listing of rank 0's (no object
  // of the durable tier is read until one is tried).
  DurableSteps listing;
  if (rank_ == 0) {
    Result<std::vector<std::pair<int64_t, ObjectInfo>>> steps =
        ListManifests(durable_.storage());
    listing.status = steps.status();
    for (const auto& [step, info] :
         steps.ok() ? *steps : std::vector<std::pair<int64_t, ObjectInfo>>{}) {
      listing.steps.push_back(step);
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::string listed,
                        comm_->Broadcast(EncodeDurableSteps(listing), 0));
  CKPT_ASSIGN_OR_RETURN(listing, DecodeDurableSteps(listed));
  if (!listing.status.ok()) {
    // The local tier may still hold a whole step.
    if (rank_ == 0) {
      LogWarning("tiers: listing the durable tier " + durable_.storage().url() +
                 ": " + listing.status.ToString());
    }
    listing.steps.clear();
  }
  for (int64_t step : listing.steps) {
    candidates.push_back({step, Tier::kDurable, 0});
  }
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.step > b.step; });
  // Try them newest first, every rank together. Nothing of the state
  // changes unless a step loads whole on every rank; a local step that
  // does not is skipped (the local tier is a cache), a durable one only
  // when it is damaged.
  TierRestoreResult out;
  std::string tried;
  for (const Candidate& c : candidates) {
    out.ranks_fetched = 0;
    out.fetched_bytes = 0;
    Status s;
    if (c.tier == Tier::kLocal) {
      if (c.world == world_) {
        std::vector<std::set<int>> nodes(world_);
        for (auto& [q, held] : have[c.step]) {
          if (q < world_) nodes[q] = held;
        }
        s = LoadLocal(c.step, nodes, state, options, out);
      } else {
        s = LoadLocalResharded(c.step, c.world, have[c.step], state, options,
                               out);
      }
      if (!s.ok() && s.code() != ErrorCode::kAborted) return s;
    } else {
      bool damaged = false;
      Result<CheckpointInfo> info =
          LoadDurable(c.step, state, options, damaged);
      if (info.ok()) out.info = *info;
      s = info.status();
      if (!s.ok() && !damaged) return s;
    }
    if (s.ok()) {
      out.tier = c.tier;
      out.step = c.step;
      out.durable_has_step =
          std::find(listing.steps.begin(), listing.steps.end(), c.step) !=
          listing.steps.end();
      return out;
    }
    const std::string what = std::string(TierName(c.tier)) + " step " +
                             std::to_string(c.step) + ": " + s.ToString();
    if (c.tier == Tier::kLocal) {
      out.local_skipped += (out.local_skipped.empty() ? "" : "; ") + what;
    }
    tried += (tried.empty() ? "" : "; ") + what;
    if (rank_ == 0) {
      LogWarning("tiers: the " + what +
                 "; it does not load whole, trying the next older step");
    }
  }
  if (candidates.empty()) return out;  // nothing saved yet
  return DataLossError("tiers: no step of either tier loads whole (tried " +
                       tried + ")");
}

Result<std::vector<LocalShareInfo>> ListLocalTier(const std::string& url) {
  StorageOptions so;
  so.create = false;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> node, OpenStorage(url, so));
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> keys, node->List("r"));
  std::map<std::pair<int, int64_t>, LocalShareInfo> shares;
  std::map<std::pair<int, int64_t>, uint64_t> bytes;
  std::map<std::pair<int, int64_t>, int> marks;
  for (const ObjectInfo& o : keys) {
    int rank = 0;
    std::string_view rest;
    if (!format::SplitShareKey(o.key, &rank, &rest)) continue;
    int64_t step = 0;
    int w = 0;
    std::string_view file;
    if (format::ParseTierMarkerKey(rest, &step, &w)) {
      marks[{rank, step}] = w;
    } else if (SplitStepKey(rest, &step, &file)) {
      bytes[{rank, step}] += o.size;
      if (rest == ManifestKey(step)) shares[{rank, step}] = {rank, step};
    }
  }
  std::vector<LocalShareInfo> out;
  for (auto& [key, info] : shares) {
    info.bytes = bytes[key];
    if (auto m = marks.find(key); m != marks.end()) {
      info.marked = true;
      info.world_size = m->second;
    }
    out.push_back(info);
  }
  return out;
}

}  // namespace ckpt
