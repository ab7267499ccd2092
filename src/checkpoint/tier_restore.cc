// Restore from the tiers (TieredManager::Restore) and what `ckpt ls` shows
// of a local tier: the numbered protocol is at the top of
// tiered_manager.cc.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "checkpoint/manifests.h"
#include "checkpoint/tier_share.h"
#include "checkpoint/tier_transfer.h"
#include "checkpoint/tiered_impl.h"
#include "format/layout.h"
#include "util/log.h"

namespace ckpt {

using format::ManifestKey;
using format::SplitStepKey;

Result<std::vector<std::string>> TieredManager::Impl::ScanNode() {
  // One line per share step ("m <rank> <step>") and marker ("c <rank>
  // <step> <world size>") in this node's local root.
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> keys, node_->List("r"));
  std::vector<std::string> lines;
  for (const ObjectInfo& o : keys) {
    int rank = 0;
    std::string_view rest;
    // Shares of ranks past this world size too: a step saved by more ranks
    // can be resharded.
    if (!SplitShareKey(o.key, &rank, &rest) || rank >= kMaxRanks) continue;
    int64_t step = 0;
    int w = 0;
    if (ParseTierMarkerKey(rest, &step, &w)) {
      lines.push_back("c " + std::to_string(rank) + " " + std::to_string(step) +
                      " " + std::to_string(w));
    } else if (std::string_view file;
               SplitStepKey(rest, &step, &file) && rest == ManifestKey(step)) {
      lines.push_back("m " + std::to_string(rank) + " " + std::to_string(step));
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

Status TieredManager::Impl::LoadShare(int64_t step, State& state,
                                      const LoadOptions& options,
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
  State view;
  CKPT_RETURN_IF_ERROR(BuildShareLoadView(state, view));
  view.AddMetadataJson(kShareEntry, "{}");
  view.AddMetadataJson(kShareJobEntry, "{}");
  CKPT_ASSIGN_OR_RETURN(out.info, own.Load(step, view, options));
  return CopyBackLoaded(view, state);
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
  if (mine.ok()) mine = LoadShare(step, state, options, out);
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        comm_->AllGather(mine.ok() ? "" : mine.ToString()));
  // A share whose bytes are damaged in its node's memory (DataLoss) comes
  // again from a replica on another node, if every failed share has one
  // (and was not itself fetched from one just now); otherwise, or if that
  // fails too, the durable tier.
  std::vector<std::pair<int, int>> again;  // (share, holder)
  bool all_again = true;
  for (int q = 0; q < world_ && all_again; ++q) {
    if (all[q].empty()) continue;
    int holder = -1;
    if (have[q].count(node_of_[q]) &&
        GatheredHasCode(all[q], ErrorCode::kDataLoss)) {
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
                   std::to_string(holder) + ": " + all[q]);
      }
      ++out.ranks_fetched;
      Status received;
      CKPT_RETURN_IF_ERROR(
          FetchShare(step, q, holder, q, world_, received, out));
      if (rank_ == q) {
        mine = received.ok() ? LoadShare(step, state, options, out) : received;
      }
    }
    CKPT_ASSIGN_OR_RETURN(all,
                          comm_->AllGather(mine.ok() ? "" : mine.ToString()));
  }
  if (std::string why = FirstCause(all); !why.empty()) {
    return AbortedError(why);
  }
  return Status();
}

Result<TierRestoreResult> TieredManager::Impl::Restore(
    State& state, const LoadOptions& options) {
  WaitInflight();
  Result<std::vector<std::string>> scanned = ScanNode();
  if (!scanned.ok()) {
    LogWarning("tiers: listing the local tier " + node_url_ + ": " +
               scanned.status().ToString());
  }
  std::string mine;
  for (const std::string& line :
       scanned.ok() ? *scanned : std::vector<std::string>{}) {
    mine += line + "\n";
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all, comm_->AllGather(mine));
  // (step -> which nodes hold each rank's share), and the world sizes that
  // marked each step.
  std::map<int64_t, std::map<int, std::set<int>>> have;
  std::map<int64_t, std::set<int>> marked;
  for (int r = 0; r < world_; ++r) {
    std::istringstream in(all[r]);
    std::string kind;
    int q = 0;
    int64_t step = 0;
    while (in >> kind >> q >> step) {
      if (kind == "c") {
        int w = 0;
        in >> w;
        if (w > 0 && w <= kMaxRanks) marked[step].insert(w);
      } else if (q >= 0 && q < kMaxRanks) {
        have[step][q].insert(node_of_[r]);
      }
    }
  }
  // The newest step whose every share is on some node: at this world size,
  // or resharded from another (unless this rank's state must load at the
  // world size that saved it, which the durable tier handles).
  const bool reshardable = ReshardRefusal(state).ok();
  auto whole = [&](int64_t step, int w) {
    const auto& held = have[step];
    for (int q = 0; q < w; ++q) {
      if (!held.count(q)) return false;
    }
    return true;
  };
  std::optional<int64_t> local;
  int local_world = world_;
  for (auto it = marked.rbegin(); it != marked.rend() && !local; ++it) {
    if (it->second.count(world_) && whole(it->first, world_)) {
      local = it->first;
      break;
    }
    for (int w : it->second) {
      if (reshardable && w != world_ && whole(it->first, w)) {
        local = it->first;
        local_world = w;
        break;
      }
    }
  }
  // Rank 0 asks the durable tier only when a listing shows it newer.
  std::string choice;
  if (rank_ == 0) {
    int64_t listed = -1;
    if (auto steps = ListManifests(durable_.storage());
        steps.ok() && !steps->empty()) {
      listed = steps->front().first;  // newest first
    }
    std::optional<int64_t> durable;
    if (!local || listed > *local) {
      Result<std::optional<int64_t>> latest = durable_.Latest();
      if (latest.ok()) durable = *latest;
    }
    if (durable && (!local || *durable > *local)) {
      choice = "D " + std::to_string(*durable) + " 0";
    } else if (local) {
      choice =
          "L " + std::to_string(*local) + " " + std::to_string(local_world);
    } else {
      choice = "N 0 0";
    }
  }
  CKPT_ASSIGN_OR_RETURN(choice, comm_->Broadcast(choice, 0));
  TierRestoreResult out;
  std::istringstream chosen(choice.substr(2));
  int64_t step = 0;
  int saved_by = 0;
  chosen >> step >> saved_by;
  if (choice[0] == 'N') return out;
  if (choice[0] == 'L') {
    Status s;
    if (saved_by == world_) {
      std::vector<std::set<int>> nodes(world_);
      for (auto& [q, held] : have[step]) {
        if (q < world_) nodes[q] = held;
      }
      s = LoadLocal(step, nodes, state, options, out);
    } else {
      s = LoadLocalResharded(step, saved_by, have[step], state, options, out);
    }
    if (s.ok()) {
      out.tier = Tier::kLocal;
      out.step = step;
      return out;
    }
    if (s.code() != ErrorCode::kAborted) return s;
    // The durable tier gives the state: no share of it came from a peer,
    // whatever the attempt at the local step fetched.
    out.ranks_fetched = 0;
    out.fetched_bytes = 0;
    out.local_skipped = s.ToString();
    if (rank_ == 0) {
      LogWarning("tiers: step " + std::to_string(step) +
                 " of the local tier cannot be restored, loading the durable "
                 "tier: " +
                 out.local_skipped);
    }
    Result<CheckpointInfo> info = durable_.Load(std::nullopt, state, options);
    if (!info.ok() && info.status().code() == ErrorCode::kNotFound) {
      return Status(ErrorCode::kDataLoss,
                    "tiers: the local tier's step " + std::to_string(step) +
                        " cannot be restored and the durable tier holds "
                        "nothing: " +
                        out.local_skipped);
    }
    CKPT_RETURN_IF_ERROR(info.status());
    out.info = *info;
  } else {
    CKPT_ASSIGN_OR_RETURN(out.info, durable_.Load(step, state, options));
  }
  out.tier = Tier::kDurable;
  out.step = out.info.step;
  return out;
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
    if (!SplitShareKey(o.key, &rank, &rest)) continue;
    int64_t step = 0;
    int w = 0;
    std::string_view file;
    if (ParseTierMarkerKey(rest, &step, &w)) {
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
