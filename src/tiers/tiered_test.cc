// Tiers (ckpt/tiered.h) with ranks as threads on simulated nodes: saves to
// the local tier with replicas on other nodes, restores from it, from peers
// when a node lost its memory (without reading the durable tier), from the
// durable tier when it is newer or the world size changed; and faults: a
// peer's tier full, a peer dying mid-transfer, a power loss at every
// storage call of a tiered save.
#include "ckpt/tiered.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "checkpoint/catalog_record.h"
#include "format/constants.h"
#include "format/layout.h"
#include "gtest/gtest.h"
#include "testing/crash_storage.h"
#include "testing/fault_storage.h"
#include "testing/files.h"
#include "testing/run_ranks.h"
#include "testing/temp_dir.h"
#include "tiers/tier_share.h"

namespace ckpt {
namespace {

using testing::RunRanks;

constexpr int64_t kRows = 64, kCols = 16;

// One rank's training state: its rows of a sharded table, a replicated
// tensor, a rank-local tensor and blob, and metadata; a function of
// (rank, world, seed).
struct RankState {
  int64_t first = 0, rows = 0;
  std::vector<float> table;
  std::vector<double> bias;
  std::vector<int64_t> position;
  std::string rng;
  bool rank_local;

  RankState(int rank, int world, uint64_t seed, bool rank_local = true)
      : rank_local(rank_local) {
    first = kRows * rank / world;
    rows = kRows * (rank + 1) / world - first;
    table.resize(rows * kCols);
    for (size_t i = 0; i < table.size(); ++i) {
      table[i] = static_cast<float>(seed * 1000 + (first * kCols + i));
    }
    bias.assign(32, static_cast<double>(seed) / 7);
    position = {static_cast<int64_t>(seed), rank};
    rng = "rng-" + std::to_string(seed) + "-" + std::to_string(rank);
  }

  State Make() {
    State s;
    s.AddTensorPiece("table", {kRows, kCols}, {first, 0},
                     View(std::span<float>(table), {rows, kCols}));
    s.AddTensor("bias", View(bias));
    if (rank_local) {  // rank-local entries load at the saving world size
      s.AddRankLocalTensor("position", View(position));
      s.AddRankLocalBlob("rng", rng);
    }
    s.AddMetadata("info", {{"kind", "test"}});
    return s;
  }

  // Fills rng from what a load put into `s`.
  void Take(const State& s) {
    if (rank_local) rng = s.BlobString("rng").value();
  }

  bool operator==(const RankState& o) const {
    return table == o.table && bias == o.bias &&
           (!rank_local || (position == o.position && rng == o.rng));
  }
};

// Counts the reads of every storage opened through it.
struct ReadCounter {
  std::atomic<int> reads{0};
};

class CountingStorage : public StorageWrapper {
 public:
  CountingStorage(std::unique_ptr<Storage> target, ReadCounter* counter)
      : StorageWrapper(target.get()),
        owned_(std::move(target)),
        counter_(counter) {}
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    ++counter_->reads;
    return StorageWrapper::ReadRange(key, offset, out);
  }
  Result<std::string> ReadAll(std::string_view key) override {
    ++counter_->reads;
    return StorageWrapper::ReadAll(key);
  }

 private:
  std::unique_ptr<Storage> owned_;
  ReadCounter* counter_;
};

// A storage that owns its target and fails (a full tier) once armed.
class FullAfterArming : public testing::FaultStorage {
 public:
  FullAfterArming(std::unique_ptr<Storage> target, std::atomic<bool>* armed)
      : FaultStorage(target.get()), owned_(std::move(target)), armed_(armed) {}
  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    if (armed_->load()) return IOError("no space left on device (test)");
    return FaultStorage::NewWritable(key);
  }
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    if (armed_->load()) return IOError("no space left on device (test)");
    return FaultStorage::Put(key, data, mode);
  }

 private:
  std::unique_ptr<Storage> owned_;
  std::atomic<bool>* armed_;
};

// Forwards to a thread communicator; point-to-point call `die_at` on this
// rank aborts the group, as a peer that died mid-transfer does to MPI.
class DyingCommunicator : public Communicator {
 public:
  DyingCommunicator(Communicator* inner, int die_at)
      : inner_(inner), die_at_(die_at) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string host_name() const override { return inner_->host_name(); }
  Status Barrier() override { return inner_->Barrier(); }
  Result<std::vector<std::string>> AllGather(std::string_view m) override {
    return inner_->AllGather(m);
  }
  Result<std::string> Broadcast(std::string_view d, int root) override {
    return inner_->Broadcast(d, root);
  }
  Result<std::string> SendRecv(std::string_view d, int dest,
                               int source) override {
    if (calls_++ == die_at_) {
      inner_->Abort(AbortedError("rank " + std::to_string(rank()) + " died"));
      return AbortedError("this rank died");
    }
    return inner_->SendRecv(d, dest, source);
  }
  void Abort(Status why) override { inner_->Abort(std::move(why)); }
  bool died() const { return die_at_ >= 0 && calls_ > die_at_; }

 private:
  Communicator* inner_;
  int die_at_;
  int calls_ = 0;
};

std::string UniqueName(const std::string& what) {
  static std::atomic<int> n{0};
  return "tiered-" + what + "-" + std::to_string(getpid()) + "-" +
         std::to_string(n++);
}

struct Job {
  std::string durable_url;
  std::string local_url;  // with {node}
  std::vector<int> nodes;
  int64_t local_every = 1, durable_every = 0;
  int replicas = 1;
  double replication_rate = 0;  // bytes per second; 0: unpaced
  bool rank_local = true;       // the states have rank-local entries
  std::function<Result<std::unique_ptr<Storage>>(const std::string&)> open;
  std::function<Result<std::unique_ptr<Storage>>(const std::string&)>
      open_durable;
  std::shared_ptr<Catalog> catalog;  // the durable manager's
};

// Opens both tiers for rank `comm` of `job`.
struct Tiers {
  std::unique_ptr<CheckpointManager> durable;
  std::unique_ptr<TieredManager> tiers;

  Tiers(const Job& job, Communicator* comm) {
    Options o;
    o.communicator = comm;
    o.lease_seconds = 0;
    o.chunk_size = 4096;
    o.catalog = job.catalog;
    if (job.open_durable) {
      durable =
          CheckpointManager::Open(job.open_durable(job.durable_url).value(), o)
              .value();
    } else {
      durable = CheckpointManager::Open(job.durable_url, o).value();
    }
    TierOptions t;
    t.local_url = job.local_url;
    t.node_of_rank = job.nodes;
    t.local_every_steps = job.local_every;
    t.durable_every_steps = job.durable_every;
    t.replicas = job.replicas;
    t.replication_bytes_per_second = job.replication_rate;
    t.transfer_block_bytes = 4096;  // many messages per object
    t.open_local = job.open;
    Result<std::unique_ptr<TieredManager>> m = TieredManager::Open(*durable, t);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    if (m.ok()) tiers = std::move(*m);
  }
};

Job MemJob(const std::string& name, std::vector<int> nodes) {
  Job job;
  job.durable_url = "mem://" + UniqueName(name) + "-durable";
  job.local_url = "mem://" + UniqueName(name) + "-node{node}";
  job.nodes = std::move(nodes);
  return job;
}

// Saves steps with seeds = step on every rank; returns each rank's results.
void SaveSteps(const Job& job, int world, const std::vector<int64_t>& steps,
               std::vector<std::vector<TierSaveResult>>* results = nullptr) {
  if (results) results->assign(world, {});
  RunRanks(world, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    ASSERT_TRUE(t.tiers);
    for (int64_t step : steps) {
      RankState s(rank, world, step, job.rank_local);
      State state = s.Make();
      Result<TierSaveResult> r = t.tiers->Save(step, state);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (results) (*results)[rank].push_back(*r);
    }
  });
}

// Restores on `world` ranks; checks every rank got step `want` (its seed)
// from `tier`, bit for bit.
std::vector<TierRestoreResult> RestoreAndCheck(const Job& job, int world,
                                               int64_t want, Tier tier) {
  std::vector<TierRestoreResult> out(world);
  RunRanks(world, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    ASSERT_TRUE(t.tiers);
    RankState got(rank, world, 999, job.rank_local);
    State state = got.Make();
    Result<TierRestoreResult> r = t.tiers->Restore(state);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    out[rank] = *r;
    EXPECT_EQ(r->tier, tier) << "rank " << rank << ": " << r->local_skipped;
    EXPECT_EQ(r->step, want) << "rank " << rank;
    got.Take(state);
    EXPECT_TRUE(got == RankState(rank, world, want, job.rank_local))
        << "rank " << rank;
  });
  return out;
}

TEST(TieredTest, SharesAndReplicasAreCommittedCheckpointsOnTheirNodes) {
  Job job = MemJob("layout", {0, 0, 1, 1});
  std::vector<std::vector<TierSaveResult>> results;
  SaveSteps(job, 4, {1, 2}, &results);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(results[r][1].local) << results[r][1].local_error;
    EXPECT_FALSE(results[r][1].durable);
    EXPECT_GT(results[r][1].local_bytes, 0u);
    // The data and the share's metadata (index, directory, manifest).
    EXPECT_GT(results[r][1].replicated_bytes, results[r][1].local_bytes);
  }
  // Node 0 holds ranks 0 and 1 and replicas of 2 and 3; node 1 the rest.
  for (int node = 0; node < 2; ++node) {
    Result<std::vector<LocalShareInfo>> shares =
        ListLocalTier(NodeRootUrl(job.local_url, node));
    ASSERT_TRUE(shares.ok()) << shares.status().ToString();
    std::map<int, std::vector<int64_t>> by_rank;
    for (const LocalShareInfo& s : *shares) {
      EXPECT_TRUE(s.marked);
      EXPECT_EQ(s.world_size, 4);
      by_rank[s.rank].push_back(s.step);
    }
    EXPECT_EQ(by_rank.size(), 4u) << "node " << node;
    for (const auto& [rank, steps] : by_rank) {
      EXPECT_EQ(steps, (std::vector<int64_t>{1, 2})) << "rank " << rank;
    }
  }
  RestoreAndCheck(job, 4, 2, Tier::kLocal);
}

// The default replicas is what the nodes allow: none on one node (where one
// replica would fail every save), one copy on another node where there are
// several.
TEST(TieredTest, TheDefaultReplicasFollowTheJobsNodes) {
  auto durable =
      CheckpointManager::Open("mem://" + UniqueName("alone")).value();
  TierOptions t;
  t.local_url = "mem://" + UniqueName("alone-local");
  ASSERT_EQ(t.replicas, TierOptions::kReplicasAuto);
  Result<std::unique_ptr<TieredManager>> alone =
      TieredManager::Open(*durable, t);
  ASSERT_TRUE(alone.ok()) << alone.status().ToString();
  RankState s(0, 1, 1, true);
  State state = s.Make();
  Result<TierSaveResult> r = (*alone)->Save(1, state);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->local) << r->local_error;
  EXPECT_EQ(r->replicated_bytes, 0u);

  Job job = MemJob("auto", {0, 0, 1, 1});
  job.replicas = TierOptions::kReplicasAuto;
  std::vector<std::vector<TierSaveResult>> results;
  SaveSteps(job, 4, {1}, &results);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(results[rank][0].local) << results[rank][0].local_error;
    EXPECT_GT(results[rank][0].replicated_bytes, results[rank][0].local_bytes);
  }
  RestoreAndCheck(job, 4, 1, Tier::kLocal);
}

TEST(TieredTest, KeepsOnlyTheNewestMarkedSteps) {
  Job job = MemJob("keep", {0, 1});
  SaveSteps(job, 2, {1, 2, 3, 4});
  Result<std::vector<LocalShareInfo>> shares =
      ListLocalTier(NodeRootUrl(job.local_url, 0));
  ASSERT_TRUE(shares.ok());
  std::vector<std::pair<int, int64_t>> got;
  for (const LocalShareInfo& s : *shares) got.push_back({s.rank, s.step});
  EXPECT_EQ(got, (std::vector<std::pair<int, int64_t>>{
                     {0, 3}, {0, 4}, {1, 3}, {1, 4}}));
}

// A job that went back to older steps (it restored from the durable tier,
// its local steps being damaged, or its folder holds another job's): the
// steps above the one it saves are dropped, where they counted as the
// newest and every save of the job was pruned at once, though reported
// saved.
TEST(TieredTest, StepsAboveTheOneSavedAreDroppedNotKept) {
  Job job = MemJob("abandoned", {0, 1});
  SaveSteps(job, 2, {8, 9});
  SaveSteps(job, 2, {1, 2, 3});
  for (int node : {0, 1}) {
    Result<std::vector<LocalShareInfo>> shares =
        ListLocalTier(NodeRootUrl(job.local_url, node));
    ASSERT_TRUE(shares.ok());
    std::set<int64_t> steps;
    for (const LocalShareInfo& s : *shares) steps.insert(s.step);
    EXPECT_EQ(steps, (std::set<int64_t>{2, 3})) << "node " << node;
  }
  RestoreAndCheck(job, 2, 3, Tier::kLocal);
}

TEST(TieredTest, TheCatalogKnowsBothTiersAndOffersOnlyTheDurableOne) {
  testing::TempDir dir("tiered-catalog");
  Job job = MemJob("catalog", {0, 1});
  job.durable_every = 3;
  job.catalog =
      OpenCatalog("sqlite://" + (dir.path() / "catalog.sqlite").string())
          .value();
  SaveSteps(job, 2, {1, 2, 3, 4});

  // The local tier keeps steps 3 and 4; pruning marked 1 and 2 deleted.
  Result<std::vector<CatalogCheckpoint>> local =
      job.catalog->List({.state = std::nullopt, .tier = CatalogTier::kLocal});
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  ASSERT_EQ(local->size(), 4u);
  for (const CatalogCheckpoint& c : *local) {
    EXPECT_EQ(c.root, job.local_url);
    EXPECT_EQ(c.scheme, "mem");
    EXPECT_EQ(c.world_size, 2);
    EXPECT_EQ(c.hosts.size(), 2u);
    EXPECT_GT(c.bytes, 0u);
    EXPECT_EQ(c.manifest_checksum.size(), 32u);
    EXPECT_EQ(c.state, c.step >= 3 ? CheckpointState::kCommitted
                                   : CheckpointState::kDeleted)
        << "step " << c.step;
  }
  // The durable tier has step 3, and it is what the job resumes from.
  Result<std::vector<CatalogCheckpoint>> durable =
      job.catalog->List({.tier = CatalogTier::kDurable});
  ASSERT_TRUE(durable.ok());
  ASSERT_EQ(durable->size(), 1u);
  EXPECT_EQ(durable->front().step, 3);
  EXPECT_EQ(durable->front().job_id, local->front().job_id);
  auto latest = job.catalog->Latest(local->front().job_id);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ((*latest)->step, 3);
  EXPECT_EQ((*latest)->tier, CatalogTier::kDurable);

  // A sync never records node memory as a durable root: a node's root, a
  // share's root, and the tier's URL where its rows say it is local.
  std::shared_ptr<Storage> node =
      OpenStorage(NodeRootUrl(job.local_url, 0)).value();
  std::vector<std::unique_ptr<Storage>> roots;
  roots.push_back(OpenStorage(NodeRootUrl(job.local_url, 0)).value());
  roots.push_back(NewShareStorage(node, 1));
  roots.push_back(OpenStorage(job.local_url).value());
  for (std::unique_ptr<Storage>& s : roots) {
    const std::string url = s->url();
    auto mgr = CheckpointManager::Open(std::move(s));
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    Result<CatalogSyncReport> synced = SyncCatalog(**mgr, *job.catalog);
    ASSERT_FALSE(synced.ok()) << url;
    EXPECT_EQ(synced.status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(synced.status().message().find("is a local tier"),
              std::string::npos)
        << synced.status().ToString();
  }
  EXPECT_EQ(job.catalog->List({.tier = CatalogTier::kLocal})->size(), 2u);
}

// Two nodes of two ranks each under `dir`, a durable save every 2 steps,
// every read of the durable tier counted in `durable_reads`.
Job CountedJob(const testing::TempDir& dir, ReadCounter& durable_reads) {
  Job job;
  job.durable_url = (dir.path() / "durable").string();
  job.local_url = (dir.path() / "node{node}").string();
  job.nodes = {0, 0, 1, 1};
  job.durable_every = 2;
  job.open_durable =
      [&](const std::string& url) -> Result<std::unique_ptr<Storage>> {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> s, OpenStorage(url));
    return std::unique_ptr<Storage>(
        new CountingStorage(std::move(s), &durable_reads));
  };
  return job;
}

TEST(TieredTest, ANodeReplacedByAnEmptyOneRecoversFromPeersNotDurable) {
  testing::TempDir dir("tiered-wipe", "/dev/shm");
  ReadCounter durable_reads;
  Job job = CountedJob(dir, durable_reads);
  SaveSteps(job, 4, {2, 3});
  std::filesystem::remove_all(dir.path() / "node1");
  durable_reads.reads = 0;
  std::vector<TierRestoreResult> r = RestoreAndCheck(job, 4, 3, Tier::kLocal);
  EXPECT_EQ(durable_reads.reads.load(), 0) << "the durable tier was read";
  EXPECT_EQ(r[0].fetched_bytes, 0u);
  EXPECT_GT(r[2].fetched_bytes, 0u);
  EXPECT_GT(r[3].fetched_bytes, 0u);
  EXPECT_FALSE(r[0].durable_has_step);  // durable every 2 steps: 2, not 3
  // The next save replicates again: losing node 0 now leaves step 4.
  SaveSteps(job, 4, {4});
  std::filesystem::remove_all(dir.path() / "node0");
  durable_reads.reads = 0;
  for (const TierRestoreResult& got :
       RestoreAndCheck(job, 4, 4, Tier::kLocal)) {
    // Known from the listing, which reads no object: the runner then does
    // not save step 4 durably again (which would read it back).
    EXPECT_TRUE(got.durable_has_step);
  }
  EXPECT_EQ(durable_reads.reads.load(), 0) << "the durable tier was read";
  // Both nodes gone: the durable tier's step 4.
  std::filesystem::remove_all(dir.path() / "node0");
  std::filesystem::remove_all(dir.path() / "node1");
  RestoreAndCheck(job, 4, 4, Tier::kDurable);
}

// A restore at another world size from node memory reads nothing of the
// durable tier: 4 ranks on two nodes to 2 (one a node), and a step saved by
// those 2 back to 4, each node holding every share through its replica.
TEST(TieredTest, ReshardingFromMemoryReadsNoDurableObject) {
  testing::TempDir dir("tiered-reshard-counted", "/dev/shm");
  ReadCounter durable_reads;
  Job four = CountedJob(dir, durable_reads);
  four.rank_local = false;
  SaveSteps(four, 4, {2, 3});
  Job two = four;
  two.nodes = {0, 1};
  durable_reads.reads = 0;
  for (const TierRestoreResult& r : RestoreAndCheck(two, 2, 3, Tier::kLocal)) {
    EXPECT_EQ(r.ranks_fetched, 0);
  }
  EXPECT_EQ(durable_reads.reads.load(), 0) << "4 to 2 read the durable tier";
  SaveSteps(two, 2, {4, 5});
  durable_reads.reads = 0;
  for (const TierRestoreResult& r : RestoreAndCheck(four, 4, 5, Tier::kLocal)) {
    EXPECT_EQ(r.ranks_fetched, 0);
  }
  EXPECT_EQ(durable_reads.reads.load(), 0) << "2 to 4 read the durable tier";
}

TEST(TieredTest, ANewerDurableStepWins) {
  Job job = MemJob("newer", {0, 1});
  job.local_every = 2;
  job.durable_every = 3;
  SaveSteps(job, 2, {2, 3});
  RestoreAndCheck(job, 2, 3, Tier::kDurable);
  SaveSteps(job, 2, {4});
  RestoreAndCheck(job, 2, 4, Tier::kLocal);
}

// Four ranks on two nodes, one replica each: every node holds every share,
// so two ranks reshard step 3 from their own nodes, newer than the durable
// tier's step 2, and fetch nothing.
TEST(TieredTest, AnotherWorldSizeReshardsFromTheLocalTier) {
  Job job = MemJob("reshard", {0, 0, 1, 1});
  job.rank_local = false;
  job.local_every = 1;
  job.durable_every = 2;
  SaveSteps(job, 4, {2, 3});
  Job two = job;
  two.nodes = {0, 1};
  for (const TierRestoreResult& r : RestoreAndCheck(two, 2, 3, Tier::kLocal)) {
    EXPECT_EQ(r.ranks_fetched, 0);
  }
  // And back to four, and on to three on one node.
  RestoreAndCheck(job, 4, 3, Tier::kLocal);
  Job three = job;
  three.nodes = {0, 0, 0};
  three.replicas = 0;
  RestoreAndCheck(three, 3, 3, Tier::kLocal);
}

// Two ranks on two nodes without replicas: each node holds one share. Of
// three ranks, rank 1 (node 1) needs rows of both shares: node 1 fetches
// share 0, and every rank fills its rows.
TEST(TieredTest, ReshardingFetchesTheSharesANodeLacks) {
  Job job = MemJob("reshard-fetch", {0, 1});
  job.rank_local = false;
  job.replicas = 0;
  SaveSteps(job, 2, {4});
  Job three = job;
  three.nodes = {0, 1, 1};
  for (const TierRestoreResult& r :
       RestoreAndCheck(three, 3, 4, Tier::kLocal)) {
    EXPECT_EQ(r.ranks_fetched, 1) << r.local_skipped;
  }
  // The fetched copy is a marked share of the 2-rank step on node 1.
  for (int node = 0; node < 2; ++node) {
    Result<std::vector<LocalShareInfo>> shares =
        ListLocalTier(NodeRootUrl(job.local_url, node));
    ASSERT_TRUE(shares.ok());
    std::set<int> ranks;
    for (const LocalShareInfo& s : *shares) {
      EXPECT_TRUE(s.marked && s.world_size == 2) << "rank " << s.rank;
      ranks.insert(s.rank);
    }
    const std::set<int> want =
        node == 0 ? std::set<int>{0} : std::set<int>{0, 1};
    EXPECT_EQ(ranks, want) << "node " << node;
  }
  // One rank alone, on node 1, now finds both shares there.
  Job one = job;
  one.nodes = {1};
  for (const TierRestoreResult& r : RestoreAndCheck(one, 1, 4, Tier::kLocal)) {
    EXPECT_EQ(r.ranks_fetched, 0);
  }
}

// A share damaged on the only node that holds it: the resharded restore
// fails its checksum on the ranks that read it (rank 0 on its own node,
// rank 1 after node 1 fetched it), and every rank loads the durable tier's
// step instead.
// Flips the last byte (tensor data, not a file's header) of every data
// object under `share` (a rank's share on a node: its data only, the share's
// metadata is checked on its own); returns how many.
int FlipLastDataByte(const std::filesystem::path& share) {
  return testing::FlipLastByteOfDataObjects(share);
}

// Two nodes of one rank each under `dir`, no replicas, a state without
// rank-local entries, a durable save every `durable_every` steps.
Job UnreplicatedJob(const testing::TempDir& dir, int64_t durable_every) {
  Job job;
  job.durable_url = (dir.path() / "durable").string();
  job.local_url = (dir.path() / "node{node}").string();
  job.nodes = {0, 1};
  job.rank_local = false;
  job.replicas = 0;
  job.durable_every = durable_every;
  return job;
}

// Every rank skipped the local tier because a checksum failed there.
void ExpectSkippedForDataLoss(const std::vector<TierRestoreResult>& results) {
  for (const TierRestoreResult& r : results) {
    EXPECT_NE(r.local_skipped.find("DataLoss"), std::string::npos)
        << r.local_skipped;
  }
}

// At the world size that saved it, a share damaged in a node's memory is
// never loaded: every rank restores the durable tier's newest step, the
// same step when it was persisted, an older one when it was not.
TEST(TieredTest, ADamagedShareIsNeverLoadedAtTheSameWorldSize) {
  testing::TempDir dir("tiered-damaged", "/dev/shm");
  Job job = UnreplicatedJob(dir, 2);
  SaveSteps(job, 2, {4, 5});
  ASSERT_GT(FlipLastDataByte(dir.path() / "node1" / "r00001"), 0);
  ExpectSkippedForDataLoss(RestoreAndCheck(job, 2, 4, Tier::kDurable));
  SaveSteps(job, 2, {6});
  ASSERT_GT(FlipLastDataByte(dir.path() / "node0" / "r00000"), 0);
  RestoreAndCheck(job, 2, 6, Tier::kDurable);
}

// A share damaged in its node's memory comes again from its replica on the
// other node, without reading the durable tier; with the replica damaged
// too, the durable tier's step.
TEST(TieredTest, ADamagedShareIsFetchedAgainFromItsReplica) {
  testing::TempDir dir("tiered-damaged-replica", "/dev/shm");
  ReadCounter durable_reads;
  Job job = CountedJob(dir, durable_reads);
  SaveSteps(job, 4, {2, 3});
  ASSERT_GT(FlipLastDataByte(dir.path() / "node0" / "r00001"), 0);
  durable_reads.reads = 0;
  std::vector<TierRestoreResult> r = RestoreAndCheck(job, 4, 3, Tier::kLocal);
  EXPECT_EQ(durable_reads.reads.load(), 0) << "the durable tier was read";
  EXPECT_EQ(r[0].fetched_bytes, 0u);
  EXPECT_GT(r[1].fetched_bytes, 0u);
  EXPECT_EQ(r[1].ranks_fetched, 1);
  // The fetched copy is whole: the next restore reads it as it is.
  r = RestoreAndCheck(job, 4, 3, Tier::kLocal);
  EXPECT_EQ(r[1].fetched_bytes, 0u);
  // Both copies of rank 2's share damaged: the durable tier's step 2.
  ASSERT_GT(FlipLastDataByte(dir.path() / "node1" / "r00002"), 0);
  ASSERT_GT(FlipLastDataByte(dir.path() / "node0" / "r00002"), 0);
  r = RestoreAndCheck(job, 4, 2, Tier::kDurable);
  ExpectSkippedForDataLoss(r);
  // The state came from the durable tier, whatever the attempt fetched.
  for (const TierRestoreResult& one : r) {
    EXPECT_EQ(one.ranks_fetched, 0);
    EXPECT_EQ(one.fetched_bytes, 0u);
  }
}

// A step whose manifest is damaged on a node is no checkpoint there, yet it
// is the local tier's own: once newer steps are marked, pruning removes it
// from memory like any other old step.
TEST(TieredTest, AStepWithADamagedManifestIsPrunedFromMemory) {
  testing::TempDir dir("tiered-damaged-manifest", "/dev/shm");
  Job job = UnreplicatedJob(dir, 2);
  SaveSteps(job, 2, {4, 5});
  const std::filesystem::path step5 =
      dir.path() / "node1" / "r00001" / format::StepDirName(5);
  std::filesystem::resize_file(step5 / format::kManifestName, 10);
  // The older local step 4 is whole: it is restored, not the durable one.
  ExpectSkippedForDataLoss(RestoreAndCheck(job, 2, 4, Tier::kLocal));
  ASSERT_TRUE(std::filesystem::exists(step5));
  SaveSteps(job, 2, {6, 7});
  EXPECT_FALSE(std::filesystem::exists(step5 / format::kManifestName));
  for (const auto& f :
       std::filesystem::recursive_directory_iterator(step5.parent_path())) {
    EXPECT_EQ(f.path().string().find(format::StepDirName(5)), std::string::npos)
        << f.path() << " is left of the damaged step";
  }
  RestoreAndCheck(job, 2, 7, Tier::kLocal);
}

TEST(TieredTest, ADamagedShareFallsBackToTheDurableTierWhenResharding) {
  testing::TempDir dir("tiered-reshard-damaged", "/dev/shm");
  Job job = UnreplicatedJob(dir, 1);
  SaveSteps(job, 2, {5});
  ASSERT_GT(FlipLastDataByte(dir.path() / "node0" / "r00000"), 0);
  Job three = job;
  three.nodes = {0, 1, 1};
  ExpectSkippedForDataLoss(RestoreAndCheck(three, 3, 5, Tier::kDurable));
}

// Rank-local entries load at the world size that saved them: at another
// one the local tier is not resharded, and the durable tier's load says
// what to do.
TEST(TieredTest, RankLocalEntriesAtAnotherWorldSizeUseTheDurableTier) {
  Job job = MemJob("reshard-rank-local", {0, 0, 1, 1});
  job.local_every = 1;
  job.durable_every = 2;
  SaveSteps(job, 4, {2, 3});
  RunRanks(2, [&](int rank, Communicator* comm) {
    Job two = job;
    two.nodes = {0, 1};
    Tiers t(two, comm);
    ASSERT_TRUE(t.tiers);
    RankState got(rank, 2, 999);
    State state = got.Make();
    Result<TierRestoreResult> r = t.tiers->Restore(state);
    // Not the local tier's step 3, whatever the durable tier makes of it.
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("load step 2 from mem://"),
              std::string::npos)
        << r.status().ToString();
    EXPECT_NE(r.status().message().find("LoadRankLocal"), std::string::npos);
  });
}

TEST(TieredTest, SharesOfAnotherJobAreNeverLoaded) {
  Job job = MemJob("other-job", {0, 1});
  SaveSteps(job, 2, {1});
  Job other = job;  // the same local root, another durable tier
  other.durable_url = "mem://" + UniqueName("other-durable");
  RunRanks(2, [&](int rank, Communicator* comm) {
    Tiers t(other, comm);
    ASSERT_TRUE(t.tiers);
    RankState got(rank, 2, 999);
    State state = got.Make();
    Result<TierRestoreResult> r = t.tiers->Restore(state);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("another job"), std::string::npos)
        << r.status().ToString();
  });
}

TEST(TieredTest, APeersFullTierFailsTheLocalStepAndKeepsThePrevious) {
  Job job = MemJob("full", {0, 1});
  job.durable_every = 2;
  std::atomic<bool> full{false};
  job.open = [&](const std::string& url) -> Result<std::unique_ptr<Storage>> {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> s, OpenStorage(url));
    // Node 1's local tier fills up; node 0's does not.
    if (url.find("node1") == std::string::npos) return s;
    return std::unique_ptr<Storage>(new FullAfterArming(std::move(s), &full));
  };
  SaveSteps(job, 2, {1});
  full = true;
  std::vector<std::vector<TierSaveResult>> results;
  SaveSteps(job, 2, {2}, &results);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(results[r][0].local);
    EXPECT_NE(results[r][0].local_error.find("no space left"),
              std::string::npos)
        << results[r][0].local_error;
    EXPECT_TRUE(results[r][0].durable) << "the durable tier is still saved";
  }
  full = false;
  // Step 2 is durable; the local tier's newest is step 1: durable wins.
  RestoreAndCheck(job, 2, 2, Tier::kDurable);
  // Without the durable tier's step 2, step 1 of the local tier, never
  // the half-replicated step 2.
  ASSERT_TRUE(CheckpointManager::Open(job.durable_url)
                  .value()
                  ->Delete(2, {.rewrite_dependants = false})
                  .ok());
  RestoreAndCheck(job, 2, 1, Tier::kLocal);
}

// A step saved again (a job restored from an older step, or the runner's
// epoch end) whose new save is cut short must not leave the old save's
// markers beside new shares: the restore takes the step before.
TEST(TieredTest, AStepSavedAgainAndCutShortIsNeverMixed) {
  Job job = MemJob("resave", {0, 1});
  std::atomic<bool> full{false};
  job.open = [&](const std::string& url) -> Result<std::unique_ptr<Storage>> {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> s, OpenStorage(url));
    if (url.find("node1") == std::string::npos) return s;
    return std::unique_ptr<Storage>(new FullAfterArming(std::move(s), &full));
  };
  SaveSteps(job, 2, {1, 2});
  RunRanks(2, [&](int rank, Communicator* comm) {
    Tiers t(job, comm);
    ASSERT_TRUE(t.tiers);
    if (rank == 1) full = true;  // node 1 fills up after opening
    comm->Barrier().IgnoreError();
    RankState s(rank, 2, 7);  // other contents for step 2
    State state = s.Make();
    Result<TierSaveResult> r = t.tiers->Save(2, state);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_FALSE(r->local);
  });
  full = false;
  RestoreAndCheck(job, 2, 1, Tier::kLocal);
}

TEST(TieredTest, APeerDyingMidTransferCommitsNothingNew) {
  Job job = MemJob("dies", {0, 0, 1, 1});
  SaveSteps(job, 4, {1});
  for (int die_at : {0, 3, 6}) {
    SCOPED_TRACE("die at send " + std::to_string(die_at));
    RunRanks(4, [&](int rank, Communicator* comm) {
      DyingCommunicator dying(comm, rank == 2 ? die_at : -1);
      Tiers t(job, &dying);
      ASSERT_TRUE(t.tiers);
      RankState s(rank, 4, 2);
      State state = s.Make();
      Result<TierSaveResult> r = t.tiers->Save(2, state);
      EXPECT_FALSE(r.ok() && r->local) << "rank " << rank;
      if (rank == 2) {
        EXPECT_TRUE(dying.died()) << "die at " << die_at;
      }
    });
    RestoreAndCheck(job, 4, 1, Tier::kLocal);
  }
}

// Power loss at every mutating storage call of a tiered save (local shares,
// replicas, markers, pruning, the durable save): afterwards the newest
// restorable step is the last one saved or the one in flight, bit for bit,
// and the durable tier's newest committed step is never lost.
TEST(TieredTest, PowerLossAtEveryCallOfATieredSave) {
  // One crash-simulating storage per root, shared by every opening of it
  // (a power loss rewrites its target once); every mutating call counts
  // toward the cut, which takes down every root at once.
  struct Power {
    std::mutex mu;
    std::map<std::string, std::pair<std::unique_ptr<Storage>,
                                    std::unique_ptr<testing::CrashStorage>>>
        roots;
    std::atomic<int64_t> calls{0};
    int64_t cut_at = -1;

    void Tick() {
      if (calls++ == cut_at) {
        std::lock_guard<std::mutex> lock(mu);
        for (auto& [url, root] : roots) root.second->Crash();
      }
    }
  };
  struct Counted : StorageWrapper {
    Counted(Storage* crash, Power* p) : StorageWrapper(crash), power(p) {}
    Result<std::unique_ptr<WritableObject>> NewWritable(
        std::string_view key) override {
      power->Tick();
      return StorageWrapper::NewWritable(key);
    }
    Status Put(std::string_view key, std::span<const std::byte> data,
               PutMode mode) override {
      power->Tick();
      return StorageWrapper::Put(key, data, mode);
    }
    Status Delete(std::string_view key) override {
      power->Tick();
      return StorageWrapper::Delete(key);
    }
    Power* power;
  };
  auto run = [](int64_t cut_at, uint64_t seed) -> int64_t {
    const std::string base = "mem://" + UniqueName("power");
    Power power;
    power.cut_at = cut_at;
    auto wrap =
        [&](const std::string& url) -> Result<std::unique_ptr<Storage>> {
      std::lock_guard<std::mutex> lock(power.mu);
      auto& root = power.roots[url];
      if (!root.second) {
        CKPT_ASSIGN_OR_RETURN(root.first, OpenStorage(url));
        CKPT_ASSIGN_OR_RETURN(root.second,
                              testing::CrashStorage::Wrap(root.first.get()));
      }
      return std::unique_ptr<Storage>(new Counted(root.second.get(), &power));
    };
    Job job;
    job.durable_url = base + "-durable";
    job.local_url = base + "-node{node}";
    job.nodes = {0, 1};
    job.durable_every = 2;
    SaveSteps(job, 2, {1, 2});
    job.open = wrap;
    job.open_durable = wrap;
    RunRanks(2, [&](int rank, Communicator* comm) {
      Tiers t(job, comm);
      if (!t.tiers) return;
      RankState s(rank, 2, 4);
      State state = s.Make();
      t.tiers->Save(4, state).status().IgnoreError();
    });
    const int64_t total = power.calls.load();
    {
      std::lock_guard<std::mutex> lock(power.mu);
      for (auto& [url, root] : power.roots) {
        root.second->Crash();
        EXPECT_TRUE(root.second
                        ->PowerLoss({testing::Damage::Uncertain::kRandom, false,
                                     true, seed})
                        .ok());
      }
    }
    // Reopen without the power cut: whatever survived.
    Job after = job;
    after.open = {};
    after.open_durable = {};
    int64_t restored = -1;
    RunRanks(2, [&](int rank, Communicator* comm) {
      Tiers t(after, comm);
      ASSERT_TRUE(t.tiers);
      RankState got(rank, 2, 999);
      State state = got.Make();
      Result<TierRestoreResult> r = t.tiers->Restore(state);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(r->step == 2 || r->step == 4) << r->step;
      got.Take(state);
      EXPECT_TRUE(got == RankState(rank, 2, r->step)) << "step " << r->step;
      EXPECT_GE(t.durable->Latest().value().value_or(-1), 2);
      if (rank == 0) restored = r->step;
    });
    return cut_at < 0 ? total : restored;
  };
  const int64_t total = run(-1, 0);
  ASSERT_GT(total, 10);
  std::set<int64_t> seen;
  for (int64_t cut = 0; cut <= total; ++cut) {
    SCOPED_TRACE("power cut at call " + std::to_string(cut));
    seen.insert(run(cut, static_cast<uint64_t>(cut)));
  }
  EXPECT_EQ(seen, (std::set<int64_t>{2, 4})) << "both outcomes occur";
  std::printf("tiered save: power cut at each of its %lld storage calls\n",
              static_cast<long long>(total));
}

// A node whose local tier cannot be opened fails Open on every rank,
// naming it, instead of leaving the others waiting in the first save.
TEST(TieredTest, ALocalTierThatCannotBeOpenedFailsEveryRank) {
  Job job = MemJob("unopenable", {0, 1});
  job.open = [](const std::string& url) -> Result<std::unique_ptr<Storage>> {
    if (url.find("node1") != std::string::npos) {
      return IOError("permission denied (test): " + url);
    }
    return OpenStorage(url);
  };
  RunRanks(2, [&](int rank, Communicator* comm) {
    Options o;
    o.communicator = comm;
    auto durable = CheckpointManager::Open(job.durable_url, o).value();
    TierOptions t;
    t.local_url = job.local_url;
    t.node_of_rank = job.nodes;
    t.open_local = job.open;
    Result<std::unique_ptr<TieredManager>> m = TieredManager::Open(*durable, t);
    ASSERT_FALSE(m.ok()) << "rank " << rank;
    EXPECT_NE(m.status().message().find("rank 1: IOError: permission denied"),
              std::string::npos)
        << m.status().ToString();
  });
}

// What a rank sends to its peers keeps to the rate: a lower bound on the
// time, as the pacing promises (the bytes sent by time t stay under rate ×
// t plus one message), checked against an unpaced save of the same state.
TEST(TieredTest, ReplicationIsPacedToItsRate) {
  Job fast = MemJob("unpaced", {0, 1});
  std::vector<std::vector<TierSaveResult>> results;
  SaveSteps(fast, 2, {1}, &results);
  const uint64_t sent = results[0][0].replicated_bytes;
  ASSERT_GT(sent, 2048u);
  Job paced = MemJob("paced", {0, 1});
  const double seconds = 0.5;
  paced.replication_rate = sent / seconds;
  SaveSteps(paced, 2, {1}, &results);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(results[r][0].local) << results[r][0].local_error;
    // Less the first message, which goes at once: an object's name (the
    // messages carry at least the bytes counted as sent, which differ from
    // the unpaced save's by a few bytes of timestamps).
    const double bytes = results[r][0].replicated_bytes;
    EXPECT_GE(results[r][0].local_seconds,
              (bytes - 512) / paced.replication_rate)
        << "rank " << r << ": " << bytes << " bytes";
  }
  RestoreAndCheck(paced, 2, 1, Tier::kLocal);
}

// Nodes simulated on one machine (node_of_rank) need a local root each: a
// local_url without {node} is refused at Open, on every rank, instead of
// failing every local save as the nodes write over each other's shares.
TEST(TieredTest, SimulatedNodesSharingOneLocalRootAreRefused) {
  testing::TempDir dir("tiered-one-root", "/dev/shm");
  for (const std::string& local : {"file://" + (dir.path() / "shared").string(),
                                   "mem://" + UniqueName("one-root")}) {
    RunRanks(2, [&](int rank, Communicator* comm) {
      Options o;
      o.communicator = comm;
      o.lease_seconds = 0;
      auto durable =
          CheckpointManager::Open((dir.path() / "durable").string(), o).value();
      TierOptions t;
      t.local_url = local;
      t.node_of_rank = {0, 1};
      t.replicas = 1;
      Result<std::unique_ptr<TieredManager>> m =
          TieredManager::Open(*durable, t);
      EXPECT_EQ(m.status().code(), ErrorCode::kInvalidArgument)
          << local << ": " << m.status().ToString();
      EXPECT_NE(m.status().message().find("{node}"), std::string::npos)
          << m.status().ToString();
      // With {node}, each node has its own root.
      t.local_url = local + "-node{node}";
      m = TieredManager::Open(*durable, t);
      EXPECT_TRUE(m.ok()) << m.status().ToString();
    });
  }
}

// Two incarnations of one job (a process left from before a restart, and
// the restarted one) on the same roots: the local tier is written only by
// the one that holds the durable root's lease, so no step can mix their
// shares; the other's local saves fail without touching it.
TEST(TieredTest, ASecondIncarnationOfTheJobCannotWriteTheLocalTier) {
  testing::TempDir dir("tiered-two-jobs", "/dev/shm");
  const std::string durable_url = (dir.path() / "durable").string();
  const std::string local_url = "file://" + (dir.path() / "local").string();
  auto open = [&](std::unique_ptr<CheckpointManager>& durable) {
    Options o;
    o.lease_seconds = 60;
    // A local-tier save does not wait for the lease: were it waited for,
    // the second incarnation's saves would hang here for ten minutes.
    o.lease_wait_seconds = 600;
    durable = CheckpointManager::Open(durable_url, o).value();
    TierOptions t;
    t.local_url = local_url;
    t.replicas = 0;
    t.local_every_steps = 1;
    return TieredManager::Open(*durable, t).value();
  };
  std::unique_ptr<CheckpointManager> first_durable, second_durable;
  auto first = open(first_durable);
  auto second = open(second_durable);
  RankState one(0, 1, 1, false), two(0, 1, 2, false);
  State first_state = one.Make(), second_state = two.Make();
  Result<TierSaveResult> saved = first->Save(1, first_state);
  ASSERT_TRUE(saved.ok() && saved->local) << saved.status().ToString();
  saved = second->Save(1, second_state);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_FALSE(saved->local);
  EXPECT_NE(saved->local_error.find("lease"), std::string::npos)
      << saved->local_error;
  saved = second->Save(2, second_state);
  ASSERT_TRUE(saved.ok());
  EXPECT_FALSE(saved->local);
  // The local tier holds the first incarnation's step 1, whole.
  second.reset();
  second_durable.reset();
  RankState got(0, 1, 999, false);
  State state = got.Make();
  Result<TierRestoreResult> r = first->Restore(state);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tier, Tier::kLocal);
  EXPECT_EQ(r->step, 1);
  got.Take(state);
  EXPECT_TRUE(got == RankState(0, 1, 1, false));
}

// The local tier in the durable root, inside it or around it would mix the
// tiers' objects; Open refuses it.
TEST(TieredTest, ALocalTierOverlappingTheDurableRootIsRefused) {
  testing::TempDir dir("tiered-overlap", "/dev/shm");
  const std::string durable_url = "file://" + (dir.path() / "run").string();
  // Opened by its plain path, as the local tier is by URLs.
  auto durable = CheckpointManager::Open((dir.path() / "run").string()).value();
  for (const std::string& local :
       {durable_url, durable_url + "/", durable_url + "/local",
        (dir.path() / "run" / "local").string(),
        "file://" + dir.path().string()}) {
    TierOptions t;
    t.local_url = local;
    t.replicas = 0;
    Result<std::unique_ptr<TieredManager>> m = TieredManager::Open(*durable, t);
    EXPECT_EQ(m.status().code(), ErrorCode::kInvalidArgument)
        << local << ": " << m.status().ToString();
    EXPECT_NE(m.status().message().find("overlap"), std::string::npos)
        << m.status().ToString();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "run" / "local"))
      << "the refused local root was made";
  TierOptions t;
  t.local_url = durable_url + "-local";  // beside it, not in it
  t.replicas = 0;
  EXPECT_TRUE(TieredManager::Open(*durable, t).ok());
}

TEST(TieredTest, BadOptionsAreRefused) {
  auto durable = CheckpointManager::Open("mem://" + UniqueName("bad")).value();
  TierOptions t;
  EXPECT_EQ(TieredManager::Open(*durable, t).status().code(),
            ErrorCode::kInvalidArgument);
  t.local_url = "mem://" + UniqueName("bad-local");
  t.replicas = 0;
  t.replication_bytes_per_second = -1;
  EXPECT_EQ(TieredManager::Open(*durable, t).status().code(),
            ErrorCode::kInvalidArgument);
  t.replication_bytes_per_second = 0;
  t.replicas = 1;  // one process is one node
  Result<std::unique_ptr<TieredManager>> m = TieredManager::Open(*durable, t);
  EXPECT_EQ(m.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("2 nodes"), std::string::npos)
      << m.status().ToString();
  t.replicas = 0;
  m = TieredManager::Open(*durable, t);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  State bad;
  bad.AddMetadataJson(kShareEntry, "{}");
  Result<TierSaveResult> r = (*m)->Save(1, bad);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->local);
  EXPECT_NE(r->local_error.find(kShareEntry), std::string::npos);
}

}  // namespace
}  // namespace ckpt
