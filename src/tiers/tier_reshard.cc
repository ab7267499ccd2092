// Restore from the local tier at another world size (TieredManager::Restore,
// docs/tiers.md): the shares of a step that W ranks saved are copied to the
// nodes whose ranks need them, with the same transfer as a replica, and each
// rank then fills its boxes from the shares on its own node.
//
//   1. For each old share, the lowest rank on a node that holds it reads the
//      share's description (every entry's dtype and shape, and the box each
//      piece came from) and checks that the share is this job's; the ranks
//      all-gather these.
//   2. Each rank finds the shares its entries need: for a tensor saved whole
//      (replicated), one share, its own node's if it has one; for a sharded
//      one, every share whose piece meets its box. The ranks all-gather the
//      shares their nodes lack.
//   3. For each (node, share) wanted, the lowest rank of the node that wants
//      it fetches it from the lowest rank of a node that holds it, in one
//      order every rank computes alike; the copy is committed and marked in
//      the node's folder of that share. The ranks all-gather the outcomes,
//      so that no rank reads a share its node is still receiving.
//   4. Each rank loads from each share it needs: whole tensors straight into
//      their memory, the parts of pieces through a buffer copied into its
//      box; every element of every box must be covered exactly. The ranks
//      all-gather the outcomes: any failure on any rank and every rank loads
//      the durable tier instead (Restore's rule for the local tier).
// Rank-local entries belong to the saving world size, and device memory is
// not staged here: a state with either takes the durable tier.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "ckpt/dtype.h"
#include "tiers/tier_share.h"
#include "tiers/tiered_impl.h"

namespace ckpt {
namespace {

int64_t Volume(const std::vector<int64_t>& lengths) {
  int64_t v = 1;
  for (int64_t n : lengths) v *= n;
  return v;
}

// The part two boxes share, as (offsets, lengths); false if none.
bool Intersect(const std::vector<int64_t>& a_off,
               const std::vector<int64_t>& a_len,
               const std::vector<int64_t>& b_off,
               const std::vector<int64_t>& b_len, std::vector<int64_t>* off,
               std::vector<int64_t>* len) {
  off->assign(a_off.size(), 0);
  len->assign(a_off.size(), 0);
  for (size_t d = 0; d < a_off.size(); ++d) {
    const int64_t lo = std::max(a_off[d], b_off[d]);
    const int64_t hi = std::min(a_off[d] + a_len[d], b_off[d] + b_len[d]);
    if (hi <= lo) return false;
    (*off)[d] = lo;
    (*len)[d] = hi - lo;
  }
  return true;
}

// Copies a dense box of `len` elements into the dense tensor `dst` of
// `shape`, starting at `at`.
void CopyIntoBox(const std::byte* src, const std::vector<int64_t>& len,
                 std::byte* dst, const std::vector<int64_t>& shape,
                 const std::vector<int64_t>& at, size_t width) {
  const size_t nd = len.size();
  if (nd == 0) {
    std::memcpy(dst, src, width);
    return;
  }
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  const size_t row = static_cast<size_t>(len[nd - 1]) * width;
  std::vector<int64_t> idx(nd, 0);  // over the leading nd - 1 dimensions
  for (int64_t r = 0, rows = Volume(len) / len[nd - 1]; r < rows; ++r) {
    int64_t at_elem = at[nd - 1];
    for (size_t d = 0; d + 1 < nd; ++d) at_elem += (at[d] + idx[d]) * stride[d];
    std::memcpy(dst + at_elem * width, src + r * row, row);
    for (size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < len[d]) break;
      idx[d] = 0;
    }
  }
}

// The entries of share `q`, or why it cannot be used.
Result<std::vector<SharedEntry>> DescribeShare(CheckpointManager& root,
                                               int64_t step, int q, int world,
                                               const std::string& job) {
  CKPT_ASSIGN_OR_RETURN(CheckpointDescription d, root.Describe(step));
  std::string share_json, job_json;
  for (const EntryInfo& e : d.entries) {
    if (e.name == kShareEntry) share_json = e.json;
    if (e.name == kShareJobEntry) job_json = e.json;
  }
  std::map<std::string, std::string> fields =
      ShareDescriptionFields(share_json);
  // A folder may hold the same step saved again by a job of another size:
  // only shares of the world that marked the step go together.
  if (ShareDescriptionFields(job_json)["durable"] != job ||
      fields["rank"] != std::to_string(q) ||
      fields["world_size"] != std::to_string(world)) {
    return FailedPreconditionError(
        "the share of rank " + std::to_string(q) + " of step " +
        std::to_string(step) + " was saved by another job, rank or world size");
  }
  CKPT_ASSIGN_OR_RETURN(auto pieces, ParseShareBoxes(fields["boxes"], q));
  std::vector<SharedEntry> out;
  for (const EntryInfo& e : d.entries) {
    if (e.name == kShareEntry || e.name == kShareJobEntry || e.owner >= 0) {
      continue;  // rank-local entries stay with the saving world size
    }
    SharedEntry s{.share = q,
                  .name = e.name,
                  .kind = e.kind,
                  .dtype = e.dtype,
                  .lengths = e.shape};
    if (auto p = pieces.find(e.name); p != pieces.end()) {
      s.piece = true;
      s.offsets = p->second.offsets;
      s.global = p->second.global;
    } else {
      s.offsets.assign(e.shape.size(), 0);
      s.global = e.shape;
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Every share's entries by name, from the all-gathered ShareEntries (a
// piece whose box does not fit its shape is DataLoss).
Status ParseDescriptions(const std::vector<std::string>& all,
                         std::map<std::string, std::vector<SharedEntry>>* by) {
  for (const std::string& bytes : all) {
    CKPT_ASSIGN_OR_RETURN(ShareEntries m, DecodeShareEntries(bytes));
    for (SharedEntry& e : m.entries) {
      std::string name = e.name;
      (*by)[name].push_back(std::move(e));
    }
  }
  return Status();
}

}  // namespace

Status ReshardRefusal(const State& state) {
  for (const Entry& e : state.entries()) {
    if (e.rank_local) {
      return FailedPreconditionError("entry " + e.name +
                                     " is rank-local: it loads at the world "
                                     "size that saved it");
    }
    if (e.kind == EntryKind::kTensor && !e.tensor.location.is_host()) {
      return FailedPreconditionError("entry " + e.name +
                                     " is in device memory");
    }
  }
  return Status();
}

Status TieredManager::Impl::LoadLocalResharded(
    int64_t step, int old_world, const std::map<int, std::set<int>>& have,
    State& state, const LoadOptions& options, TierRestoreResult& out) {
  // Rank 0 chose a reshard from its own state; a rank whose state differs
  // refuses here, and every rank then takes the durable tier.
  Status mine = state.status();
  if (mine.ok()) mine = ReshardRefusal(state);
  auto holds = [&](int q, int node) {
    auto it = have.find(q);
    return it != have.end() && it->second.count(node) > 0;
  };
  auto holder = [&](int q) {
    for (int r = 0; r < world_; ++r) {
      if (holds(q, node_of_[r])) return r;
    }
    return -1;
  };

  // 1. The shares' descriptions.
  ShareEntries described;
  for (int q = 0; q < old_world; ++q) {
    if (holder(q) != rank_) continue;
    Result<CheckpointManager*> root = Root(q);
    Result<std::vector<SharedEntry>> entries =
        root.ok() ? DescribeShare(**root, step, q, old_world, job_)
                  : root.status();
    if (entries.ok()) {
      for (SharedEntry& e : *entries) {
        described.entries.push_back(std::move(e));
      }
    } else if (mine.ok()) {
      mine = entries.status();
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> all,
                        comm_->AllGather(EncodeShareEntries(described)));
  std::map<std::string, std::vector<SharedEntry>> saved;
  if (Status s = ParseDescriptions(all, &saved); !s.ok() && mine.ok()) {
    mine = s;
  }

  // 2. What this rank needs from which share. A share on this node is
  // preferred for what any share holds whole.
  const int node = node_of_[rank_];
  struct Part {
    int share;
    const Entry* target;
    const SharedEntry* from;
    std::vector<int64_t> offsets, lengths;  // the part, in global indices
  };
  std::vector<Part> parts;
  std::set<int> used;
  std::set<std::string> wanted;
  for (const Entry& e : state.entries()) {
    if (!mine.ok()) break;
    wanted.insert(e.name);
    auto it = saved.find(e.name);
    if (it == saved.end()) {
      mine = NotFoundError("step " + std::to_string(step) +
                           " of the local tier has no entry " + e.name);
      break;
    }
    const SharedEntry* whole = nullptr;
    for (const SharedEntry& s : it->second) {
      if (s.piece) continue;
      if (!whole || (holds(s.share, node) && !holds(whole->share, node))) {
        whole = &s;
      }
    }
    if (e.kind != EntryKind::kTensor) {
      if (!whole || whole->kind != e.kind) {
        mine = InvalidArgumentError("entry " + e.name +
                                    " is saved as another kind");
        break;
      }
      parts.push_back({whole->share, &e, whole, {}, {}});
      used.insert(whole->share);
      continue;
    }
    std::vector<int64_t> box_off =
        e.is_piece() ? e.offsets : std::vector<int64_t>(e.tensor.shape.size());
    const std::vector<int64_t>& box_len = e.tensor.shape;
    int64_t covered = 0;
    for (const SharedEntry& s : it->second) {
      if (whole ? &s != whole : false) continue;
      if (s.kind != EntryKind::kTensor || s.dtype != e.tensor.dtype ||
          s.global != e.full_shape()) {
        mine = InvalidArgumentError("entry " + e.name +
                                    " is saved with another dtype or shape");
        break;
      }
      Part p{s.share, &e, &s, {}, {}};
      if (Volume(box_len) == 0 ||
          !Intersect(box_off, box_len, s.offsets, s.lengths, &p.offsets,
                     &p.lengths)) {
        continue;
      }
      covered += Volume(p.lengths);
      used.insert(s.share);
      parts.push_back(std::move(p));
    }
    if (mine.ok() && covered != Volume(box_len)) {
      mine = DataLossError("the shares of step " + std::to_string(step) +
                           " cover " + std::to_string(covered) + " of the " +
                           std::to_string(Volume(box_len)) +
                           " elements of entry " + e.name + "'s box");
    }
  }
  if (mine.ok() && options.strict) {
    for (const auto& [name, entries] : saved) {
      if (!wanted.count(name)) {
        mine =
            InvalidArgumentError("strict load: the state has no entry " + name);
        break;
      }
    }
  }

  // 3. Fetch what the node lacks.
  LackingShares lacking;
  for (int q : used) {
    if (mine.ok() && !holds(q, node)) lacking.shares.push_back(q);
  }
  CKPT_ASSIGN_OR_RETURN(all, comm_->AllGather(EncodeLackingShares(lacking)));
  std::set<std::pair<int, int>> assigned;    // (node, share)
  std::vector<std::pair<int, int>> fetches;  // (fetching rank, share)
  for (int r = 0; r < world_; ++r) {
    CKPT_ASSIGN_OR_RETURN(LackingShares theirs, DecodeLackingShares(all[r]));
    for (int64_t share : theirs.shares) {
      if (share < 0 || share >= old_world) continue;
      const int q = static_cast<int>(share);
      if (holder(q) < 0) continue;
      if (assigned.insert({node_of_[r], q}).second) fetches.push_back({r, q});
    }
  }
  out.ranks_fetched = static_cast<int>(fetches.size());
  for (const auto& [fetcher, q] : fetches) {
    Status received;
    CKPT_RETURN_IF_ERROR(
        FetchShare(step, q, holder(q), fetcher, old_world, received, out));
    if (rank_ == fetcher && mine.ok()) mine = received;
  }
  {
    CKPT_ASSIGN_OR_RETURN(std::vector<Status> outcomes,
                          AllGatherStatus(*comm_, mine));
    if (std::string why = FirstCause(outcomes); !why.empty()) {
      return AbortedError(why);
    }
  }

  // 4. Load, share by share, into buffers of the restore's own: the state
  // changes only once every rank has loaded every part whole.
  std::vector<std::vector<std::byte>> buffers(parts.size());
  std::vector<State> views;
  bool described_info = false;
  for (int q : used) {
    if (!mine.ok()) break;
    State& view = views.emplace_back();
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      if (p.share != q) continue;
      const Entry& e = *p.target;
      if (e.kind == EntryKind::kBlob) {
        view.AddBlob(e.name, std::string());
        continue;
      }
      if (e.kind == EntryKind::kMetadata) {
        view.AddMetadataJson(e.name, "{}");
        continue;
      }
      buffers[i].resize(static_cast<size_t>(Volume(p.lengths)) *
                        DTypeSize(e.tensor.dtype));
      const TensorView into{.dtype = e.tensor.dtype,
                            .shape = p.lengths,
                            .data = buffers[i].data(),
                            .writable = true};
      if (!p.from->piece) {
        // Saved whole: the part is the caller's whole box.
        if (e.is_piece()) {
          view.AddTensorPiece(e.name, e.global_shape, e.offsets, into);
        } else {
          view.AddTensor(e.name, into);
        }
      } else {
        // A part of a saved piece, which the share holds as a whole tensor
        // of the piece's shape.
        std::vector<int64_t> within(p.offsets.size());
        for (size_t d = 0; d < within.size(); ++d) {
          within[d] = p.offsets[d] - p.from->offsets[d];
        }
        view.AddTensorPiece(e.name, p.from->lengths, within, into);
      }
    }
    // Into buffers no one else sees: no need for a staged copy.
    Result<CheckpointManager*> root = Root(q);
    Result<CheckpointInfo> info =
        root.ok() ? (*root)->Load(step, view, {.transactional = false})
                  : root.status();
    if (!info.ok()) {
      mine = info.status();
      break;
    }
    if (!described_info) {  // a one-rank share's: the step, its metadata
      out.info = *info;
      described_info = true;
    }
  }
  {
    CKPT_ASSIGN_OR_RETURN(std::vector<Status> outcomes,
                          AllGatherStatus(*comm_, mine));
    if (std::string why = FirstCause(outcomes); !why.empty()) {
      return AbortedError(why);
    }
  }
  for (const State& view : views) {
    CKPT_RETURN_IF_ERROR(CopyBackLoaded(view, state));
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    const Entry& e = *p.target;
    if (e.kind != EntryKind::kTensor) continue;
    std::vector<int64_t> at(p.offsets.size());
    for (size_t d = 0; d < at.size(); ++d) {
      at[d] = p.offsets[d] - (e.is_piece() ? e.offsets[d] : 0);
    }
    CopyIntoBox(buffers[i].data(), p.lengths, e.tensor.data, e.tensor.shape, at,
                DTypeSize(e.tensor.dtype));
  }
  return Status();
}

}  // namespace ckpt
