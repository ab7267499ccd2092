#include "checkpoint/read_once_exchange.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

namespace ckpt::read_once {

namespace {

// At most this many bytes of chunks in one message (one chunk larger goes
// alone), so that neither side holds more than one such message at a time
// for the exchange itself.
constexpr uint64_t kBatchBytes = uint64_t{64} << 20;

// How much of `bytes` each bin holding `load` takes so that those that
// take any end level, at or below those that take none (water-filling).
std::vector<double> Fill(const std::vector<uint64_t>& load, double bytes) {
  std::vector<size_t> order(load.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return load[a] < load[b]; });
  double level = 0, below = 0;
  size_t n = 0;
  while (n < order.size()) {
    below += static_cast<double>(load[order[n]]);
    ++n;
    level = (bytes + below) / static_cast<double>(n);
    if (n == order.size() || level <= static_cast<double>(load[order[n]])) {
      break;
    }
  }
  std::vector<double> fill(load.size(), 0);
  for (size_t i = 0; i < n; ++i) {
    fill[order[i]] = level - static_cast<double>(load[order[i]]);
  }
  return fill;
}

}  // namespace

std::vector<Run> CutRuns(const std::vector<Shared*>& shared,
                         uint64_t max_bytes) {
  std::vector<Run> runs;
  for (size_t i = 0; i < shared.size(); ++i) {
    const Shared& s = *shared[i];
    if (!runs.empty()) {
      Run& last = runs.back();
      const Shared& prev = *shared[i - 1];
      if (s.place.first == prev.place.first &&
          s.place.second == prev.place.second + prev.id.length &&
          s.ranks == prev.ranks && last.bytes + s.id.length <= max_bytes) {
        last.end = i + 1;
        last.bytes += s.id.length;
        continue;
      }
    }
    runs.push_back({i, i + 1, s.id.length});
  }
  return runs;
}

std::vector<int> DealRuns(const std::vector<Shared*>& shared,
                          const std::vector<Run>& runs,
                          const std::vector<int>& node_of,
                          std::vector<uint64_t>& reads) {
  std::vector<int> reader_of(runs.size(), -1);
  std::map<std::vector<int>, std::pair<uint64_t, std::vector<size_t>>>
      groups;  // rank set -> bytes, runs in place order
  for (size_t k = 0; k < runs.size(); ++k) {
    auto& g = groups[shared[runs[k].begin]->ranks];
    g.first += runs[k].bytes;
    g.second.push_back(k);
  }
  std::vector<const std::pair<const std::vector<int>,
                              std::pair<uint64_t, std::vector<size_t>>>*>
      by_size;
  for (const auto& g : groups) by_size.push_back(&g);
  // The nodes of each set of ranks, ascending, each once.
  std::map<const std::vector<int>*, std::vector<int>> nodes_of;
  for (const auto* g : by_size) {
    std::vector<int>& n = nodes_of[&g->first];
    for (int r : g->first) n.push_back(node_of[r]);
    std::sort(n.begin(), n.end());
    n.erase(std::unique(n.begin(), n.end()), n.end());
  }
  // The runs that fewer nodes need first: they have the least choice of
  // a node to read them (those only one node needs, none), and those with
  // more then even out around them. Of as many nodes, larger sets first.
  std::stable_sort(by_size.begin(), by_size.end(), [&](auto* a, auto* b) {
    return std::pair(nodes_of[&a->first].size(), b->second.first) <
           std::pair(nodes_of[&b->first].size(), a->second.first);
  });
  // What each node reads in all: its ranks share its link to storage.
  std::vector<uint64_t> node_reads(
      node_of.empty() ? 0
                      : *std::max_element(node_of.begin(), node_of.end()) + 1,
      0);
  for (size_t r = 0; r < reads.size(); ++r) {
    node_reads[node_of[r]] += reads[r];
  }
  for (const auto* g : by_size) {
    const std::vector<int>& need = g->first;
    // The group's bytes go to its nodes first, as even as can be with all
    // that each node reads (others' groups and chunks only one rank needs
    // included), then to its ranks on each node, as even as can be among
    // them.
    const std::vector<int>& group_nodes = nodes_of[&need];
    std::vector<uint64_t> load;
    for (int n : group_nodes) load.push_back(node_reads[n]);
    const std::vector<double> node_fill =
        Fill(load, static_cast<double>(g->second.first));
    std::vector<std::vector<int>> on(group_nodes.size());
    for (int r : need) {
      on[std::lower_bound(group_nodes.begin(), group_nodes.end(), node_of[r]) -
         group_nodes.begin()]
          .push_back(r);
    }
    std::vector<std::pair<int, double>> quota;  // rank, bytes
    for (size_t j = 0; j < group_nodes.size(); ++j) {
      if (node_fill[j] <= 0) continue;
      std::vector<uint64_t> rank_reads;
      for (int r : on[j]) rank_reads.push_back(reads[r]);
      const std::vector<double> fill = Fill(rank_reads, node_fill[j]);
      for (size_t i = 0; i < on[j].size(); ++i) {
        if (fill[i] > 0) quota.emplace_back(on[j][i], fill[i]);
      }
    }
    // The readers fill up in the order of their nodes, so that the blocks
    // of a node's ranks lie side by side: by node, a node's share goes
    // round the ring of leaders in few large batches (its leader, which
    // reads less, would otherwise come last and cut every node's share in
    // two).
    std::sort(quota.begin(), quota.end(), [&](const auto& a, const auto& b) {
      return std::pair(node_of[a.first], a.first) <
             std::pair(node_of[b.first], b.first);
    });
    if (quota.empty()) quota.emplace_back(need.front(), 0);  // no bytes
    size_t i = 0;
    double left = quota[0].second;
    for (size_t k : g->second.second) {
      // On to the next reader once this one's block is full (a run
      // that would overfill it by more than half goes to the next).
      while (i + 1 < quota.size() && left < runs[k].bytes / 2.0) {
        ++i;
        left = quota[i].second;
      }
      reader_of[k] = quota[i].first;
      left -= static_cast<double>(runs[k].bytes);
    }
    for (size_t k : g->second.second) {
      reads[reader_of[k]] += runs[k].bytes;
      node_reads[node_of[reader_of[k]]] += runs[k].bytes;
    }
  }
  return reader_of;
}

// `items` in the order of their places, cut into messages of at most
// kBatchBytes (or one chunk) of chunks that lie back to back in their
// object: such a message goes out of, and into, the memory the chunks are
// held in (HeldChunks keeps them as their objects lay them out) without a
// copy. Every rank cuts the same lists alike.
std::vector<std::vector<const Shared*>> Batches(
    std::vector<const Shared*> items) {
  std::stable_sort(
      items.begin(), items.end(), [](const Shared* a, const Shared* b) {
        return std::tie(a->place, a->id) < std::tie(b->place, b->id);
      });
  std::vector<std::vector<const Shared*>> out;
  uint64_t bytes = 0;
  for (const Shared* s : items) {
    const Shared* prev = out.empty() ? nullptr : out.back().back();
    const bool after = prev != nullptr && s->place.first == prev->place.first &&
                       s->place.second == prev->place.second + prev->id.length;
    if (!after || (bytes > 0 && bytes + s->id.length > kBatchBytes)) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(s);
    bytes += s->id.length;
  }
  return out;
}

uint64_t Mover::SizeOf(const std::vector<const Shared*>& chunks) {
  uint64_t n = 0;
  for (const Shared* s : chunks) n += s->id.length;
  return n;
}

std::byte* Mover::Buffer(std::unique_ptr<std::byte[]>& buffer,
                         uint64_t& capacity, uint64_t size) {
  if (capacity < size) {
    buffer.reset();
    buffer.reset(new std::byte[size]);
    capacity = size;
  }
  return buffer.get();
}

std::byte* Mover::Home(const ChunkId& id) const {
  const format::ChunkRecord& c = *places_.at(id)[0]->chunk;
  return held_.At(manifest_.objects[c.object].key, c.offset);
}

void Mover::Mark(const ChunkId& id, bool received) {
  if (received && !Holds(id)) received_ += id.length;
  bytes_of_[id] = Home(id);
}

std::vector<bool> Mover::Pack(const std::vector<const Shared*>& chunks,
                              std::span<const std::byte>& payload) {
  std::vector<bool> present;
  bool whole = true;
  const std::byte* next = nullptr;
  for (const Shared* s : chunks) {
    auto found = bytes_of_.find(s->id);
    present.push_back(found != bytes_of_.end());
    if (found == bytes_of_.end() ||
        (next != nullptr && found->second != next)) {
      whole = false;
    }
    if (found != bytes_of_.end()) next = found->second + s->id.length;
  }
  const uint64_t size = SizeOf(chunks);
  if (whole && !chunks.empty()) {
    payload = {bytes_of_.at(chunks[0]->id), size};
  } else {
    std::byte* out = Buffer(out_, out_size_, size);
    uint64_t at = 0;
    for (const Shared* s : chunks) {
      auto found = bytes_of_.find(s->id);
      if (found != bytes_of_.end()) {
        std::memcpy(out + at, found->second, s->id.length);
      }
      at += s->id.length;
    }
    payload = {out, size};
  }
  return present;
}

std::span<std::byte> Mover::Landing(
    const std::vector<const Shared*>& expected) {
  const uint64_t size = SizeOf(expected);
  std::byte* first = Home(expected[0]->id);
  std::byte* next = first;
  for (const Shared* s : expected) {
    if (Home(s->id) != next) return {Buffer(in_, in_size_, size), size};
    next += s->id.length;
  }
  return {first, size};
}

Status Mover::Take(const Result<std::string>& got,
                   const std::vector<const Shared*>& expected,
                   std::span<const std::byte> landing, int source) {
  Result<ReadOnceBatch> batch =
      got.ok() ? DecodeReadOnceBatch(*got) : got.status();
  if (!batch.ok() || batch->present.size() != expected.size() ||
      !batch->data.empty()) {
    const Status why = DataLossError(
        "read once: rank " + std::to_string(source) +
        " sent chunks that its plan does not hold" +
        (batch.ok() ? "" : " (" + batch.status().message() + ")"));
    comm_.Abort(why);
    return why;
  }
  uint64_t at = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const ChunkId& id = expected[i]->id;
    if (batch->present[i]) {
      std::byte* home = Home(id);
      if (home != landing.data() + at) {
        std::memcpy(home, landing.data() + at, id.length);
      }
      bytes_of_[id] = home;
      received_ += id.length;
    }
    at += id.length;
  }
  return Status();
}

Status Mover::Lost(const Status& why, const std::string& what) {
  if (why.code() == ErrorCode::kDataLoss) comm_.Abort(why);
  return why.WithContext(what);
}

namespace {

// The batches `sends` to `dest` while the batches `receives` come from
// `source` (-1: none), one pair at a time, each side's lists as both plans
// say. Sends the chunks this rank holds (the others as missing); takes what
// arrives.
Status Swap(Communicator& comm, Mover& mover,
            const std::vector<std::vector<const Shared*>>& sends, int dest,
            const std::vector<std::vector<const Shared*>>& receives, int source,
            const std::string& with) {
  for (size_t j = 0; j < std::max(sends.size(), receives.size()); ++j) {
    const bool sending = j < sends.size(), receiving = j < receives.size();
    std::span<const std::byte> payload;
    Result<std::string> got = comm.SendRecv(
        sending ? EncodeReadOnceBatch(mover.Pack(sends[j], payload), {})
                : std::string(),
        sending ? dest : -1, receiving ? source : -1);
    // A message that fails fails this rank's load; its partners fail too,
    // within the communicator's timeout (docs/tiers.md).
    if (!got.ok()) return got.status().WithContext(with);
    const std::span<std::byte> landing =
        receiving ? mover.Landing(receives[j]) : std::span<std::byte>();
    if (Status s = comm.SendRecvInto(payload, sending ? dest : -1, landing,
                                     receiving ? source : -1);
        !s.ok()) {
      return mover.Lost(s, with);
    }
    if (!receiving) continue;
    CKPT_RETURN_IF_ERROR(mover.Take(got, receives[j], landing, source));
  }
  return Status();
}

}  // namespace

Status Exchange(Communicator& comm, const Transfers& t, Mover& mover) {
  const int world = comm.size();
  const int me = comm.rank();
  for (int k = 1; k < world; ++k) {
    const int dest = (me + k) % world;
    const int source = (me - k + world) % world;
    CKPT_RETURN_IF_ERROR(Swap(comm, mover, Batches(t.send[dest]), dest,
                              Batches(t.receive[source]), source,
                              "read once: chunks with ranks " +
                                  std::to_string(dest) + " and " +
                                  std::to_string(source)));
  }
  return Status();
}

Status RingEach(Communicator& comm,
                const std::vector<std::vector<const Shared*>>& everyone,
                const std::vector<int>& ring, Mover& mover) {
  const int world = static_cast<int>(ring.size());
  const int at = static_cast<int>(
      std::find(ring.begin(), ring.end(), comm.rank()) - ring.begin());
  if (world <= 1 || at == world) return Status();
  const int dest = ring[(at + 1) % world];
  const int source = ring[(at - 1 + world) % world];
  // In step k a rank passes on the share it took in step k - 1 (its own
  // first) and takes the one before it on the ring.
  for (int k = 0; k + 1 < world; ++k) {
    const int passed = ring[(at - k + world) % world];
    const int taken = ring[(at - k - 1 + world) % world];
    CKPT_RETURN_IF_ERROR(
        Swap(comm, mover, Batches(everyone[passed]), dest,
             Batches(everyone[taken]), source,
             "read once: the chunks read by rank " + std::to_string(taken) +
                 ", passed on the ring from rank " + std::to_string(source) +
                 " to rank " + std::to_string(dest)));
  }
  return Status();
}

Status BroadcastEach(Communicator& comm,
                     const std::vector<std::vector<const Shared*>>& everyone,
                     Mover& mover) {
  const int world = comm.size();
  const int me = comm.rank();
  for (int r = 0; r < world; ++r) {
    const std::string what =
        "read once: chunks broadcast by rank " + std::to_string(r);
    for (const auto& batch : Batches(everyone[r])) {
      std::span<const std::byte> payload;
      Result<std::string> got = comm.Broadcast(
          r == me ? EncodeReadOnceBatch(mover.Pack(batch, payload), {})
                  : std::string(),
          r);
      if (!got.ok()) return got.status().WithContext(what);
      // The root's bytes are only read (BroadcastInto writes on the others).
      const std::span<std::byte> landing =
          r == me ? std::span<std::byte>(const_cast<std::byte*>(payload.data()),
                                         payload.size())
                  : mover.Landing(batch);
      if (Status s = comm.BroadcastInto(landing, r); !s.ok()) {
        return mover.Lost(s, what);
      }
      if (r == me) continue;
      CKPT_RETURN_IF_ERROR(mover.Take(got, batch, landing, r));
    }
  }
  return Status();
}

}  // namespace ckpt::read_once
