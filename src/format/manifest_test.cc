#include "format/manifest.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "format/constants.h"
#include "format/layout.h"

namespace ckpt::format {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

using nlohmann::json;

constexpr std::string_view kWhat = "step-000000000042/MANIFEST.json";
constexpr std::string_view kAttempt = "0123456789abcdef";

ChunkRecord Chunk(uint32_t object, uint64_t offset, uint64_t length) {
  ChunkRecord c;
  c.object = object;
  c.offset = offset;
  c.length = length;
  c.checksum = Xxh3_128(std::to_string(object) + ":" + std::to_string(offset));
  return c;
}

// Step 42 of a 2-rank job: a 4x6 F32 tensor split in two pieces (the second
// held in an object of the earlier step 40), a blob and a metadata entry.
Manifest SmallManifest() {
  Manifest m;
  m.version = kManifestVersion;
  m.job_id = "job-\xc3\xa4-1";
  m.step = 42;
  m.epoch = 3;
  m.created_unix_ms = 1700000000123;
  m.attempt = std::string(kAttempt);
  m.world_size = 2;
  m.hosts = {"node-a", "node-b"};
  m.chunk_size = 32;
  m.objects = {{DataObjectKey(42, 0, kAttempt), 64, 0},
               {DataObjectKey(40, 1, "fedcba9876543210"), 48, 1}};
  m.depends_on = {40};

  EntryRecord w;
  w.name = "model.w";
  w.kind = EntryKind::kTensor;
  w.dtype = DType::kF32;
  w.shape = {4, 6};
  PieceRecord top;
  top.offsets = {0, 0};
  top.lengths = {2, 6};
  top.rank = 0;
  top.chunks = {Chunk(0, 0, 32), Chunk(0, 32, 16)};
  PieceRecord bottom;
  bottom.offsets = {2, 0};
  bottom.lengths = {2, 6};
  bottom.rank = 1;
  bottom.chunks = {Chunk(1, 0, 48)};
  w.pieces = {top, bottom};

  EntryRecord rng;
  rng.name = "rng";
  rng.kind = EntryKind::kBlob;
  rng.dtype = DType::kU8;
  rng.shape = {10};
  PieceRecord all;
  all.offsets = {0};
  all.lengths = {10};
  all.rank = 0;
  all.chunks = {Chunk(0, 48, 10)};
  rng.pieces = {all};

  EntryRecord config;
  config.name = "config";
  config.kind = EntryKind::kMetadata;
  config.json = R"({"lr":"0.1","nested":{"n":3}})";

  m.entries = {w, rng, config};
  m.metadata = {{"git", "abc123"}, {"note", "line\nbreak \"quoted\""}};
  m.metrics = {{"loss", 0.25}, {"acc", 1.0 / 3.0}, {"neg", -1e-300}};
  return m;
}

void ExpectSameManifest(const Manifest& a, const Manifest& b) {
  EXPECT_EQ(a.version, b.version);
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.created_unix_ms, b.created_unix_ms);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.hosts, b.hosts);
  EXPECT_EQ(a.chunk_size, b.chunk_size);
  ASSERT_EQ(a.objects.size(), b.objects.size());
  for (size_t i = 0; i < a.objects.size(); ++i) {
    EXPECT_EQ(a.objects[i].key, b.objects[i].key);
    EXPECT_EQ(a.objects[i].size, b.objects[i].size);
    EXPECT_EQ(a.objects[i].rank, b.objects[i].rank);
  }
  EXPECT_EQ(a.depends_on, b.depends_on);
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const EntryRecord& x = a.entries[i];
    const EntryRecord& y = b.entries[i];
    SCOPED_TRACE(x.name);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.json, y.json);
    if (x.kind == EntryKind::kMetadata) continue;
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    ASSERT_EQ(x.pieces.size(), y.pieces.size());
    for (size_t p = 0; p < x.pieces.size(); ++p) {
      EXPECT_EQ(x.pieces[p].offsets, y.pieces[p].offsets);
      EXPECT_EQ(x.pieces[p].lengths, y.pieces[p].lengths);
      EXPECT_EQ(x.pieces[p].rank, y.pieces[p].rank);
      ASSERT_EQ(x.pieces[p].chunks.size(), y.pieces[p].chunks.size());
      for (size_t c = 0; c < x.pieces[p].chunks.size(); ++c) {
        const ChunkRecord& cx = x.pieces[p].chunks[c];
        const ChunkRecord& cy = y.pieces[p].chunks[c];
        EXPECT_EQ(cx.object, cy.object);
        EXPECT_EQ(cx.offset, cy.offset);
        EXPECT_EQ(cx.length, cy.length);
        EXPECT_EQ(cx.checksum, cy.checksum);
      }
    }
  }
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.metrics, b.metrics);  // exact: doubles survive the JSON
}

// The manifest file for a body written by hand, in a correct envelope.
std::string Envelope(std::string_view body) {
  return std::string(kEnvelopePrefix) + Xxh3_128(body).Hex() +
         std::string(kEnvelopeMiddle) + std::string(body) +
         std::string(kEnvelopeSuffix);
}

// The JSON body EncodeManifest wrote.
json BodyOf(const std::string& encoded) {
  return json::parse(encoded)["manifest"];
}

void ExpectDecodeDataLoss(const std::string& bytes,
                          std::string_view needle = {}) {
  Result<Manifest> r = DecodeManifest(bytes, kWhat);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss) << r.status().ToString();
  EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  if (!needle.empty()) {
    EXPECT_CONTAINS(r.status().message(), std::string(needle));
  }
}

// --- Round trip and encoding -----------------------------------------------

TEST(ManifestTest, SmallManifestIsValid) {
  const Status s = ValidateManifest(SmallManifest());
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(ManifestTest, EncodeDecodeRoundTrip) {
  const Manifest m = SmallManifest();
  const std::string bytes = EncodeManifest(m);
  Result<Manifest> back = DecodeManifest(bytes, kWhat);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameManifest(m, *back);
  // Encoding is deterministic, so the decoded manifest re-encodes the same.
  EXPECT_EQ(EncodeManifest(*back), bytes);
}

TEST(ManifestTest, TimingRoundTripsAndIsOptional) {
  Manifest m = SmallManifest();
  Result<Manifest> without = DecodeManifest(EncodeManifest(m), kWhat);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_FALSE(without->timing.has_value());  // as an older save wrote it
  SaveTimingRecord t;
  t.save_ms = 120;
  t.commit_ms = 7;
  t.stall_ms = 3;
  t.async = true;
  t.ranks = {{0, 100, 1}};
  m.timing = t;
  const std::string bytes = EncodeManifest(m);
  Result<Manifest> back = DecodeManifest(bytes, kWhat);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_TRUE(back->timing.has_value());
  EXPECT_EQ(back->timing->save_ms, 120);
  EXPECT_EQ(back->timing->commit_ms, 7);
  EXPECT_EQ(back->timing->stall_ms, 3);
  EXPECT_TRUE(back->timing->async);
  ASSERT_EQ(back->timing->ranks.size(), 1u);
  EXPECT_EQ(back->timing->ranks[0].rank, 0);
  EXPECT_EQ(back->timing->ranks[0].write_ms, 100);
  EXPECT_EQ(back->timing->ranks[0].wait_ms, 1);
  EXPECT_EQ(EncodeManifest(*back), bytes);
}

TEST(ManifestTest, RoundTripExtremeValues) {
  Manifest m = SmallManifest();
  m.epoch = -1;
  m.created_unix_ms = std::numeric_limits<int64_t>::max();
  m.chunk_size = std::numeric_limits<uint64_t>::max();
  m.metrics = {{"max", std::numeric_limits<double>::max()},
               {"min", std::numeric_limits<double>::denorm_min()},
               {"zero", -0.0}};
  m.depends_on = {0, 1, 40, 41};
  m.metadata = {};
  Result<Manifest> back = DecodeManifest(EncodeManifest(m), kWhat);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameManifest(m, *back);
}

TEST(ManifestTest, RoundTripScalarAndEmptyTensors) {
  Manifest m = SmallManifest();
  EntryRecord scalar;
  scalar.name = "step_counter";
  scalar.dtype = DType::kI64;
  PieceRecord p;
  p.rank = 1;
  p.chunks = {Chunk(1, 0, 8)};
  // The bottom piece of model.w used object 1 from 0; move it past.
  m.objects[1].size = 56;
  scalar.pieces = {p};
  EntryRecord empty;
  empty.name = "empty";
  empty.dtype = DType::kF16;
  empty.shape = {0, 7};
  m.entries[0].pieces[1].chunks = {Chunk(1, 8, 48)};
  m.entries.push_back(scalar);
  m.entries.push_back(empty);
  ASSERT_TRUE(ValidateManifest(m).ok()) << ValidateManifest(m).ToString();
  Result<Manifest> back = DecodeManifest(EncodeManifest(m), kWhat);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameManifest(m, *back);
}

TEST(ManifestTest, EncodedBytesAreJsonInTheEnvelope) {
  const Manifest m = SmallManifest();
  const std::string bytes = EncodeManifest(m);
  ASSERT_TRUE(json::accept(bytes));
  const json j = json::parse(bytes);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.size(), 2u);
  ASSERT_TRUE(j.contains("xxh3_128"));
  ASSERT_TRUE(j.contains("manifest"));
  EXPECT_TRUE(j["manifest"].is_object());
  EXPECT_EQ(j["manifest"]["format"], std::string(kManifestMagic));
  EXPECT_EQ(j["manifest"]["version"], kManifestVersion);
  EXPECT_EQ(j["manifest"]["step"], 42);
  // The envelope is exactly prefix, checksum of the body, middle, body,
  // suffix.
  EXPECT_EQ(bytes.rfind(kEnvelopePrefix, 0), 0u);
  EXPECT_TRUE(bytes.ends_with(kEnvelopeSuffix));
  const size_t head = kEnvelopePrefix.size() + 32 + kEnvelopeMiddle.size();
  const std::string body =
      bytes.substr(head, bytes.size() - head - kEnvelopeSuffix.size());
  EXPECT_EQ(j["xxh3_128"], Xxh3_128(body).Hex());
  EXPECT_EQ(Envelope(body), bytes);
}

TEST(ManifestTest, FindAndTotalObjectBytes) {
  const Manifest m = SmallManifest();
  ASSERT_NE(m.Find("rng"), nullptr);
  EXPECT_EQ(m.Find("rng")->kind, EntryKind::kBlob);
  EXPECT_EQ(m.Find("nope"), nullptr);
  EXPECT_EQ(m.TotalObjectBytes(), 64u + 48u);
}

TEST(ManifestTest, FindOnDecodedManifest) {
  Result<Manifest> m = DecodeManifest(EncodeManifest(SmallManifest()), kWhat);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const char* name : {"model.w", "rng", "config"}) {
    const EntryRecord* e = m->Find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->name, name);
  }
  EXPECT_EQ(m->Find("nope"), nullptr);
  EXPECT_EQ(m->Find(""), nullptr);
}

// --- Damage -----------------------------------------------------------------

TEST(ManifestDamageTest, EverySingleBitFlipIsDataLoss) {
  const std::string good = EncodeManifest(SmallManifest());
  ASSERT_TRUE(DecodeManifest(good, kWhat).ok());
  for (size_t i = 0; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      Result<Manifest> r = DecodeManifest(bad, kWhat);
      ASSERT_FALSE(r.ok()) << "byte " << i << " bit " << bit;
      ASSERT_EQ(r.status().code(), ErrorCode::kDataLoss)
          << "byte " << i << " bit " << bit << ": " << r.status().ToString();
    }
  }
}

TEST(ManifestDamageTest, EveryTruncationIsDataLoss) {
  const std::string good = EncodeManifest(SmallManifest());
  for (size_t n = 0; n < good.size(); ++n) {
    Result<Manifest> r = DecodeManifest(good.substr(0, n), kWhat);
    ASSERT_FALSE(r.ok()) << "length " << n;
    ASSERT_EQ(r.status().code(), ErrorCode::kDataLoss) << "length " << n;
    EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  }
}

TEST(ManifestDamageTest, AppendedBytesAreDataLoss) {
  const std::string good = EncodeManifest(SmallManifest());
  ExpectDecodeDataLoss(good + "\n");
  ExpectDecodeDataLoss(good + " ");
  ExpectDecodeDataLoss(good + good);
  ExpectDecodeDataLoss(" " + good);
}

TEST(ManifestDamageTest, ChecksumMismatchSaysSo) {
  std::string bad = EncodeManifest(SmallManifest());
  const size_t pos = bad.find("node-a");
  ASSERT_NE(pos, std::string::npos);
  bad[pos] = 'N';
  ExpectDecodeDataLoss(bad, "checksum");
}

TEST(ManifestDamageTest, UpperCaseChecksumIsDataLoss) {
  const std::string good = EncodeManifest(SmallManifest());
  std::string bad = good;
  for (size_t i = kEnvelopePrefix.size(); i < kEnvelopePrefix.size() + 32;
       ++i) {
    bad[i] = static_cast<char>(std::toupper(bad[i]));
  }
  if (bad != good) ExpectDecodeDataLoss(bad);
}

TEST(ManifestDamageTest, WrongVersionIsNotSupported) {
  json body = BodyOf(EncodeManifest(SmallManifest()));
  body["version"] = 4;
  ExpectDecodeDataLoss(Envelope(body.dump()), "version 4 is not supported");
  // Version 2 needs its own fields.
  body["version"] = 2;
  ExpectDecodeDataLoss(Envelope(body.dump()), "parent");
  body["version"] = 0;
  ExpectDecodeDataLoss(Envelope(body.dump()), "version 0 is not supported");
  body["version"] = "1";
  ExpectDecodeDataLoss(Envelope(body.dump()), "version");
}

TEST(ManifestDamageTest, HandBuiltEnvelopeOfGoodBodyDecodes) {
  // The control for the hand-built cases: re-wrapping works.
  const json body = BodyOf(EncodeManifest(SmallManifest()));
  Result<Manifest> r = DecodeManifest(Envelope(body.dump()), kWhat);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectSameManifest(SmallManifest(), *r);
}

TEST(ManifestDamageTest, WrongFormatMagic) {
  json body = BodyOf(EncodeManifest(SmallManifest()));
  body["format"] = "something-else";
  ExpectDecodeDataLoss(Envelope(body.dump()), "format");
}

TEST(ManifestDamageTest, BodyNotJsonWithCorrectChecksum) {
  ExpectDecodeDataLoss(Envelope("this is not json"));
  ExpectDecodeDataLoss(Envelope(""));
  ExpectDecodeDataLoss(Envelope("{\"format\":"));
  ExpectDecodeDataLoss(Envelope("[]"));
  ExpectDecodeDataLoss(Envelope("\"ckpt-manifest\""));
  ExpectDecodeDataLoss(Envelope("{\"a\":\"\xff\"}"));
  ExpectDecodeDataLoss(
      Envelope(std::string(100000, '[') + std::string(100000, ']')));
}

TEST(ManifestDamageTest, DuplicateKeyInBody) {
  const std::string body = BodyOf(EncodeManifest(SmallManifest())).dump();
  // Insert a second "step" right after the opening brace.
  ExpectDecodeDataLoss(Envelope("{\"step\":7," + body.substr(1)), "step");
}

TEST(ManifestDamageTest, MissingOrMistypedFields) {
  const json good = BodyOf(EncodeManifest(SmallManifest()));
  for (const char* field :
       {"format", "version", "job_id", "step", "epoch", "created_unix_ms",
        "attempt", "world_size", "hosts", "chunk_size", "objects", "depends_on",
        "entries", "metadata", "metrics"}) {
    SCOPED_TRACE(field);
    json missing = good;
    missing.erase(field);
    ExpectDecodeDataLoss(Envelope(missing.dump()), field);
    json mistyped = good;
    mistyped[field] = json::array({json::object()});
    ExpectDecodeDataLoss(Envelope(mistyped.dump()));
  }
}

TEST(ManifestDamageTest, MalformedTimingIsDataLoss) {
  const json good = BodyOf(EncodeManifest(SmallManifest()));
  const json fine = {{"save_ms", 1},
                     {"commit_ms", 1},
                     {"stall_ms", 1},
                     {"async", false},
                     {"ranks", json::array({{0, 1, 1}})}};
  const auto with = [&fine](const json& patch) {
    json t = fine;
    t.update(patch);
    return t;
  };
  json ok = good;
  ok["timing"] = fine;
  EXPECT_TRUE(DecodeManifest(Envelope(ok.dump()), kWhat).ok());
  std::vector<std::pair<std::string, json>> bad = {
      {"not an object", json::array()},
      {"negative", with({{"save_ms", -1}})},
      {"no commit_ms", fine},
      {"async a number", with({{"async", 1}})},
      {"rank out of range", with({{"ranks", json::array({{7, 1, 1}})}})},
      {"row of two", with({{"ranks", json::array({{0, 1}})}})},
      {"negative write", with({{"ranks", json::array({{0, -1, 1}})}})},
      {"ranks not an array", with({{"ranks", 3}})},
  };
  bad[2].second.erase("commit_ms");
  json many = json::array();
  for (int i = 0; i < 257; ++i) many.push_back({0, 1, 1});
  bad.push_back({"257 ranks", with({{"ranks", many}})});
  for (const auto& [why, timing] : bad) {
    SCOPED_TRACE(why);
    json body = good;
    body["timing"] = timing;
    ExpectDecodeDataLoss(Envelope(body.dump()), "timing");
  }
}

TEST(ManifestDamageTest, BadNestedRecords) {
  const json good = BodyOf(EncodeManifest(SmallManifest()));
  std::vector<std::function<void(json&)>> edits = {
      [](json& b) { b["world_size"] = 0; },
      [](json& b) { b["world_size"] = -5; },
      [](json& b) { b["world_size"] = 1 << 25; },
      [](json& b) { b["step"] = 18446744073709551615ULL; },
      [](json& b) { b["chunk_size"] = -1; },
      [](json& b) {
        b["hosts"] = json::array({"a", 3});
      },
      [](json& b) { b["objects"][0]["rank"] = 2; },
      [](json& b) { b["objects"][0]["size"] = -1; },
      [](json& b) { b["objects"][0] = 5; },
      [](json& b) { b["depends_on"] = json::array({-1}); },
      [](json& b) { b["entries"][0]["kind"] = "table"; },
      [](json& b) { b["entries"][0]["dtype"] = "F7"; },
      [](json& b) {
        b["entries"][0]["shape"] = json::array({4, -6});
      },
      [](json& b) {
        b["entries"][0]["shape"] = json::array({4.0, 6});
      },
      [](json& b) { b["entries"][0]["pieces"][0]["rank"] = 9; },
      [](json& b) { b["entries"][0]["pieces"][0]["chunks"][0] = "x"; },
      [](json& b) {
        b["entries"][0]["pieces"][0]["chunks"][0] = json::array({0, 0, 32});
      },
      [](json& b) { b["entries"][0]["pieces"][0]["chunks"][0][0] = 2; },
      [](json& b) { b["entries"][0]["pieces"][0]["chunks"][0][1] = -1; },
      [](json& b) { b["entries"][0]["pieces"][0]["chunks"][0][3] = "abc"; },
      [](json& b) {
        b["entries"][0]["pieces"][0]["chunks"][0][3] = std::string(32, 'A');
      },
      [](json& b) { b["entries"][2]["json"] = json::array(); },
      [](json& b) { b["metadata"]["k"] = 1; },
      [](json& b) { b["metrics"]["loss"] = "low"; },
      [](json& b) { b["metrics"]["loss"] = nullptr; },
      // Structurally fine but inconsistent: ValidateManifest's checks run.
      [](json& b) { b["entries"][1]["name"] = "model.w"; },
      [](json& b) { b["entries"][1]["name"] = "../rng"; },
      [](json& b) { b["hosts"] = json::array({"only-one"}); },
      [](json& b) { b["depends_on"] = json::array({42}); },
      [](json& b) { b["entries"][0]["pieces"][1]["offsets"][0] = 1; },
  };
  for (size_t i = 0; i < edits.size(); ++i) {
    SCOPED_TRACE("edit #" + std::to_string(i));
    json body = good;
    edits[i](body);
    ExpectDecodeDataLoss(Envelope(body.dump()));
  }
}

TEST(ManifestDamageTest, NotAnEnvelope) {
  ExpectDecodeDataLoss("");
  ExpectDecodeDataLoss("{}");
  ExpectDecodeDataLoss("{\"manifest\":{},\"xxh3_128\":\"" +
                       Xxh3_128("{}").Hex() + "\"}\n");
  // The same JSON with a different spelling of the envelope.
  const std::string good = EncodeManifest(SmallManifest());
  const json j = json::parse(good);
  ExpectDecodeDataLoss(j.dump(2) + "\n");
}

// --- ValidateManifest -------------------------------------------------------

// Applies `edit` to the small manifest and expects ValidateManifest to refuse
// it with DataLoss whose message holds `needle`; unless `encoding_survives`,
// DecodeManifest of its encoding must refuse it too. (Some damage cannot
// survive encoding: text that is not UTF-8 is replaced, a metadata entry's
// pieces are not written.)
void ExpectInvalid(const std::function<void(Manifest&)>& edit,
                   std::string_view needle = {},
                   bool encoding_survives = true) {
  Manifest m = SmallManifest();
  edit(m);
  const Status s = ValidateManifest(m);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kDataLoss) << s.ToString();
  if (!needle.empty()) {
    EXPECT_CONTAINS(s.message(), std::string(needle));
  }
  if (!encoding_survives) return;
  Result<Manifest> r = DecodeManifest(EncodeManifest(m), kWhat);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
}

TEST(ValidateManifestTest, PieceOutsideTheShape) {
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].offsets = {3, 0};
      },
      "outside");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].offsets = {2, 1};
      },
      "outside");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].offsets = {-2, 0};
        m.entries[0].pieces[1].lengths = {4, 6};
      },
      "outside");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].offsets = {std::numeric_limits<int64_t>::max(),
                                          0};
      },
      "outside");
}

TEST(ValidateManifestTest, BoxRankDiffersFromShape) {
  ExpectInvalid([](Manifest& m) { m.entries[0].pieces[1].offsets = {2}; },
                "model.w");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].lengths = {2, 6, 1};
      },
      "model.w");
}

TEST(ValidateManifestTest, OverlappingPieces) {
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].offsets = {1, 0};
      },
      "overlaps");
  // The same piece twice (two replicas) covers it twice.
  ExpectInvalid(
      [](Manifest& m) {
        m.objects[1].size = 96;
        PieceRecord again = m.entries[0].pieces[1];
        again.chunks = {Chunk(1, 48, 48)};
        m.entries[0].pieces.push_back(again);
      },
      "overlaps");
}

TEST(ValidateManifestTest, PiecesNotCoveringTheShape) {
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].pieces[1].lengths = {1, 6};
        m.entries[0].pieces[1].chunks = {Chunk(1, 0, 24)};
      },
      "cover");
  ExpectInvalid([](Manifest& m) { m.entries[0].pieces.pop_back(); }, "cover");
  ExpectInvalid([](Manifest& m) { m.entries[1].pieces.clear(); }, "cover");
}

TEST(ValidateManifestTest, ChunkBytesNotMatchingThePiece) {
  ExpectInvalid(
      [](Manifest& m) { m.entries[0].pieces[0].chunks[1].length = 15; },
      "chunks hold");
  ExpectInvalid([](Manifest& m) { m.entries[0].pieces[0].chunks.pop_back(); },
                "chunks hold");
  ExpectInvalid([](Manifest& m) { m.entries[0].dtype = DType::kF64; },
                "chunks hold");
  // Lengths whose sum wraps 64 bits around to the box's 48 bytes, in an
  // object recorded as large enough.
  ExpectInvalid(
      [](Manifest& m) {
        m.objects[0].size = UINT64_MAX;
        m.entries[0].pieces[0].chunks[0].length = uint64_t{1} << 63;
        m.entries[0].pieces[0].chunks[1].length = (uint64_t{1} << 63) + 16;
      },
      "chunks hold more than the 48 bytes the box needs");
}

TEST(ValidateManifestTest, EmptyChunk) {
  ExpectInvalid([](Manifest& m) {
    m.entries[1].pieces[0].chunks.push_back(Chunk(0, 60, 0));
  });
}

TEST(ValidateManifestTest, ChunkPastTheEndOfItsObject) {
  ExpectInvalid([](Manifest& m) { m.objects[0].size = 57; }, "past the end");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[1].pieces[0].chunks[0].offset =
            std::numeric_limits<uint64_t>::max() - 4;
      },
      "past the end");
  ExpectInvalid(
      [](Manifest& m) { m.entries[1].pieces[0].chunks[0].offset = 100; },
      "past the end");
}

TEST(ValidateManifestTest, OverlappingChunksInOneObject) {
  // rng's chunk over the tail of model.w's second chunk.
  ExpectInvalid(
      [](Manifest& m) { m.entries[1].pieces[0].chunks[0].offset = 40; },
      "overlap");
  // Within one piece.
  ExpectInvalid(
      [](Manifest& m) { m.entries[0].pieces[0].chunks[1].offset = 31; },
      "overlap");
  // Different objects may use the same offsets.
  Manifest ok = SmallManifest();
  ok.objects[1].size = 64;
  ok.entries[1].pieces[0].chunks[0] = Chunk(1, 48, 10);
  EXPECT_TRUE(ValidateManifest(ok).ok()) << ValidateManifest(ok).ToString();
}

TEST(ValidateManifestTest, ChunkObjectIndexOutOfRange) {
  ExpectInvalid(
      [](Manifest& m) { m.entries[1].pieces[0].chunks[0].object = 2; },
      "no object");
  ExpectInvalid([](Manifest& m) {
    m.entries[1].pieces[0].chunks[0].object = 0xffffffffu;
  });
}

TEST(ValidateManifestTest, DuplicateEntryNames) {
  ExpectInvalid([](Manifest& m) { m.entries[1].name = "model.w"; },
                "duplicate");
  ExpectInvalid([](Manifest& m) { m.entries[2].name = "rng"; }, "duplicate");
}

TEST(ValidateManifestTest, BadEntryNames) {
  for (const char* name : {"", "a/../b", "/abs", "a//b", "__metadata__", "x\\y",
                           "a\nb", "bad\xff"}) {
    SCOPED_TRACE(name);
    const bool utf8 = std::string_view(name).find('\xff') == std::string::npos;
    ExpectInvalid([&](Manifest& m) { m.entries[1].name = name; }, {}, utf8);
  }
}

TEST(ValidateManifestTest, BadObjects) {
  ExpectInvalid([](Manifest& m) { m.objects[1].key = "../outside"; });
  ExpectInvalid([](Manifest& m) { m.objects[1].key = "/etc/passwd"; });
  ExpectInvalid([](Manifest& m) { m.objects[1].key = m.objects[0].key; },
                "twice");
  ExpectInvalid([](Manifest& m) { m.objects[1].rank = 2; }, "rank");
  ExpectInvalid([](Manifest& m) { m.objects[1].rank = -1; }, "rank");
}

TEST(ValidateManifestTest, HostsCountMustMatchWorldSize) {
  ExpectInvalid([](Manifest& m) { m.hosts.pop_back(); }, "world_size");
  ExpectInvalid([](Manifest& m) { m.hosts.push_back("node-c"); }, "world_size");
  ExpectInvalid([](Manifest& m) { m.world_size = 3; }, "world_size");
}

TEST(ValidateManifestTest, HeaderFields) {
  ExpectInvalid([](Manifest& m) { m.version = 4; }, "version");
  ExpectInvalid([](Manifest& m) { m.step = -1; });
  ExpectInvalid([](Manifest& m) {
    m.world_size = 0;
    m.hosts.clear();
  });
  ExpectInvalid([](Manifest& m) { m.chunk_size = 0; }, "chunk_size");
}

TEST(ValidateManifestTest, DependsOnMustBeEarlierSteps) {
  ExpectInvalid([](Manifest& m) { m.depends_on = {42}; }, "depends_on");
  ExpectInvalid([](Manifest& m) { m.depends_on = {43}; }, "depends_on");
  ExpectInvalid([](Manifest& m) { m.depends_on = {-1}; }, "depends_on");
  ExpectInvalid([](Manifest& m) { m.depends_on = {40, 40}; }, "depends_on");
}

TEST(ManifestTest, IncrementalVersionRoundTrips) {
  Manifest m = SmallManifest();
  m.version = kIncrementalManifestVersion;
  m.parent = 41;
  m.chain = 3;
  const std::string bytes = EncodeManifest(m);
  EXPECT_CONTAINS(bytes, "\"parent\":41");
  Result<Manifest> back = DecodeManifest(bytes, kWhat);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSameManifest(m, *back);
  EXPECT_EQ(back->parent, 41);
  EXPECT_EQ(back->chain, 3);
  // A version 1 manifest carries neither field.
  EXPECT_EQ(EncodeManifest(SmallManifest()).find("\"parent\""),
            std::string::npos);
  EXPECT_EQ(SmallManifest().OwnObjectBytes(), 64u);
}

TEST(ValidateManifestTest, ParentAndChainMatchTheVersion) {
  // (A version 1 encoding leaves both fields out.)
  ExpectInvalid([](Manifest& m) { m.parent = 41; }, "version 1", false);
  ExpectInvalid([](Manifest& m) { m.chain = 1; }, "version 1", false);
  auto v2 = [](int64_t parent, int64_t chain) {
    return [=](Manifest& m) {
      m.version = kIncrementalManifestVersion;
      m.parent = parent;
      m.chain = chain;
    };
  };
  ExpectInvalid(v2(42, 1), "parent");
  ExpectInvalid(v2(-1, 1), "parent");
  ExpectInvalid(v2(41, 0), "chain");
  ExpectInvalid(v2(41, kMaxDependsOn + 1), "chain");
}

TEST(ValidateManifestTest, ReferencedObjectsMustLieInDependedOnSteps) {
  ExpectInvalid([](Manifest& m) { m.depends_on = {}; }, "outside");
  ExpectInvalid([](Manifest& m) { m.depends_on = {39}; }, "outside");
  ExpectInvalid([](Manifest& m) { m.objects[1].key = "r00001.safetensors"; },
                "outside");
  ExpectInvalid(
      [](Manifest& m) { m.objects[1].key = "other/r00001.safetensors"; },
      "outside");
  ExpectInvalid([](Manifest& m) {
    m.objects[1].key = DataObjectKey(43, 1, "fedcba9876543210");
  });
}

TEST(ValidateManifestTest, PieceRankOutOfRange) {
  ExpectInvalid([](Manifest& m) { m.entries[0].pieces[1].rank = 2; }, "rank");
  ExpectInvalid([](Manifest& m) { m.entries[0].pieces[1].rank = -1; }, "rank");
}

TEST(ValidateManifestTest, BlobMustBeU8OneDimensional) {
  ExpectInvalid([](Manifest& m) { m.entries[1].dtype = DType::kI8; }, "blob");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[1].shape = {2, 5};
        m.entries[1].pieces[0].offsets = {0, 0};
        m.entries[1].pieces[0].lengths = {2, 5};
      },
      "blob");
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[1].shape = {};
        m.entries[1].pieces[0].offsets = {};
        m.entries[1].pieces[0].lengths = {};
        m.entries[1].pieces[0].chunks[0].length = 1;
      },
      "blob");
}

TEST(ValidateManifestTest, ShapeOverflow) {
  ExpectInvalid(
      [](Manifest& m) {
        m.entries[0].shape = {int64_t{1} << 62, 8};
      },
      "overflow");
  ExpectInvalid([](Manifest& m) { m.entries[0].shape = {4, -6}; });
}

TEST(ValidateManifestTest, MetricsMustBeFinite) {
  ExpectInvalid(
      [](Manifest& m) {
        m.metrics["loss"] = std::numeric_limits<double>::quiet_NaN();
      },
      "loss");
  ExpectInvalid([](Manifest& m) {
    m.metrics["loss"] = std::numeric_limits<double>::infinity();
  });
  ExpectInvalid([](Manifest& m) {
    m.metrics["loss"] = -std::numeric_limits<double>::infinity();
  });
}

TEST(ValidateManifestTest, MetadataEntryMustHoldAJsonObject) {
  ExpectInvalid([](Manifest& m) { m.entries[2].json = "not json"; }, "config");
  ExpectInvalid([](Manifest& m) { m.entries[2].json = "[1,2]"; }, "config");
  ExpectInvalid([](Manifest& m) { m.entries[2].json = ""; }, "config");
  ExpectInvalid([](Manifest& m) { m.entries[2].json = "{\"a\":\"\xff\"}"; },
                "config");
  ExpectInvalid([](Manifest& m) { m.entries[2].pieces = m.entries[1].pieces; },
                "pieces", /*encoding_survives=*/false);
}

TEST(ValidateManifestTest, ValidMetadataNestingRoundTrips) {
  // Whatever ValidateManifest accepts must decode again: a manifest that
  // validates but cannot be read would be a committed, unreadable step.
  int deepest_valid = 0;
  for (int depth = 1; depth <= 80; ++depth) {
    Manifest m = SmallManifest();
    std::string j;
    for (int i = 0; i < depth; ++i) j += "{\"a\":";
    j += "1";
    for (int i = 0; i < depth; ++i) j += "}";
    m.entries[2].json = j;
    const bool valid = ValidateManifest(m).ok();
    const bool decodes = DecodeManifest(EncodeManifest(m), kWhat).ok();
    EXPECT_EQ(valid, decodes) << "depth " << depth;
    if (valid) deepest_valid = depth;
  }
  EXPECT_GE(deepest_valid, 32);
}

TEST(ValidateManifestTest, TextMustBeUtf8) {
  const auto expect = [](const std::function<void(Manifest&)>& edit,
                         std::string_view needle) {
    ExpectInvalid(edit, needle, /*encoding_survives=*/false);
  };
  expect([](Manifest& m) { m.job_id = "job\xff"; }, "job_id");
  expect([](Manifest& m) { m.attempt = "\xc3"; }, "attempt");
  expect([](Manifest& m) { m.hosts[1] = "node-\xfe"; }, "host");
  expect([](Manifest& m) { m.metadata["k"] = "v\xff"; }, "metadata");
  expect([](Manifest& m) { m.metadata["k\xff"] = "v"; }, "metadata");
  expect([](Manifest& m) { m.metrics["l\xff"] = 1.0; }, "metric");
}

TEST(ValidateManifestTest, EncodeNeverThrows) {
  // Even an unvalidated manifest encodes (it then fails to decode).
  Manifest m = SmallManifest();
  m.job_id = "job\xff";
  m.entries[2].json = "not json";
  m.metrics["nan"] = std::numeric_limits<double>::quiet_NaN();
  std::string bytes;
  EXPECT_NO_THROW(bytes = EncodeManifest(m));
  EXPECT_FALSE(DecodeManifest(bytes, kWhat).ok());
}

TEST(ValidateManifestTest, DecodeErrorsNameTheManifest) {
  Manifest m = SmallManifest();
  m.entries[1].pieces[0].chunks[0].offset = 40;
  Result<Manifest> r = DecodeManifest(EncodeManifest(m), kWhat);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  EXPECT_CONTAINS(r.status().message(), "rng");
}

// --- Layout names -----------------------------------------------------------

TEST(LayoutNamesTest, StepDirName) {
  EXPECT_EQ(StepDirName(0), "step-000000000000");
  EXPECT_EQ(StepDirName(42), "step-000000000042");
  EXPECT_EQ(StepDirName(999999999999), "step-999999999999");
  // Zero padding makes listing order step order.
  EXPECT_LT(StepDirName(9), StepDirName(10));
  EXPECT_LT(StepDirName(99999), StepDirName(100000));
}

TEST(LayoutNamesTest, ParseStepDirNameRoundTrip) {
  for (int64_t step : {int64_t{0}, int64_t{1}, int64_t{42},
                       int64_t{123456789012}, int64_t{999999999999}}) {
    EXPECT_EQ(ParseStepDirName(StepDirName(step)), step) << step;
  }
}

TEST(LayoutNamesTest, ParseStepDirNameRejects) {
  for (const char* name :
       {"step-42", "step-00000000004x", "step-0000000000042",
        "step-00000000042", "Step-000000000042", "step_000000000042",
        "step-+00000000042", "step--00000000042", "step-00000000004 ", "",
        "step-", "000000000042", "step-000000000042/",
        "step-000000000042/MANIFEST.json", "xstep-00000000042"}) {
    EXPECT_EQ(ParseStepDirName(name), -1) << name;
  }
}

TEST(LayoutNamesTest, ManifestKey) {
  EXPECT_EQ(ManifestKey(42), "step-000000000042/MANIFEST.json");
  EXPECT_TRUE(ManifestKey(42).ends_with(kManifestName));
}

TEST(LayoutNamesTest, DataObjectKeyRoundTrip) {
  EXPECT_EQ(DataObjectKey(42, 3, kAttempt),
            "step-000000000042/r00003-0123456789abcdef.safetensors");
  for (int rank : {0, 1, 9, 12345, 99999}) {
    for (int64_t step : {int64_t{0}, int64_t{7}, int64_t{999999999999}}) {
      const std::string key = DataObjectKey(step, rank, "fedcba9876543210");
      int64_t s = -1;
      int r = -1;
      std::string a;
      ASSERT_TRUE(ParseDataObjectKey(key, &s, &r, &a)) << key;
      EXPECT_EQ(s, step);
      EXPECT_EQ(r, rank);
      EXPECT_EQ(a, "fedcba9876543210");
    }
  }
  // Null outputs are allowed.
  EXPECT_TRUE(ParseDataObjectKey(DataObjectKey(1, 2, kAttempt), nullptr,
                                 nullptr, nullptr));
}

TEST(LayoutNamesTest, ParseDataObjectKeyRejects) {
  const std::string good =
      "step-000000000042/r00003-0123456789abcdef.safetensors";
  ASSERT_TRUE(ParseDataObjectKey(good, nullptr, nullptr, nullptr));
  for (const std::string& key : std::vector<std::string>{
           "step-000000000042/r0003-0123456789abcdef.safetensors",
           "step-000000000042/r000003-0123456789abcdef.safetensors",
           "step-000000000042/r0000-.....0123456789abcdef.safetensors",
           "step-000000000042/r00003-0123456789abcdef.safetensor",
           "step-000000000042/r00003-0123456789abcdef.safetensorz",
           "step-000000000042/r00003-0123456789abcdef.json",
           "step-000000000042/r00003-0123456789abcdef",
           "step-000000000042/r00003-0123456789ABCDEF.safetensors",
           "step-000000000042/r00003-0123456789abcdeg.safetensors",
           "step-000000000042/r00003-0123456789abcde.safetensors",
           "step-000000000042/r00003_0123456789abcdef.safetensors",
           "step-000000000042/x00003-0123456789abcdef.safetensors",
           "step-000000000042/r0000x-0123456789abcdef.safetensors",
           "step-000000000042/r-0003-0123456789abcdef.safetensors",
           "step-42/r00003-0123456789abcdef.safetensors",
           "step-00000000004x/r00003-0123456789abcdef.safetensors",
           "step-000000000042/MANIFEST.json",
           "step-000000000042//r00003-0123456789abcdef.safetensors",
           "step-000000000042/sub/r00003-0123456789abcdef.safetensors",
           "r00003-0123456789abcdef.safetensors",
           "",
           "/"}) {
    int64_t s = -7;
    int r = -7;
    std::string a = "untouched";
    EXPECT_FALSE(ParseDataObjectKey(key, &s, &r, &a)) << key;
    // A rejected key fills in nothing.
    EXPECT_EQ(s, -7) << key;
    EXPECT_EQ(r, -7) << key;
    EXPECT_EQ(a, "untouched") << key;
  }
}

TEST(LayoutNamesTest, KeysAreValidStorageKeys) {
  EXPECT_TRUE(ValidateManifest(SmallManifest()).ok());
  EXPECT_TRUE(DataObjectKey(42, 0, kAttempt).starts_with(StepDirName(42)));
  EXPECT_EQ(ParseStepDirName(ManifestKey(42).substr(0, 17)), 42);
}

}  // namespace
}  // namespace ckpt::format
