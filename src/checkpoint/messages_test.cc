#include "checkpoint/messages.h"

#include <cmath>
#include <string>

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
  p.chunks.push_back(ChunkRow{kOwnObject, 128, 4096, Checksum128{1, 2}});
  p.chunks.push_back(ChunkRow{0, 0, 4096, Checksum128{3, 4}});
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
  d.attempt = "0123456789abcdef";
  d.parent = 41;
  d.parent_chain = 3;
  auto d2 = DecodeSaveDecision(EncodeSaveDecision(d));
  ASSERT_TRUE(d2.ok()) << d2.status().ToString();
  EXPECT_TRUE(d2->status.ok());
  EXPECT_FALSE(d2->skip);
  EXPECT_EQ(d2->attempt, d.attempt);
  EXPECT_EQ(d2->parent, 41);
  EXPECT_EQ(d2->parent_chain, 3);

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
  ASSERT_EQ(r2->pieces[0].chunks.size(), 2u);
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

}  // namespace
}  // namespace ckpt
