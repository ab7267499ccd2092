// The bytes of version 3's binary objects: the per-rank index and the
// directory (docs/format.md section 8). Every object is
//
//   magic (8 bytes) | body length (u64 LE) | xxh3-128 of the body | body
//
// and every count is checked against the bytes left before it sizes a loop
// or an allocation.
#include "format/index.h"

#include <cstring>

#include "format/binary.h"
#include "format/constants.h"
#include "format/layout.h"
#include "util/names.h"

namespace ckpt::format {

namespace {

// The smallest encodings of a record, for ByteReader::Room.
constexpr uint64_t kMinObjectBytes = 1 + 1 + 8 + 1;
constexpr uint64_t kMinPieceBytes = 1 + 1 + 1;
constexpr uint64_t kMinChunkBytes = 1 + 1 + 1 + 16;
constexpr uint64_t kMinRunBytes = 3;
constexpr uint64_t kMinEntryBytes = 1 + 1 + 1;
constexpr size_t kMaxDims = 64;

uint8_t KindCode(EntryKind k) {
  switch (k) {
    case EntryKind::kTensor:
      return 0;
    case EntryKind::kBlob:
      return 1;
    case EntryKind::kMetadata:
      return 2;
  }
  return 0;
}

// A writer whose first kBinaryHeaderBytes are left for Frame, so the body
// is written once and never copied (an index can be tens of megabytes).
ByteWriter Framable(size_t body_bytes) {
  ByteWriter w;
  w.Reserve(kBinaryHeaderBytes + body_bytes);
  w.bytes().resize(kBinaryHeaderBytes);
  return w;
}

// Fills in the header of a Framable writer's bytes and returns them.
std::string Frame(std::string_view magic, ByteWriter& w) {
  std::string& out = w.bytes();
  const std::string_view body =
      std::string_view(out).substr(kBinaryHeaderBytes);
  ByteWriter head;
  head.bytes().append(magic);
  head.U64(body.size());
  head.Sum(Xxh3_128(body));
  out.replace(0, kBinaryHeaderBytes, head.bytes());
  return std::move(out);
}

// The body of a framed object, once magic, length and checksum hold.
Result<std::string_view> Unframe(std::string_view bytes, std::string_view magic,
                                 const std::string& what) {
  if (bytes.size() < kBinaryHeaderBytes ||
      bytes.substr(0, magic.size()) != magic) {
    return DataLossError(what + ": not a ckpt " +
                         (magic == kIndexMagic ? "index" : "directory") +
                         " object (wrong magic or truncated)");
  }
  ByteReader head(bytes.substr(8, kBinaryHeaderBytes - 8));
  const uint64_t length = head.U64();
  const Checksum128 sum = head.Sum();
  if (length != bytes.size() - kBinaryHeaderBytes) {
    return DataLossError(what + ": records a body of " +
                         std::to_string(length) + " bytes but holds " +
                         std::to_string(bytes.size() - kBinaryHeaderBytes) +
                         " (truncated or extended)");
  }
  std::string_view body = bytes.substr(kBinaryHeaderBytes);
  if (Xxh3_128(body) != sum) {
    return DataLossError(what + ": checksum mismatch (the object is damaged)");
  }
  return body;
}

void PutObject(ByteWriter& w, const DataObjectId& o) {
  w.Var(static_cast<uint64_t>(o.step));
  w.Var(static_cast<uint64_t>(o.rank));
  w.U64(o.attempt);
  w.Var(o.size);
}

DataObjectId GetObject(ByteReader& r) {
  DataObjectId o;
  o.step = static_cast<int64_t>(r.VarMax(kMaxStep, "object step"));
  o.rank = static_cast<int32_t>(r.VarMax(kMaxWorldSize - 1, "object rank"));
  o.attempt = r.U64();
  o.size = r.Var();
  return o;
}

void PutInts(ByteWriter& w, const std::vector<int64_t>& v) {
  for (int64_t x : v) w.Var(static_cast<uint64_t>(x));
}

void GetInts(ByteReader& r, size_t n, std::vector<int64_t>& out) {
  out.resize(n);
  for (int64_t& x : out) {
    x = static_cast<int64_t>(r.VarMax(INT64_MAX, "box coordinate"));
  }
}

// Reads `n` records of at least `min_bytes`, calling `one` for each; false
// once the reader has failed. Reserves room for the n records in `into`
// once the bytes are known to hold them (growing by doubling could hold
// twice as much).
template <typename T, typename F>
bool Each(ByteReader& r, uint64_t n, uint64_t min_bytes, std::vector<T>& into,
          F one) {
  if (!r.Room(n, min_bytes)) return false;
  into.reserve(into.size() + n);
  for (uint64_t i = 0; i < n && r.ok(); ++i) one(i);
  return r.ok();
}

}  // namespace

std::string DataObjectId::Key() const {
  // Written by hand: a directory names one object per rank, and a loading
  // rank makes every key (snprintf would be most of its decode time).
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key = "step-000000000000/r00000-0000000000000000";
  int64_t s = step;
  for (int i = 16; i >= 5 && s > 0; --i, s /= 10) key[i] = '0' + s % 10;
  int32_t r = rank;
  for (int i = 23; i >= 19 && r > 0; --i, r /= 10) key[i] = '0' + r % 10;
  for (int i = 0; i < 16; ++i)
    key[25 + i] = kHex[(attempt >> (60 - 4 * i)) & 15];
  key += kDataSuffix;
  return key;
}

bool ParseAttempt(std::string_view attempt, uint64_t* out) {
  if (attempt.size() != static_cast<size_t>(kAttemptHexDigits)) return false;
  uint64_t v = 0;
  for (char c : attempt) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

bool ParseDataObjectId(std::string_view key, DataObjectId* out) {
  int64_t step;
  int rank;
  std::string attempt;
  uint64_t a;
  if (!ParseDataObjectKey(key, &step, &rank, &attempt) ||
      !ParseAttempt(attempt, &a)) {
    return false;
  }
  out->step = step;
  out->rank = rank;
  out->attempt = a;
  return true;
}

std::string EncodeRankIndex(const RankIndex& index) {
  size_t estimate = 64 + 32 * index.objects.size();
  for (const IndexPiece& p : index.pieces) {
    estimate += 16 + 20 * p.offsets.size() + 40 * p.chunks.size();
  }
  ByteWriter w = Framable(estimate);
  w.Var(static_cast<uint64_t>(index.step));
  w.Var(static_cast<uint64_t>(index.rank));
  w.Var(static_cast<uint64_t>(index.world_size));
  w.U64(index.attempt);
  w.Var(index.objects.size());
  for (const DataObjectId& o : index.objects) PutObject(w, o);
  bool compressed = false;
  for (const IndexPiece& p : index.pieces) {
    for (const ChunkRecord& c : p.chunks) compressed |= c.compressed();
  }
  w.Var(index.pieces.size());
  for (const IndexPiece& p : index.pieces) {
    w.Var(p.entry);
    w.Var(p.offsets.size());
    PutInts(w, p.offsets);
    PutInts(w, p.lengths);
    w.Var(p.chunks.size());
    for (const ChunkRecord& c : p.chunks) {
      w.Var(c.object);
      w.Var(c.offset);
      w.Var(c.length);
      w.Sum(c.checksum);
      if (!compressed) continue;
      w.U8(static_cast<uint8_t>(c.codec()));
      if (!c.compressed()) continue;
      w.Var(c.stored_length());
      w.U64(c.stored_checksum);
    }
  }
  return Frame(compressed ? kCompressedIndexMagic : kIndexMagic, w);
}

Result<RankIndex> DecodeRankIndex(std::string_view bytes,
                                  std::string_view what) {
  const std::string w(what);
  // Encoding 2 (chunks with codecs) or 1.
  const bool codecs =
      bytes.substr(0, kCompressedIndexMagic.size()) == kCompressedIndexMagic;
  CKPT_ASSIGN_OR_RETURN(
      std::string_view body,
      Unframe(bytes, codecs ? kCompressedIndexMagic : kIndexMagic, w));
  ByteReader r(body);
  RankIndex x;
  x.step = static_cast<int64_t>(r.VarMax(kMaxStep, "step"));
  x.rank = static_cast<int32_t>(r.VarMax(kMaxWorldSize - 1, "rank"));
  x.world_size = static_cast<int32_t>(r.VarMax(kMaxWorldSize, "world size"));
  x.attempt = r.U64();
  if (r.ok() && x.rank >= x.world_size) r.Fail("rank outside the world");
  Each(r, r.Var(), kMinObjectBytes, x.objects,
       [&](uint64_t) { x.objects.push_back(GetObject(r)); });
  Each(r, r.Var(), kMinPieceBytes, x.pieces, [&](uint64_t) {
    IndexPiece p;
    p.entry = static_cast<uint32_t>(r.VarMax(UINT32_MAX, "entry"));
    const uint64_t dims = r.VarMax(kMaxDims, "dimension count");
    GetInts(r, dims, p.offsets);
    GetInts(r, dims, p.lengths);
    Each(r, r.Var(), kMinChunkBytes + (codecs ? 1 : 0), p.chunks,
         [&](uint64_t) {
           ChunkRecord c;
           c.object = static_cast<uint32_t>(r.Var());
           if (r.ok() && c.object >= x.objects.size()) {
             r.Fail("chunk names object #" + std::to_string(c.object) + " of " +
                    std::to_string(x.objects.size()));
           }
           c.offset = r.Var();
           c.length = r.Var();
           c.checksum = r.Sum();
           if (codecs) {
             const uint8_t code = r.U8();
             const std::optional<codec::Codec> known =
                 codec::CodecFromByte(code);
             if (r.ok() && !known) {
               r.Fail("chunk has unknown codec " + std::to_string(code));
             } else if (known && *known != codec::Codec::kRaw) {
               const uint64_t stored = r.Var();
               const uint64_t sum = r.U64();
               if (r.ok() && stored > ChunkRecord::kMaxStoredLength) {
                 r.Fail("a compressed chunk of " + std::to_string(stored) +
                        " stored bytes");
               }
               c.SetCompressed(*known, stored, sum);
             }
           }
           p.chunks.push_back(c);
         });
    x.pieces.push_back(std::move(p));
  });
  if (r.ok() && !r.done()) r.Fail("trailing bytes");
  // One spelling per value: encoding 2 only for an index that needs it.
  if (r.ok() && codecs) {
    bool compressed = false;
    for (const IndexPiece& p : x.pieces) {
      for (const ChunkRecord& c : p.chunks) compressed |= c.compressed();
    }
    if (!compressed) r.Fail("encoding 2 without a compressed chunk");
  }
  if (!r.ok()) return DataLossError(w + ": " + r.error());
  return x;
}

std::string EncodeDirectory(const Directory& dir) {
  ByteWriter w = Framable(64 + 48 * dir.world_size);
  w.Var(static_cast<uint64_t>(dir.step));
  w.Var(static_cast<uint64_t>(dir.world_size));
  w.U64(dir.attempt);
  // Host names repeat (8 ranks a node): a table, then an index per rank.
  std::vector<std::string_view> names;
  std::vector<uint64_t> which;
  {
    std::unordered_map<std::string_view, uint64_t> seen;
    for (const std::string& h : dir.hosts) {
      auto [it, fresh] = seen.emplace(h, names.size());
      if (fresh) names.push_back(h);
      which.push_back(it->second);
    }
  }
  w.Var(names.size());
  for (std::string_view n : names) w.Str(n);
  for (uint64_t i : which) w.Var(i);
  for (const IndexRef& x : dir.indexes) {
    w.Var(x.size);
    w.Sum(x.checksum);
  }
  w.Var(dir.objects.size());
  for (const DataObjectId& o : dir.objects) PutObject(w, o);
  w.Var(dir.entries.size());
  for (const DirectoryEntry& e : dir.entries) {
    w.Str(e.name);
    w.U8(KindCode(e.kind));
    w.Var(static_cast<uint64_t>(e.owner + 1));
    if (e.kind == EntryKind::kMetadata) {
      w.Str(e.json);
      continue;
    }
    w.Str(DTypeName(e.dtype));
    w.Var(e.shape.size());
    PutInts(w, e.shape);
    w.Var(e.runs.size());
    for (const PieceRun& run : e.runs) {
      w.Var(static_cast<uint64_t>(run.first_rank));
      w.SignedVar(run.rank_stride);
      w.Var(run.count);
      PutInts(w, run.offsets);
      PutInts(w, run.lengths);
      for (int64_t d : run.delta) w.SignedVar(d);
    }
    w.Sum(e.pieces_sum);
  }
  return Frame(kDirectoryMagic, w);
}

Status CheckDirectory(const Directory& dir, const std::string& what);

Result<Directory> DecodeDirectory(std::string_view bytes,
                                  std::string_view what) {
  const std::string w(what);
  CKPT_ASSIGN_OR_RETURN(std::string_view body,
                        Unframe(bytes, kDirectoryMagic, w));
  ByteReader r(body);
  Directory d;
  d.step = static_cast<int64_t>(r.VarMax(kMaxStep, "step"));
  d.world_size = static_cast<int32_t>(r.VarMax(kMaxWorldSize, "world size"));
  if (r.ok() && d.world_size < 1) r.Fail("world size 0");
  d.attempt = r.U64();
  std::vector<std::string_view> names;
  Each(r, r.Var(), 1, names, [&](uint64_t) {
    names.push_back(r.Str());
    if (r.ok() && names.back().size() > kMaxHostNameBytes) {
      r.Fail("host name of " + std::to_string(names.back().size()) +
             " bytes is longer than " + std::to_string(kMaxHostNameBytes));
    }
  });
  // One spelling: the table lists each name once, in the order ranks first
  // use it, and every name is used.
  size_t used = 0;
  Each(r, d.world_size, 1, d.hosts, [&](uint64_t) {
    const uint64_t i = r.Var();
    if (r.ok() && (i >= names.size() || i > used)) {
      r.Fail("host index out of order or range");
    }
    if (r.ok() && i == used) ++used;
    if (r.ok()) d.hosts.emplace_back(names[i]);
  });
  if (r.ok() && used != names.size()) r.Fail("unused host name");
  if (r.ok()) {
    std::unordered_map<std::string_view, int> seen;
    for (std::string_view n : names) {
      if (seen[n]++) r.Fail("host name listed twice");
    }
  }
  Each(r, d.world_size, 17, d.indexes, [&](uint64_t) {
    IndexRef x;
    x.size = r.Var();
    x.checksum = r.Sum();
    d.indexes.push_back(x);
  });
  Each(r, r.Var(), kMinObjectBytes, d.objects,
       [&](uint64_t) { d.objects.push_back(GetObject(r)); });
  Each(r, r.Var(), kMinEntryBytes, d.entries, [&](uint64_t) {
    DirectoryEntry e;
    e.name = std::string(r.Str());
    const uint8_t kind = r.U8();
    if (r.ok() && kind > 2)
      r.Fail("unknown entry kind " + std::to_string(kind));
    e.kind = kind == 0   ? EntryKind::kTensor
             : kind == 1 ? EntryKind::kBlob
                         : EntryKind::kMetadata;
    e.owner = static_cast<int32_t>(r.VarMax(kMaxWorldSize, "owner")) - 1;
    if (e.kind == EntryKind::kMetadata) {
      e.json = std::string(r.Str());
      d.entries.push_back(std::move(e));
      return;
    }
    const std::string_view dtype = r.Str();
    std::optional<DType> dt = ParseDType(dtype);
    if (r.ok() && !dt) r.Fail("unknown dtype " + Quote(dtype));
    if (dt) e.dtype = *dt;
    const uint64_t dims = r.VarMax(kMaxDims, "dimension count");
    GetInts(r, dims, e.shape);
    Each(r, r.Var(), kMinRunBytes, e.runs, [&](uint64_t) {
      PieceRun run;
      run.first_rank =
          static_cast<int32_t>(r.VarMax(kMaxWorldSize - 1, "run rank"));
      const int64_t stride = r.SignedVar();
      if (r.ok() && (stride < -kMaxWorldSize || stride > kMaxWorldSize)) {
        r.Fail("run rank stride out of range");
      }
      run.rank_stride = static_cast<int32_t>(stride);
      run.count = r.Var();
      if (r.ok() && run.count == 0) r.Fail("empty run");
      GetInts(r, dims, run.offsets);
      GetInts(r, dims, run.lengths);
      run.delta.resize(dims);
      for (int64_t& x : run.delta) x = r.SignedVar();
      e.runs.push_back(std::move(run));
    });
    e.pieces_sum = r.Sum();
    d.entries.push_back(std::move(e));
  });
  if (r.ok() && !r.done()) r.Fail("trailing bytes");
  if (!r.ok()) return DataLossError(w + ": " + r.error());
  CKPT_RETURN_IF_ERROR(CheckDirectory(d, w));
  return d;
}

}  // namespace ckpt::format
