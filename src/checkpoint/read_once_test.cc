// Every byte read once (read_once.h): a chunk that several ranks need is
// read from storage by one of them; what each rank loads is bit-identical
// either way, and a damaged chunk, a rank that fails, or a communicator that
// cannot send between ranks changes nothing of the load's all-or-nothing
// promise.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/read_once_exchange.h"
#include "ckpt/checkpoint_manager.h"
#include "gtest/gtest.h"
#include "messages/messages.h"
#include "testing/backends.h"
#include "testing/run_ranks.h"

namespace ckpt {
namespace {

using testing::RunRanks;

constexpr int64_t kRows = 256;
constexpr int64_t kCols = 64;  // 256 x 64 floats: 64 KiB, 16 chunks
constexpr uint64_t kChunk = 4096;
constexpr uint64_t kTensorBytes = kRows * kCols * sizeof(float);

// Bytes read from data objects (ReadRange: manifests and indexes are read
// whole), over every rank's storage. With `link`, its reads are declared
// not local, as a network store's are (where kAuto reads once); without,
// they are mem://'s own, local.
class CountingReads : public StorageWrapper {
 public:
  CountingReads(std::unique_ptr<Storage> target, std::atomic<uint64_t>* count,
                bool link)
      : StorageWrapper(std::move(target)), count_(count), link_(link) {}
  StorageCapabilities capabilities() const override {
    StorageCapabilities caps = StorageWrapper::capabilities();
    if (link_) caps.local_reads = false;
    return caps;
  }
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    *count_ += out.size();
    return StorageWrapper::ReadRange(key, offset, out);
  }

 private:
  std::atomic<uint64_t>* count_;
  bool link_;
};

// Element i of tensor `t` at step `step`.
float Value(int t, int64_t i, int64_t step) {
  return static_cast<float>(t * 1000003 + i * 7 + step);
}

std::vector<float> Rows(int t, int64_t r0, int64_t n, int64_t step) {
  std::vector<float> v(static_cast<size_t>(n * kCols));
  for (int64_t i = 0; i < n * kCols; ++i) v[i] = Value(t, r0 * kCols + i, step);
  return v;
}

// A communicator that cannot send between ranks, as a caller's may be.
class NoSendRecv : public Communicator {
 public:
  explicit NoSendRecv(Communicator* c) : c_(c) {}
  int rank() const override { return c_->rank(); }
  int size() const override { return c_->size(); }
  std::string host_name() const override { return c_->host_name(); }
  Status Barrier() override { return c_->Barrier(); }
  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    return c_->AllGather(mine);
  }
  Result<std::string> Broadcast(std::string_view data, int root) override {
    return c_->Broadcast(data, root);
  }

 private:
  Communicator* c_;
};

// A rank on a node of `per_node` ranks (its host name): ranks 0 to
// per_node - 1 on the first, or, `dealt` out in turn, every
// (size / per_node)th rank on the same one. Counts the bytes it sends to
// ranks of other nodes.
struct Nodes {
  int per_node = 1;
  std::atomic<uint64_t>* across = nullptr;
  bool dealt = false;
  // Each message of 64 KiB or more to another rank this much late (the
  // probe of kAuto, not the few bytes that tell what a rank holds).
  std::chrono::milliseconds delay{0};
  // Invitations to a node's shared memory name another file: as where two
  // hosts carry the same name, its ranks cannot share memory.
  bool other_hosts = false;
  // Counts the messages of 1 MiB or more to another node.
  std::atomic<int>* large_across = nullptr;
  // Counts the probes of kAuto: the only messages that carry 64 KiB or
  // more of bytes in the message itself (a batch's bytes follow apart).
  std::atomic<int>* probes = nullptr;
  // Only the first message `delay` applies to is late (a rank descheduled
  // once), not the later ones.
  bool delay_once = false;
};
class OnNode : public NoSendRecv {
 public:
  OnNode(Communicator* c, int per_node, std::atomic<uint64_t>* across,
         bool dealt = false)
      : OnNode(c,
               Nodes{.per_node = per_node, .across = across, .dealt = dealt}) {}
  OnNode(Communicator* c, Nodes nodes) : NoSendRecv(c), c_(c), n_(nodes) {}
  std::string host_name() const override {
    return "node" + std::to_string(Node(c_->rank()));
  }
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    if (dest >= 0 && n_.across != nullptr && Node(dest) != Node(c_->rank())) {
      *n_.across += data.size();
    }
    if (dest >= 0 && n_.large_across != nullptr && data.size() >= (1 << 20) &&
        Node(dest) != Node(c_->rank())) {
      ++*n_.large_across;
    }
    if (dest >= 0 && data.size() >= 65536 && !(n_.delay_once && delayed_)) {
      std::this_thread::sleep_for(n_.delay);
      delayed_ = true;
    }
    if (Result<ReadOnceBatch> b = DecodeReadOnceBatch(data);
        n_.probes != nullptr && dest >= 0 && b.ok() &&
        b->data.size() >= 65536) {
      ++*n_.probes;
    }
    if (Result<ReadOnceNodeMemory> m = DecodeReadOnceNodeMemory(data);
        n_.other_hosts && m.ok() && !m->invitation.empty()) {
      m->invitation.back() = m->invitation.back() == '0' ? '1' : '0';
      return c_->SendRecv(EncodeReadOnceNodeMemory(*m), dest, source);
    }
    return c_->SendRecv(data, dest, source);
  }

 private:
  int Node(int rank) const {
    return n_.dealt ? rank % (c_->size() / n_.per_node) : rank / n_.per_node;
  }

  Communicator* c_;
  Nodes n_;
  bool delayed_ = false;
};

// A rank whose messages to other ranks each take `delay` more: a network
// slower than the storage.
class SlowSends : public NoSendRecv {
 public:
  SlowSends(Communicator* c, std::chrono::milliseconds delay)
      : NoSendRecv(c), c_(c), delay_(delay) {}
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    std::this_thread::sleep_for(delay_);
    return c_->SendRecv(data, dest, source);
  }

 private:
  Communicator* c_;
  std::chrono::milliseconds delay_;
};

// `c` behind SlowSends of a second: the probe finds the ranks slower than
// a storage at memory speed, also where memory is read slowly (under
// ThreadSanitizer, beside other tests, 300 ms was not enough for an 8 MiB
// probe's rate to fall below half the storage's).
Communicator* Slow(Communicator* c) {
  return new SlowSends(c, std::chrono::seconds(1));
}

class ReadOnceTest : public ::testing::Test {
 protected:
  std::unique_ptr<CheckpointManager> Open(Communicator* comm) {
    auto storage = OpenStorage(root_.url());
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (read_rate_ > 0) {
      storage = NewRateLimitedStorage(
          std::move(*storage),
          RateLimit{.bytes_per_second = read_rate_, .reads = true});
      EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    }
    if (wrap_storage_)
      *storage = wrap_storage_(comm->rank(), std::move(*storage));
    Options o;
    o.communicator = comm;
    o.chunk_size = chunk_;
    if (compress_) o.compression.mode = Compression::Mode::kZstd;
    auto mgr = CheckpointManager::Open(
        std::make_unique<CountingReads>(std::move(*storage), &read_, link_), o);
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return std::move(mgr).value();
  }

  // `ranks` ranks save `step`: two tensors of rows_ rows, "a" split by rows
  // across the ranks (a piece each) and "b" whole on every rank.
  void Save(int ranks, int64_t step) {
    RunRanks(ranks, [&](int rank, Communicator* comm) {
      auto mgr = Open(comm);
      const int64_t n = rows_ / ranks;
      std::vector<float> a = Rows(0, rank * n, n, step);
      std::vector<float> b = Rows(1, 0, rows_, step);
      State s;
      s.AddTensorPiece("a", {rows_, kCols}, {rank * n, 0},
                       View(std::span<float>(a), {n, kCols}))
          .AddTensor("b", View(std::span<float>(b), {rows_, kCols}));
      auto saved = mgr->Save(step, s);
      ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    });
  }

  // `ranks` ranks load `step` (nullopt: resume), each "a" whole when
  // `whole`, else its even split of rows (the last rank takes the rest),
  // and "b" whole; returns each rank's outcome, and checks that a rank
  // whose load succeeded holds `want_step`'s values and one whose load
  // failed holds its buffers' old values (all or nothing).
  std::vector<Status> Load(
      int ranks, std::optional<int64_t> step, bool whole,
      LoadOptions::ReadOnce mode, int64_t want_step = -1,
      const std::function<Communicator*(Communicator*)>& wrap = nullptr) {
    std::vector<Status> out(ranks);
    read_ = 0;
    RunRanks(ranks, [&](int rank, Communicator* comm) {
      std::unique_ptr<Communicator> own;
      if (wrap) own.reset(wrap(comm));
      auto mgr = Open(own ? own.get() : comm);
      const int64_t per = rows_ / ranks;
      const int64_t r0 = whole ? 0 : rank * per;
      const int64_t n = whole ? rows_ : (rank == ranks - 1 ? rows_ - r0 : per);
      std::vector<float> a(static_cast<size_t>(n * kCols), -1.0f);
      std::vector<float> b(static_cast<size_t>(rows_ * kCols), -1.0f);
      State s;
      s.AddTensorPiece("a", {rows_, kCols}, {r0, 0},
                       View(std::span<float>(a), {n, kCols}))
          .AddTensor("b", View(std::span<float>(b), {rows_, kCols}));
      LoadOptions lo;
      lo.read_once = mode;
      auto loaded = mgr->Load(step, s, lo);
      out[rank] = loaded.status();
      if (loaded.ok()) {
        EXPECT_EQ(loaded->step, want_step) << "rank " << rank;
        EXPECT_EQ(a, Rows(0, r0, n, want_step)) << "rank " << rank;
        EXPECT_EQ(b, Rows(1, 0, rows_, want_step)) << "rank " << rank;
      } else {
        EXPECT_EQ(a, std::vector<float>(a.size(), -1.0f)) << "rank " << rank;
        EXPECT_EQ(b, std::vector<float>(b.size(), -1.0f)) << "rank " << rank;
      }
    });
    return out;
  }

  // 40 MiB in 1 MiB chunks (kLargeRows rows a tensor): each rank's share
  // of the reading on 4 ranks (10 MiB) is more than the first 8 MiB kAuto
  // times, so part of it is read while the ranks decide.
  static constexpr int64_t kLargeRows = kRows * 320;
  // Two ranks load what they saved (Save(2, 1)) with `mode`: rank 1's rows
  // of "a", in the object it saved, only it needs; "b" both need, read once
  // (half each) and exchanged. Every message of rank 0's of a chunk or more
  // comes a second late. Returns when rank 1 first read its own object and
  // when its first such message came (both checked to have happened).
  std::pair<int64_t, int64_t> Timed(LoadOptions::ReadOnce mode);

  void UseLargeState() {
    rows_ = kLargeRows;
    chunk_ = 1 << 20;
  }

  testing::TestRoot root_{testing::Backend::kMemory, "read-once"};
  int64_t rows_ = kRows;     // of each tensor, saved and loaded
  uint64_t chunk_ = kChunk;  // the saves' chunk size
  std::atomic<uint64_t> read_{0};
  bool link_ = true;
  double read_rate_ = 0;   // each rank's reads paced to it (> 0)
  bool compress_ = false;  // saves compress every chunk that shrinks
  // Wraps each rank's storage (its rank, the storage) where set.
  std::function<std::unique_ptr<Storage>(int, std::unique_ptr<Storage>)>
      wrap_storage_;
};

void ExpectAllOk(const std::vector<Status>& got) {
  for (size_t r = 0; r < got.size(); ++r) {
    EXPECT_TRUE(got[r].ok()) << "rank " << r << ": " << got[r].ToString();
  }
}

TEST_F(ReadOnceTest, ReplicatedStateIsReadOnceByTheJob) {
  Save(4, 1);
  // Every rank loads both tensors whole: the job needs 2 tensors' bytes.
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1));
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOff, 1));
  EXPECT_EQ(read_.load(), 4 * 2 * kTensorBytes);
}

void DamageStep(const std::string& url, int64_t step);  // below

// A compressed chunk goes from rank to rank as its stored bytes, each rank
// decompressing and checking its own: the job reads the stored bytes once,
// and a damaged compressed chunk fails every rank with nothing changed.
TEST_F(ReadOnceTest, CompressedChunksAreReadOnceToo) {
  compress_ = true;
  Save(4, 1);
  Save(4, 2);
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOff, 1));
  const uint64_t off = read_.load();
  // Every rank read the stored bytes of both tensors, fewer than raw.
  ASSERT_EQ(off % 4, 0u);
  EXPECT_LT(off / 4, 2 * kTensorBytes) << "the saves compressed nothing";
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1));
  EXPECT_EQ(read_.load(), off / 4);
  // Across nodes, through relays.
  std::atomic<uint64_t> across{0};
  auto two_nodes = [&](Communicator* c) -> Communicator* {
    return new OnNode(c, 2, &across);
  };
  ExpectAllOk(
      Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1, two_nodes));
  EXPECT_EQ(read_.load(), off / 4);
  // A reshard, each rank its split of "a".
  ExpectAllOk(Load(3, 1, /*whole=*/false, LoadOptions::ReadOnce::kOn, 1));
  DamageStep(root_.url(), 2);
  for (const Status& s :
       Load(4, 2, /*whole=*/true, LoadOptions::ReadOnce::kOn)) {
    EXPECT_EQ(s.code(), ErrorCode::kDataLoss) << s.ToString();
  }
  ExpectAllOk(
      Load(4, std::nullopt, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1));
}

TEST_F(ReadOnceTest, AutoReadsForItselfFromLocalStorageAndOnForces) {
  Save(4, 1);
  link_ = false;  // mem://'s reads, local: read again costs less than sent
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1));
  EXPECT_EQ(read_.load(), 4 * 2 * kTensorBytes);
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1));
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
  // The same on two nodes (the ranks' host names): local reads are local
  // on every node.
  std::atomic<uint64_t> across{0};
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1,
                   [&](Communicator* c) -> Communicator* {
                     return new OnNode(c, 2, &across);
                   }));
  EXPECT_EQ(read_.load(), 4 * 2 * kTensorBytes);
  EXPECT_EQ(across.load(), 0u);
}

TEST_F(ReadOnceTest, AutoReadsOnceWhereRanksAreFasterThanStorage) {
  Save(4, 1);
  // Each rank's reads paced to 256 KiB/s: the 96 KiB of shared chunks a
  // rank needs beyond its own share would take 0.375 s from storage, and
  // take a moment from the other ranks (threads of this process).
  read_rate_ = 256 << 10;
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1));
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
}

TEST_F(ReadOnceTest, AutoReadsForItselfWhereRanksAreSlowerThanStorage) {
  Save(4, 1);
  // Storage at memory speed (declared over a link), and every message
  // between ranks a second late: the probe finds the ranks slower, and each
  // rank reads the rest it needs itself (its own share it keeps).
  ExpectAllOk(
      Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1, Slow));
  EXPECT_EQ(read_.load(), 4 * 2 * kTensorBytes);
}

TEST_F(ReadOnceTest, AutoReadingForItselfKeepsAllItReadBesideTheProbe) {
  // The reads go on while the ranks decide; what they read is kept, and
  // nothing is read twice.
  UseLargeState();
  Save(4, 1);
  ExpectAllOk(
      Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1, Slow));
  EXPECT_EQ(read_.load(), 4 * 2 * kLargeRows * kCols * sizeof(float));
}

TEST_F(ReadOnceTest, ADamagedChunkReadThroughTheDecisionFailsEveryRank) {
  // The damage is in the last chunk of each object: in one rank's share
  // within the 8 MiB it times, in another's past them (read while the
  // ranks decide), whether the ranks go on to read once (messages on time)
  // or each to read for itself (messages a second late).
  UseLargeState();
  Save(4, 1);
  Save(4, 2);
  DamageStep(root_.url(), 2);
  using Wrap = std::function<Communicator*(Communicator*)>;
  for (const Wrap& wrap : {Wrap(), Wrap(Slow)}) {
    // Every rank fails, and no rank's buffers change (Load checks).
    for (const Status& s :
         Load(4, 2, /*whole=*/true, LoadOptions::ReadOnce::kAuto, -1, wrap)) {
      EXPECT_EQ(s.code(), ErrorCode::kDataLoss) << s.ToString();
    }
    ExpectAllOk(Load(4, std::nullopt, /*whole=*/true,
                     LoadOptions::ReadOnce::kAuto, 1, wrap));
  }
}

TEST_F(ReadOnceTest, ReshardReadsEveryChunkOnce) {
  Save(4, 1);
  // 4 -> 3: the new boxes straddle chunks; each is read by one rank.
  ExpectAllOk(Load(3, 1, /*whole=*/false, LoadOptions::ReadOnce::kOn, 1));
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
  ExpectAllOk(Load(3, 1, /*whole=*/false, LoadOptions::ReadOnce::kOff, 1));
  EXPECT_GT(read_.load(), 3 * kTensorBytes);  // "b" three times, "a" once+
  // 4 -> 6, the same.
  ExpectAllOk(Load(6, 1, /*whole=*/false, LoadOptions::ReadOnce::kOn, 1));
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
}

TEST_F(ReadOnceTest, SameSplitSharesOnlyWhatIsReplicated) {
  Save(4, 1);
  // "a" at the split it was saved at: each rank reads its own piece; "b"
  // once for the job.
  ExpectAllOk(Load(4, 1, /*whole=*/false, LoadOptions::ReadOnce::kOn, 1));
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
}

TEST_F(ReadOnceTest, AByteCrossesToAnotherNodeOnce) {
  Save(4, 1);
  // 4 ranks on 2 nodes; ranks 0, 2 and 3 load "a" whole, rank 1 only "b".
  // What node 0 reads of "a" goes to one rank of node 1, which passes it
  // on; "b", which every rank needs, is broadcast.
  std::atomic<uint64_t> across{0};
  read_ = 0;
  RunRanks(4, [&](int rank, Communicator* comm) {
    OnNode node(comm, 2, &across);
    auto mgr = Open(&node);
    std::vector<float> a(static_cast<size_t>(kRows * kCols), -1.0f);
    std::vector<float> b(static_cast<size_t>(kRows * kCols), -1.0f);
    State s;
    if (rank != 1) s.AddTensor("a", View(std::span<float>(a), {kRows, kCols}));
    s.AddTensor("b", View(std::span<float>(b), {kRows, kCols}));
    auto loaded = mgr->Load(1, s, {.read_once = LoadOptions::ReadOnce::kOn});
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    if (rank != 1) {
      EXPECT_EQ(a, Rows(0, 0, kRows, 1)) << "rank " << rank;
    }
    EXPECT_EQ(b, Rows(1, 0, kRows, 1)) << "rank " << rank;
  });
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
  // Each byte of "a" crosses once (and the messages' few bytes of
  // framing); sent to each rank of the other node, node 0's would cross
  // twice.
  EXPECT_GE(across.load(), kTensorBytes);
  EXPECT_LT(across.load(), kTensorBytes + 4096);
}

// The steady clock's now, in its ticks: a time an atomic can hold.
int64_t Now() {
  return std::chrono::steady_clock::now().time_since_epoch().count();
}

// Notes when it first read from an object whose key holds `part`.
class FirstReadOf : public StorageWrapper {
 public:
  FirstReadOf(std::unique_ptr<Storage> target, std::string part,
              std::atomic<int64_t>* at)
      : StorageWrapper(std::move(target)), part_(std::move(part)), at_(at) {}
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    int64_t none = 0;
    if (key.find(part_) != std::string_view::npos) {
      at_->compare_exchange_strong(none, Now());
    }
    return StorageWrapper::ReadRange(key, offset, out);
  }

 private:
  std::string part_;
  std::atomic<int64_t>* at_;
};

// A rank whose messages of chunks (`bytes` or more) each leave a second
// late, sent or broadcast.
class LateChunks : public NoSendRecv {
 public:
  LateChunks(Communicator* c, size_t bytes)
      : NoSendRecv(c), c_(c), bytes_(bytes) {}
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    if (dest >= 0 && data.size() >= bytes_) Wait();
    return c_->SendRecv(data, dest, source);
  }
  Result<std::string> Broadcast(std::string_view data, int root) override {
    if (root == rank() && data.size() >= bytes_) Wait();
    return c_->Broadcast(data, root);
  }

 private:
  static void Wait() { std::this_thread::sleep_for(std::chrono::seconds(1)); }
  Communicator* c_;
  size_t bytes_;
};

// The time its first message of `bytes` or more from another rank came.
class FirstReceived : public NoSendRecv {
 public:
  FirstReceived(Communicator* c, size_t bytes, std::atomic<int64_t>* at)
      : NoSendRecv(c), c_(c), bytes_(bytes), at_(at) {}
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    return Note(c_->SendRecv(data, dest, source));
  }
  // Shares every rank needs come as broadcasts where they are small.
  Result<std::string> Broadcast(std::string_view data, int root) override {
    if (root == rank()) return c_->Broadcast(data, root);
    return Note(c_->Broadcast(data, root));
  }

 private:
  Result<std::string> Note(Result<std::string> got) {
    int64_t none = 0;
    if (got.ok() && got->size() >= bytes_) {
      at_->compare_exchange_strong(none, Now());
    }
    return got;
  }

  Communicator* c_;
  size_t bytes_;
  std::atomic<int64_t>* at_;
};

std::pair<int64_t, int64_t> ReadOnceTest::Timed(LoadOptions::ReadOnce mode) {
  std::atomic<int64_t> own_read{0}, received{0};
  wrap_storage_ = [&](int rank, std::unique_ptr<Storage> s) {
    if (rank != 1) return s;
    return std::unique_ptr<Storage>(
        std::make_unique<FirstReadOf>(std::move(s), "/r00001-", &own_read));
  };
  const auto wrap = [&](Communicator* c) -> Communicator* {
    if (c->rank() == 0) return new LateChunks(c, kChunk);
    return new FirstReceived(c, kChunk, &received);
  };
  ExpectAllOk(Load(2, 1, /*whole=*/false, mode, 1, wrap));
  wrap_storage_ = nullptr;
  EXPECT_NE(own_read.load(), 0) << "rank 1 read nothing of its own object";
  EXPECT_NE(received.load(), 0) << "rank 1 received nothing of rank 0's";
  return {own_read.load(), received.load()};
}

TEST_F(ReadOnceTest, ChunksOnlyOneRankNeedsAreReadWhileItWaitsForTheOthers) {
  Save(2, 1);
  // Rank 1 waits for its half of "b": its link to storage reads its own
  // rows meanwhile, not after the exchange.
  const auto [own_read, received] = Timed(LoadOptions::ReadOnce::kOn);
  EXPECT_EQ(read_.load(), 2 * kTensorBytes);
  EXPECT_LT(own_read, received)
      << "rank 1 read its own rows only once the exchange had brought it "
         "rank 0's half of \"b\"";
}

TEST_F(ReadOnceTest, ChunksOnlyOneRankNeedsAreReadWhileTheRanksDecide) {
  Save(2, 1);
  // With kAuto rank 0's probe is the late message, so rank 1 decides a
  // second late. Its own rows it reads whatever is decided: read while the
  // ranks measure and decide, not after (a rank with little to read for
  // others waited with its link to storage idle).
  const auto [own_read, probe_came] = Timed(LoadOptions::ReadOnce::kAuto);
  EXPECT_LT(own_read, probe_came)
      << "rank 1 read its own rows only once the ranks had decided";
}

// The read-once files a node's ranks shared, left in /dev/shm.
int SharedFilesLeft() {
  int n = 0;
  if (std::filesystem::exists("/dev/shm")) {
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      n += e.path().filename().string().starts_with("ckpt-read-once-");
    }
  }
  return n;
}

TEST_F(ReadOnceTest, TheRanksOfANodeHoldAndReceiveTheStateOnce) {
  // 4 ranks on 2 nodes load a state every rank needs whole: each node's
  // ranks share one memory, each reads a quarter into it, and only the
  // first rank of each node sends and receives: each byte crosses to the
  // other node once (and the messages' few bytes of framing).
  UseLargeState();
  Save(4, 1);
  const uint64_t state = 2 * kLargeRows * kCols * sizeof(float);
  const int before = SharedFilesLeft();
  for (const bool dealt : {false, true}) {
    std::atomic<uint64_t> across{0};
    ExpectAllOk(Load(
        4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1,
        [&](Communicator* c) { return new OnNode(c, 2, &across, dealt); }));
    EXPECT_EQ(read_.load(), state);
    EXPECT_GE(across.load(), state);
    EXPECT_LT(across.load(), state + 4096);
  }
  // One node of 4: nothing to measure or send, each rank reads a quarter.
  std::atomic<uint64_t> across{0};
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1,
                   [&](Communicator* c) { return new OnNode(c, 4, &across); }));
  EXPECT_EQ(read_.load(), state);
  EXPECT_EQ(across.load(), 0u);
  EXPECT_EQ(SharedFilesLeft(), before);
}

// The names of the node memories the leaders invite their nodes' ranks
// to, and how many of them were still in /dev/shm when the late rank
// looked.
struct Invitations {
  std::mutex mu;
  std::vector<std::string> names;
  int named_when_late = -1;
};

// A rank on a node of 2 that notes the invitations it sends; `late`, it
// comes half a second late to the job-wide word on whether every node
// shares its memory, and first looks for the invited names in /dev/shm.
class Inviting : public OnNode {
 public:
  Inviting(Communicator* c, Invitations* seen, bool late)
      : OnNode(c, 2, nullptr), seen_(seen), late_(late) {}
  Result<std::string> SendRecv(std::string_view data, int dest,
                               int source) override {
    if (Result<ReadOnceNodeMemory> m = DecodeReadOnceNodeMemory(data);
        m.ok() && !m->invitation.empty()) {
      std::lock_guard<std::mutex> lock(seen_->mu);
      seen_->names.push_back(m->invitation.substr(0, m->invitation.find(' ')));
    }
    return OnNode::SendRecv(data, dest, source);
  }
  Result<std::vector<std::string>> AllGather(std::string_view mine) override {
    if (late_ && DecodeReadOnceNodeMemory(mine).ok()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::lock_guard<std::mutex> lock(seen_->mu);
      seen_->named_when_late = 0;
      for (const std::string& name : seen_->names) {
        seen_->named_when_late += std::filesystem::exists("/dev/shm" + name);
      }
    }
    return OnNode::AllGather(mine);
  }

 private:
  Invitations* seen_;
  bool late_;
};

TEST_F(ReadOnceTest, ANodesMemoryIsNamedOnlyUntilItsRanksHaveItOpen) {
  // 4 ranks on 2 nodes share a node's memory; rank 3 comes half a second
  // late to the job-wide word that follows. By then every node's ranks
  // have the file open and its name is gone: a job killed while a rank of
  // another node lags leaves nothing in /dev/shm.
  UseLargeState();
  Save(4, 1);
  Invitations seen;
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1,
                   [&](Communicator* c) -> Communicator* {
                     return new Inviting(c, &seen, c->rank() == 3);
                   }));
  EXPECT_EQ(seen.names.size(), 2u) << "a leader invited no one";
  EXPECT_EQ(seen.named_when_late, 0);
  for (const std::string& name : seen.names) {
    EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name)) << name;
  }
}

TEST_F(ReadOnceTest, ANodesRanksReadBlocksSideBySideThatCrossInOneMessage) {
  // 4 ranks dealt out in turn over 2 nodes (0 and 2 on one, 1 and 3 on
  // the other) that share memory: a node's ranks read blocks of the state
  // that lie side by side, so that each leader sends its node's 20 MiB to
  // the other in one message. Blocks in rank order would cut each node's
  // share in two: four messages. (Saved by one rank: one object, which
  // cuts no share.)
  UseLargeState();
  Save(1, 1);
  std::atomic<uint64_t> across{0};
  std::atomic<int> large{0};
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1,
                   [&](Communicator* c) {
                     return new OnNode(c, Nodes{.per_node = 2,
                                                .across = &across,
                                                .dealt = true,
                                                .large_across = &large});
                   }));
  const uint64_t state = 2 * kLargeRows * kCols * sizeof(float);
  EXPECT_EQ(read_.load(), state);
  EXPECT_LT(across.load(), state + 4096);
  EXPECT_EQ(large.load(), 2);
}

TEST_F(ReadOnceTest, ANodeReadsWhatItLacksWhereTheNodesAreSlowerThanStorage) {
  // Messages a second late: each node reads the rest it lacks from
  // storage, its two ranks a half each, once for the node.
  UseLargeState();
  Save(4, 1);
  const uint64_t state = 2 * kLargeRows * kCols * sizeof(float);
  ExpectAllOk(
      Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kAuto, 1,
           [&](Communicator* c) {
             return new OnNode(
                 c, Nodes{.per_node = 2, .delay = std::chrono::seconds(1)});
           }));
  EXPECT_EQ(read_.load(), 2 * state);
}

TEST_F(ReadOnceTest, OnSeveralNodesOnlyTheLeadersProbeForAReshard) {
  // 4 ranks to 3 on 2 nodes (ranks 0 and 1, rank 2): the new boxes
  // straddle chunks that two ranks need. Only the nodes' first ranks
  // probe, each for what crosses into its node; every rank probing put
  // ranks-per-node times the bytes on a node's link while it read through
  // it. The decision still goes both ways: read once where messages are on
  // time, each rank for itself where they are a second late.
  UseLargeState();
  Save(4, 1);
  const uint64_t state = 2 * kLargeRows * kCols * sizeof(float);
  for (const auto delay :
       {std::chrono::milliseconds(0), std::chrono::milliseconds(1000)}) {
    // The decision is timed: on a machine busy with other work (a test
    // suite run two at a time) the ranks' messages can look slower than
    // the in-memory storage for one load; with no delay, read once in one
    // of three loads is what must hold.
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::atomic<int> probes{0};
      ExpectAllOk(Load(
          3, 1, /*whole=*/false, LoadOptions::ReadOnce::kAuto, 1,
          [&](Communicator* c) {
            return new OnNode(
                c, Nodes{.per_node = 2, .delay = delay, .probes = &probes});
          }));
      // Two leaders, two rounds each (the faster counts).
      EXPECT_EQ(probes.load(), 4) << delay.count() << " ms";
      if (delay.count() != 0 || read_.load() == state) break;
    }
    if (delay.count() == 0) {
      EXPECT_EQ(read_.load(), state);
    } else {
      EXPECT_GT(read_.load(), state);
    }
  }
}

TEST_F(ReadOnceTest, OneLateProbeRoundDoesNotSendAReshardToStorage) {
  // The same reshard with each leader's first probe a second late, as a
  // rank descheduled while it probes (6 ranks on 2 processors on the node
  // bed): the faster round counts, so the ranks still read once. With one
  // round, each read for itself.
  UseLargeState();
  Save(4, 1);
  const uint64_t state = 2 * kLargeRows * kCols * sizeof(float);
  // Timed, as above: read once in one of three loads is what must hold.
  for (int attempt = 0; attempt < 3; ++attempt) {
    ExpectAllOk(Load(3, 1, /*whole=*/false, LoadOptions::ReadOnce::kAuto, 1,
                     [&](Communicator* c) {
                       return new OnNode(c,
                                         Nodes{.per_node = 2,
                                               .delay = std::chrono::seconds(1),
                                               .delay_once = true});
                     }));
    if (read_.load() == state) break;
  }
  EXPECT_EQ(read_.load(), state);
}

// Chunks of 4 MiB that two ranks each need, 32 MiB a pair, dealt among 6
// ranks on 3 nodes ({0, 1}, {2, 3}, {4, 5}), as the reshard of 8 ranks to 6
// on the node bed: ranks 0, 2, 3 and 5 each read 32 MiB already (chunks
// only they need). A node's ranks share its link to storage: dealt rank by
// rank, node {4, 5} read 96 MiB while node {0, 1} read 80; dealt by node
// (those that fewer nodes need first), none reads more than 88.
TEST(DealRunsTest, EvensOutWhatEachNodeReads) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  const std::vector<std::vector<int>> pairs = {{0, 1}, {1, 2}, {3, 4}, {4, 5}};
  std::vector<read_once::Shared> chunks;
  for (size_t p = 0; p < pairs.size(); ++p) {
    for (uint64_t i = 0; i < 8; ++i) {
      read_once::Shared c;
      c.id = {{.high = p, .low = i}, 4 * kMiB};
      c.ranks = pairs[p];
      c.place = {p, i * 4 * kMiB};
      chunks.push_back(c);
    }
  }
  std::vector<read_once::Shared*> shared;
  for (read_once::Shared& c : chunks) shared.push_back(&c);
  const std::vector<read_once::Run> runs = read_once::CutRuns(shared, 8 * kMiB);
  const std::vector<int> node_of = {0, 0, 1, 1, 2, 2};
  std::vector<uint64_t> reads = {32 * kMiB, 0, 32 * kMiB,
                                 32 * kMiB, 0, 32 * kMiB};
  const std::vector<int> reader_of =
      read_once::DealRuns(shared, runs, node_of, reads);
  ASSERT_EQ(reader_of.size(), runs.size());
  std::vector<uint64_t> node_reads(3, 0);
  for (size_t k = 0; k < runs.size(); ++k) {
    const std::vector<int>& need = shared[runs[k].begin]->ranks;
    EXPECT_NE(std::find(need.begin(), need.end(), reader_of[k]), need.end());
  }
  for (size_t r = 0; r < reads.size(); ++r) node_reads[node_of[r]] += reads[r];
  EXPECT_EQ(std::accumulate(node_reads.begin(), node_reads.end(), uint64_t{0}),
            (4 * 32 + 4 * 32) * kMiB);
  EXPECT_LE(*std::max_element(node_reads.begin(), node_reads.end()), 88 * kMiB);
}

TEST_F(ReadOnceTest, ADamagedChunkFailsEveryRankOfNodesThatShareMemory) {
  // Whether the nodes' leaders exchange or each node reads what it lacks.
  UseLargeState();
  Save(4, 1);
  Save(4, 2);
  DamageStep(root_.url(), 2);
  for (const auto delay :
       {std::chrono::milliseconds(0), std::chrono::milliseconds(1000)}) {
    const auto wrap = [&](Communicator* c) -> Communicator* {
      return new OnNode(c, Nodes{.per_node = 2, .delay = delay});
    };
    for (const Status& s :
         Load(4, 2, /*whole=*/true, LoadOptions::ReadOnce::kAuto, -1, wrap)) {
      EXPECT_EQ(s.code(), ErrorCode::kDataLoss) << s.ToString();
    }
    ExpectAllOk(Load(4, std::nullopt, /*whole=*/true,
                     LoadOptions::ReadOnce::kAuto, 1, wrap));
  }
}

TEST_F(ReadOnceTest, TheRingPassesSharesAlongTheRanksOfANodeTogether) {
  // 4 ranks on 2 nodes, dealt out in turn (0 and 2 on one, 1 and 3 on the
  // other), whose ranks cannot share memory (their invitations name
  // another file, as where two hosts carry one name: each rank holds its
  // own), load a state every rank needs whole in shares of 10 MiB, which
  // go round a ring. In rank order every hop of the ring crosses between
  // the nodes, and each share crosses 3 times: 3 times the state in all.
  // With the ranks of a node side by side (0, 2, 1, 3), a share crosses
  // once from the first rank of a node and twice from the second: about
  // 1.5 times the state, less than twice however the shares come out (a
  // run of up to 8 MiB goes to one reader). Nodes that shared memory
  // would send it once.
  UseLargeState();
  Save(4, 1);
  const int before = SharedFilesLeft();
  std::atomic<uint64_t> across{0};
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1,
                   [&](Communicator* c) {
                     return new OnNode(c, Nodes{.per_node = 2,
                                                .across = &across,
                                                .dealt = true,
                                                .other_hosts = true});
                   }));
  const uint64_t state = 2 * kLargeRows * kCols * sizeof(float);
  EXPECT_EQ(read_.load(), state);
  EXPECT_GT(across.load(), state * 5 / 4);
  EXPECT_LT(across.load(), state * 2 + 4096);
  EXPECT_EQ(SharedFilesLeft(), before);
}

TEST_F(ReadOnceTest, EnvironmentTurnsItOff) {
  Save(4, 1);
  setenv("CKPT_READ_ONCE", "off", 1);
  ExpectAllOk(Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1));
  unsetenv("CKPT_READ_ONCE");
  EXPECT_EQ(read_.load(), 4 * 2 * kTensorBytes);
}

TEST_F(ReadOnceTest, ACommunicatorThatCannotSendLoadsAsWithout) {
  Save(4, 1);
  // One rank's communicator cannot send: every rank reads for itself, and
  // none waits on a message.
  auto status = Load(4, 1, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1,
                     [](Communicator* c) -> Communicator* {
                       return c->rank() == 2 ? new NoSendRecv(c) : nullptr;
                     });
  ExpectAllOk(status);
  EXPECT_EQ(read_.load(), 4 * 2 * kTensorBytes);
}

// Flips the last byte of every data object of `step` ("b"'s last chunk on
// the rank that wrote it: a chunk every rank needs).
void DamageStep(const std::string& url, int64_t step) {
  auto storage = OpenStorage(url);
  ASSERT_TRUE(storage.ok());
  auto listed = (*storage)->List("");
  ASSERT_TRUE(listed.ok());
  int damaged = 0;
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "step-%012lld/",
                static_cast<long long>(step));
  for (const ObjectInfo& o : *listed) {
    if (o.key.rfind(prefix, 0) != 0 || !o.key.ends_with(".safetensors")) {
      continue;
    }
    auto bytes = (*storage)->ReadAll(o.key);
    ASSERT_TRUE(bytes.ok());
    bytes->back() ^= 0x5a;
    ASSERT_TRUE(
        (*storage)
            ->Put(o.key, std::as_bytes(std::span(*bytes)), PutMode::kOverwrite)
            .ok());
    ++damaged;
  }
  ASSERT_GT(damaged, 0) << "no data object of step " << step;
}

TEST_F(ReadOnceTest, ADamagedSharedChunkFailsEveryRankAndResumeFallsBack) {
  Save(4, 1);
  Save(4, 2);
  DamageStep(root_.url(), 2);
  // Asked for step 2: every rank fails, naming the damage, and no rank's
  // buffers change.
  for (const Status& s :
       Load(4, 2, /*whole=*/true, LoadOptions::ReadOnce::kOn)) {
    EXPECT_EQ(s.code(), ErrorCode::kDataLoss) << s.ToString();
    EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos)
        << s.ToString();
  }
  // The same where the damaged chunk reaches a node through a relay, which
  // passes it on as missing.
  std::atomic<uint64_t> across{0};
  auto two_nodes = [&](Communicator* c) -> Communicator* {
    return new OnNode(c, 2, &across);
  };
  for (const Status& s :
       Load(4, 2, /*whole=*/true, LoadOptions::ReadOnce::kOn, -1, two_nodes)) {
    EXPECT_EQ(s.code(), ErrorCode::kDataLoss) << s.ToString();
  }
  // A resume skips step 2 on every rank and loads step 1 whole.
  ExpectAllOk(
      Load(4, std::nullopt, /*whole=*/true, LoadOptions::ReadOnce::kOn, 1));
  ExpectAllOk(Load(4, std::nullopt, /*whole=*/true, LoadOptions::ReadOnce::kOn,
                   1, two_nodes));
}

TEST_F(ReadOnceTest, ARankThatCannotPlanFailsTheLoadWithoutAHang) {
  Save(4, 1);
  std::vector<Status> out(4);
  RunRanks(4, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    std::vector<float> b(static_cast<size_t>(kRows * kCols), -1.0f);
    // Rank 3 asks for "b" with a shape the checkpoint does not hold.
    const int64_t rows = rank == 3 ? kRows / 2 : kRows;
    State s;
    s.AddTensor("b",
                View(std::span<float>(b).first(rows * kCols), {rows, kCols}));
    out[rank] = mgr->Load(1, s).status();
    EXPECT_EQ(b, std::vector<float>(b.size(), -1.0f)) << "rank " << rank;
  });
  for (size_t r = 0; r < out.size(); ++r) {
    EXPECT_EQ(out[r].code(), ErrorCode::kInvalidArgument)
        << "rank " << r << ": " << out[r].ToString();
    EXPECT_NE(out[r].message().find("rank 3"), std::string::npos)
        << out[r].ToString();
  }
}

}  // namespace
}  // namespace ckpt
