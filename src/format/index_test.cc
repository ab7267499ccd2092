#include "format/index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "format/binary.h"
#include "format/constants.h"
#include "format/layout.h"

namespace ckpt::format {
namespace {

constexpr std::string_view kAttempt = "0123456789abcdef";

// Step 9 of a 4-rank job: "w" split by rows over all ranks, "grid" a 2 x 2
// grid, a blob of rank 0, a metadata entry, a rank-local "loader" per rank,
// and one piece whose chunks lie in an object of step 7 (a reference).
Manifest FourRanks() {
  Manifest m;
  m.version = kScalableManifestVersion;
  m.job_id = "job";
  m.step = 9;
  m.attempt = std::string(kAttempt);
  m.world_size = 4;
  m.hosts = {"a", "a", "b", "b"};
  m.chunk_size = 64;
  m.depends_on = {7};
  m.parent = 7;
  m.chain = 1;
  std::vector<uint64_t> used(4, 8);
  for (int r = 0; r < 4; ++r) {
    m.objects.push_back({DataObjectKey(9, r, kAttempt), 4096, r});
  }
  m.objects.push_back({DataObjectKey(7, 2, "00000000000000aa"), 1024, 2});
  uint64_t sum = 0;
  auto piece = [&](std::vector<int64_t> o, std::vector<int64_t> l, int rank,
                   uint64_t bytes, uint32_t object) {
    PieceRecord p{std::move(o), std::move(l), rank, {}};
    // Chunks of at most 64 bytes, laid out one after another.
    for (uint64_t done = 0; done < bytes;) {
      const uint64_t n = std::min<uint64_t>(64, bytes - done);
      p.chunks.push_back({.object = object,
                          .offset = used[object % 4],
                          .length = n,
                          .checksum = {++sum, ~sum}});
      used[object % 4] += n;
      done += n;
    }
    return p;
  };
  EntryRecord w{"w", EntryKind::kTensor, DType::kF32, {8, 4}, {}, "", -1};
  for (int r = 0; r < 4; ++r) {
    w.pieces.push_back(piece({2 * r, 0}, {2, 4}, r, 32, r == 2 ? 4 : r));
  }
  EntryRecord g{"grid", EntryKind::kTensor, DType::kBF16, {4, 6}, {}, "", -1};
  for (int r = 0; r < 4; ++r) {
    g.pieces.push_back(piece({2 * (r / 2), 3 * (r % 2)}, {2, 3}, r, 12, r));
  }
  EntryRecord b{"rng", EntryKind::kBlob, DType::kU8, {100}, {}, "", -1};
  b.pieces.push_back(piece({0}, {100}, 0, 100, 0));
  EntryRecord meta{"cfg", EntryKind::kMetadata, DType::kU8, {},
                   {},    "{\"lr\":\"0.1\"}",   -1};
  m.entries = {w, g, b, meta};
  for (int r = 0; r < 4; ++r) {
    EntryRecord l{"loader", EntryKind::kTensor, DType::kI64, {3}, {}, "", r};
    l.pieces.push_back(piece({0}, {3}, r, 24, r));
    m.entries.push_back(std::move(l));
  }
  m.Reindex();
  EXPECT_TRUE(ValidateManifest(m).ok()) << ValidateManifest(m).ToString();
  return m;
}

// The commit record that goes with `s`.
Manifest Header(const Manifest& m, const SplitMetadata& s) {
  Manifest h = m;
  h.hosts.clear();
  h.objects.clear();
  h.entries.clear();
  h.directory = {DirectoryKey(m.step, m.attempt), s.directory_bytes.size(),
                 Xxh3_128(s.directory_bytes)};
  h.pieces = Manifest::Pieces::kNone;
  return h;
}

Result<Manifest> Load(const Manifest& m, const SplitMetadata& s,
                      std::vector<int> ranks, bool all) {
  CKPT_ASSIGN_OR_RETURN(Directory d, DecodeDirectory(s.directory_bytes, "dir"));
  std::vector<RankIndex> xs;
  for (int r : ranks) {
    CKPT_ASSIGN_OR_RETURN(RankIndex x, DecodeRankIndex(s.indexes[r], "index"));
    xs.push_back(std::move(x));
  }
  return Assemble(Header(m, s), d, std::move(xs), all, "test");
}

std::string Describe(const EntryRecord& e) {
  std::vector<std::string> pieces;
  for (const PieceRecord& p : e.pieces) {
    std::string s = std::to_string(p.rank) + ":";
    for (size_t d = 0; d < p.offsets.size(); ++d) {
      s += std::to_string(p.offsets[d]) + "+" + std::to_string(p.lengths[d]) +
           ",";
    }
    for (const ChunkRecord& c : p.chunks) {
      s += std::to_string(c.object) + "@" + std::to_string(c.offset) + "+" +
           std::to_string(c.length) + "#" + c.checksum.Hex() + ";";
    }
    pieces.push_back(s);
  }
  std::sort(pieces.begin(), pieces.end());
  std::string out = e.name + "/" + std::to_string(e.owner) + "/" + e.json;
  for (const std::string& p : pieces) out += "|" + p;
  return out;
}

TEST(IndexTest, EveryIndexAssemblesTheManifestBack) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Result<Manifest> back = Load(m, *s, {0, 1, 2, 3}, true);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->HasAllPieces());
  EXPECT_EQ(back->hosts, m.hosts);
  ASSERT_EQ(back->objects.size(), m.objects.size());
  for (size_t i = 0; i < m.objects.size(); ++i) {
    EXPECT_EQ(back->objects[i].key, m.objects[i].key);
    EXPECT_EQ(back->objects[i].size, m.objects[i].size);
  }
  ASSERT_EQ(back->entries.size(), m.entries.size());
  for (size_t i = 0; i < m.entries.size(); ++i) {
    EXPECT_EQ(Describe(back->entries[i]), Describe(m.entries[i]));
    EXPECT_EQ(back->entries[i].dtype, m.entries[i].dtype);
    EXPECT_EQ(back->entries[i].shape, m.entries[i].shape);
  }
  // The directory and every index are metadata objects to keep.
  EXPECT_EQ(back->metadata_objects.size(), 5u);
  EXPECT_NE(back->FindLocal("loader", 3), nullptr);
}

TEST(IndexTest, RegularSplitsBecomeOneRunEach) {
  Result<Directory> d =
      DecodeDirectory(Split(FourRanks())->directory_bytes, "d");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->entries[0].runs.size(), 1u);  // rows over 4 ranks
  EXPECT_EQ(d->entries[0].runs[0].count, 4u);
  EXPECT_EQ(d->entries[0].runs[0].rank_stride, 1);
  EXPECT_EQ(d->entries[0].runs[0].delta, (std::vector<int64_t>{2, 0}));
  // A 2 x 2 grid is two runs, one per row of the grid.
  EXPECT_EQ(d->entries[1].runs.size(), 2u);
  EXPECT_EQ(d->hosts, (std::vector<std::string>{"a", "a", "b", "b"}));
}

TEST(IndexTest, SomeIndexesGiveOnlyTheirRanksPieces) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  Result<Manifest> part = Load(m, *s, {2}, false);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_EQ(part->pieces, Manifest::Pieces::kSome);
  EXPECT_EQ(part->loaded_ranks, (std::vector<int32_t>{2}));
  const EntryRecord* w = part->Find("w");
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->pieces.size(), 1u);
  EXPECT_EQ(w->pieces[0].offsets, (std::vector<int64_t>{4, 0}));
  // Its chunks point at step 7's object. Only the objects rank 2's chunks
  // name are listed, and no metadata objects: a loading rank builds no key
  // for every rank's objects.
  EXPECT_EQ(part->objects[w->pieces[0].chunks[0].object].key,
            DataObjectKey(7, 2, "00000000000000aa"));
  std::vector<std::string> keys;
  for (const ObjectRecord& o : part->objects) keys.push_back(o.key);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys,
            (std::vector<std::string>{DataObjectKey(7, 2, "00000000000000aa"),
                                      DataObjectKey(9, 2, kAttempt)}));
  EXPECT_TRUE(part->metadata_objects.empty());
  EXPECT_TRUE(part->Find("rng")->pieces.empty());
  EXPECT_EQ(part->Find("cfg")->json, "{\"lr\":\"0.1\"}");
  // Claiming every rank with one index is refused.
  EXPECT_FALSE(Load(m, *s, {2}, true).ok());
}

// Indexes name objects by (step, rank, attempt), so the directory's order
// of them does not matter: in order, reversed or shuffled, every rank's
// chunks land in the objects they were written to.
TEST(IndexTest, ObjectsAreFoundInAnyDirectoryOrder) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  Result<Directory> d = DecodeDirectory(s->directory_bytes, "dir");
  ASSERT_TRUE(d.ok());
  std::vector<DataObjectId> sorted = d->objects;
  auto parts = [](const DataObjectId& o) {
    return std::tuple(o.step, o.rank, o.attempt);
  };
  std::sort(sorted.begin(), sorted.end(),
            [&](const auto& a, const auto& b) { return parts(a) < parts(b); });
  std::vector<DataObjectId> reversed(sorted.rbegin(), sorted.rend());
  std::vector<DataObjectId> shuffled = sorted;
  std::swap(shuffled[0], shuffled[3]);
  for (const auto& order : {sorted, reversed, shuffled}) {
    for (int r = 0; r < 4; ++r) {
      Directory dir = *d;
      dir.objects = order;
      Result<RankIndex> x = DecodeRankIndex(s->indexes[r], "index");
      ASSERT_TRUE(x.ok());
      std::vector<RankIndex> xs;
      xs.push_back(std::move(*x));
      Result<Manifest> part =
          Assemble(Header(m, *s), dir, std::move(xs), false, "test");
      ASSERT_TRUE(part.ok()) << part.status().ToString();
      for (size_t ei = 0; ei < m.entries.size(); ++ei) {
        for (const PieceRecord& want : m.entries[ei].pieces) {
          if (want.rank != r) continue;
          const EntryRecord& got = part->entries[ei];
          ASSERT_EQ(got.pieces.size(), 1u) << got.name << " rank " << r;
          ASSERT_EQ(got.pieces[0].chunks.size(), want.chunks.size());
          for (size_t k = 0; k < want.chunks.size(); ++k) {
            EXPECT_EQ(part->objects[got.pieces[0].chunks[k].object].key,
                      m.objects[want.chunks[k].object].key)
                << got.name << " rank " << r << " chunk " << k;
          }
        }
      }
    }
    // An index naming an object the directory lacks is refused.
    Directory dir = *d;
    dir.objects = order;
    std::erase_if(dir.objects, [&](const DataObjectId& o) {
      return parts(o) == parts(sorted[0]);
    });
    ASSERT_EQ(dir.objects.size(), sorted.size() - 1);
    Result<RankIndex> x = DecodeRankIndex(s->indexes[sorted[0].rank], "index");
    ASSERT_TRUE(x.ok());
    std::vector<RankIndex> xs;
    xs.push_back(std::move(*x));
    Result<Manifest> part =
        Assemble(Header(m, *s), dir, std::move(xs), false, "test");
    ASSERT_FALSE(part.ok());
    EXPECT_NE(part.status().message().find("is not in the directory"),
              std::string::npos)
        << part.status().ToString();
  }
}

// Brute force against RanksMeeting over random grids and boxes.
TEST(IndexTest, RanksMeetingMatchesEveryPieceChecked) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const int64_t rows = 1 + rng() % 40, cols = 1 + rng() % 40;
    const int64_t rs = 1 + rng() % rows, cs = 1 + rng() % cols;
    std::vector<PieceRecord> pieces;
    int rank = 0;
    const bool transpose = rng() % 2;
    for (int64_t a = 0; a < (transpose ? cols : rows);
         a += (transpose ? cs : rs)) {
      for (int64_t b = 0; b < (transpose ? rows : cols);
           b += (transpose ? rs : cs)) {
        const int64_t r0 = transpose ? b : a, c0 = transpose ? a : b;
        pieces.push_back({{r0, c0},
                          {std::min(rs, rows - r0), std::min(cs, cols - c0)},
                          rank++,
                          {}});
      }
    }
    std::vector<PieceBox> boxes;
    for (const PieceRecord& p : pieces) {
      boxes.push_back({&p.offsets, &p.lengths, p.rank});
    }
    DirectoryEntry e{"t", EntryKind::kTensor,    DType::kF32, -1, {rows, cols},
                     "",  SummarizePieces(boxes)};
    for (int q = 0; q < 20; ++q) {
      const int64_t r0 = rng() % rows, c0 = rng() % cols;
      const std::vector<int64_t> off = {r0, c0};
      const std::vector<int64_t> len = {
          static_cast<int64_t>(rng() % (rows - r0 + 1)),
          static_cast<int64_t>(rng() % (cols - c0 + 1))};
      std::set<int32_t> want;
      for (const PieceRecord& p : pieces) {
        bool meet = true;
        for (int d = 0; d < 2; ++d) {
          meet = meet && len[d] > 0 && p.offsets[d] < off[d] + len[d] &&
                 p.offsets[d] + p.lengths[d] > off[d];
        }
        if (meet) want.insert(p.rank);
      }
      std::vector<int32_t> got;
      RanksMeeting(e, off, len, got);
      EXPECT_EQ(std::set<int32_t>(got.begin(), got.end()), want)
          << rows << "x" << cols << " split " << rs << "x" << cs << " query "
          << r0 << "+" << len[0] << ", " << c0 << "+" << len[1];
    }
  }
}

TEST(IndexTest, EveryFlippedBitAndEveryTruncationIsCaught) {
  Result<SplitMetadata> s = Split(FourRanks());
  ASSERT_TRUE(s.ok());
  for (const std::string* obj : {&s->indexes[2], &s->directory_bytes}) {
    const bool is_index = obj != &s->directory_bytes;
    auto decodes = [&](const std::string& b) {
      return is_index ? DecodeRankIndex(b, "x").ok()
                      : DecodeDirectory(b, "x").ok();
    };
    ASSERT_TRUE(decodes(*obj));
    for (size_t i = 0; i < obj->size() * 8; ++i) {
      std::string b = *obj;
      b[i / 8] ^= static_cast<char>(1 << (i % 8));
      EXPECT_FALSE(decodes(b)) << "bit " << i;
    }
    for (size_t n = 0; n < obj->size(); ++n) {
      EXPECT_FALSE(decodes(obj->substr(0, n))) << "first " << n << " bytes";
    }
    EXPECT_FALSE(decodes(*obj + "x"));
  }
}

TEST(IndexTest, AnIndexHoldingOtherPiecesIsRefused) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  // Well-formed, checksummed, but rank 1 claims a box the directory gives
  // to nobody.
  Result<RankIndex> x = DecodeRankIndex(s->indexes[1], "x");
  ASSERT_TRUE(x.ok());
  x->pieces[0].offsets[0] = 3;
  s->indexes[1] = EncodeRankIndex(*x);
  Result<Manifest> back = Load(m, *s, {1}, false);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("do not hold the pieces"),
            std::string::npos);
  // An index of another attempt.
  x->pieces[0].offsets[0] = 2;
  x->attempt ^= 1;
  s->indexes[1] = EncodeRankIndex(*x);
  EXPECT_FALSE(Load(m, *s, {1}, false).ok());
}

TEST(IndexTest, ChunksThatDoNotHoldTheBoxAreRefused) {
  Manifest m = FourRanks();
  m.entries[0].pieces[1].chunks[0].length = 8;  // 32-byte box, 8 bytes
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  Result<Manifest> part = Load(m, *s, {1}, false);
  ASSERT_FALSE(part.ok());
  EXPECT_NE(part.status().message().find("the box needs"), std::string::npos);
  EXPECT_FALSE(Load(m, *s, {0, 1, 2, 3}, true).ok());
}

// The directory of FourRanks with `edit` applied, encoded.
std::string EditedDirectory(SplitMetadata& s,
                            const std::function<void(Directory&)>& edit) {
  Directory d = DecodeDirectory(s.directory_bytes, "dir").value();
  edit(d);
  s.directory_bytes = EncodeDirectory(d);
  return s.directory_bytes;
}

// `count` empty boxes (no rows, every column) of FourRanks' "w", all at
// row 0 and all rank 1's.
PieceRun EmptyRowsOfRank1(uint64_t count) {
  PieceRun run;
  run.first_rank = 1;
  run.count = count;
  run.offsets = {0, 0};
  run.lengths = {0, 4};
  run.delta = {0, 0};
  return run;
}

TEST(IndexTest, RunCountsBeyondTheIndexesBytesAreRefused) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  // 2^62 empty boxes of "w", all rank 1's: no element, so the coverage
  // count cannot see them; the indexes' bytes can.
  const PieceRun empty = EmptyRowsOfRank1(uint64_t{1} << 62);
  const std::string original = s->directory_bytes;
  const std::string bytes = EditedDirectory(
      *s, [&](Directory& d) { d.entries[0].runs.push_back(empty); });
  Result<Directory> d = DecodeDirectory(bytes, "dir");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(d.status().message().find(
                "entry \"w\": a run of 4611686018427387904 pieces promises "
                "more pieces than the indexes' recorded bytes can hold"),
            std::string::npos)
      << d.status().ToString();
  // An index recorded as larger than any index may be.
  s->directory_bytes = original;
  EditedDirectory(*s, [](Directory& d) {
    d.indexes[2].size = kMaxBinaryMetadataBytes + 1;
  });
  EXPECT_FALSE(DecodeDirectory(s->directory_bytes, "dir").ok());
}

TEST(IndexTest, PiecesPromisedButNotHeldAreCountedBeforeListed) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  // Three empty boxes more for rank 1: within what its index's bytes could
  // hold, so the directory passes; the index holds none of them.
  const PieceRun empty = EmptyRowsOfRank1(3);
  EditedDirectory(*s,
                  [&](Directory& d) { d.entries[0].runs.push_back(empty); });
  ASSERT_TRUE(DecodeDirectory(s->directory_bytes, "dir").ok());
  for (bool all : {false, true}) {
    Result<Manifest> back =
        all ? Load(m, *s, {0, 1, 2, 3}, true) : Load(m, *s, {1}, false);
    ASSERT_FALSE(back.ok());
    EXPECT_NE(back.status().message().find("do not hold the pieces"),
              std::string::npos)
        << back.status().ToString();
  }
}

TEST(IndexTest, HostNamesAreBounded) {
  Manifest m = FourRanks();
  m.hosts[3] = std::string(kMaxHostNameBytes + 1, 'h');
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  Result<Directory> d = DecodeDirectory(s->directory_bytes, "dir");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("host name of 256 bytes"),
            std::string::npos)
      << d.status().ToString();
  Directory built = s->directory;
  EXPECT_FALSE(CheckDirectory(built, "dir").ok());
}

// What a load of some ranks reads is checked across its pieces too: two
// chunks over the same bytes would put one chunk's bytes in another's place.
TEST(IndexTest, SomeRanksChunksMustNotOverlap) {
  Manifest m = FourRanks();
  // rng: rank 0's 100 bytes in a chunk of 64 and one of 36.
  std::vector<ChunkRecord>& rng = m.entries[2].pieces[0].chunks;
  ASSERT_EQ(rng.size(), 2u);
  rng[1].offset = rng[0].offset + 8;
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  for (bool all : {false, true}) {
    Result<Manifest> back =
        all ? Load(m, *s, {0, 1, 2, 3}, true) : Load(m, *s, {0}, false);
    ASSERT_FALSE(back.ok());
    EXPECT_EQ(back.status().code(), ErrorCode::kDataLoss);
    EXPECT_NE(back.status().message().find("overlap bytes"), std::string::npos)
        << back.status().ToString();
    EXPECT_NE(back.status().message().find("entry \"rng\""), std::string::npos);
  }
  // Chunk lengths that wrap 64 bits to the box's bytes, in objects
  // recorded as that large, read alone.
  m = FourRanks();
  m.objects[0].size = UINT64_MAX;
  m.entries[2].pieces[0].chunks[0].length = uint64_t{1} << 63;
  m.entries[2].pieces[0].chunks[1].length = (uint64_t{1} << 63) + 36;
  s = Split(m);
  ASSERT_TRUE(s.ok());
  Result<Manifest> back = Load(m, *s, {0}, false);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("chunks hold more"), std::string::npos)
      << back.status().ToString();
}

// A walk over `s`'s indexes of `ranks`, one at a time, rank r's from
// `other` where given (an index that does not go with the directory).
Status Walk(const Manifest& m, const SplitMetadata& s, std::vector<int> ranks,
            std::vector<Manifest>* out = nullptr,
            const SplitMetadata* other = nullptr, int other_rank = -1) {
  CKPT_ASSIGN_OR_RETURN(Directory d, DecodeDirectory(s.directory_bytes, "dir"));
  const Manifest header = Header(m, s);
  IndexWalk walk(header, d, "test");
  CKPT_RETURN_IF_ERROR(walk.CheckEntriesDisjoint());
  for (int r : ranks) {
    const SplitMetadata& from = r == other_rank ? *other : s;
    CKPT_ASSIGN_OR_RETURN(RankIndex x,
                          DecodeRankIndex(from.indexes[r], "index"));
    CKPT_ASSIGN_OR_RETURN(Manifest one, walk.Next(std::move(x)));
    if (out != nullptr) out->push_back(std::move(one));
  }
  return walk.Finish();
}

// Verify's walk holds one index at a time, and still sees every piece once
// and refuses what Assemble with every index refuses.
TEST(IndexTest, AWalkOneIndexAtATimeChecksWhatAllIndexesDo) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  std::vector<Manifest> ones;
  const Status walked = Walk(m, *s, {0, 1, 2, 3}, &ones);
  ASSERT_TRUE(walked.ok()) << walked.ToString();
  for (size_t ei = 0; ei < m.entries.size(); ++ei) {
    size_t pieces = 0;
    uint64_t bytes = 0;
    for (const Manifest& one : ones) {
      EXPECT_EQ(one.pieces, Manifest::Pieces::kSome);
      for (const PieceRecord& p : one.entries[ei].pieces) {
        ++pieces;
        for (const ChunkRecord& c : p.chunks) bytes += c.length;
      }
    }
    uint64_t want = 0;
    for (const PieceRecord& p : m.entries[ei].pieces) {
      for (const ChunkRecord& c : p.chunks) want += c.length;
    }
    EXPECT_EQ(pieces, m.entries[ei].pieces.size()) << m.entries[ei].name;
    EXPECT_EQ(bytes, want) << m.entries[ei].name;
  }
  auto refused = [](const Status& st, const std::string& why) {
    EXPECT_EQ(st.code(), ErrorCode::kDataLoss) << st.ToString();
    EXPECT_NE(st.message().find(why), std::string::npos) << st.ToString();
  };
  refused(Walk(m, *s, {0, 1, 3}), "an index is missing");
  refused(Walk(m, *s, {0, 1, 2, 3, 1}), "an index is given twice");
  // Rank 1's index with another checksum in a chunk: its boxes are the
  // directory's, its bytes are not what the directory sums.
  Manifest changed = FourRanks();
  changed.entries[0].pieces[1].chunks[0].checksum.low ^= 1;
  Result<SplitMetadata> s2 = Split(changed);
  ASSERT_TRUE(s2.ok());
  refused(Walk(m, *s, {0, 1, 2, 3}, nullptr, &*s2, 1),
          "its pieces are not those the directory sums");
  // Rank 1's chunk over rank 0's bytes of one object: each index alone is
  // fine, together they overlap.
  Manifest shared = FourRanks();
  ChunkRecord& theirs = shared.entries[0].pieces[1].chunks[0];
  theirs.object = 0;
  theirs.offset = shared.entries[0].pieces[0].chunks[0].offset;
  s2 = Split(shared);
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE(Load(shared, *s2, {1}, false).ok());
  refused(Walk(shared, *s2, {0, 1, 2, 3}), "overlap bytes");
  refused(Load(shared, *s2, {0, 1, 2, 3}, true).status(), "overlap bytes");
  // Rank 1's box of "w" over rank 0's: the directory's count still adds
  // up, the boxes do not.
  Manifest stacked = FourRanks();
  stacked.entries[0].pieces[1].offsets = {0, 0};
  s2 = Split(stacked);
  ASSERT_TRUE(s2.ok());
  refused(Walk(stacked, *s2, {0, 1, 2, 3}), "overlaps");
  refused(Load(stacked, *s2, {0, 1, 2, 3}, true).status(), "overlaps");
}

TEST(IndexTest, CommitRecordRoundTripsAndNamesItsDirectory) {
  const Manifest m = FourRanks();
  Result<SplitMetadata> s = Split(m);
  ASSERT_TRUE(s.ok());
  Manifest h = Header(m, *s);
  h.data_bytes = 5 * 4096;
  h.own_data_bytes = 4 * 4096;
  h.metrics = {{"loss", 0.5}};
  const std::string bytes = EncodeManifest(h);
  EXPECT_EQ(bytes.find("entries"), std::string::npos);
  Result<Manifest> back = DecodeManifest(bytes, "record");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version, kScalableManifestVersion);
  EXPECT_EQ(back->pieces, Manifest::Pieces::kNone);
  EXPECT_EQ(back->directory.key, DirectoryKey(9, kAttempt));
  EXPECT_EQ(back->directory.checksum, Xxh3_128(s->directory_bytes));
  EXPECT_EQ(back->data_bytes, 5u * 4096);
  EXPECT_EQ(back->parent, 7);
  EXPECT_EQ(back->metrics.at("loss"), 0.5);
  // A record naming another directory is not a checkpoint.
  h.directory.key = DirectoryKey(9, "fedcba9876543210");
  EXPECT_FALSE(DecodeManifest(EncodeManifest(h), "record").ok());
}

TEST(IndexTest, IntegersHaveOneSpelling) {
  ByteWriter w;
  w.Var(300);
  w.SignedVar(-5);
  w.Var(UINT64_MAX);
  ByteReader r(w.bytes());
  EXPECT_EQ(r.Var(), 300u);
  EXPECT_EQ(r.SignedVar(), -5);
  EXPECT_EQ(r.Var(), UINT64_MAX);
  EXPECT_TRUE(r.ok() && r.done());
  const std::string redundant("\x81\x00", 2), overflow(10, '\xff');
  ByteReader a(redundant), b(overflow);
  a.Var();
  b.Var();
  EXPECT_FALSE(a.ok());
  EXPECT_FALSE(b.ok());
}

}  // namespace
}  // namespace ckpt::format
