// Incremental saves: only changed chunks are written, the rest referenced;
// every checkpoint of a chain loads bit-identical; retention, gc and Delete
// respect the references; crashes never break a kept checkpoint.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <thread>

#include "ckpt/checkpoint_manager.h"
#include "data/writer.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/fault_storage.h"
#include "testing/test_util.h"
#include "util/mutex.h"

namespace ckpt {
namespace {

using testing::FaultStorage;
using Steps = std::vector<int64_t>;

constexpr uint64_t kChunk = 4096;

// Embedding tables (rows x dim floats), a small dense tensor, a blob and a
// metadata entry; owns its bytes and can be mutated the ways a trainer does.
struct Tables {
  static constexpr int64_t kDim = 16;
  std::vector<int64_t> rows;
  std::vector<std::vector<float>> tables;
  std::vector<int64_t> counters = std::vector<int64_t>(5, 0);
  std::string rng = "rng";
  int64_t version = 0;

  explicit Tables(std::vector<int64_t> table_rows, uint64_t seed = 1)
      : rows(std::move(table_rows)) {
    std::mt19937_64 gen(seed);
    for (int64_t r : rows) {
      tables.emplace_back(r * kDim);
      for (float& f : tables.back()) f = static_cast<float>(gen() % 1000);
    }
  }

  State ToState() {
    State s;
    for (size_t t = 0; t < tables.size(); ++t) {
      s.AddTensor("emb" + std::to_string(t),
                  View(std::span<float>(tables[t]), {rows[t], kDim}));
    }
    s.AddTensor("counters", View(counters));
    s.AddBlob("rng", rng);
    s.AddMetadata("info", {{"version", std::to_string(version)}});
    return s;
  }

  // Changes `n` random rows of table `t`; returns the rows as ranges.
  std::vector<std::pair<int64_t, int64_t>> TouchRows(size_t t, int n,
                                                     std::mt19937_64& gen) {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int i = 0; i < n; ++i) {
      const int64_t r = static_cast<int64_t>(gen() % rows[t]);
      for (int64_t d = 0; d < kDim; ++d) tables[t][r * kDim + d] += 1;
      out.emplace_back(r, r + 1);
    }
    return out;
  }
};

void ExpectLoadsTables(CheckpointManager& mgr, int64_t step,
                       const Tables& want) {
  SCOPED_TRACE("loading step " + std::to_string(step));
  Result<LoadedCheckpoint> got = mgr.LoadAll(step);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  for (size_t t = 0; t < want.tables.size(); ++t) {
    const Entry* e = got->state.Find("emb" + std::to_string(t));
    ASSERT_NE(e, nullptr);
    ASSERT_EQ(e->tensor.shape,
              (std::vector<int64_t>{want.rows[t], Tables::kDim}));
    EXPECT_EQ(std::memcmp(e->tensor.data, want.tables[t].data(),
                          want.tables[t].size() * sizeof(float)),
              0)
        << "table " << t;
  }
  const Entry* c = got->state.Find("counters");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(std::memcmp(c->tensor.data, want.counters.data(),
                        want.counters.size() * sizeof(int64_t)),
            0);
  EXPECT_EQ(got->state.BlobString("rng").value(), want.rng);
  EXPECT_EQ(got->state.Metadata("info").value().at("version"),
            std::to_string(want.version));
}

// Every object under the root is a manifest of a listed checkpoint, an
// object one of them names, LATEST, or the root's lease.
void ExpectNoUnnamedObjects(CheckpointManager& mgr) {
  std::set<std::string> named = {std::string(format::kLatestName)};
  for (int64_t step : testing::ListedSteps(mgr)) {
    named.insert(format::ManifestKey(step));
    Result<CheckpointDescription> d = mgr.Describe(step);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    for (const ObjectInfo& o : d->objects) named.insert(o.key);
    for (const auto& o : d->metadata_objects) named.insert(o.key);
  }
  for (const std::string& key : testing::CheckpointObjectKeys(mgr.storage())) {
    EXPECT_TRUE(named.count(key)) << key << " is named by no manifest";
  }
  // And every named object exists.
  for (const std::string& key : named) {
    if (key == format::kLatestName) continue;
    EXPECT_TRUE(mgr.storage().Stat(key).ok()) << key << " is missing";
  }
}

class IncrementalTest : public ::testing::Test {
 protected:
  // Fresh roots, each kept until the end of the test.
  std::string MemRoot() {
    return roots_.emplace_back(testing::Backend::kMemory, "incr").url();
  }
  std::string FileRoot() {
    return roots_.emplace_back(testing::Backend::kFile, "incr").url();
  }

  static Options MakeOptions() {
    Options o;
    o.chunk_size = kChunk;
    return o;
  }

  std::unique_ptr<CheckpointManager> Open(const std::string& url,
                                          Options o = MakeOptions()) {
    auto mgr = CheckpointManager::Open(url, std::move(o));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  std::deque<testing::TestRoot> roots_;
};

SaveOptions Incremental() {
  SaveOptions s;
  s.incremental = true;
  return s;
}

// The start of a chain: `s` (the state of `m`) saved as step 1, then with
// one chunk of `m` changed as step 2, incremental.
void SaveOneAndTwo(CheckpointManager& mgr, Tables& m, State& s) {
  ASSERT_TRUE(mgr.Save(1, s).ok());
  m.tables[0][0] = 5;
  ASSERT_TRUE(mgr.Save(2, s, Incremental()).ok());
}

TEST_F(IncrementalTest, WritesOnlyChangedChunksAndLoadsBitIdentical) {
  auto mgr = Open(MemRoot());
  Tables m({1024, 512});  // 64 KiB and 32 KiB: 16 and 8 chunks
  State s = m.ToState();
  Result<SaveResult> full = mgr->Save(1, s, Incremental());
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_TRUE(full->info.depends_on.empty()) << "nothing to compare with";
  EXPECT_EQ(full->info.chain, 0);

  m.tables[0][3] = -1;  // one chunk of table 0 changes
  m.version = 1;
  s = m.ToState();  // the metadata entry holds a copy
  Result<SaveResult> inc = mgr->Save(2, s, Incremental());
  ASSERT_TRUE(inc.ok()) << inc.status().ToString();
  EXPECT_EQ(inc->info.depends_on, Steps{1});
  EXPECT_EQ(inc->info.parent, 1);
  EXPECT_EQ(inc->info.chain, 1);
  // One 4 KiB chunk, the counters and the blob, plus a safetensors header.
  EXPECT_LT(inc->info.bytes, kChunk + 1024);
  EXPECT_GT(inc->info.referenced_bytes, 20 * kChunk);
  ExpectLoadsTables(*mgr, 2, m);

  // Nothing changed: nothing but the small entries is written, and the
  // chain flattens (step 3 points straight at steps 1 and 2's objects).
  Result<SaveResult> same = mgr->Save(3, s, Incremental());
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->info.depends_on, (Steps{1, 2}));
  EXPECT_EQ(same->info.chain, 2);
  ExpectLoadsTables(*mgr, 3, m);
  for (int64_t step : {1, 2, 3}) {
    Result<VerifyReport> v = mgr->Verify(step);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << v->problems.front();
  }
  // A full save by default.
  Result<SaveResult> plain = mgr->Save(4, s);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->info.depends_on.empty());
  EXPECT_GT(plain->info.bytes, 24 * kChunk);
}

TEST_F(IncrementalTest, DirtyRowsAreTheOnlyOnesCompared) {
  auto mgr = Open(MemRoot());
  Tables m({2048});  // 128 KiB: 32 chunks of 64 rows
  State s = m.ToState();
  ASSERT_TRUE(mgr->Save(1, s).ok());
  std::mt19937_64 gen(7);
  SaveOptions inc = Incremental();
  inc.dirty_rows["emb0"] = m.TouchRows(0, 3, gen);
  Result<SaveResult> r = mgr->Save(2, s, inc);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LE(r->info.bytes, 3 * kChunk + 1024);
  ExpectLoadsTables(*mgr, 2, m);

  // The caller vouches for the rows it does not list: a change elsewhere is
  // not seen (that is the point: those chunks are not even hashed).
  const float before = m.tables[0][0];
  m.tables[0][0] = before + 100;
  inc.dirty_rows["emb0"] = {{2000, 2001}};
  ASSERT_TRUE(mgr->Save(3, s, inc).ok());
  Result<LoadedCheckpoint> got = mgr->LoadAll(3, {"emb0"});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(
      reinterpret_cast<const float*>(got->state.Find("emb0")->tensor.data)[0],
      before);

  // Bad ranges are refused, naming the tensor.
  inc.dirty_rows["emb0"] = {{5, 3}};
  Result<SaveResult> bad = mgr->Save(4, s, inc);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("emb0"), std::string::npos);
  inc.dirty_rows = {{"nope", {{0, 1}}}};
  EXPECT_EQ(mgr->Save(4, s, inc).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(IncrementalTest, PolicyDecidesWhenToSaveFull) {
  Options o = MakeOptions();
  o.incremental.full_every = 3;
  auto mgr = Open(MemRoot(), o);
  Tables m({1024});
  State s = m.ToState();
  Steps chains;
  for (int64_t step = 1; step <= 7; ++step) {
    m.tables[0][0] = static_cast<float>(step);
    Result<SaveResult> r = mgr->Save(step, s, Incremental());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    chains.push_back(r->info.chain);
  }
  EXPECT_EQ(chains, (Steps{0, 1, 2, 0, 1, 2, 0}));

  o = MakeOptions();
  o.incremental.max_chain = 1;
  mgr = Open(MemRoot(), o);
  chains.clear();
  for (int64_t step = 1; step <= 4; ++step) {
    Result<SaveResult> r = mgr->Save(step, s, Incremental());
    ASSERT_TRUE(r.ok());
    chains.push_back(r->info.chain);
  }
  EXPECT_EQ(chains, (Steps{0, 1, 0, 1}));

  // Bad policies are refused when the root is opened.
  for (auto bad :
       {IncrementalPolicy{.full_every = -1}, IncrementalPolicy{.max_chain = -2},
        IncrementalPolicy{.min_referenced_fraction = 1.5}}) {
    Options b = MakeOptions();
    b.incremental = bad;
    EXPECT_EQ(CheckpointManager::Open(MemRoot(), b).status().code(),
              ErrorCode::kInvalidArgument);
  }

  // Too little unchanged: a full save.
  o = MakeOptions();
  o.incremental.min_referenced_fraction = 0.5;
  mgr = Open(MemRoot(), o);
  ASSERT_TRUE(mgr->Save(1, s, Incremental()).ok());
  for (size_t i = 0; i < m.tables[0].size() * 6 / 10; ++i) m.tables[0][i] += 1;
  Result<SaveResult> r = mgr->Save(2, s, Incremental());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->info.depends_on.empty());
  m.tables[0][0] += 1;
  r = mgr->Save(3, s, Incremental());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->info.depends_on, Steps{2});
  ExpectLoadsTables(*mgr, 3, m);
}

TEST_F(IncrementalTest, DeleteRefusesDependedOnAndForceRewritesDependants) {
  auto mgr = Open(MemRoot());
  Tables m({1024});
  State s = m.ToState();
  ASSERT_NO_FATAL_FAILURE(SaveOneAndTwo(*mgr, m, s));
  Tables at2 = m;
  m.tables[0][2000] = 6;
  ASSERT_TRUE(mgr->Save(3, s, Incremental()).ok());

  Status refused = mgr->Delete(1).status();
  ASSERT_EQ(refused.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("2, 3"), std::string::npos)
      << refused.message();
  ASSERT_TRUE(mgr->Delete(2, DeleteOptions{.rewrite_dependants = true}).ok());
  EXPECT_EQ(testing::ListedSteps(*mgr), (Steps{1, 3}));
  Result<CheckpointDescription> d3 = mgr->Describe(3);
  ASSERT_TRUE(d3.ok());
  EXPECT_EQ(d3->info.depends_on, Steps{1});
  ExpectLoadsTables(*mgr, 3, m);
  // The rewrite is an attempt of its own, named by the manifest and by the
  // object it wrote (docs/format.md: `attempt`).
  Result<std::string> raw = mgr->storage().ReadAll(format::ManifestKey(3));
  ASSERT_TRUE(raw.ok());
  Result<format::Manifest> m3 = format::DecodeManifest(*raw, "step 3");
  ASSERT_TRUE(m3.ok());
  EXPECT_TRUE(std::any_of(m3->objects.begin(), m3->objects.end(),
                          [&](const auto& o) {
                            return o.key ==
                                   format::DataObjectKey(3, 0, m3->attempt);
                          }))
      << "no object of step 3 carries attempt " << m3->attempt;
  ASSERT_TRUE(mgr->Delete(1, DeleteOptions{.rewrite_dependants = true}).ok());
  d3 = mgr->Describe(3);
  ASSERT_TRUE(d3.ok());
  EXPECT_TRUE(d3->info.depends_on.empty());
  EXPECT_EQ(d3->info.chain, 0);
  ExpectLoadsTables(*mgr, 3, m);
  Result<VerifyReport> v = mgr->Verify(3);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok()) << v->problems.front();
  ExpectNoUnnamedObjects(*mgr);
  (void)at2;
}

// Watches, once armed, a forced delete of step `from` that rewrites step
// `into`: the bytes read from `from`'s objects, the bytes appended to new
// objects of `into`, and the most read but not yet written at any moment.
class CopyWatcher : public StorageWrapper {
 public:
  CopyWatcher(Storage* target, int64_t from, int64_t into)
      : StorageWrapper(target),
        from_(format::StepDirName(from) + "/"),
        into_(format::StepDirName(into) + "/") {}

  void Arm() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    armed_ = true;
  }
  uint64_t read() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return read_;
  }
  uint64_t appended() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return appended_;
  }
  uint64_t largest_read() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return largest_read_;
  }
  uint64_t most_unwritten() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return most_unwritten_;
  }

  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override EXCLUDES(mu_) {
    Status s = StorageWrapper::ReadRange(key, offset, out);
    MutexLock lock(&mu_);
    if (s.ok() && armed_ && key.starts_with(from_)) {
      read_ += out.size();
      largest_read_ = std::max<uint64_t>(largest_read_, out.size());
      if (read_ > appended_) {
        most_unwritten_ = std::max(most_unwritten_, read_ - appended_);
      }
    }
    return s;
  }

  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    Result<std::unique_ptr<WritableObject>> out =
        StorageWrapper::NewWritable(key);
    if (!out.ok() || !key.starts_with(into_)) return out;
    return std::unique_ptr<WritableObject>(
        std::make_unique<Counted>(std::move(out).value(), this));
  }

 private:
  class Counted : public WritableObject {
   public:
    Counted(std::unique_ptr<WritableObject> target, CopyWatcher* watcher)
        : target_(std::move(target)), watcher_(watcher) {}
    Status Append(std::span<const std::byte> data) override {
      Status s = target_->Append(data);
      if (s.ok()) watcher_->Appended(data.size());
      return s;
    }
    Status Close() override { return target_->Close(); }
    uint64_t size() const override { return target_->size(); }

   private:
    std::unique_ptr<WritableObject> target_;
    CopyWatcher* watcher_;
  };

  void Appended(uint64_t n) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (armed_) appended_ += n;
  }

  const std::string from_;
  const std::string into_;
  Mutex mu_;
  bool armed_ GUARDED_BY(mu_) = false;
  uint64_t read_ GUARDED_BY(mu_) = 0;
  uint64_t appended_ GUARDED_BY(mu_) = 0;
  uint64_t largest_read_ GUARDED_BY(mu_) = 0;
  uint64_t most_unwritten_ GUARDED_BY(mu_) = 0;
};

// A forced delete streams what it copies: at no moment has it read more
// than one chunk that it has not written yet, however much the dependant
// inherits; the dependant then loads bit-identical on its own.
TEST_F(IncrementalTest, ForcedDeleteCopiesOneChunkAtATime) {
  constexpr uint64_t kBigChunk = 256 << 10;
  const std::string url = FileRoot();
  auto base = OpenStorage(url);
  ASSERT_TRUE(base.ok());
  auto wrapper = std::make_unique<CopyWatcher>(base->get(), 1, 2);
  CopyWatcher* watch = wrapper.get();
  Options o = MakeOptions();
  o.chunk_size = kBigChunk;
  auto mgr = CheckpointManager::Open(std::move(wrapper), o);
  ASSERT_TRUE(mgr.ok());
  Tables m({65536});  // 4 MiB: 16 chunks, of which step 2 rewrites one
  State s = m.ToState();
  ASSERT_NO_FATAL_FAILURE(SaveOneAndTwo(**mgr, m, s));
  watch->Arm();
  ASSERT_TRUE(
      (*mgr)->Delete(1, DeleteOptions{.rewrite_dependants = true}).ok());
  EXPECT_GE(watch->read(), 15 * kBigChunk);
  EXPECT_GE(watch->appended(), watch->read()) << "copied bytes went missing";
  EXPECT_LE(watch->largest_read(), kBigChunk);
  EXPECT_LE(watch->most_unwritten(), kBigChunk)
      << "the copy held more than one chunk in memory";
  EXPECT_EQ(testing::ListedSteps(**mgr), Steps{2});
  Result<CheckpointDescription> d2 = (*mgr)->Describe(2);
  ASSERT_TRUE(d2.ok());
  EXPECT_TRUE(d2->info.depends_on.empty());
  ExpectLoadsTables(**mgr, 2, m);
  Result<VerifyReport> v = (*mgr)->Verify(2);
  ASSERT_TRUE(v.ok());
  EXPECT_TRUE(v->ok()) << v->problems.front();
  ExpectNoUnnamedObjects(**mgr);
}

// The streamed writer writes the very bytes WriteDataObject writes, below
// and above the size from which the data starts on a page, with pieces of
// several chunks and of another dtype; misused, it publishes nothing.
TEST(DataObjectStreamTest, WritesWhatWriteDataObjectWrites) {
  testing::TestRoot root(testing::Backend::kMemory, "stream");
  Result<std::unique_ptr<Storage>> storage = root.Open();
  ASSERT_TRUE(storage.ok());
  Storage& st = **storage;
  for (uint64_t total : {uint64_t{10000}, format::kPageAlignFrom + 12344}) {
    SCOPED_TRACE("data bytes " + std::to_string(total));
    const std::vector<std::byte> bytes = testing::RandomBytes(total, total);
    const uint64_t a = total / 3, b = 4 * (total / 8);  // b: whole F32s
    const std::vector<PieceToWrite> pieces = {
        {"a", DType::kU8, {static_cast<int64_t>(a)}, {bytes.data(), a}},
        {"b",
         DType::kF32,
         {static_cast<int64_t>(b / 4)},
         {bytes.data() + a, b}},
        {"c@1",
         DType::kU8,
         {static_cast<int64_t>(total - a - b)},
         {bytes.data() + a + b, total - a - b}}};
    constexpr uint64_t kSmallChunk = 1000;
    Result<WrittenObject> whole =
        WriteDataObject(st, "whole", pieces, kSmallChunk);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    std::vector<format::TensorLayout> tensors;
    for (const PieceToWrite& p : pieces) {
      tensors.push_back({p.tensor_name, p.dtype, p.lengths});
    }
    Result<DataObjectStream> stream =
        DataObjectStream::Start(st, "streamed", tensors, kSmallChunk);
    ASSERT_TRUE(stream.ok()) << stream.status().ToString();
    for (const PieceToWrite& p : pieces) {
      ASSERT_TRUE(stream->Append(p.bytes).ok());
    }
    Result<WrittenObject> streamed = stream->Close();
    ASSERT_TRUE(streamed.ok()) << streamed.status().ToString();
    EXPECT_EQ(st.ReadAll("streamed").value(), st.ReadAll("whole").value());
    EXPECT_EQ(streamed->size, whole->size);
    ASSERT_EQ(streamed->chunks.size(), whole->chunks.size());
    for (size_t i = 0; i < whole->chunks.size(); ++i) {
      ASSERT_EQ(streamed->chunks[i].size(), whole->chunks[i].size());
      EXPECT_GT(whole->chunks[i].size(), 1u) << "piece " << i;
      for (size_t c = 0; c < whole->chunks[i].size(); ++c) {
        EXPECT_EQ(streamed->chunks[i][c].offset, whole->chunks[i][c].offset);
        EXPECT_EQ(streamed->chunks[i][c].length, whole->chunks[i][c].length);
        EXPECT_EQ(streamed->chunks[i][c].checksum,
                  whole->chunks[i][c].checksum);
      }
    }

    {
      Result<DataObjectStream> misused =
          DataObjectStream::Start(st, "misused", tensors, kSmallChunk);
      ASSERT_TRUE(misused.ok());
      EXPECT_EQ(misused->Append(pieces[1].bytes).code(),
                ErrorCode::kInvalidArgument);
      ASSERT_TRUE(misused->Append(pieces[0].bytes).ok());
      EXPECT_EQ(misused->Close().status().code(), ErrorCode::kInvalidArgument);
    }  // destroyed unpublished
    EXPECT_EQ(st.Stat("misused").status().code(), ErrorCode::kNotFound);
  }
}

// The data object step `step`'s own save wrote (rank 0).
std::string OwnObject(CheckpointManager& mgr, int64_t step) {
  Result<CheckpointDescription> d = mgr.Describe(step);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (d.ok()) {
    for (const ObjectInfo& o : d->objects) {
      if (o.key.starts_with(format::StepDirName(step) + "/")) return o.key;
    }
  }
  ADD_FAILURE() << "step " << step << " has no object of its own";
  return "";
}

TEST_F(IncrementalTest, ResumeAndParentsSkipAStepWhoseObjectIsMissing) {
  auto mgr = Open(MemRoot());
  Tables m({1024});
  State s = m.ToState();
  ASSERT_NO_FATAL_FAILURE(SaveOneAndTwo(*mgr, m, s));
  const Tables at2 = m;
  m.tables[0][100] = 6;
  ASSERT_TRUE(mgr->Save(3, s, Incremental()).ok());
  // Step 3's own object is lost: its manifest is there, its data is not.
  ASSERT_TRUE(mgr->storage().Delete(OwnObject(*mgr, 3)).ok());
  EXPECT_EQ(mgr->Latest().value(), std::optional<int64_t>(2));
  Tables got({1024}, 99);
  State into = got.ToState();
  Result<CheckpointInfo> loaded = mgr->Load(std::nullopt, into);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->step, 2);
  ExpectLoadsTables(*mgr, 2, at2);
  // An incremental save never takes the broken step as its parent.
  m.tables[0][200] = 7;
  Result<SaveResult> r4 = mgr->Save(4, s, Incremental());
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_EQ(r4->info.parent, 2);
  EXPECT_EQ(mgr->Latest().value(), std::optional<int64_t>(4));
  ExpectLoadsTables(*mgr, 4, m);
}

// Removes `victim` when the first data object of `step` is started: a
// delete running while an incremental save writes.
class DeleteWhileWriting : public StorageWrapper {
 public:
  DeleteWhileWriting(Storage* target, int64_t step)
      : StorageWrapper(target), step_(step) {}
  std::string victim;
  Result<std::unique_ptr<WritableObject>> NewWritable(
      std::string_view key) override {
    if (!victim.empty() && key.starts_with(format::StepDirName(step_))) {
      EXPECT_TRUE(StorageWrapper::Delete(std::exchange(victim, "")).ok());
    }
    return StorageWrapper::NewWritable(key);
  }

 private:
  int64_t step_;
};

TEST_F(IncrementalTest, AParentLostDuringTheSaveIsNeverReferenced) {
  const std::string url = MemRoot();
  auto base = OpenStorage(url);
  ASSERT_TRUE(base.ok());
  auto wrapper = std::make_unique<DeleteWhileWriting>(base->get(), 2);
  DeleteWhileWriting* racing = wrapper.get();
  auto mgr = CheckpointManager::Open(std::move(wrapper), MakeOptions());
  ASSERT_TRUE(mgr.ok());
  Tables m({1024});
  State s = m.ToState();
  ASSERT_TRUE((*mgr)->Save(1, s).ok());
  racing->victim = OwnObject(**mgr, 1);
  m.tables[0][0] = 5;
  Result<SaveResult> r = (*mgr)->Save(2, s, Incremental());
  ASSERT_FALSE(r.ok()) << "step 2 committed over a missing parent";
  EXPECT_EQ(r.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("is missing"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("nothing was committed"),
            std::string::npos);
  EXPECT_EQ(testing::ListedSteps(**mgr), (Steps{1}));
  // Nothing of the attempt stays, and the next save is whole.
  EXPECT_TRUE((*mgr)->storage().List(format::StepDirName(2)).value().empty());
  Result<SaveResult> again = (*mgr)->Save(2, s, Incremental());
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(again->info.depends_on.empty());
  ExpectLoadsTables(**mgr, 2, m);
}

// Counts the reads of index objects; fails the commit of one step.
class IndexReads : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  Status Put(std::string_view key, std::span<const std::byte> data,
             PutMode mode) override {
    if (key == format::ManifestKey(fail_commit)) {
      return IOError("injected: no room for the commit record");
    }
    return StorageWrapper::Put(key, data, mode);
  }
  Status ReadRange(std::string_view key, uint64_t offset,
                   std::span<std::byte> out) override {
    if (key.ends_with(format::kIndexSuffix)) ++reads;
    return StorageWrapper::ReadRange(key, offset, out);
  }
  Result<std::string> ReadAll(std::string_view key) override {
    if (key.ends_with(format::kIndexSuffix)) ++reads;
    return StorageWrapper::ReadAll(key);
  }
  int reads = 0;
  int64_t fail_commit = -1;
};

TEST_F(IncrementalTest, TheNextSaveTakesItsParentsIndexFromMemory) {
  const std::string url = FileRoot();
  auto base = OpenStorage(url);
  ASSERT_TRUE(base.ok());
  auto wrapper = std::make_unique<IndexReads>(base->get());
  IndexReads* io = wrapper.get();
  auto opened = CheckpointManager::Open(std::move(wrapper), MakeOptions());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  CheckpointManager& mgr = **opened;
  Tables m({1024, 512});
  State s = m.ToState();
  std::mt19937_64 gen(3);
  SaveOptions inc = Incremental();
  ASSERT_TRUE(mgr.Save(1, s).ok());
  // Each save's parent is the step this manager just committed: the index
  // it wrote is not read back.
  for (int64_t step : {2, 3}) {
    inc.dirty_rows["emb0"] = m.TouchRows(0, 2, gen);
    Result<SaveResult> r = mgr.Save(step, s, inc);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->info.parent, step - 1);
    EXPECT_EQ(io->reads, 0) << "step " << step << " read its parent's index";
  }
  // A save whose commit fails leaves its index behind in memory; the next
  // save's parent is step 3, whose index is read from storage.
  io->fail_commit = 4;
  inc.dirty_rows["emb0"] = m.TouchRows(0, 2, gen);
  EXPECT_FALSE(mgr.Save(4, s, inc).ok());
  io->fail_commit = -1;
  Result<SaveResult> r = mgr.Save(5, s, Incremental());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->info.parent, 3);
  EXPECT_GT(io->reads, 0);
  EXPECT_LT(r->info.bytes, 3 * kChunk + 1024);
  ExpectLoadsTables(mgr, 5, m);
  // A fresh manager, which has no index in memory, loads the same.
  auto other = Open(url);
  ASSERT_NE(other, nullptr);
  ExpectLoadsTables(*other, 5, m);
  for (int64_t step : {2, 3, 5}) {
    Result<VerifyReport> v = other->Verify(step);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_TRUE(v->ok()) << v->problems.front();
  }
}

TEST_F(IncrementalTest, RetentionKeepsWhatKeptCheckpointsDependOn) {
  Options o = MakeOptions();
  o.retention.keep_last = 1;
  o.incremental.full_every = 4;
  auto mgr = Open(MemRoot(), o);
  Tables m({1024});
  State s = m.ToState();
  for (int64_t step = 1; step <= 4; ++step) {
    m.tables[0][step * 2048] += 1;  // chunk 2 * step
    ASSERT_TRUE(mgr->Save(step, s, Incremental()).ok());
  }
  // Step 4 depends on 1, 2 and 3 (each wrote a chunk step 4 still uses).
  EXPECT_EQ(testing::ListedSteps(*mgr), (Steps{1, 2, 3, 4}));
  ExpectLoadsTables(*mgr, 4, m);
  // Step 5 is full (every 4th): the old chain goes.
  m.tables[0][0] += 1;
  Result<SaveResult> r = mgr->Save(5, s, Incremental());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->deleted_steps, (Steps{1, 2, 3, 4}));
  EXPECT_EQ(testing::ListedSteps(*mgr), Steps{5});
  ExpectLoadsTables(*mgr, 5, m);
  ExpectNoUnnamedObjects(*mgr);
}

// Snapshots of a chain: keeping every 4th step costs about what changed.
TEST_F(IncrementalTest, KeepingEveryKthStepOfAChainIsCheap) {
  Options o = MakeOptions();
  o.retention.keep_every_n_steps = 4;
  o.retention.keep_last = 1;
  auto mgr = Open(MemRoot(), o);
  Tables m({4096});  // 256 KiB
  State s = m.ToState();
  std::mt19937_64 gen(3);
  std::map<int64_t, Tables> kept;
  ASSERT_TRUE(mgr->Save(0, s, Incremental()).ok());
  kept.emplace(0, m);
  for (int64_t step = 1; step <= 16; ++step) {
    m.TouchRows(0, 1, gen);
    ASSERT_TRUE(mgr->Save(step, s, Incremental()).ok());
    if (step % 4 == 0) kept.emplace(step, m);
  }
  uint64_t stored = 0;
  auto listed = mgr->List();  // held: a range-for over List().value() dangles
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  for (const CheckpointInfo& c : *listed) stored += c.bytes;
  const uint64_t full = m.tables[0].size() * sizeof(float);
  // A full state plus, per save, about one changed chunk and small entries.
  EXPECT_LT(stored, full + 16 * (kChunk + 1024));
  for (const auto& [step, want] : kept) ExpectLoadsTables(*mgr, step, want);
}

// Random mutations, incremental and full saves, deletes and gc; after every
// round every kept checkpoint loads bit-identical and nothing is orphaned.
void RandomRounds(CheckpointManager& mgr, int rounds, uint64_t seed) {
  std::mt19937_64 gen(seed);
  Tables m({300, 77, 1});
  std::map<int64_t, Tables> saved;
  int64_t step = 0;
  for (int round = 0; round < rounds; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    SaveOptions save;
    save.incremental = gen() % 4 != 0;
    const int what = static_cast<int>(gen() % 4);
    const size_t t = gen() % m.tables.size();
    if (what == 0) {  // a whole tensor
      for (float& f : m.tables[t]) f = static_cast<float>(gen() % 7);
    } else if (what == 1) {  // random rows, perhaps with dirty rows
      auto rows = m.TouchRows(t, 1 + static_cast<int>(gen() % 5), gen);
      if (gen() % 2) save.dirty_rows["emb" + std::to_string(t)] = rows;
    } else if (what == 2) {
      m.counters[gen() % m.counters.size()] += 1;
      m.rng = "rng-" + std::to_string(gen() % 3);
    }  // 3: no change at all
    m.version = round;
    step += 1 + static_cast<int64_t>(gen() % 2);
    State s = m.ToState();
    Result<SaveResult> r = mgr.Save(step, s, save);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    saved.emplace(step, m);
    for (int64_t d : r->deleted_steps) saved.erase(d);

    const int op = static_cast<int>(gen() % 6);
    if (op == 0 && saved.size() > 1) {
      auto it = std::next(saved.begin(), gen() % saved.size());
      const bool force = gen() % 2;
      Status del =
          mgr.Delete(it->first, DeleteOptions{.rewrite_dependants = force})
              .status();
      if (del.ok()) {
        saved.erase(it);
      } else {
        ASSERT_FALSE(force) << del.ToString();
        ASSERT_EQ(del.code(), ErrorCode::kFailedPrecondition) << del.ToString();
      }
    } else if (op == 1) {
      GcOptions gc;
      RetentionPolicy p;
      p.keep_last = 1 + static_cast<int>(gen() % 4);
      if (gen() % 2) p.keep_every_n_steps = 3;
      gc.retention = p;
      Result<GcReport> report = mgr.GarbageCollect(gc);
      ASSERT_TRUE(report.ok()) << report.status().ToString();
      for (int64_t d : report->deleted_steps) saved.erase(d);
    }
    ASSERT_EQ(testing::ListedSteps(mgr), [&] {
      Steps keys;
      for (const auto& [k, v] : saved) keys.push_back(k);
      return keys;
    }());
    for (const auto& [k, want] : saved) {
      ExpectLoadsTables(mgr, k, want);
      if (::testing::Test::HasFailure()) return;
    }
    ExpectNoUnnamedObjects(mgr);
    if (::testing::Test::HasFailure()) return;
  }
}

// A manager reuses the chunk rows of one save's index for the next; saves
// of states with more, fewer and differently sized tables in turn, full
// and incremental, each load back exactly what was saved.
TEST_F(IncrementalTest, StatesOfChangingShapeSaveInTurn) {
  Options o = MakeOptions();
  auto mgr = Open(FileRoot(), o);
  const std::vector<std::vector<int64_t>> shapes = {
      {300, 77, 1}, {5, 900, 3, 40, 2}, {300, 77, 1}, {1}, {2000}};
  std::map<int64_t, Tables> saved;
  int64_t step = 0;
  std::mt19937_64 gen(3);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tables m(shapes[i], 11 + i + round);
      // The same shape again, a few rows changed: an incremental save
      // with references to the one just made.
      for (int incremental = 0; incremental < 2; ++incremental) {
        SaveOptions save;
        save.incremental = incremental == 1;
        if (save.incremental) {
          save.dirty_rows["emb0"] = m.TouchRows(0, 2, gen);
        }
        State s = m.ToState();
        Result<SaveResult> r = mgr->Save(++step, s, save);
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        saved.emplace(step, m);
      }
    }
  }
  for (const auto& [k, want] : saved) ExpectLoadsTables(*mgr, k, want);
}

int RoundsFromEnv(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

TEST_F(IncrementalTest, RandomizedRoundsInMemory) {
  Options o = MakeOptions();
  o.incremental.full_every = 7;
  auto mgr = Open(MemRoot(), o);
  RandomRounds(*mgr, RoundsFromEnv("CKPT_INCREMENTAL_ROUNDS", 200), 42);
}

TEST_F(IncrementalTest, RandomizedRoundsOnFiles) {
  Options o = MakeOptions();
  o.retention.keep_last = 5;
  o.retention.keep_every_n_steps = 4;
  auto mgr = Open(FileRoot(), o);
  RandomRounds(*mgr, RoundsFromEnv("CKPT_INCREMENTAL_FILE_ROUNDS", 30), 7);
}

// Several ranks, each holding a row shard of the tables and a replicated
// counter: each compares its own pieces with the parent's.
TEST_F(IncrementalTest, ManyRanks) {
  for (int ranks : {1, 3}) {
    SCOPED_TRACE(std::to_string(ranks) + " ranks");
    const std::string root = MemRoot();
    const int64_t rows = 600, dim = 16;
    std::vector<float> full(rows * dim);
    for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
    auto comms = NewThreadCommunicators(ranks);
    std::vector<uint64_t> bytes(3);
    std::vector<std::thread> threads;
    std::mutex mu;
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        Options o = MakeOptions();
        o.communicator = comms[r].get();
        auto mgr = CheckpointManager::Open(root, o);
        ASSERT_TRUE(mgr.ok());
        const int64_t per = rows / ranks;
        std::vector<float> mine(full.begin() + r * per * dim,
                                full.begin() + (r + 1) * per * dim);
        std::vector<int64_t> counter = {1};
        for (int64_t step = 1; step <= 3; ++step) {
          if (step > 1) mine[step] += 1;  // one chunk per rank changes
          State s;
          s.AddTensorPiece("emb", {rows, dim}, {r * per, 0},
                           View(std::span<float>(mine), {per, dim}));
          s.AddTensor("counter", View(counter));
          Result<SaveResult> res = (*mgr)->Save(step, s, Incremental());
          ASSERT_TRUE(res.ok()) << res.status().ToString();
          std::lock_guard<std::mutex> lock(mu);
          bytes[step - 1] = res->info.bytes;
          if (step > 1) {
            for (int64_t i = 0; i < per * dim; ++i) {
              full[r * per * dim + i] = mine[i];
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_GT(bytes[0], rows * dim * sizeof(float));
    EXPECT_LT(bytes[2], static_cast<uint64_t>(ranks) * (kChunk + 512));
    auto mgr = CheckpointManager::Open(root, MakeOptions());
    ASSERT_TRUE(mgr.ok());
    Result<LoadedCheckpoint> got = (*mgr)->LoadAll(3, {"emb"});
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(std::memcmp(got->state.Find("emb")->tensor.data, full.data(),
                          full.size() * sizeof(float)),
              0);
  }
}

// A crash at every storage operation of an incremental save (with the
// retention and gc after it), and of a forced delete, leaves every kept
// checkpoint loadable.
TEST_F(IncrementalTest, CrashesNeverBreakAKeptCheckpoint) {
  Options o = MakeOptions();
  o.retention.keep_last = 1;
  for (int scenario = 0; scenario < 2; ++scenario) {
    uint64_t op = 0;
    for (;; ++op) {
      SCOPED_TRACE("scenario " + std::to_string(scenario) + " crash at op " +
                   std::to_string(op));
      const std::string url = MemRoot();
      Tables m({1024});
      State s = m.ToState();
      std::map<int64_t, Tables> want;
      {
        Options plain = MakeOptions();
        auto mgr = Open(url, plain);
        ASSERT_TRUE(mgr->Save(1, s).ok());
        want.emplace(1, m);
        m.tables[0][1] = 9;
        ASSERT_TRUE(mgr->Save(2, s, Incremental()).ok());
        want.emplace(2, m);
      }
      auto base = OpenStorage(url);
      ASSERT_TRUE(base.ok());
      auto fault = std::make_unique<FaultStorage>(base->get());
      FaultStorage* f = fault.get();
      f->CrashAt(op, op % 2 ? FaultStorage::Mode::kCrashAfter
                            : FaultStorage::Mode::kCrashBefore);
      auto mgr = CheckpointManager::Open(std::move(fault), o);
      ASSERT_TRUE(mgr.ok());
      bool ok;
      if (scenario == 0) {
        m.tables[0][3000] = 7;
        ok = (*mgr)->Save(3, s, Incremental()).ok();
        if (ok) want.emplace(3, m);
      } else {
        ok = (*mgr)->Delete(1, DeleteOptions{.rewrite_dependants = true}).ok();
        if (ok) want.erase(1);
      }
      const bool crashed = f->crashed();
      mgr->reset();
      // Reopen untouched: whatever is listed loads bit-identical, and the
      // newest kept checkpoint is there.
      auto after = Open(url);
      const Steps listed = testing::ListedSteps(*after);
      ASSERT_FALSE(listed.empty());
      for (int64_t step : listed) {
        ASSERT_TRUE(want.count(step) || step == 3) << step;
        if (step == 3 && !want.count(3)) {
          // A save that crashed after its commit: complete.
          Tables t = m;
          t.tables[0][3000] = 7;
          ExpectLoadsTables(*after, step, t);
        } else {
          ExpectLoadsTables(*after, step, want.at(step));
        }
      }
      if (ok) {
        EXPECT_EQ(listed.back(), scenario == 0 ? 3 : 2);
      }
      EXPECT_TRUE(std::count(listed.begin(), listed.end(), 2))
          << "step 2 is lost";
      // A gc after the crash leaves exactly the named objects.
      // Two hours later: the dead attempt of step 3 (above the newest
      // committed step, so protected while young) is old enough to go.
      Options later = MakeOptions();
      later.now_unix_ms = [] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count() +
               2 * 3600 * 1000;
      };
      auto cleaner = Open(url, later);
      ASSERT_TRUE(cleaner->GarbageCollect().ok());
      ExpectNoUnnamedObjects(*cleaner);
      for (int64_t step : testing::ListedSteps(*cleaner)) {
        Result<VerifyReport> v = cleaner->Verify(step);
        ASSERT_TRUE(v.ok());
        EXPECT_TRUE(v->ok()) << v->problems.front();
      }
      if (::testing::Test::HasFailure() || !crashed) break;
    }
    // The save writes, commits and cleans up; the forced delete writes a
    // copy, replaces a manifest and deletes: a crash was tried at each.
    EXPECT_GE(op, 3u) << "scenario " << scenario;
  }
}

}  // namespace
}  // namespace ckpt
