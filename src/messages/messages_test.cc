#include "messages/messages.h"

#include <cmath>
#include <functional>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace ckpt {
namespace {

WriteResult SampleResult() {
  WriteResult r;
  r.key = "step-000000000007/r00001-0123456789abcdef.safetensors";
  r.size = 123456;
  r.refs.push_back(
      ObjectRef{"step-000000000005/r00000-aaaa.safetensors", 99, 3});
  PieceChunks p;
  p.piece = 4;
  p.chunks.push_back(ChunkRow{.object = kOwnObject,
                              .offset = 128,
                              .length = 4096,
                              .checksum = Checksum128{1, 2}});
  p.chunks.push_back(
      ChunkRow{.offset = 0, .length = 4096, .checksum = Checksum128{3, 4}});
  // A compressed chunk's row carries its codec, stored length and sum.
  ChunkRow packed{.object = 0,
                  .offset = 4096,
                  .length = 8192,
                  .checksum = Checksum128{5, 6}};
  packed.SetCompressed(codec::Codec::kZstdFloat32, 1000, 77);
  p.chunks.push_back(packed);
  r.pieces.push_back(p);
  return r;
}

Offer SampleOffer() {
  Offer o;
  o.host = "node-7";
  PieceOffer p;
  p.name = "layer.0/weight";
  p.kind = EntryKind::kTensor;
  p.dtype = DType::kBF16;
  p.shape = {8, 4};
  p.offsets = {4, 0};
  p.lengths = {4, 4};
  o.pieces.push_back(p);
  PieceOffer meta;
  meta.name = "config";
  meta.kind = EntryKind::kMetadata;
  meta.json = "{\"lr\":0.1}";
  meta.rank_local = true;
  o.pieces.push_back(meta);
  return o;
}

TEST(MessagesTest, EveryMessageSurvivesEncoding) {
  SaveDecision d;
  d.step = 1234;
  d.attempt = "0123456789abcdef";
  d.parent = 41;
  d.parent_chain = 3;
  d.replace = true;
  d.replace_because = "a checksum mismatch";
  auto d2 = DecodeSaveDecision(EncodeSaveDecision(d));
  ASSERT_TRUE(d2.ok()) << d2.status().ToString();
  EXPECT_TRUE(d2->status.ok());
  EXPECT_FALSE(d2->skip);
  EXPECT_EQ(d2->step, 1234);
  EXPECT_EQ(d2->attempt, d.attempt);
  EXPECT_EQ(d2->parent, 41);
  EXPECT_EQ(d2->parent_chain, 3);
  EXPECT_TRUE(d2->replace);
  EXPECT_EQ(d2->replace_because, "a checksum mismatch");

  SaveDecision failed;
  failed.status = AlreadyExistsError("step 7 is already committed");
  auto f2 = DecodeSaveDecision(EncodeSaveDecision(failed));
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->status.code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(f2->status.message(), "step 7 is already committed");

  auto s2 = DecodeReferenceStats(EncodeReferenceStats({5, 1ull << 40}));
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(s2->referenced, 5u);
  EXPECT_EQ(s2->total, 1ull << 40);

  const WriteResult r = SampleResult();
  auto r2 = DecodeWriteResult(EncodeWriteResult(r));
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ(r2->key, r.key);
  EXPECT_EQ(r2->size, r.size);
  ASSERT_EQ(r2->refs.size(), 1u);
  EXPECT_EQ(r2->refs[0].key, r.refs[0].key);
  EXPECT_EQ(r2->refs[0].rank, 3);
  ASSERT_EQ(r2->pieces.size(), 1u);
  EXPECT_EQ(r2->pieces[0].piece, 4u);
  ASSERT_EQ(r2->pieces[0].chunks.size(), 3u);
  EXPECT_EQ(r2->pieces[0].chunks[2].codec(), codec::Codec::kZstdFloat32);
  EXPECT_EQ(r2->pieces[0].chunks[2].stored_length(), 1000u);
  EXPECT_EQ(r2->pieces[0].chunks[2].stored_checksum, 77u);
  EXPECT_EQ(r2->pieces[0].chunks[0].codec(), codec::Codec::kRaw);
  EXPECT_EQ(r2->pieces[0].chunks[0].offset, 128u);
  EXPECT_EQ(r2->pieces[0].chunks[0].checksum, (Checksum128{1, 2}));
  EXPECT_EQ(r2->pieces[0].chunks[0].object, kOwnObject);
  EXPECT_EQ(r2->pieces[0].chunks[1].object, 0u);

  auto o2 = DecodeSaveOutcome(EncodeSaveOutcome({Status(), {3, 5, 8}}));
  ASSERT_TRUE(o2.ok());
  EXPECT_EQ(o2->deleted_steps, (std::vector<int64_t>{3, 5, 8}));
  EXPECT_FALSE(o2->discard);
  // The committed checkpoint travels whole, so no rank reads it back.
  SaveOutcome with_info;
  with_info.info.step = 42;
  with_info.info.epoch = 3;
  with_info.info.created_unix_ms = 1700000000123;
  with_info.info.job_id = "job \xff";
  with_info.info.world_size = 16384;
  with_info.info.hosts = {"node-1", "node-2"};
  with_info.info.bytes = uint64_t{1} << 40;
  with_info.info.depends_on = {30, 40};
  with_info.info.referenced_bytes = 77;
  with_info.info.parent = 40;
  with_info.info.chain = 2;
  with_info.info.metrics = {{"loss", 0.125}, {"negative_zero", -0.0}};
  with_info.info.metadata = {{"note", "{\"a\": 1}"}, {"", ""}};
  with_info.info.num_entries = 9;
  auto o4 = DecodeSaveOutcome(EncodeSaveOutcome(with_info));
  ASSERT_TRUE(o4.ok()) << o4.status().ToString();
  const CheckpointInfo& i = o4->info;
  EXPECT_EQ(i.step, 42);
  EXPECT_EQ(i.epoch, 3);
  EXPECT_EQ(i.created_unix_ms, 1700000000123);
  EXPECT_EQ(i.job_id, "job \xff");
  EXPECT_EQ(i.world_size, 16384);
  EXPECT_EQ(i.hosts, with_info.info.hosts);
  EXPECT_EQ(i.bytes, uint64_t{1} << 40);
  EXPECT_EQ(i.depends_on, (std::vector<int64_t>{30, 40}));
  EXPECT_EQ(i.referenced_bytes, 77u);
  EXPECT_EQ(i.parent, 40);
  EXPECT_EQ(i.chain, 2);
  EXPECT_EQ(i.metrics, with_info.info.metrics);
  EXPECT_TRUE(std::signbit(i.metrics.at("negative_zero")));
  EXPECT_EQ(i.metadata, with_info.info.metadata);
  EXPECT_EQ(i.num_entries, 9u);
  auto o3 = DecodeSaveOutcome(EncodeSaveOutcome({IOError("full"), {}, true}));
  ASSERT_TRUE(o3.ok());
  EXPECT_EQ(o3->status.code(), ErrorCode::kIOError);
  EXPECT_TRUE(o3->discard);

  auto p2 = DecodeLoadSteps(EncodeLoadSteps({Status(), {12, 9, 3}}));
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->steps, (std::vector<int64_t>{12, 9, 3}));
  auto p3 = DecodeLoadSteps(
      EncodeLoadSteps({NotFoundError("no committed checkpoint"), {}}));
  ASSERT_TRUE(p3.ok());
  EXPECT_EQ(p3->status.code(), ErrorCode::kNotFound);

  auto v1 = DecodeLoadVote(EncodeLoadVote({DataLossError("bad chunk"), true}));
  ASSERT_TRUE(v1.ok());
  EXPECT_EQ(v1->status.code(), ErrorCode::kDataLoss);
  EXPECT_TRUE(v1->damaged);
  std::string vote = EncodeLoadVote({Status(), false});
  vote.back() = 2;  // neither damaged nor whole
  EXPECT_EQ(DecodeLoadVote(vote).status().code(), ErrorCode::kDataLoss);

  const Offer o = SampleOffer();
  auto back = DecodeOffer(EncodeOffer(o));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->host, "node-7");
  ASSERT_EQ(back->pieces.size(), 2u);
  EXPECT_EQ(back->pieces[0].dtype, DType::kBF16);
  EXPECT_EQ(back->pieces[0].offsets, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(back->pieces[1].kind, EntryKind::kMetadata);
  EXPECT_EQ(back->pieces[1].json, "{\"lr\":0.1}");
  EXPECT_TRUE(back->pieces[1].rank_local);
}

void ExpectMalformed(const Result<WriteResult>& r, std::string_view why) {
  ASSERT_FALSE(r.ok()) << why;
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss) << why;
  EXPECT_NE(r.status().message().find("write result"), std::string::npos)
      << r.status().message();
}

TEST(MessagesTest, EveryTruncationAndTrailingByteIsRefused) {
  const std::string bytes = EncodeWriteResult(SampleResult());
  for (size_t n = 0; n < bytes.size(); ++n) {
    ExpectMalformed(DecodeWriteResult(bytes.substr(0, n)),
                    "truncated to " + std::to_string(n));
  }
  ExpectMalformed(DecodeWriteResult(bytes + "x"), "a trailing byte");
}

TEST(MessagesTest, ForeignVersionTypeAndMagicAreRefused) {
  std::string bytes = EncodeWriteResult(SampleResult());
  std::string version = bytes;
  version[2] = static_cast<char>(kMessageVersion + 1);
  auto v = DecodeWriteResult(version);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("same ckpt"), std::string::npos)
      << v.status().message();
  // A message of another type is not read as this one.
  ExpectMalformed(DecodeWriteResult(EncodeSaveOutcome({})), "another type");
  std::string magic = bytes;
  magic[0] = '{';
  ExpectMalformed(DecodeWriteResult(magic), "no magic");
  EXPECT_EQ(DecodeOffer("not json").status().code(), ErrorCode::kDataLoss);
}

TEST(MessagesTest, HostileFieldsAreRefused) {
  // A count far beyond the message allocates nothing and is refused.
  WriteResult empty;
  std::string bytes = EncodeWriteResult(empty);
  // The refs count sits after status (1 + 4), key (4) and size (8).
  const size_t refs_at = 4 + 5 + 4 + 8;
  for (int i = 0; i < 4; ++i) bytes[refs_at + i] = '\xff';
  ExpectMalformed(DecodeWriteResult(bytes), "a huge count");

  // A row that names a reference the rank did not list.
  WriteResult bad_ref = SampleResult();
  bad_ref.pieces[0].chunks[1].object = 1;
  ExpectMalformed(DecodeWriteResult(EncodeWriteResult(bad_ref)),
                  "a reference out of range");
  // A row in the rank's own object, from a rank that wrote none.
  WriteResult no_object = SampleResult();
  no_object.key.clear();
  ExpectMalformed(DecodeWriteResult(EncodeWriteResult(no_object)),
                  "a row in no object");

  // An unknown error code.
  std::string code = EncodeSaveOutcome({});
  code[4] = 100;
  EXPECT_EQ(DecodeSaveOutcome(code).status().code(), ErrorCode::kDataLoss);

  // Enums and flags out of range in an offer.
  const std::string offer = EncodeOffer(SampleOffer());
  const std::string name = "layer.0/weight";
  const size_t kind_at = offer.find(name) + name.size();
  std::string kind = offer;
  kind[kind_at] = 7;
  EXPECT_EQ(DecodeOffer(kind).status().code(), ErrorCode::kDataLoss);
  std::string dtype = offer;
  dtype[kind_at + 1] = 99;
  EXPECT_EQ(DecodeOffer(dtype).status().code(), ErrorCode::kDataLoss);
  std::string flag = offer;
  flag.back() = 2;  // the last piece's rank_local flag
  EXPECT_EQ(DecodeOffer(flag).status().code(), ErrorCode::kDataLoss);

  // Steps to load that are neither an error nor steps.
  EXPECT_EQ(DecodeLoadSteps(EncodeLoadSteps({Status(), {}})).status().code(),
            ErrorCode::kDataLoss);
  EXPECT_EQ(
      DecodeLoadSteps(EncodeLoadSteps({Status(), {4, -1}})).status().code(),
      ErrorCode::kDataLoss);
}

// One sample of each message of the tiers and the runner, encoded, with
// its decoder (reduced to the status) and the name its errors carry.
struct Sample {
  std::string name;
  std::string bytes;
  std::function<Status(std::string_view)> decode;
};

template <typename T>
std::function<Status(std::string_view)> StatusOf(
    Result<T> (*decode)(std::string_view)) {
  return [decode](std::string_view b) { return decode(b).status(); };
}

SharedEntry SamplePiece() {
  return {.share = 3,
          .name = "layer.1/weight",
          .kind = EntryKind::kTensor,
          .dtype = DType::kF32,
          .offsets = {4, 0},
          .lengths = {4, 8},
          .global = {16, 8},
          .piece = true};
}

std::vector<Sample> TierSamples() {
  return {
      {"rank status", EncodeRankStatus({DataLossError("share 2 is torn")}),
       StatusOf(DecodeRankStatus)},
      {"node place", EncodeNodePlace({"node-3", "machine-a", 4242}),
       StatusOf(DecodeNodePlace)},
      {"node shares", EncodeNodeShares({{{false, 1, 40, 0}, {true, 1, 40, 2}}}),
       StatusOf(DecodeNodeShares)},
      {"durable steps", EncodeDurableSteps({Status(), {10, 20}}),
       StatusOf(DecodeDurableSteps)},
      {"share outcome", EncodeShareOutcome({Status(), 1 << 20}),
       StatusOf(DecodeShareOutcome)},
      {"share entries", EncodeShareEntries({{SamplePiece()}}),
       StatusOf(DecodeShareEntries)},
      {"lacking shares", EncodeLackingShares({{0, 5}}),
       StatusOf(DecodeLackingShares)},
      {"transfer part",
       EncodeTransferPart({.kind = TransferPart::Kind::kData, .data = "abc"}),
       StatusOf(DecodeTransferPart)},
      {"runner vote", EncodeRunnerVote({true, false, true}),
       StatusOf(DecodeRunnerVote)},
      {"resume step", EncodeResumeStep({Status(), 7}),
       StatusOf(DecodeResumeStep)},
  };
}

TEST(MessagesTest, TierAndRunnerMessagesSurviveEncoding) {
  auto status = DecodeRankStatus(
      EncodeRankStatus({IOError("the local tier is full: /nvme/r0")}));
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(status->status.code(), ErrorCode::kIOError);
  EXPECT_EQ(status->status.message(), "the local tier is full: /nvme/r0");
  auto ok = DecodeRankStatus(EncodeRankStatus({}));
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->status.ok());

  auto place = DecodeNodePlace(EncodeNodePlace({"n\n1", "m", -1}));
  ASSERT_TRUE(place.ok()) << place.status().ToString();
  EXPECT_EQ(place->host, "n\n1");  // a separator in a name is just a byte
  EXPECT_EQ(place->machine, "m");
  EXPECT_EQ(place->pid, -1);

  auto shares = DecodeNodeShares(
      EncodeNodeShares({{{false, 1, 40, 0}, {true, 2, 41, 8}}}));
  ASSERT_TRUE(shares.ok()) << shares.status().ToString();
  ASSERT_EQ(shares->items.size(), 2u);
  EXPECT_FALSE(shares->items[0].marker);
  EXPECT_EQ(shares->items[0].rank, 1);
  EXPECT_EQ(shares->items[0].step, 40);
  EXPECT_TRUE(shares->items[1].marker);
  EXPECT_EQ(shares->items[1].world, 8);

  auto steps = DecodeDurableSteps(
      EncodeDurableSteps({UnavailableError("s3 is down"), {}}));
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->status.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(steps->status.message(), "s3 is down");
  steps = DecodeDurableSteps(EncodeDurableSteps({Status(), {3, 9}}));
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->steps, (std::vector<int64_t>{3, 9}));

  auto outcome = DecodeShareOutcome(EncodeShareOutcome({Status(), 123456}));
  ASSERT_TRUE(outcome.ok());
  EXPECT_EQ(outcome->bytes, 123456u);

  SharedEntry blob{.share = 0, .name = "rng", .kind = EntryKind::kBlob};
  auto entries =
      DecodeShareEntries(EncodeShareEntries({{SamplePiece(), blob}}));
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->entries.size(), 2u);
  const SharedEntry& e = entries->entries[0];
  EXPECT_EQ(e.share, 3);
  EXPECT_EQ(e.name, "layer.1/weight");
  EXPECT_EQ(e.dtype, DType::kF32);
  EXPECT_EQ(e.offsets, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(e.lengths, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(e.global, (std::vector<int64_t>{16, 8}));
  EXPECT_TRUE(e.piece);
  EXPECT_EQ(entries->entries[1].kind, EntryKind::kBlob);

  auto lacking = DecodeLackingShares(EncodeLackingShares({{2, 0}}));
  ASSERT_TRUE(lacking.ok());
  EXPECT_EQ(lacking->shares, (std::vector<int64_t>{2, 0}));

  auto object = DecodeTransferPart(EncodeTransferPart(
      {.kind = TransferPart::Kind::kObject, .key = "k", .size = 1ull << 40}));
  ASSERT_TRUE(object.ok());
  EXPECT_EQ(object->kind, TransferPart::Kind::kObject);
  EXPECT_EQ(object->key, "k");
  EXPECT_EQ(object->size, 1ull << 40);
  const std::string block(5000, '\0');
  const std::string data_bytes =
      EncodeTransferPart({.kind = TransferPart::Kind::kData, .data = block});
  auto data = DecodeTransferPart(data_bytes);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(data->data, block);
  // The block is a view into the bytes decoded, not a copy.
  EXPECT_GE(data->data.data(), data_bytes.data());
  EXPECT_LE(data->data.data() + data->data.size(),
            data_bytes.data() + data_bytes.size());
  auto failed = DecodeTransferPart(EncodeTransferPart(
      {.kind = TransferPart::Kind::kFailed, .failed = NotFoundError("gone")}));
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->failed.code(), ErrorCode::kNotFound);

  auto vote = DecodeRunnerVote(EncodeRunnerVote({false, true, true}));
  ASSERT_TRUE(vote.ok());
  EXPECT_FALSE(vote->preempt);
  EXPECT_TRUE(vote->stop);
  EXPECT_TRUE(vote->time_due);

  auto none = DecodeResumeStep(EncodeResumeStep({}));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->step.has_value());
  auto zero = DecodeResumeStep(EncodeResumeStep({Status(), 0}));
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->step, std::optional<int64_t>(0));
  auto error = DecodeResumeStep(EncodeResumeStep({IOError("no root"), {}}));
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->status.code(), ErrorCode::kIOError);
}

TEST(MessagesTest, TierAndRunnerMessagesRefuseTruncatedAndForeignBytes) {
  for (const Sample& s : TierSamples()) {
    SCOPED_TRACE(s.name);
    ASSERT_TRUE(s.decode(s.bytes).ok()) << s.decode(s.bytes).ToString();
    auto expect_malformed = [&](std::string_view bytes, std::string_view why) {
      const Status st = s.decode(bytes);
      EXPECT_EQ(st.code(), ErrorCode::kDataLoss) << why;
      EXPECT_NE(st.message().find("a rank sent a malformed " + s.name),
                std::string::npos)
          << why << ": " << st.message();
    };
    for (size_t n = 0; n < s.bytes.size(); ++n) {
      expect_malformed(s.bytes.substr(0, n),
                       "truncated to " + std::to_string(n));
    }
    expect_malformed(s.bytes + "x", "a trailing byte");
    expect_malformed("Aborted: rank 1 failed", "the old text form");
    // Any other message's bytes are refused, not read as this one.
    for (const Sample& other : TierSamples()) {
      if (other.name != s.name) expect_malformed(other.bytes, other.name);
    }
  }
}

TEST(MessagesTest, TierAndRunnerMessagesRefuseHostileFields) {
  // A count far beyond the message allocates nothing and is refused.
  std::string huge = EncodeShareEntries({});
  for (int i = 0; i < 4; ++i) huge[4 + i] = '\xff';
  EXPECT_EQ(DecodeShareEntries(huge).status().code(), ErrorCode::kDataLoss);
  huge = EncodeNodeShares({});
  for (int i = 0; i < 4; ++i) huge[4 + i] = '\xff';
  EXPECT_EQ(DecodeNodeShares(huge).status().code(), ErrorCode::kDataLoss);

  // A box whose offsets do not fit its shape.
  SharedEntry bad = SamplePiece();
  bad.offsets = {4};
  auto box = DecodeShareEntries(EncodeShareEntries({{bad}}));
  EXPECT_EQ(box.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(box.status().message().find("layer.1/weight"), std::string::npos)
      << box.status().message();
  // An entry kind and a dtype out of range.
  const std::string entries = EncodeShareEntries({{SamplePiece()}});
  const size_t kind_at = entries.find("layer.1/weight") + 14;
  std::string kind = entries;
  kind[kind_at] = 3;
  EXPECT_EQ(DecodeShareEntries(kind).status().code(), ErrorCode::kDataLoss);
  std::string dtype = entries;
  dtype[kind_at + 1] = 99;
  EXPECT_EQ(DecodeShareEntries(dtype).status().code(), ErrorCode::kDataLoss);

  // A rank beyond 32 bits.
  std::string rank = EncodeNodeShares({{{false, 1, 40, 0}}});
  rank[4 + 4 + 1 + 7] = 1;  // the high byte of the rank's 64-bit field
  EXPECT_EQ(DecodeNodeShares(rank).status().code(), ErrorCode::kDataLoss);

  // A transfer part of an unknown kind; a vote flag neither 0 nor 1.
  std::string part = EncodeTransferPart({});
  part[4] = 4;
  EXPECT_EQ(DecodeTransferPart(part).status().code(), ErrorCode::kDataLoss);
  std::string vote = EncodeRunnerVote({});
  vote[5] = 2;
  EXPECT_EQ(DecodeRunnerVote(vote).status().code(), ErrorCode::kDataLoss);

  // A step to resume from that says there is none.
  std::string resume = EncodeResumeStep({});
  resume.back() = 5;
  EXPECT_EQ(DecodeResumeStep(resume).status().code(), ErrorCode::kDataLoss);
  // An OK status with a message (one spelling per value); an unknown code.
  std::string ok = EncodeRankStatus({});
  ok += 'x';
  ok[5] = 1;  // the message's length
  EXPECT_EQ(DecodeRankStatus(ok).status().code(), ErrorCode::kDataLoss);
  std::string code = EncodeRankStatus({});
  code[4] = 100;
  EXPECT_EQ(DecodeRankStatus(code).status().code(), ErrorCode::kDataLoss);
}

TEST(MessagesTest, MetricsOutOfOrderAreASecondSpellingAndRefused) {
  SaveOutcome m;
  m.info.metrics = {{"p", 1.0}, {"q", 2.0}};
  const std::string bytes = EncodeSaveOutcome(m);
  ASSERT_TRUE(DecodeSaveOutcome(bytes).ok());
  // The same two metrics named the other way round: "q" first.
  std::string swapped = bytes;
  const size_t p = swapped.find('p'), q = swapped.find('q');
  ASSERT_NE(p, std::string::npos);
  ASSERT_NE(q, std::string::npos);
  std::swap(swapped[p], swapped[q]);
  EXPECT_EQ(DecodeSaveOutcome(swapped).status().code(), ErrorCode::kDataLoss);
  // One name twice.
  std::string twice = bytes;
  twice[q] = 'p';
  EXPECT_EQ(DecodeSaveOutcome(twice).status().code(), ErrorCode::kDataLoss);
}

TEST(MessagesTest, ReadOnceMessagesSurviveEncodingAndRefuseHostileFields) {
  ReadOncePlan plan{
      .planned = true, .can_send = true, .in_place = false, .host = "node3"};
  plan.chunks = {{{1, 2}, 4096}, {{1, 3}, 16}};
  plan.places = {{77, 0}, {77, 4096}};
  auto back = DecodeReadOncePlan(EncodeReadOncePlan(plan));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->planned);
  EXPECT_TRUE(back->can_send);
  EXPECT_FALSE(back->in_place);
  EXPECT_EQ(back->host, "node3");
  EXPECT_EQ(back->chunks, plan.chunks);
  ASSERT_EQ(back->places.size(), 2u);
  EXPECT_EQ(back->places[1].object, 77u);
  EXPECT_EQ(back->places[1].offset, 4096u);
  // Chunks out of order or listed twice would let ranks disagree on who
  // reads what: refused.
  const ReadOnceRates rates{.read_bytes = 1 << 20,
                            .read_ns = 5'000'000,
                            .probe_bytes = 4096,
                            .probe_ns = 70'000};
  auto rates_back = DecodeReadOnceRates(EncodeReadOnceRates(rates));
  ASSERT_TRUE(rates_back.ok()) << rates_back.status().ToString();
  EXPECT_EQ(rates_back->read_ns, 5'000'000u);
  EXPECT_EQ(rates_back->probe_bytes, 4096u);
  EXPECT_FALSE(
      DecodeReadOnceRates(EncodeReadOnceRates(rates).substr(0, 20)).ok());
  const ReadOnceNodeMemory invite{.invitation = "/ckpt-read-once-ab 01",
                                  .opened = true};
  auto invite_back = DecodeReadOnceNodeMemory(EncodeReadOnceNodeMemory(invite));
  ASSERT_TRUE(invite_back.ok()) << invite_back.status().ToString();
  EXPECT_EQ(invite_back->invitation, invite.invitation);
  EXPECT_TRUE(invite_back->opened);
  EXPECT_FALSE(DecodeReadOnceNodeMemory(EncodeReadOnceRates(rates)).ok());
  EXPECT_FALSE(
      DecodeReadOnceNodeMemory(EncodeReadOnceNodeMemory(invite).substr(0, 10))
          .ok());
  ReadOncePlan twice = plan;
  twice.chunks[1] = twice.chunks[0];
  EXPECT_EQ(DecodeReadOncePlan(EncodeReadOncePlan(twice)).status().code(),
            ErrorCode::kDataLoss);
  ReadOncePlan unplanned = plan;
  unplanned.planned = false;
  EXPECT_EQ(DecodeReadOncePlan(EncodeReadOncePlan(unplanned)).status().code(),
            ErrorCode::kDataLoss);
  const std::string plan_bytes = EncodeReadOncePlan(plan);
  for (size_t n = 0; n < plan_bytes.size(); ++n) {
    EXPECT_FALSE(DecodeReadOncePlan(plan_bytes.substr(0, n)).ok()) << n;
  }

  const std::string block(5000, 'x');
  const std::string batch_bytes =
      EncodeReadOnceBatch({.present = {true, false}, .data = block});
  auto batch = DecodeReadOnceBatch(batch_bytes);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_EQ(batch->present, (std::vector<bool>{true, false}));
  EXPECT_EQ(batch->data, block);
  // The data is a view into the bytes decoded, not a copy.
  EXPECT_GE(batch->data.data(), batch_bytes.data());
  EXPECT_EQ(DecodeReadOnceBatch(batch_bytes + "x").status().code(),
            ErrorCode::kDataLoss);
  std::string flag = batch_bytes;
  flag[4 + 4] = 2;  // a presence flag that is neither 0 nor 1
  EXPECT_EQ(DecodeReadOnceBatch(flag).status().code(), ErrorCode::kDataLoss);
}

TEST(MessagesTest, StatusCrossesRanksWithItsCodeAndMessage) {
  auto comms = NewThreadCommunicators(3);
  // A message that reads like another code's text keeps its own code.
  const std::vector<Status> mine = {Status(),
                                    AbortedError("DataLoss: not really"),
                                    DataLossError("rank 2's share is torn")};
  std::vector<Result<std::vector<Status>>> gathered(3, Status());
  std::vector<Result<RankStatus>> broadcast(3, Status());
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      gathered[r] = AllGatherStatus(*comms[r], mine[r]);
      broadcast[r] = BroadcastStatus(*comms[r], mine[r], 2);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(gathered[r].ok()) << gathered[r].status().ToString();
    ASSERT_EQ(gathered[r]->size(), 3u);
    for (int q = 0; q < 3; ++q) {
      EXPECT_EQ((*gathered[r])[q].code(), mine[q].code());
      EXPECT_EQ((*gathered[r])[q].message(), mine[q].message());
    }
    ASSERT_TRUE(broadcast[r].ok()) << broadcast[r].status().ToString();
    EXPECT_EQ(broadcast[r]->status.code(), ErrorCode::kDataLoss);
    EXPECT_EQ(broadcast[r]->status.message(), "rank 2's share is torn");
  }
}

}  // namespace
}  // namespace ckpt
