#include "checkpoint/read_once.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "checkpoint/held_chunks.h"
#include "checkpoint/read_once_exchange.h"
#include "checkpoint/read_once_measure.h"
#include "checkpoint/read_once_node.h"
#include "messages/messages.h"
#include "util/checksum.h"
#include "util/env.h"
#include "util/log.h"
#include "util/thread_pool.h"

namespace ckpt {

namespace {

using read_once::Batches;
using read_once::BroadcastEach;
using read_once::CutRuns;
using read_once::DealRuns;
using read_once::Exchange;
using read_once::Mover;
using read_once::ProbeRanks;
using read_once::RanksFasterThanStorage;
using read_once::RingEach;
using read_once::Run;
using read_once::Shared;
using read_once::Transfers;

// At most this many bytes of chunks side by side are read by one rank, so
// that a large tensor every rank needs is read by many, in parallel.
constexpr uint64_t kRunBytes = uint64_t{8} << 20;
// kAuto times at least this many bytes of a rank's share read from
// storage (or all of it), a run, so that a storage's first-byte latency
// and a busy machine's hiccups weigh little (read_once_measure.h).
constexpr uint64_t kStorageProbeBytes = kRunBytes;
// By node, a leader reads this many bytes less of the shared chunks than
// the other ranks of its node, and probes meanwhile (ShareReads): about
// what the probe moves, 8 MiB.
constexpr uint64_t kProbeLead = uint64_t{8} << 20;
// The chunks every rank needs go round a ring of the ranks (RingEach)
// where the readers' shares of them are this large on average, and as
// broadcasts (BroadcastEach) where they are smaller: on the node bed, 8
// ranks passing 32 MiB shares round a ring took a third of the time of
// eight broadcasts of them (docs/benchmarks.md), while a ring's world - 1
// steps cost more than a broadcast's few where each message is short.
constexpr uint64_t kRingShareBytes = uint64_t{1} << 20;
// A chunk as the ranks name it: its bytes' checksum and length. A
// compressed chunk goes from rank to rank as its stored bytes, which each
// rank that needs it decompresses and checks itself (the bytes stand for
// the chunk's range of the object, and that range holds the stored bytes):
// it is named by the stored length, with the stored bytes' checksum folded
// in, so that two encodings of the same bytes are two chunks.
ChunkId IdOf(const format::ChunkRecord& c) {
  if (!c.compressed()) return {c.checksum, c.length};
  return {{c.checksum.high, c.checksum.low ^ c.stored_checksum},
          c.stored_length()};
}

// Reads the chunks this rank reads for the job into their places: raw ones
// as ReadChunks does (each checked as it arrives), compressed ones as their
// stored bytes, checked against the stored checksum (what is sent is what
// was checked; each rank that takes them decompresses and checks the rest).
Status ReadShare(Storage& storage, const format::Manifest& manifest,
                 std::vector<ChunkRead> chunks, ThreadPool* pool) {
  std::vector<ChunkRead> raw, stored;
  for (const ChunkRead& c : chunks) {
    (c.chunk->compressed() ? stored : raw).push_back(c);
  }
  CKPT_RETURN_IF_ERROR(ReadChunks(storage, manifest, std::move(raw), pool,
                                  /*max_gap=*/0));
  const int parallelism = pool == nullptr ? 1 : pool->size() + 1;
  return ParallelFor(pool, parallelism, stored.size(), [&](size_t i) {
    const ChunkRead& c = stored[i];
    const std::span<std::byte> bytes(c.dest, c.chunk->stored_length());
    CKPT_RETURN_IF_ERROR(storage.ReadRange(
        manifest.objects[c.chunk->object].key, c.chunk->offset, bytes));
    if (Xxh3_64(bytes) != c.chunk->stored_checksum) {
      return ChecksumMismatch(manifest, *c.entry, *c.chunk);
    }
    return Status();
  });
}

}  // namespace

bool ReadOnceWanted(const LoadOptions& load, const Communicator& comm,
                    const Storage& storage) {
  if (comm.size() <= 1 || load.read_once == LoadOptions::ReadOnce::kOff) {
    return false;
  }
  // Reads at memory speed: a byte sent costs more than a byte read again.
  if (load.read_once == LoadOptions::ReadOnce::kAuto &&
      storage.capabilities().local_reads) {
    return false;
  }
  return !EnvSwitchOff("CKPT_READ_ONCE");
}

Status AddNeededChunks(const format::EntryRecord& entry,
                       const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths,
                       std::vector<NeededChunk>& out) {
  return ForEachChunkMeeting(entry, offsets, lengths,
                             [&](const format::ChunkRecord& c) {
                               out.push_back({&entry, &c});
                             });
}

Result<SharedReads> ShareReads(Communicator& comm, Storage& storage,
                               LoadOptions::ReadOnce mode,
                               const format::Manifest& manifest,
                               const std::vector<NeededChunk>* mine,
                               ThreadPool* pool) {
  const auto start = std::chrono::steady_clock::now();
  const int world = comm.size();
  const int me = comm.rank();
  SharedReads out;
  // 1. Every rank's plan. A rank whose communicator cannot pass messages
  // says so here, so that no rank waits on a message that never comes.
  ReadOncePlan plan;
  plan.can_send = comm.SendRecv(EncodeReadOnceBatch({}), -1, -1).ok();
  plan.host = comm.host_name();
  // With kAuto (over a storage reached through a link: ReadOnceWanted),
  // whether it pays (docs/design.md, "Every byte read once"): on one host
  // over a storage that hands objects over in place, never; elsewhere, as
  // the ranks measure.
  const bool automatic = mode == LoadOptions::ReadOnce::kAuto;
  plan.in_place = automatic && storage.capabilities().object_views;
  plan.measure = automatic;
  std::map<ChunkId, std::vector<const NeededChunk*>> places;
  if (mine != nullptr) {
    plan.planned = true;
    for (const NeededChunk& c : *mine) places[IdOf(*c.chunk)].push_back(&c);
    plan.chunks.reserve(places.size());
    for (const auto& [id, at] : places) {
      const format::ChunkRecord& c = *at[0]->chunk;
      plan.chunks.push_back(id);
      plan.places.push_back(
          {Xxh3_128(manifest.objects[c.object].key).low, c.offset});
    }
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                        comm.AllGather(EncodeReadOncePlan(plan)));
  std::vector<ReadOncePlan> plans(gathered.size());
  bool all_send = true, in_place = false, measure = false;
  for (size_t r = 0; r < gathered.size(); ++r) {
    Result<ReadOncePlan> p = DecodeReadOncePlan(gathered[r]);
    if (!p.ok()) {
      return p.status().WithContext("the read plan of rank " +
                                    std::to_string(r));
    }
    plans[r] = std::move(*p);
    if (!plans[r].planned) out.another_failed = mine != nullptr;
    all_send = all_send && plans[r].can_send;
    in_place = in_place || plans[r].in_place;
    measure = measure || plans[r].measure;
  }
  gathered.clear();
  if (mine == nullptr || out.another_failed || !all_send) return out;
  // Every rank needs the same chunks (a replicated state): the ranks of a
  // node can hold them once for all (read_once_node.h).
  bool same_needs = true;
  for (const ReadOncePlan& p : plans) {
    same_needs =
        same_needs && p.chunks == plans[0].chunks &&
        std::equal(p.places.begin(), p.places.end(), plans[0].places.begin(),
                   plans[0].places.end(), [](const auto& a, const auto& b) {
                     return a.object == b.object && a.offset == b.offset;
                   });
  }
  // On one host, from a storage that hands its objects over in place, the
  // host's memory already holds each byte once for all its ranks (the page
  // cache, or mem://'s buffers): sending would only add copies.
  bool one_host = true;
  for (const ReadOncePlan& p : plans)
    one_host = one_host && p.host == plan.host;
  if (one_host && in_place) return out;

  // 2. Who needs each chunk, and who reads the shared ones (read_once.h).
  std::map<ChunkId, Shared> by_id;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < plans[r].chunks.size(); ++i) {
      Shared& s = by_id[plans[r].chunks[i]];
      s.id = plans[r].chunks[i];
      s.ranks.push_back(r);
      s.place = std::min(s.place, std::pair(plans[r].places[i].object,
                                            plans[r].places[i].offset));
    }
  }
  std::vector<uint64_t> reads(world, 0);
  // Of the shared chunks, the bytes each rank needs and does not read
  // itself: what comes to it from other ranks, or else from storage.
  std::vector<uint64_t> rest(world, 0);
  std::vector<Shared*> shared;
  for (auto& [id, s] : by_id) {
    if (s.ranks.size() == 1) {
      reads[s.ranks[0]] += id.length;
    } else {
      shared.push_back(&s);
    }
  }
  if (shared.empty()) return out;
  // Side by side in their objects, cut into runs (a run is read by one
  // rank with one range read).
  std::sort(shared.begin(), shared.end(), [](const Shared* a, const Shared* b) {
    return std::tie(a->place, a->id) < std::tie(b->place, b->id);
  });
  const std::vector<Run> runs = CutRuns(shared, kRunBytes);
  std::map<std::string, int> nodes;
  std::vector<int> node_of(world);
  for (int r = 0; r < world; ++r) {
    node_of[r] = nodes.emplace(plans[r].host, nodes.size()).first->second;
  }
  // The ranks of each node, ascending; the first is the node's leader.
  std::vector<std::vector<int>> node_ranks(nodes.size());
  for (int r = 0; r < world; ++r) node_ranks[node_of[r]].push_back(r);
  const std::vector<int>& my_node = node_ranks[node_of[me]];
  bool by_node = same_needs && static_cast<size_t>(world) > nodes.size();
  // By node with kAuto, each leader reads kProbeLead bytes less than its
  // node's other ranks: it probes the way (ProbeRanks) while they still
  // read, as their node's link carries them no slower.
  const bool lead = by_node && measure && nodes.size() > 1;
  if (lead) {
    for (const std::vector<int>& n : node_ranks) reads[n.front()] += kProbeLead;
  }
  const std::vector<int> reader_of = DealRuns(shared, runs, node_of, reads);
  if (lead) {
    for (const std::vector<int>& n : node_ranks) reads[n.front()] -= kProbeLead;
  }
  plans.clear();
  // Each run's reader, and its way to each rank that needs it: straight
  // to those on the reader's node, and to one rank of each other node (the
  // relay, the one that relays the fewest bytes so far), which passes it
  // on to the others of its node. A byte crosses the network once a node.
  std::vector<uint64_t> relayed(world, 0);
  // Of the shared chunks, the bytes that reach each node over its link: a
  // run read on another node crosses into a node that needs it once (to
  // one rank, which relays it within the node, or round the ring).
  std::vector<uint64_t> crossing(nodes.size(), 0);
  Transfers direct(world), relay(world);
  // Runs every rank needs, by reader: broadcast.
  std::vector<std::vector<const Shared*>> everyone(world);
  std::vector<const Shared*> own;
  for (size_t k = 0; k < runs.size(); ++k) {
    const Run& run = runs[k];
    const std::vector<int>& ranks = shared[run.begin]->ranks;
    const int reader = reader_of[k];
    std::vector<int> into;  // the other nodes that need it
    for (int r : ranks) {
      if (r != reader) rest[r] += run.bytes;
      if (node_of[r] != node_of[reader]) into.push_back(node_of[r]);
    }
    std::sort(into.begin(), into.end());
    into.erase(std::unique(into.begin(), into.end()), into.end());
    for (int n : into) crossing[n] += run.bytes;
    if (reader == me) {
      for (size_t i = run.begin; i < run.end; ++i) own.push_back(shared[i]);
    }
    if (ranks.size() == static_cast<size_t>(world)) {
      for (size_t i = run.begin; i < run.end; ++i) {
        everyone[reader].push_back(shared[i]);
      }
      continue;
    }
    std::map<int, std::vector<int>> by_node;
    for (int r : ranks) {
      if (r != reader) by_node[node_of[r]].push_back(r);
    }
    auto add = [&](Transfers& t, int from, int to) {
      for (size_t i = run.begin; i < run.end; ++i) {
        if (from == me) t.send[to].push_back(shared[i]);
        if (to == me) t.receive[from].push_back(shared[i]);
      }
    };
    for (const auto& [node, members] : by_node) {
      if (node == node_of[reader] || members.size() == 1) {
        for (int r : members) add(direct, reader, r);
        continue;
      }
      int via = -1;
      for (int r : members) {
        if (via < 0 || relayed[r] < relayed[via]) via = r;
      }
      relayed[via] += run.bytes;
      add(direct, reader, via);
      for (int r : members) {
        if (r != via) add(relay, via, r);
      }
    }
  }

  // 3. The memory every chunk this rank needs is held in, laid out as the
  // objects are (HeldChunks).
  std::map<std::string, uint64_t, std::less<>> ends;
  for (const NeededChunk& c : *mine) {
    uint64_t& end = ends[manifest.objects[c.chunk->object].key];
    end = std::max(end, c.chunk->StoredEnd());
  }
  std::optional<SharedMemoryFile> node_memory;
  if (by_node) {
    CKPT_ASSIGN_OR_RETURN(
        node_memory, read_once::ShareNodeMemory(
                         comm, my_node, HeldChunks::SizeOf(ends), by_node));
  }
  Result<std::unique_ptr<HeldChunks>> made =
      HeldChunks::Make(&storage, ends, node_memory ? node_memory->fd() : -1);
  // One node holds every chunk its ranks read: nothing to weigh.
  if (by_node && nodes.size() == 1) measure = false;
  if (!made.ok()) {
    // Its partners would wait for messages that never come.
    comm.Abort(made.status());
    return made.status();
  }
  std::unique_ptr<HeldChunks> held = std::move(*made);
  const auto held_at = std::chrono::steady_clock::now();
  // This rank's share of the reading, in the order of their places in the
  // objects, so that adjacent chunks are read with one range read straight
  // into place.
  std::sort(own.begin(), own.end(), [&](const Shared* a, const Shared* b) {
    const format::ChunkRecord& x = *places.at(a->id)[0]->chunk;
    const format::ChunkRecord& y = *places.at(b->id)[0]->chunk;
    return std::pair(x.object, x.offset) < std::pair(y.object, y.offset);
  });
  uint64_t own_bytes = 0;
  for (const Shared* s : own) own_bytes += s->id.length;
  std::map<ChunkId, const std::byte*> bytes_of;
  Mover mover(comm, *held, manifest, places, bytes_of);
  // In the node's memory, a rank takes the pages it reads into first
  // (SharedMemoryFile::Reserve): where there is no room, it reads nothing,
  // as a failed read.
  const auto reserve = [&](const std::vector<ChunkRead>& chunks) -> Status {
    if (!node_memory) return Status();
    uint64_t begin = 0, end = 0;
    for (const ChunkRead& c : chunks) {
      const uint64_t at = held->OffsetOf(c.dest);
      if (at != end) {
        CKPT_RETURN_IF_ERROR(node_memory->Reserve(begin, end - begin));
        begin = at;
      }
      end = at + c.chunk->StoredLength();
    }
    return node_memory->Reserve(begin, end - begin);
  };
  // With kAuto, the first chunks of the share, at least kStorageProbeBytes
  // (or all of it), are timed: the rate from storage that decides whether
  // the rest goes rank to rank (RanksFasterThanStorage).
  std::vector<ChunkRead> first, then;
  uint64_t first_bytes = 0;
  for (const Shared* s : own) {
    const NeededChunk& c = *places.at(s->id)[0];
    std::byte* dest = mover.Home(s->id);
    const bool early = !measure || first_bytes < kStorageProbeBytes;
    (early ? first : then).push_back({c.entry, c.chunk, dest});
    if (early) first_bytes += s->id.length;
    bytes_of[s->id] = dest;
  }
  // The chunks only this rank needs, read into the same memory on a thread
  // of their own once its share for others is read, so that it holds every
  // chunk it needs: the load then checks them where they lie and copies
  // them once (HeldChunks). Read after the exchange, they left this rank's
  // link to storage idle while it waited for the others' shares (resharding
  // 8 ranks to 6 on the node bed, a fifth of the load); read after kAuto's
  // decision, while the ranks that read little for others waited for it (a
  // third of that reshard). Whatever is decided, this rank reads them. One
  // it cannot read is left to the load, which meets the error where it
  // lies. Joined before `held` can go (a future of std::async waits in its
  // destructor). Not by node: there every rank needs every chunk.
  std::vector<ChunkRead> alone;
  if (!by_node) {
    for (const auto& [id, s] : by_id) {
      if (s.ranks.size() != 1 || s.ranks[0] != me) continue;
      const NeededChunk& c = *places.at(id)[0];
      alone.push_back({c.entry, c.chunk, mover.Home(id)});
    }
  }
  std::sort(alone.begin(), alone.end(), [](const auto& a, const auto& b) {
    return std::pair(a.chunk->object, a.chunk->offset) <
           std::pair(b.chunk->object, b.chunk->offset);
  });
  auto alone_begin = std::chrono::steady_clock::now();
  auto alone_done = alone_begin;
  const auto read_alone = [&] {
    Status s = ReadShare(storage, manifest, alone, pool);
    alone_done = std::chrono::steady_clock::now();
    return s;
  };
  // With kAuto the share is read on a thread of its own, the first chunks
  // timed, while this one probes the way between ranks and then decides:
  // the probe costs the load no time of its own, and the reads go on
  // through the decision (every rank needs the chunks it reads, whatever
  // is decided). Without a probe, read here. Joined before `held` can go.
  ReadOnceRates measured;
  const auto read_begin = std::chrono::steady_clock::now();
  auto read_done = read_begin;
  bool first_read = false;
  std::promise<void> first_done;
  std::future<void> first_ready = first_done.get_future();
  std::future<Status> read_share = std::async(
      measure ? std::launch::async : std::launch::deferred,
      [&, first = std::move(first), then = std::move(then)]() mutable {
        Status s;
        {
          // Said on the way out, also by an exception, so that no one
          // waits for it for ever.
          struct Said {
            std::promise<void>& done;
            ~Said() { done.set_value(); }
          } said{first_done};
          s = reserve(first);
          if (s.ok()) s = ReadShare(storage, manifest, std::move(first), pool);
          read_done = std::chrono::steady_clock::now();
          first_read = s.ok();
        }
        if (s.ok() && !then.empty()) {
          s = reserve(then);
          if (s.ok()) s = ReadShare(storage, manifest, std::move(then), pool);
        }
        return s;
      });
  // Waited for by the thread that reads the chunks only this rank needs.
  const std::shared_future<Status> reading = read_share.share();
  // Joined before `reading` and `held` go: declared after them.
  std::future<Status> reading_alone;
  if (measure && !alone.empty()) {
    reading_alone = std::async(std::launch::async, [&, share = reading] {
      share.wait();
      alone_begin = std::chrono::steady_clock::now();
      return read_alone();
    });
  }
  // Where a node's ranks share their memory, only the nodes' leaders
  // exchange, and probe; once the share is read, as the exchange starts
  // no sooner (the leader gathers what its node read first), and beside
  // the reads the probe timed the ranks' contention for the processors,
  // not the way (on the node bed, 8 MiB at 55-120 MB/s where the leaders'
  // ring then ran at 400). Elsewhere beside the reads: a rank that reads
  // little starts to exchange while others still read.
  // On several nodes, the leaders alone probe, each for its node's link
  // (what crosses into the node, `crossing`): every rank probing at once
  // put ranks-per-node times the bytes on the links while they read
  // through them too, and on the node bed took the processors from the
  // reads (docs/benchmarks.md). On one host every rank probes.
  const bool leaders_probe = by_node || nodes.size() > 1;
  std::vector<int> probing;
  for (int r = 0; r < world; ++r) {
    if (!leaders_probe || node_ranks[node_of[r]].front() == r) {
      probing.push_back(r);
    }
  }
  if (by_node) reading.wait();
  // Beside the reads, two rounds (the faster counts): the second costs
  // the load nothing there. After them (by node), one: it holds up the
  // exchange, and nothing else runs to slow it.
  const Status probed =
      measure ? ProbeRanks(comm, rest, probing, by_node ? 1 : 2, measured)
              : Status();
  if (!measure) reading.wait();
  first_ready.wait();
  CKPT_RETURN_IF_ERROR(probed);

  // Every place this rank reads a chunk it holds from: a chunk stored at
  // several places is copied to the others (in a node's memory, by its
  // leader alone, before it tells the others what the node holds).
  const auto copy_places = [&] {
    for (const auto& [id, bytes] : bytes_of) {
      for (const NeededChunk* c : places.at(id)) {
        std::byte* home =
            held->At(manifest.objects[c->chunk->object].key, c->chunk->offset);
        if (home != bytes) std::memcpy(home, bytes, id.length);
      }
    }
  };
  const auto place_held = [&] {
    if (!by_node) copy_places();
    for (const auto& [id, bytes] : bytes_of) {
      for (const NeededChunk* c : places.at(id)) {
        held->Hold(manifest.objects[c->chunk->object].key, c->chunk->offset,
                   id.length);
      }
    }
    if (!held->empty()) out.storage = std::move(held);
  };
  bool pays = true;
  if (measure) {
    if (first_read) {
      measured.read_bytes = first_bytes;
      measured.read_ns = static_cast<uint64_t>(
          std::chrono::duration<double>(read_done - read_begin).count() * 1e9);
    }
    // By node, a node's leader receives all the node lacks, or the node's
    // ranks read it from storage, each a part.
    // Every shared chunk is one every rank needs there, so what a node
    // lacks is what the other nodes' ranks read (`reads`).
    std::vector<uint64_t> link = rest, from_storage = rest;
    if (by_node) {
      const uint64_t all_read =
          std::accumulate(reads.begin(), reads.end(), uint64_t{0});
      for (const std::vector<int>& n : node_ranks) {
        uint64_t lacks = all_read;
        for (int r : n) lacks -= reads[r];
        for (int r : n) {
          link[r] = r == n.front() ? lacks : 0;
          from_storage[r] = lacks / n.size();
        }
      }
    } else if (leaders_probe) {
      // The node's link carries what crosses into it, at its leader's
      // probe; each rank reads its own rest from storage.
      for (int r = 0; r < world; ++r) {
        link[r] =
            node_ranks[node_of[r]].front() == r ? crossing[node_of[r]] : 0;
      }
    }
    CKPT_ASSIGN_OR_RETURN(
        pays, RanksFasterThanStorage(comm, link, from_storage, measured));
    LogInfo("read once: rank " + std::to_string(me) + " decided after " +
            std::to_string(std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - start)
                               .count()) +
            " s");
    if (!pays && !by_node) {
      // Each rank reads the rest it needs itself, and keeps the chunks it
      // has read (a failed read keeps none: the reader meets the error
      // again where it lies).
      if (!reading.get().ok()) bytes_of.clear();
      if (reading_alone.valid() && reading_alone.get().ok()) {
        for (const ChunkRead& c : alone) bytes_of[IdOf(*c.chunk)] = c.dest;
      }
      place_held();
      return out;
    }
  }
  Status read = reading.get();
  const auto read_at = std::chrono::steady_clock::now();
  // A failed read sends every chunk as missing: the ranks that need them
  // read them themselves, and meet the error where it lies.
  if (!read.ok()) {
    bytes_of.clear();
    LogInfo("read once: rank " + std::to_string(me) +
            " could not read the chunks it reads for others (" +
            read.message() + "); they read them themselves");
  } else {
    out.read_for_others = own_bytes;
  }

  if (by_node) {
    // What each rank of the node reads into its memory, and the ring of
    // the nodes' leaders, each passing on what its node read; or, where
    // the node reads what it lacks itself, each rank a part of it.
    std::vector<std::vector<const Shared*>> node_reads(my_node.size());
    for (size_t i = 0; i < my_node.size(); ++i) {
      node_reads[i] = everyone[my_node[i]];
    }
    std::vector<int> ring;
    std::vector<std::vector<const Shared*>> by_leader(world);
    if (pays && nodes.size() > 1) {
      for (const std::vector<int>& n : node_ranks) {
        ring.push_back(n.front());
        for (int r : n) {
          by_leader[n.front()].insert(by_leader[n.front()].end(),
                                      everyone[r].begin(), everyone[r].end());
        }
      }
    } else if (!pays) {
      const auto dealt = read_once::DealToNode(my_node, node_of, everyone);
      std::vector<ChunkRead> part;
      for (size_t i = 0; i < my_node.size(); ++i) {
        node_reads[i].insert(node_reads[i].end(), dealt[i].begin(),
                             dealt[i].end());
        if (my_node[i] != me) continue;
        for (const Shared* s : dealt[i]) {
          const NeededChunk& c = *places.at(s->id)[0];
          part.push_back({c.entry, c.chunk, mover.Home(s->id)});
        }
      }
      if (reserve(part).ok() && ReadShare(storage, manifest, part, pool).ok()) {
        for (const ChunkRead& c : part) bytes_of[IdOf(*c.chunk)] = c.dest;
      }
    }
    CKPT_RETURN_IF_ERROR(read_once::ExchangeByNode(
        comm, my_node, node_reads, ring, by_leader,
        std::vector<const Shared*>(shared.begin(), shared.end()), copy_places,
        node_memory ? &*node_memory : nullptr, mover));
    out.received = mover.received();
    const auto since = [&](auto t) {
      return std::to_string(std::chrono::duration<double>(t - start).count());
    };
    if (LogEnabled(LogLevel::kInfo)) {
      LogInfo("read once, step " + std::to_string(manifest.step) + ": rank " +
              std::to_string(me) + " of the node of rank " +
              std::to_string(my_node.front()) + " held its memory at " +
              since(held_at) + " s, had read its share at " + since(read_at) +
              " s, and holds " + std::to_string(bytes_of.size()) + " of its " +
              std::to_string(places.size()) + " chunks at " +
              since(std::chrono::steady_clock::now()) + " s");
    }
    if (bytes_of.size() == places.size()) held->SetComplete();
    place_held();
    return out;
  }

  // 4. The chunks only this rank needs (alone, above), read on a thread of
  // their own while the exchange runs, unless already under way.
  const auto exchange_begin = std::chrono::steady_clock::now();
  if (!alone.empty() && !reading_alone.valid()) {
    alone_begin = exchange_begin;
    reading_alone = std::async(std::launch::async, read_alone);
  }
  // 5. The exchange: from the readers, then from the relays.
  for (const Transfers* t : {&direct, &relay}) {
    CKPT_RETURN_IF_ERROR(Exchange(comm, *t, mover));
  }
  // What every rank needs: round the ring, those of a node side by side,
  // or as broadcasts where the shares are small (kRingShareBytes).
  uint64_t everyone_bytes = 0;
  for (const auto& share : everyone) {
    for (const Shared* s : share) everyone_bytes += s->id.length;
  }
  if (everyone_bytes / world >= kRingShareBytes) {
    std::vector<int> ring(world);
    for (int r = 0; r < world; ++r) ring[r] = r;
    std::stable_sort(ring.begin(), ring.end(),
                     [&](int a, int b) { return node_of[a] < node_of[b]; });
    CKPT_RETURN_IF_ERROR(RingEach(comm, everyone, ring, mover));
  } else {
    CKPT_RETURN_IF_ERROR(BroadcastEach(comm, everyone, mover));
  }
  out.received = mover.received();
  const auto exchange_done = std::chrono::steady_clock::now();
  if (reading_alone.valid() && reading_alone.get().ok()) {
    for (const ChunkRead& c : alone) bytes_of[IdOf(*c.chunk)] = c.dest;
  }
  if (LogEnabled(LogLevel::kInfo)) {
    const auto seconds = [](auto a, auto b) {
      return std::to_string(std::chrono::duration<double>(b - a).count());
    };
    LogInfo(
        "read once, step " + std::to_string(manifest.step) + ": rank " +
        std::to_string(me) + " read " + std::to_string(out.read_for_others) +
        " bytes that other ranks need in " + seconds(start, exchange_begin) +
        " s, received " + std::to_string(out.received) + " bytes in " +
        seconds(exchange_begin, exchange_done) + " s, and read the " +
        std::to_string(alone.size()) + " chunks only it needs in " +
        seconds(alone_begin, alone_done) + " s from " +
        seconds(start, alone_begin) + " s");
  }

  if (bytes_of.size() == places.size()) held->SetComplete();
  place_held();
  return out;
}

}  // namespace ckpt
