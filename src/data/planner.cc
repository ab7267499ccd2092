#include "data/planner.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <system_error>
#include <tuple>

#include "format/constants.h"
#include "util/boxes.h"
#include "util/dtype_text.h"
#include "util/names.h"

namespace ckpt {

Offer MakeOffer(const State& state, std::string host) {
  Offer offer;
  offer.host = std::move(host);
  if (!state.status().ok()) {
    offer.error_code = state.status().code();
    offer.error_message = state.status().message();
    return offer;
  }
  for (const Entry& e : state.entries()) {
    PieceOffer p;
    p.name = e.name;
    p.kind = e.kind;
    p.rank_local = e.rank_local;
    if (e.kind == EntryKind::kMetadata) {
      p.json = e.json;
    } else {
      p.dtype = e.tensor.dtype;
      p.shape = e.full_shape();
      p.offsets = e.is_piece() ? e.offsets
                               : std::vector<int64_t>(e.tensor.shape.size(), 0);
      p.lengths = e.tensor.shape;
    }
    offer.pieces.push_back(std::move(p));
  }
  return offer;
}

Result<SavePlan> MakePlan(const std::vector<Offer>& offers) {
  SavePlan plan;
  if (offers.empty() ||
      offers.size() > static_cast<size_t>(format::kMaxWorldSize)) {
    return InvalidArgumentError("save plan: " + std::to_string(offers.size()) +
                                " ranks; ckpt supports 1 to " +
                                std::to_string(format::kMaxWorldSize));
  }
  for (size_t r = 0; r < offers.size(); ++r) {
    if (offers[r].error_code != ErrorCode::kOk) {
      return Status(
          offers[r].error_code,
          (offers.size() > 1 ? "rank " + std::to_string(r) + ": " : "") +
              offers[r].error_message);
    }
    plan.hosts.push_back(offers[r].host);
  }
  // By (name, owner): a rank-local entry is a separate entry per rank.
  std::map<std::pair<std::string, int>, size_t> entry_index;
  using BoxKey = std::tuple<size_t, std::vector<int64_t>, std::vector<int64_t>>;
  std::map<BoxKey, size_t> piece_index;
  std::vector<std::vector<int>> holders;  // by piece
  for (size_t r = 0; r < offers.size(); ++r) {
    for (const PieceOffer& p : offers[r].pieces) {
      const int owner = p.rank_local ? static_cast<int>(r) : -1;
      auto [it, inserted] =
          entry_index.emplace(std::pair(p.name, owner), plan.entries.size());
      if (inserted) {
        PlannedEntry e;
        e.name = p.name;
        e.owner = owner;
        e.kind = p.kind;
        e.dtype = p.dtype;
        e.shape = p.shape;
        e.json = p.json;
        plan.entries.push_back(std::move(e));
      }
      PlannedEntry& e = plan.entries[it->second];
      if (e.kind != p.kind || (e.kind != EntryKind::kMetadata &&
                               (e.dtype != p.dtype || e.shape != p.shape))) {
        return InvalidArgumentError(
            "entry " + Quote(p.name) +
            " differs between ranks: " + std::string(EntryKindName(e.kind)) +
            " " + DescribeTensorType(e.dtype, e.shape) + " vs " +
            std::string(EntryKindName(p.kind)) + " " +
            DescribeTensorType(p.dtype, p.shape) + " on rank " +
            std::to_string(r));
      }
      if (e.kind == EntryKind::kMetadata) continue;
      auto [pit, pinserted] = piece_index.emplace(
          BoxKey{it->second, p.offsets, p.lengths}, plan.pieces.size());
      if (pinserted) {
        PlannedPiece piece;
        piece.entry = it->second;
        piece.offsets = p.offsets;
        piece.lengths = p.lengths;
        TensorView box{p.dtype, p.lengths, nullptr, false};
        CKPT_ASSIGN_OR_RETURN(piece.bytes, box.ByteSize());
        plan.pieces.push_back(std::move(piece));
        e.pieces.push_back(pit->second);
        holders.emplace_back();
      }
      holders[pit->second].push_back(static_cast<int>(r));
    }
  }
  // A name is either the job's or every rank's own, never both.
  for (const auto& [key, index] : entry_index) {
    if (key.second >= 0 && entry_index.count({key.first, -1})) {
      return InvalidArgumentError(
          "entry " + Quote(key.first) + " is rank-local on rank " +
          std::to_string(key.second) + " but global on another rank");
    }
  }
  // Every tensor must be covered exactly once by its distinct pieces.
  for (const PlannedEntry& e : plan.entries) {
    if (e.kind == EntryKind::kMetadata) continue;
    TensorView whole{e.dtype, e.shape, nullptr, false};
    CKPT_ASSIGN_OR_RETURN(uint64_t total, whole.NumElements());
    uint64_t covered = 0;
    std::vector<BoxRef> boxes;
    for (size_t i : e.pieces) {
      const PlannedPiece& p = plan.pieces[i];
      covered += *TensorView{e.dtype, p.lengths, nullptr, false}.NumElements();
      boxes.push_back({&p.offsets, &p.lengths});
    }
    if (FindOverlap(boxes)) {
      return InvalidArgumentError("entry " + Quote(e.name) +
                                  ": two ranks hold overlapping pieces");
    }
    if (covered != total) {
      return InvalidArgumentError("entry " + Quote(e.name) +
                                  ": the ranks' pieces cover " +
                                  std::to_string(covered) + " of " +
                                  std::to_string(total) + " elements");
    }
  }
  // Largest first to the least-loaded holder (ties: lowest rank).
  std::vector<size_t> order(plan.pieces.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return plan.pieces[a].bytes > plan.pieces[b].bytes;
  });
  plan.bytes_per_rank.assign(offers.size(), 0);
  for (size_t i : order) {
    int best = holders[i].front();
    for (int r : holders[i]) {
      if (plan.bytes_per_rank[r] < plan.bytes_per_rank[best]) best = r;
    }
    plan.pieces[i].writer = best;
    plan.bytes_per_rank[best] += plan.pieces[i].bytes;
  }
  return plan;
}

std::vector<format::DirectoryEntry> DirectoryEntries(const SavePlan& plan) {
  const size_t n = plan.entries.size();
  std::vector<format::RunBuilder> builders(n);
  std::vector<int> last(n, -1);
  std::vector<char> in_order(n, 1);
  // One pass in plan order, where the pieces lie in memory: a pass entry by
  // entry would jump across all of them, and ran several times slower
  // (docs/benchmarks.md, "Figures behind the library's constants"). Runs
  // need each entry's pieces by rank; an entry whose pieces are not is
  // summarized from a sorted copy below.
  for (const PlannedPiece& p : plan.pieces) {
    if (p.writer < last[p.entry]) in_order[p.entry] = 0;
    last[p.entry] = p.writer;
    if (in_order[p.entry]) {
      builders[p.entry].Add(p.offsets, p.lengths, p.writer);
    }
  }
  std::vector<format::DirectoryEntry> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const PlannedEntry& e = plan.entries[i];
    format::DirectoryEntry d{e.name,  e.kind, e.dtype, e.owner,
                             e.shape, e.json, {}};
    if (in_order[i]) {
      d.runs = builders[i].Take();
    } else {
      std::vector<format::PieceBox> boxes;
      for (size_t pi : e.pieces) {
        const PlannedPiece& p = plan.pieces[pi];
        boxes.push_back({&p.offsets, &p.lengths, p.writer});
      }
      std::stable_sort(
          boxes.begin(), boxes.end(),
          [](const auto& a, const auto& b) { return a.rank < b.rank; });
      d.runs = format::SummarizePieces(boxes);
    }
    out.push_back(std::move(d));
  }
  return out;
}

void PendingDirectoryEntries::Start(const SavePlan& plan) {
  if (plan.pieces.size() < kBesideWritesFrom) return;
  try {
    built_ = std::async(std::launch::async,
                        [&plan] { return DirectoryEntries(plan); });
  } catch (const std::system_error&) {
    // No thread to spare: Take summarizes the plan itself.
  }
}

std::vector<format::DirectoryEntry> PendingDirectoryEntries::Take(
    const SavePlan& plan) {
  if (!built_.valid()) return DirectoryEntries(plan);
  // Rethrows what the build threw (the commit's guard turns it into a
  // status).
  return built_.get();
}

}  // namespace ckpt
