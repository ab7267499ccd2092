// The checkpoint layer on s3:// roots, against moto's S3 emulator (started
// by the test on 127.0.0.1): round trips with multipart data objects, the
// commit where the store cannot create-if-absent atomically (conditional
// writes off, as MotoS3::Options() sets them), four ranks saving and other
// world sizes loading, and garbage collection of the incomplete uploads a dead
// attempt leaves. crash_test.cc runs its crash cases on s3:// as well. Built
// with CKPT_S3_TEST_ON_RGW (checkpoint_s3_rgw_test), the same tests run against
// Ceph's radosgw, which honours If-None-Match itself.
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "storage/s3/s3_storage.h"
#include "testing/backends.h"
#include "testing/test_util.h"
#ifdef CKPT_S3_TEST_ON_RGW
#include "testing/rgw.h"
#else
#include "testing/moto_s3.h"
#endif

namespace ckpt {
namespace {

using testing::RandomBytes;
#ifdef CKPT_S3_TEST_ON_RGW
using TestServer = testing::Rgw;
constexpr testing::Backend kBackend = testing::Backend::kRgw;
constexpr bool kServerHonoursIfNoneMatch = true;
#else
using TestServer = testing::MotoS3;
constexpr testing::Backend kBackend = testing::Backend::kS3;
constexpr bool kServerHonoursIfNoneMatch = false;
#endif
using testing::TestModel;

// Records every request, and can make the store honour If-None-Match (as
// AWS does, where a server would not) by checking for the object first,
// under a lock.
class RecordingTransport : public s3::HttpTransport {
 public:
  bool honour_if_none_match = false;

  Result<s3::HttpResponse> Send(const s3::HttpRequest& request) override {
    bool conditional = false;
    for (const auto& [k, v] : request.headers) {
      conditional |= k == "If-None-Match" && v == "*";
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      log_.push_back(request.method + " " + request.url +
                     (conditional ? " If-None-Match" : ""));
    }
    if (!honour_if_none_match || !conditional || kServerHonoursIfNoneMatch) {
      return inner_->Send(request);
    }
    std::lock_guard<std::mutex> lock(conditional_mu_);
    s3::HttpRequest head;
    head.method = "HEAD";
    head.url = request.url.substr(0, request.url.find('?'));
    for (const auto& h : request.headers) {
      if (h.first != "If-None-Match") head.headers.push_back(h);
    }
    CKPT_ASSIGN_OR_RETURN(s3::HttpResponse exists, inner_->Send(head));
    if (exists.status == 200) {
      s3::HttpResponse refused;
      refused.status = 412;
      return refused;
    }
    return inner_->Send(request);
  }

  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }

 private:
  std::shared_ptr<s3::HttpTransport> inner_ = s3::NewCurlTransport();
  std::mutex mu_;
  std::vector<std::string> log_;
  std::mutex conditional_mu_;
};

class S3CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<TestServer*> server = TestServer::Shared();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = *server;
  }

  std::unique_ptr<CheckpointManager> Open(
      Options options = {}, const std::function<void(S3Options&)>& tweak = {}) {
    StorageOptions so = server_->MakeStorageOptions();
    if (tweak) tweak(so.s3);
    auto storage = OpenStorage(url_, so);
    EXPECT_TRUE(storage.ok()) << storage.status().ToString();
    if (!storage.ok()) return nullptr;
    auto mgr =
        CheckpointManager::Open(std::move(storage).value(), std::move(options));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  // A manager whose storage speaks through `transport`.
  std::unique_ptr<CheckpointManager> OpenThrough(
      std::shared_ptr<s3::HttpTransport> transport, bool conditional,
      const std::function<void(S3Options&)>& tweak = {}) {
    S3Options o = server_->Options();
    o.conditional_writes = conditional;
    if (tweak) tweak(o);
    Result<ParsedUrl> parsed = ParseUrl(url_);
    Result<s3::S3Config> config = s3::ResolveS3Config(
        *parsed, o, [](const char*) -> const char* { return nullptr; });
    EXPECT_TRUE(config.ok());
    auto storage =
        OpenS3Storage(*std::move(config), std::move(transport), true);
    EXPECT_TRUE(storage.ok());
    auto mgr = CheckpointManager::Open(std::move(storage).value(), Options{});
    EXPECT_TRUE(mgr.ok());
    return std::move(mgr).value();
  }

  // GarbageCollectionAbortsUploadsOfDeadAttemptsOnly, with the lease off
  // or on.
  void AbortUploadsOfDeadAttempts(const std::string& url, double lease_seconds);

  TestServer* server_ = nullptr;
  const testing::TestRoot root_{kBackend, "checkpoint"};
  const std::string url_ = root_.url();
};

TEST_F(S3CheckpointTest, RoundTripWithMultipartDataObjects) {
  // 12 MiB in 5 MiB parts: the data object is a three-part upload.
  std::vector<std::byte> big = RandomBytes(12 << 20, 3);
  TestModel model(5);
  State state = model.MakeState();
  state.AddTensor("big", TensorView{DType::kU8, {12 << 20}, big.data(), true});
  auto mgr = Open({}, [](S3Options& o) { o.part_size = 5 << 20; });
  ASSERT_NE(mgr, nullptr);
  auto saved = mgr->Save(3, state, {.epoch = 1, .metadata = {{"k", "v"}}});
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();

  // A fresh handle, as after a restart, through the environment alone.
  server_->ExportEnvironment();
  auto again = CheckpointManager::Open(url_, Options{.create = false});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)->Latest().value(), std::optional<int64_t>(3));
  TestModel got(0);
  std::vector<std::byte> big_back(big.size());
  State into = got.MakeState();
  into.AddTensor("big",
                 TensorView{DType::kU8, {12 << 20}, big_back.data(), true});
  auto info = (*again)->Load(std::nullopt, into);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  got.rng = into.BlobString("rng").value();
  EXPECT_TRUE(got == model);
  EXPECT_TRUE(big_back == big);
  EXPECT_EQ(info->metadata.at("k"), "v");
  auto verified = (*again)->Verify(3);
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok());
  EXPECT_EQ(verified->bytes_checked,
            big.size() + model.weights.size() * 4 + model.moments.size() * 8 +
                model.counters.size() * 8 + model.rng.size());
  auto latest = (*again)->storage().ReadAll("LATEST");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, "3\n");
}

// A compressed save streams its data object: the chunks go up part by part
// as they are compressed, and the first part, whose header gives the
// stored sizes, waits in memory and goes up last.
TEST_F(S3CheckpointTest, ACompressedSaveStreamsItsPartsAndSendsTheFirstLast) {
  // 16 MiB of floats of a few exponents and random mantissas, as trained
  // weights have: about 0.8 of it is stored, in three parts of 5 MiB.
  std::vector<float> w(4 << 20);
  std::mt19937 rng(9);
  for (float& f : w) {
    const uint32_t bits = (120u + rng() % 6) << 23 | (rng() & 0x7fffff);
    std::memcpy(&f, &bits, 4);
  }
  State state;
  state.AddTensor("w", TensorView{DType::kF32,
                                  {static_cast<int64_t>(w.size())},
                                  reinterpret_cast<std::byte*>(w.data()),
                                  true});
  auto transport = std::make_shared<RecordingTransport>();
  auto mgr = OpenThrough(transport, false, [](S3Options& o) {
    o.part_size = 5 << 20;
    // One part in flight at a time: the log's order
    // is the order of sending.
    o.max_concurrency = 1;
  });
  auto saved = mgr->Save(
      1, state, {.compression = Compression{Compression::Mode::kZstd}});
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_LT(saved->info.bytes, w.size() * 4 * 9 / 10);
  EXPECT_GT(saved->info.bytes, uint64_t{10} << 20);
  const std::vector<std::string> log = transport->log();
  auto part = [&](int n) {
    return std::find_if(log.begin(), log.end(), [&](const std::string& l) {
      return l.starts_with("PUT ") && l.find("partNumber=" + std::to_string(n) +
                                             "&") != std::string::npos;
    });
  };
  std::string all;
  for (const std::string& l : log) all += l + "\n";
  ASSERT_NE(part(1), log.end()) << all;
  ASSERT_NE(part(2), log.end()) << all;
  ASSERT_NE(part(3), log.end()) << all;
  EXPECT_LT(part(2), part(1)) << all;
  EXPECT_LT(part(3), part(1)) << all;
  std::vector<float> back(w.size());
  State into;
  into.AddTensor("w", TensorView{DType::kF32,
                                 {static_cast<int64_t>(back.size())},
                                 reinterpret_cast<std::byte*>(back.data()),
                                 true});
  ASSERT_TRUE(mgr->Load(1, into).ok());
  EXPECT_EQ(back, w);
  auto verified = mgr->Verify(1);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_TRUE(verified->ok());
}

TEST_F(S3CheckpointTest, CommitChecksFirstWhereCreateIfAbsentIsNotAtomic) {
  auto transport = std::make_shared<RecordingTransport>();
  auto mgr = OpenThrough(transport, false);
  ASSERT_FALSE(mgr->storage().capabilities().atomic_create_if_absent);
  TestModel model(1);
  State state = model.MakeState();
  ASSERT_TRUE(mgr->Save(1, state).ok());
  // The manifest PUT is unconditional (the store would ignore the header),
  // and the manager and the backend checked for the manifest before it.
  const std::vector<std::string> log = transport->log();
  auto put = std::find_if(log.begin(), log.end(), [](const std::string& l) {
    return l.starts_with("PUT ") && l.ends_with("/MANIFEST.json");
  });
  ASSERT_NE(put, log.end());
  ASSERT_GE(put - log.begin(), 2);
  EXPECT_TRUE((put - 1)->starts_with("HEAD ") &&
              (put - 1)->ends_with("/MANIFEST.json"));
  EXPECT_TRUE((put - 2)->starts_with("HEAD ") &&
              (put - 2)->ends_with("/MANIFEST.json"));
  // A second save of the step is refused before it writes anything.
  auto other = OpenThrough(transport, false);
  auto again = other->Save(1, state);
  EXPECT_EQ(again.status().code(), ErrorCode::kAlreadyExists);
  // Those writers end, so the next one takes the root's lease at once.
  mgr.reset();
  other.reset();

  // Where the store honours If-None-Match, the commit relies on it.
  auto atomic_transport = std::make_shared<RecordingTransport>();
  atomic_transport->honour_if_none_match = true;
  auto atomic = OpenThrough(atomic_transport, true);
  ASSERT_TRUE(atomic->storage().capabilities().atomic_create_if_absent);
  ASSERT_TRUE(atomic->Save(2, state).ok());
  const std::vector<std::string> log2 = atomic_transport->log();
  EXPECT_EQ(std::count_if(log2.begin(), log2.end(),
                          [](const std::string& l) {
                            return l.starts_with("PUT ") &&
                                   l.ends_with("/MANIFEST.json If-None-Match");
                          }),
            1);
}

// 4 ranks save a row-sharded tensor, a replicated one and rank-local blobs
// to s3://; 1, 2 and 3 ranks load it back resharded.
TEST_F(S3CheckpointTest, FourRanksSaveAndOtherWorldSizesLoad) {
  constexpr int64_t kRows = 64, kCols = 24;
  auto box = [&](int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    std::vector<float> out;
    for (int64_t i = r0; i < r0 + nr; ++i) {
      for (int64_t j = c0; j < c0 + nc; ++j) {
        out.push_back(static_cast<float>(i * kCols + j));
      }
    }
    return out;
  };
  testing::RunRanks(4, [&](int rank, Communicator* comm) {
    auto mgr = Open({.communicator = comm, .chunk_size = 4096});
    ASSERT_NE(mgr, nullptr);
    std::vector<float> piece = box(rank * 16, 16, 0, kCols);
    std::vector<double> bias(kCols, 0.5);
    State s;
    s.AddTensorPiece("weights", {kRows, kCols}, {rank * 16, 0},
                     View(std::span<float>(piece), {16, kCols}))
        .AddTensor("bias", View(bias))
        .AddRankLocalBlob("loader", "rank-" + std::to_string(rank));
    auto saved = mgr->Save(1, s);
    ASSERT_TRUE(saved.ok())
        << "rank " << rank << ": " << saved.status().ToString();
    EXPECT_EQ(saved->info.world_size, 4);
  });

  auto one = Open();
  ASSERT_NE(one, nullptr);
  auto d = one->Describe(1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->objects.size(), 4u);  // one data object per rank
  auto all = one->LoadAll(1);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const Entry* w = all->state.Find("weights");
  ASSERT_NE(w, nullptr);
  const std::vector<float> whole = box(0, kRows, 0, kCols);
  EXPECT_EQ(std::memcmp(w->tensor.data, whole.data(), whole.size() * 4), 0);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(all->state.BlobString(RankLocalName("loader", r)).value(),
              "rank-" + std::to_string(r));
  }
  auto verified = one->Verify(1);
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok());

  // 2 ranks split by columns, 3 ranks unevenly by rows.
  const std::vector<testing::Split> splits = {
      {2,
       [](int r) {
         return std::array<int64_t, 4>{0, kRows, r * 12, 12};
       }},
      {3, [](int r) {
         const int64_t starts[] = {0, 5, 40, kRows};
         return std::array<int64_t, 4>{starts[r], starts[r + 1] - starts[r], 0,
                                       kCols};
       }}};
  for (const testing::Split& split : splits) {
    testing::ExpectSplitLoads(
        split, kRows, kCols,
        [&](Communicator* comm) { return Open({.communicator = comm}); }, box,
        0.5);
  }
}

// A store that keeps incomplete uploads: offers a fixed set to the
// manager's garbage collection and records which it finds dead.
class UploadsStorage : public StorageWrapper {
 public:
  using StorageWrapper::StorageWrapper;
  std::vector<ObjectInfo> uploads;
  std::vector<std::string> aborted;

  Result<std::vector<std::string>> AbortIncompleteWrites(
      std::string_view prefix,
      const std::function<bool(const ObjectInfo&)>& dead) override {
    std::vector<std::string> out;
    for (const ObjectInfo& u : uploads) {
      if (u.key.starts_with(prefix) && dead(u)) out.push_back(u.key);
    }
    aborted.insert(aborted.end(), out.begin(), out.end());
    return out;
  }
};

// Which unfinished uploads garbage collection aborts: with the lease off it
// guesses by step and age; holding the lease (the default) it knows that no
// other party writes, so every upload no manifest names is dead.
TEST_F(S3CheckpointTest, GarbageCollectionAbortsUploadsOfDeadAttemptsOnly) {
  for (const double lease_seconds : {0.0, 60.0}) {
    SCOPED_TRACE("lease_seconds " + std::to_string(lease_seconds));
    const testing::TestRoot root(kBackend, "uploads");
    AbortUploadsOfDeadAttempts(root.url(), lease_seconds);
  }
}

void S3CheckpointTest::AbortUploadsOfDeadAttempts(const std::string& url,
                                                  double lease_seconds) {
  auto base = OpenStorage(url, server_->MakeStorageOptions());
  ASSERT_TRUE(base.ok());
  auto wrapper = std::make_unique<UploadsStorage>(std::move(base).value());
  UploadsStorage* uploads = wrapper.get();
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t two_hours_ago = now - 2 * 3600 * 1000;
  const std::string dead_step = format::DataObjectKey(1, 0, "00000000deadbeef");
  const std::string live = format::DataObjectKey(5, 0, "0000000000a11ce0");
  const std::string stale = format::DataObjectKey(5, 1, "000000000000beef");
  uploads->uploads = {
      {dead_step, 0, now},                         // at a committed step
      {live, 0, now},                              // may still be running
      {stale, 0, two_hours_ago},                   // past the grace period
      {format::ManifestKey(5), 0, now},            // a commit under way
      {format::ManifestKey(6), 0, two_hours_ago},  // a commit that died
      {"step-000000000001/not-ours", 0, two_hours_ago},
  };
  Options options;
  options.lease_seconds = lease_seconds;
  auto mgr = CheckpointManager::Open(std::move(wrapper), options);
  ASSERT_TRUE(mgr.ok());
  TestModel model(1);
  State state = model.MakeState();
  ASSERT_TRUE((*mgr)->Save(1, state).ok());  // gc_after_save runs too
  uploads->aborted.clear();

  auto dry = (*mgr)->GarbageCollect({.dry_run = true});
  ASSERT_TRUE(dry.ok());
  EXPECT_TRUE(uploads->aborted.empty());
  std::set<std::string> expected = {dead_step, stale, format::ManifestKey(6)};
  if (lease_seconds > 0) {
    expected.insert(live);
    expected.insert(format::ManifestKey(5));
  }
  EXPECT_EQ(std::set<std::string>(dry->deleted_objects.begin(),
                                  dry->deleted_objects.end()),
            expected);
  auto report = (*mgr)->GarbageCollect();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(
      std::set<std::string>(uploads->aborted.begin(), uploads->aborted.end()),
      expected);
  EXPECT_EQ(std::set<std::string>(report->deleted_objects.begin(),
                                  report->deleted_objects.end()),
            expected);
}

}  // namespace
}  // namespace ckpt
