#include <filesystem>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "data/planner.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "gtest/gtest.h"
#include "messages/messages.h"
#include "testing/backends.h"
#include "testing/temp_dir.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using testing::RandomBytes;
using testing::TestModel;

// Runs each round-trip test on mem:// and on file://.
class RoundTripTest : public ::testing::TestWithParam<testing::Backend> {
 protected:
  std::unique_ptr<CheckpointManager> Open(Options options = {}) {
    auto mgr = CheckpointManager::Open(url_, std::move(options));
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return std::move(mgr).value();
  }

  testing::TestRoot root_{GetParam(), "manager"};
  const std::string url_ = root_.url();
};

INSTANTIATE_TEST_SUITE_P(Backends, RoundTripTest,
                         ::testing::Values(testing::Backend::kMemory,
                                           testing::Backend::kFile),
                         testing::BackendTestName);

TEST_P(RoundTripTest, EveryDTypeIncludingEmptyAndScalar) {
  // Per dtype: a 2-d tensor, a 0-d scalar and an empty tensor.
  std::vector<std::vector<std::byte>> buffers;
  State state;
  uint64_t seed = 1;
  for (DType dt : AllDTypes()) {
    const std::string name(DTypeName(dt));
    const size_t es = DTypeSize(dt);
    buffers.push_back(RandomBytes(es * 3 * 5, seed++));
    if (dt == DType::kBool) {
      for (auto& b : buffers.back()) b = std::byte(static_cast<int>(b) & 1);
    }
    state.AddTensor(name + "/matrix",
                    TensorView{dt, {3, 5}, buffers.back().data(), true});
    buffers.push_back(RandomBytes(es, seed++));
    state.AddTensor(name + "/scalar",
                    TensorView{dt, {}, buffers.back().data(), true});
    state.AddTensor(name + "/empty", TensorView{dt, {0, 4}, nullptr, true});
  }
  auto mgr = Open();
  auto saved = mgr->Save(7, state, {.epoch = 3});
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_FALSE(saved->skipped);
  EXPECT_EQ(saved->info.step, 7);
  EXPECT_EQ(saved->info.epoch, 3);

  auto loaded = mgr->LoadAll(std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_EQ(loaded->state.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    const Entry& want = state.entries()[i];
    const Entry& got = loaded->state.entries()[i];
    EXPECT_EQ(got.name, want.name);  // stable order
    EXPECT_EQ(got.tensor.dtype, want.tensor.dtype);
    EXPECT_EQ(got.tensor.shape, want.tensor.shape);
    const size_t n = *want.tensor.ByteSize();
    ASSERT_EQ(*got.tensor.ByteSize(), n);
    if (n) {
      EXPECT_EQ(std::memcmp(got.tensor.data, want.tensor.data, n), 0)
          << want.name;
    }
  }
}

TEST_P(RoundTripTest, LoadInPlaceRestoresEveryKindOfEntry) {
  TestModel before(11);
  State s = before.MakeState();
  auto mgr = Open();
  ASSERT_TRUE(mgr->Save(1, s,
                        {.epoch = 0,
                         .metrics = {{"loss", 0.5}},
                         .metadata = {{"git", "abc123"}}})
                  .ok());

  TestModel after(99);  // different contents, same shapes
  State into = after.MakeState();
  auto info = mgr->Load(std::nullopt, into);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  after.rng = into.BlobString("rng").value();
  EXPECT_TRUE(after == before);
  EXPECT_EQ(into.Metadata("info").value().at("seed"), before.rng);
  EXPECT_EQ(info->step, 1);
  EXPECT_EQ(info->metrics.at("loss"), 0.5);
  EXPECT_EQ(info->metadata.at("git"), "abc123");
  EXPECT_EQ(info->world_size, 1);
  ASSERT_EQ(info->hosts.size(), 1u);
  EXPECT_FALSE(info->hosts[0].empty());
}

TEST_P(RoundTripTest, TenThousandSmallTensors) {
  constexpr int kCount = 10000;
  std::vector<std::vector<int32_t>> values(kCount);
  State state;
  for (int i = 0; i < kCount; ++i) {
    values[i] = {i, -i, i * 3};
    state.AddTensor("layer" + std::to_string(i) + ".bias", View(values[i]));
  }
  auto mgr = Open();
  ASSERT_TRUE(mgr->Save(1, state).ok());
  std::vector<std::vector<int32_t>> back(kCount, std::vector<int32_t>(3, 0));
  State into;
  for (int i = 0; i < kCount; ++i) {
    into.AddTensor("layer" + std::to_string(i) + ".bias", View(back[i]));
  }
  ASSERT_TRUE(mgr->Load(1, into).ok());
  EXPECT_EQ(back, values);
}

TEST_P(RoundTripTest, SmallChunksSplitLargeTensorsAndStillRoundTrip) {
  std::vector<std::byte> big = RandomBytes(1'000'003, 5);
  State state;
  state.AddTensor("big", TensorView{DType::kU8, {1'000'003}, big.data(), true});
  auto mgr = Open({.chunk_size = 4096});
  ASSERT_TRUE(mgr->Save(2, state).ok());
  auto d = mgr->Describe(2);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->entries[0].bytes, big.size());
  auto loaded = mgr->LoadAll(2, {"big"});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(std::memcmp(loaded->state.entries()[0].tensor.data, big.data(),
                        big.size()),
            0);
  auto verified = mgr->Verify(2);
  ASSERT_TRUE(verified.ok());
  EXPECT_TRUE(verified->ok());
  EXPECT_EQ(verified->chunks_checked, (big.size() + 4095) / 4096);
  EXPECT_EQ(verified->bytes_checked, big.size());
}

TEST_P(RoundTripTest, LatestListAndStepsBehaveAsDocumented) {
  auto mgr = Open();
  auto none = mgr->Latest();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  State empty;
  EXPECT_EQ(mgr->Load(std::nullopt, empty).status().code(),
            ErrorCode::kNotFound);

  for (int64_t step : {3, 10, 5}) {  // out of order on purpose
    TestModel m(step);
    State s = m.MakeState();
    ASSERT_TRUE(mgr->Save(step, s, {.epoch = step * 2}).ok());
  }
  EXPECT_EQ(mgr->Latest().value(), std::optional<int64_t>(10));
  auto list = mgr->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].step, 3);
  EXPECT_EQ((*list)[1].step, 5);
  EXPECT_EQ((*list)[2].step, 10);
  EXPECT_EQ((*list)[2].epoch, 20);

  TestModel m5(5), got(0);
  State into = got.MakeState();
  ASSERT_TRUE(mgr->Load(5, into).ok());
  got.rng = into.BlobString("rng").value();
  EXPECT_TRUE(got == m5);

  auto latest_hint = mgr->storage().ReadAll("LATEST");
  ASSERT_TRUE(latest_hint.ok());
  EXPECT_EQ(*latest_hint, "10\n");
}

TEST_P(RoundTripTest, DataFilesAreValidSafetensors) {
  TestModel m(3);
  State s = m.MakeState();
  auto mgr = Open();
  ASSERT_TRUE(mgr->Save(4, s).ok());
  auto objects = mgr->storage().List("step-000000000004/");
  ASSERT_TRUE(objects.ok());
  int data_files = 0;
  for (const auto& o : *objects) {
    if (!o.key.ends_with(".safetensors")) continue;
    ++data_files;
    auto bytes = mgr->storage().ReadAll(o.key);
    ASSERT_TRUE(bytes.ok());
    auto header = format::ParseSafetensorsFile(*bytes, o.key);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->data_start % 8, 0u);
    std::set<std::string> names;
    for (const auto& t : header->tensors) names.insert(t.name);
    EXPECT_EQ(names,
              (std::set<std::string>{"model/weights", "optimizer/moments",
                                     "counters", "rng"}));
    for (const auto& t : header->tensors) {
      if (t.name != "model/weights") continue;
      EXPECT_EQ(t.dtype, DType::kF32);
      EXPECT_EQ(std::memcmp(bytes->data() + header->data_start + t.begin,
                            m.weights.data(), t.end - t.begin),
                0);
    }
  }
  EXPECT_EQ(data_files, 1);
}

TEST_P(RoundTripTest, OpenRejectsBadOptions) {
  EXPECT_EQ(CheckpointManager::Open(url_, {.chunk_size = 100}).status().code(),
            ErrorCode::kInvalidArgument);
  Options keep_best;
  keep_best.retention.keep_best = 2;  // no metric named
  EXPECT_EQ(CheckpointManager::Open(url_, keep_best).status().code(),
            ErrorCode::kInvalidArgument);
}

// --- Roots are made by saves, not reads --------------------------------------

// A mistyped path must not resume from nothing: every call that reads a
// root that does not exist is NotFound naming it, and creates nothing.
TEST(MissingRootTest, ReadingAMissingRootIsNotFoundAndCreatesNothing) {
  const testing::TempDir temp("missing-root");
  const std::string path = temp.string() + "/tpyo/run";
  auto mgr = CheckpointManager::Open(path).value();
  TestModel model(1);
  State state = model.MakeState();
  const auto expect_missing = [&](const Status& s, const char* op) {
    EXPECT_EQ(s.code(), ErrorCode::kNotFound) << op << ": " << s.ToString();
    EXPECT_NE(s.message().find("root " + path + " does not exist"),
              std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("create_root"), std::string::npos)
        << s.message();
  };
  expect_missing(mgr->Latest().status(), "latest");
  expect_missing(mgr->List().status(), "list");
  expect_missing(mgr->Load(std::nullopt, state).status(), "load");
  expect_missing(mgr->LoadAll(std::nullopt, {}).status(), "load all");
  expect_missing(mgr->LoadRankLocal(std::nullopt, "x").status(), "rank local");
  expect_missing(mgr->Describe(std::nullopt).status(), "describe");
  expect_missing(mgr->Verify(1).status(), "verify");
  expect_missing(mgr->Delete(1).status(), "delete");
  expect_missing(mgr->GarbageCollect().status(), "gc");
  expect_missing(mgr->GarbageCollect({.dry_run = true}).status(), "gc dry");
  EXPECT_FALSE(std::filesystem::exists(temp.string() + "/tpyo"));
}

TEST(MissingRootTest, TheFirstSaveCreatesTheRoot) {
  const testing::TempDir temp("missing-root");
  const std::string path = temp.string() + "/new/run";
  auto reader = CheckpointManager::Open(path).value();
  auto mgr = CheckpointManager::Open("file://" + path).value();
  EXPECT_EQ(mgr->Latest().status().code(), ErrorCode::kNotFound);
  TestModel model(2);
  ASSERT_TRUE(mgr->Save(1, model.MakeState()).ok());
  EXPECT_TRUE(std::filesystem::is_directory(path));
  EXPECT_EQ(mgr->Latest().value(), 1);
  // A manager opened before the root existed reads it once it does.
  EXPECT_EQ(reader->Latest().value(), 1);
  TestModel loaded(3);
  State into = loaded.MakeState();
  ASSERT_TRUE(reader->Load(1, into).ok());
  loaded.rng = into.BlobString("rng").value();
  EXPECT_EQ(loaded, model);
}

TEST(MissingRootTest, CreateRootCreatesItAtOpen) {
  const testing::TempDir temp("missing-root");
  const std::string path = temp.string() + "/job/run";
  auto mgr = CheckpointManager::Open(path, {.create_root = true}).value();
  EXPECT_TRUE(std::filesystem::is_directory(path));
  EXPECT_EQ(mgr->Latest().value(), std::nullopt);
  EXPECT_TRUE(mgr->List().value().empty());
  // Without `create` the root must exist, and create_root cannot make it.
  const std::string other = temp.string() + "/other";
  EXPECT_EQ(CheckpointManager::Open(other, {.create = false}).status().code(),
            ErrorCode::kNotFound);
  EXPECT_EQ(
      CheckpointManager::Open(other, {.create = false, .create_root = true})
          .status()
          .code(),
      ErrorCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(other));
}

// --- Planner
// ------------------------------------------------------------------

Offer MakeTestOffer(std::string host,
                    std::vector<std::pair<std::string, std::vector<int64_t>>>
                        pieces /* name -> box offsets; lengths {2, 4} */) {
  Offer o;
  o.host = std::move(host);
  for (auto& [name, offsets] : pieces) {
    PieceOffer p;
    p.name = name;
    p.dtype = DType::kF32;
    p.shape = {4, 4};
    p.offsets = offsets;
    p.lengths = {2, 4};
    o.pieces.push_back(std::move(p));
  }
  return o;
}

TEST(PlannerTest, ReplicatedPiecesAreWrittenOnceAndBalanced) {
  // Both ranks hold both halves of two tensors (fully replicated).
  std::vector<Offer> offers;
  for (int r = 0; r < 2; ++r) {
    offers.push_back(MakeTestOffer(
        "h" + std::to_string(r),
        {{"a", {0, 0}}, {"a", {2, 0}}, {"b", {0, 0}}, {"b", {2, 0}}}));
  }
  auto plan = MakePlan(offers);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->pieces.size(), 4u);  // each written once
  EXPECT_EQ(plan->bytes_per_rank[0], plan->bytes_per_rank[1]);
  EXPECT_EQ(plan->hosts, (std::vector<std::string>{"h0", "h1"}));
  // The same offers always give the same plan.
  auto again = MakePlan(offers);
  for (size_t i = 0; i < plan->pieces.size(); ++i) {
    EXPECT_EQ(plan->pieces[i].writer, again->pieces[i].writer);
  }
}

TEST(PlannerTest, ShardedPiecesGoToTheirHolders) {
  std::vector<Offer> offers = {MakeTestOffer("h0", {{"a", {0, 0}}}),
                               MakeTestOffer("h1", {{"a", {2, 0}}})};
  auto plan = MakePlan(offers);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->pieces.size(), 2u);
  EXPECT_EQ(plan->pieces[0].writer, 0);
  EXPECT_EQ(plan->pieces[1].writer, 1);
}

TEST(PlannerTest, RejectsGapsOverlapsDisagreementAndRankErrors) {
  // Only half of "a" is held by anyone.
  EXPECT_EQ(MakePlan({MakeTestOffer("h0", {{"a", {0, 0}}})}).status().code(),
            ErrorCode::kInvalidArgument);
  // Overlapping boxes.
  auto overlap = MakePlan({MakeTestOffer("h0", {{"a", {0, 0}}, {"a", {1, 0}}}),
                           MakeTestOffer("h1", {{"a", {2, 0}}})});
  EXPECT_EQ(overlap.status().code(), ErrorCode::kInvalidArgument);
  // Ranks disagree on the dtype.
  Offer other = MakeTestOffer("h1", {{"a", {2, 0}}});
  other.pieces[0].dtype = DType::kF64;
  auto mismatch = MakePlan({MakeTestOffer("h0", {{"a", {0, 0}}}), other});
  EXPECT_EQ(mismatch.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("\"a\""), std::string::npos);
  // A rank that failed to build its state fails the plan for everyone.
  Offer failed;
  failed.error_code = ErrorCode::kAlreadyExists;
  failed.error_message = "duplicate entry name \"x\"";
  auto bad = MakePlan({MakeTestOffer("h0", {}), failed});
  EXPECT_EQ(bad.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_NE(bad.status().message().find("rank 1"), std::string::npos);
}

TEST(PlannerTest, OffersSurviveEncoding) {
  Offer o = MakeTestOffer("host", {{"a", {0, 0}}});
  auto back = DecodeOffer(EncodeOffer(o));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->host, "host");
  EXPECT_EQ(back->pieces[0].offsets, o.pieces[0].offsets);
  EXPECT_EQ(DecodeOffer("not json").status().code(), ErrorCode::kDataLoss);
  EXPECT_EQ(DecodeOffer("{\"host\": 1}").status().code(), ErrorCode::kDataLoss);
}

}  // namespace
}  // namespace ckpt
