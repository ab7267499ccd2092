#include "format/manifest.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "format/constants.h"
#include "format/layout.h"
#include "util/boxes.h"
#include "util/names.h"

namespace ckpt::format {

using nlohmann::json;

namespace {

// The index key of an entry: its name, and for a rank-local one its owner
// after a NUL (which no name contains).
std::string IndexKey(std::string_view name, int32_t owner) {
  std::string key(name);
  if (owner >= 0) {
    key += '\0';
    key += std::to_string(owner);
  }
  return key;
}

}  // namespace

void Manifest::Reindex() {
  entry_index.clear();
  for (size_t i = 0; i < entries.size(); ++i) {
    entry_index[IndexKey(entries[i].name, entries[i].owner)] = i;
  }
}

const EntryRecord* Manifest::FindLocal(std::string_view name,
                                       int32_t owner) const {
  if (entry_index.size() == entries.size()) {
    auto it = entry_index.find(IndexKey(name, owner));
    if (it != entry_index.end() && it->second < entries.size() &&
        entries[it->second].name == name &&
        entries[it->second].owner == owner) {
      return &entries[it->second];
    }
  }
  for (const EntryRecord& e : entries) {
    if (e.name == name && e.owner == owner) return &e;
  }
  return nullptr;
}

const EntryRecord* Manifest::Find(std::string_view name) const {
  return FindLocal(name, -1);
}

Checksum128 PieceHash(const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& lengths,
                      const std::vector<ChunkRecord>& chunks) {
  // Little-endian fixed-width fields: the same bytes on every host.
  std::string bytes;
  bytes.reserve(16 * offsets.size() + 16 * chunks.size());
  const auto put = [&bytes](uint64_t v) {
    for (int i = 0; i < 8; ++i)
      bytes.push_back(static_cast<char>(v >> (8 * i)));
  };
  for (size_t d = 0; d < offsets.size(); ++d) {
    put(static_cast<uint64_t>(offsets[d]));
    put(static_cast<uint64_t>(lengths[d]));
  }
  for (const ChunkRecord& c : chunks) {
    put(c.checksum.high);
    put(c.checksum.low);
  }
  return Xxh3_128(bytes);
}

Checksum128 AddSums(const Checksum128& a, const Checksum128& b) {
  Checksum128 out;
  out.low = a.low + b.low;
  out.high = a.high + b.high + (out.low < a.low ? 1 : 0);
  return out;
}

Checksum128 PiecesSum(const EntryRecord& e) {
  Checksum128 sum;
  for (const PieceRecord& p : e.pieces) {
    sum = AddSums(sum, PieceHash(p.offsets, p.lengths, p.chunks));
  }
  return sum;
}

uint64_t Manifest::TotalObjectBytes() const {
  // Version 3's commit record says, even before the directory is read.
  if (version == kScalableManifestVersion) return data_bytes;
  uint64_t total = 0;
  for (const ObjectRecord& o : objects) total += o.size;
  return total;
}

uint64_t Manifest::OwnObjectBytes() const {
  if (version == kScalableManifestVersion) return own_data_bytes;
  uint64_t total = 0;
  for (const ObjectRecord& o : objects) {
    if (StepOfKey(o.key) == step) total += o.size;
  }
  return total;
}

namespace {

// The optional `timing` field: ranks as compact [rank, write_ms, wait_ms].
void PutTiming(const Manifest& m, json& j) {
  if (!m.timing) return;
  const SaveTimingRecord& t = *m.timing;
  json ranks = json::array();
  for (const SaveTimingRecord::Rank& r : t.ranks) {
    ranks.push_back({r.rank, r.write_ms, r.wait_ms});
  }
  j["timing"] = {{"save_ms", t.save_ms},
                 {"commit_ms", t.commit_ms},
                 {"stall_ms", t.stall_ms},
                 {"async", t.async},
                 {"ranks", std::move(ranks)}};
}

json EncodeBody(const Manifest& m) {
  json j = json::object();
  j["format"] = kManifestMagic;
  j["version"] = m.version;
  j["job_id"] = m.job_id;
  j["step"] = m.step;
  j["epoch"] = m.epoch;
  j["created_unix_ms"] = m.created_unix_ms;
  j["attempt"] = m.attempt;
  j["world_size"] = m.world_size;
  j["chunk_size"] = m.chunk_size;
  if (m.version == kScalableManifestVersion) {
    // The commit record: everything else is in the directory and indexes.
    j["depends_on"] = m.depends_on;
    j["parent"] = m.parent;
    j["chain"] = m.chain;
    j["directory"] = {{"key", m.directory.key},
                      {"size", m.directory.size},
                      {"xxh3_128", m.directory.checksum.Hex()}};
    j["data_bytes"] = m.data_bytes;
    j["own_data_bytes"] = m.own_data_bytes;
    j["metadata"] = m.metadata;
    json metrics = json::object();
    for (const auto& [k, v] : m.metrics) metrics[k] = v;
    j["metrics"] = std::move(metrics);
    PutTiming(m, j);
    return j;
  }
  j["hosts"] = m.hosts;
  json objects = json::array();
  for (const ObjectRecord& o : m.objects) {
    objects.push_back({{"key", o.key}, {"size", o.size}, {"rank", o.rank}});
  }
  j["objects"] = std::move(objects);
  j["depends_on"] = m.depends_on;
  if (m.version >= kIncrementalManifestVersion) {
    j["parent"] = m.parent;
    j["chain"] = m.chain;
  }
  json entries = json::array();
  for (const EntryRecord& e : m.entries) {
    json je = {{"name", e.name}, {"kind", EntryKindName(e.kind)}};
    if (e.owner >= 0) je["owner"] = e.owner;
    if (e.kind == EntryKind::kMetadata) {
      je["json"] = json::parse(e.json, nullptr, false);
    } else {
      je["dtype"] = DTypeName(e.dtype);
      je["shape"] = e.shape;
      json pieces = json::array();
      for (const PieceRecord& p : e.pieces) {
        json chunks = json::array();
        for (const ChunkRecord& c : p.chunks) {
          // Compact rows: a large checkpoint has millions of chunks.
          if (c.compressed()) {
            chunks.push_back({c.object, c.offset, c.length, c.checksum.Hex(),
                              codec::CodecName(c.codec()), c.stored_length(),
                              Hex64(c.stored_checksum)});
          } else {
            chunks.push_back({c.object, c.offset, c.length, c.checksum.Hex()});
          }
        }
        pieces.push_back({{"offsets", p.offsets},
                          {"lengths", p.lengths},
                          {"rank", p.rank},
                          {"chunks", std::move(chunks)}});
      }
      je["pieces"] = std::move(pieces);
    }
    entries.push_back(std::move(je));
  }
  j["entries"] = std::move(entries);
  j["metadata"] = m.metadata;
  json metrics = json::object();
  for (const auto& [k, v] : m.metrics) metrics[k] = v;
  j["metrics"] = std::move(metrics);
  PutTiming(m, j);
  return j;
}

// A metadata entry's JSON sits three levels down in the manifest body
// (body, "entries", the entry), and ParseJsonStrict reads 64 levels.
constexpr int kMaxMetadataDepth = 64 - 3;

// Whether `s` can go into JSON: nlohmann::json::dump() throws on text that is
// not UTF-8, and EncodeManifest has no way to report an error.
bool IsUtf8(const std::string& s) {
  try {
    json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace

namespace {

Status Bad(const std::string& why) { return DataLossError(why); }

// A chunk and the piece it belongs to, to find overlaps and name them.
struct ChunkSpan {
  uint64_t offset;
  uint64_t length;
  const EntryRecord* entry;
  const PieceRecord* piece;
};

std::string SpanOwner(const ChunkSpan& s) {
  return "entry " + Quote(s.entry->name) +
         (s.entry->owner >= 0 ? " of rank " + std::to_string(s.entry->owner)
                              : "") +
         " piece of rank " + std::to_string(s.piece->rank);
}

// Version, step, world size and hosts, chunk size, and that every string
// of the header can go into JSON.
Status CheckHeader(const Manifest& m) {
  if (m.version != kManifestVersion &&
      m.version != kIncrementalManifestVersion &&
      m.version != kScalableManifestVersion) {
    return Bad("unsupported manifest version");
  }
  if (m.step < 0) return Bad("negative step");
  if (m.world_size < 1 || m.world_size > kMaxWorldSize) {
    return Bad("world_size out of range");
  }
  if (m.step > kMaxStep) return Bad("step out of range");
  // A version 3 commit record alone has no hosts: the directory does.
  if ((m.version != kScalableManifestVersion || !m.hosts.empty()) &&
      m.hosts.size() != static_cast<size_t>(m.world_size)) {
    return Bad("hosts lists " + std::to_string(m.hosts.size()) +
               " names for world_size " + std::to_string(m.world_size));
  }
  if (m.chunk_size == 0) return Bad("chunk_size is 0");
  if (!IsUtf8(m.job_id)) return Bad("job_id is not UTF-8");
  if (!IsUtf8(m.attempt)) return Bad("attempt is not UTF-8");
  for (const std::string& h : m.hosts) {
    if (!IsUtf8(h)) return Bad("host name " + Quote(h) + " is not UTF-8");
  }
  for (const auto& [k, v] : m.metadata) {
    if (!IsUtf8(k) || !IsUtf8(v)) {
      return Bad("metadata " + Quote(k) + " is not UTF-8");
    }
  }
  return Status();
}

// Keys valid and listed once, ranks inside the world.
Status CheckObjects(const Manifest& m) {
  std::set<std::string_view> keys;
  for (const ObjectRecord& o : m.objects) {
    if (Status s = ValidateKey(o.key); !s.ok())
      return Bad("object " + s.message());
    if (!keys.insert(o.key).second)
      return Bad("object " + Quote(o.key) + " listed twice");
    if (o.rank < 0 || o.rank >= m.world_size) {
      return Bad("object " + Quote(o.key) + " rank out of range");
    }
  }
  return Status();
}

// depends_on names earlier steps, each once, at most kMaxDependsOn of them;
// parent and chain fit the version. Fills `deps`.
Status CheckDependsOn(const Manifest& m, std::set<int64_t>& deps) {
  for (int64_t d : m.depends_on) {
    if (d < 0 || d >= m.step) return Bad("depends_on step out of range");
    if (!deps.insert(d).second) return Bad("depends_on lists a step twice");
  }
  if (deps.size() > static_cast<size_t>(kMaxDependsOn)) {
    return Bad("depends_on lists more than " + std::to_string(kMaxDependsOn) +
               " steps");
  }
  if (m.version == kManifestVersion && (m.parent != -1 || m.chain != 0)) {
    return Bad("a version 1 manifest has no parent or chain");
  }
  if (m.version == kIncrementalManifestVersion &&
      (m.parent < 0 || m.parent >= m.step || m.chain < 1 ||
       m.chain > kMaxDependsOn)) {
    return Bad("parent or chain out of range");
  }
  // Version 3 writes both always: -1 and 0 for a full save.
  if (m.version == kScalableManifestVersion &&
      !(m.parent == -1 && m.chain == 0) &&
      (m.parent < 0 || m.parent >= m.step || m.chain < 1 ||
       m.chain > kMaxDependsOn)) {
    return Bad("parent or chain out of range");
  }
  return Status();
}

// An object lies in this checkpoint's own step directory or in one of the
// steps it depends on, so dependency-aware retention keeps every byte a
// chunk points at.
Status CheckObjectSteps(const Manifest& m, const std::set<int64_t>& deps) {
  for (const ObjectRecord& o : m.objects) {
    const int64_t in = StepOfKey(o.key);
    if (in != m.step && !deps.count(in)) {
      return Bad("object " + Quote(o.key) +
                 " lies outside this step and the steps it depends on");
    }
  }
  return Status();
}

Status CheckMetrics(const Manifest& m) {
  for (const auto& [k, v] : m.metrics) {
    if (!IsUtf8(k)) return Bad("metric " + Quote(k) + " is not UTF-8");
    if (!std::isfinite(v)) return Bad("metric " + Quote(k) + " is not finite");
  }
  return Status();
}

// A metadata entry has no pieces, and its JSON is an object that
// DecodeManifest can read back.
Status CheckMetadataEntry(const EntryRecord& e, const std::string& where) {
  if (!e.pieces.empty()) return Bad(where + ": metadata with pieces");
  return CheckMetadataJson(e.json, where);
}

}  // namespace

Status CheckMetadataJson(const std::string& text, const std::string& where) {
  // EncodeManifest embeds the JSON as it is: text that does not parse, or
  // nests deeper than DecodeManifest reads, would make the whole manifest
  // unreadable.
  int depth = 0;
  const json j = json::parse(
      text,
      [&depth](int d, json::parse_event_t, json&) {
        depth = std::max(depth, d);
        return true;
      },
      /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Bad(where + ": metadata is not a JSON object");
  }
  if (depth > kMaxMetadataDepth) {
    return Bad(where + ": metadata nests deeper than " +
               std::to_string(kMaxMetadataDepth) + " levels");
  }
  return Status();
}

namespace {

// A piece's box lies inside the shape, its rank inside the world, and its
// chunks inside their objects, holding exactly the box's bytes. Adds the box's
// elements to `covered`.
Status CheckPiece(const Manifest& m, const EntryRecord& e, const PieceRecord& p,
                  const std::string& pw, uint64_t& covered) {
  if (p.offsets.size() != e.shape.size() ||
      p.lengths.size() != e.shape.size()) {
    return Bad(pw + ": box rank differs from the shape's");
  }
  for (size_t d = 0; d < e.shape.size(); ++d) {
    if (p.offsets[d] < 0 || p.lengths[d] < 0 || p.offsets[d] > e.shape[d] ||
        p.lengths[d] > e.shape[d] - p.offsets[d]) {
      return Bad(pw + ": box lies outside the shape");
    }
  }
  if (p.rank < 0 || p.rank >= m.world_size)
    return Bad(pw + ": rank out of range");
  TensorView box{e.dtype, p.lengths, nullptr, false};
  // Inside the shape, so neither can overflow.
  const uint64_t elements = *box.NumElements();
  const uint64_t bytes = *box.ByteSize();
  covered += elements;
  uint64_t chunk_bytes = 0;
  for (const ChunkRecord& c : p.chunks) {
    if (c.object >= m.objects.size())
      return Bad(pw + ": chunk names no object");
    const ObjectRecord& o = m.objects[c.object];
    if (c.length == 0) return Bad(pw + ": empty chunk");
    // A compressed chunk is smaller than its bytes (one that would not
    // shrink is stored raw), and its codec is one this reader knows.
    if (c.compressed() &&
        (c.stored_length() == 0 || c.stored_length() >= c.length ||
         c.length > kMaxCompressedChunk ||
         static_cast<uint8_t>(c.codec()) > codec::kLastCodec)) {
      return Bad(pw + ": compressed chunk of " + std::to_string(c.length) +
                 " bytes stored in " + std::to_string(c.stored_length()) +
                 " (codec " + std::string(codec::CodecName(c.codec())) + ")");
    }
    const uint64_t stored = c.StoredLength();
    if (c.offset > o.size || stored > o.size - c.offset) {
      return Bad(pw + ": chunk [" + std::to_string(c.offset) + ", +" +
                 std::to_string(stored) + ") runs past the end of " +
                 Quote(o.key));
    }
    // Compared before adding: lengths that wrap 64 bits around to the box's
    // byte count would otherwise pass.
    if (c.length > bytes - chunk_bytes) {
      return Bad(pw + ": chunks hold more than the " + std::to_string(bytes) +
                 " bytes the box needs");
    }
    chunk_bytes += c.length;
  }
  if (chunk_bytes != bytes) {
    return Bad(pw + ": chunks hold " + std::to_string(chunk_bytes) +
               " bytes, the box needs " + std::to_string(bytes));
  }
  return Status();
}

// A tensor or blob: a known shape whose byte count fits, and pieces that tile
// it (each checked by CheckPiece, none overlapping another, together covering
// every element).
Status CheckDataEntry(const Manifest& m, const EntryRecord& e,
                      const std::string& where) {
  if (e.kind == EntryKind::kBlob &&
      (e.dtype != DType::kU8 || e.shape.size() != 1)) {
    return Bad(where + ": a blob must be U8 with one dimension");
  }
  TensorView shape_only{e.dtype, e.shape, nullptr, false};
  Result<uint64_t> total = shape_only.NumElements();
  if (!total.ok() || !shape_only.ByteSize().ok()) {
    return Bad(where + ": shape byte count overflows");
  }
  uint64_t covered = 0;
  for (size_t pi = 0; pi < e.pieces.size(); ++pi) {
    CKPT_RETURN_IF_ERROR(CheckPiece(
        m, e, e.pieces[pi], where + " piece #" + std::to_string(pi), covered));
  }
  CKPT_RETURN_IF_ERROR(CheckPiecesDisjoint(e, where));
  if (covered != *total) {
    return Bad(where + ": pieces cover " + std::to_string(covered) + " of " +
               std::to_string(*total) + " elements");
  }
  return Status();
}

// Every entry: a valid name, unique per owner, an owner inside the world,
// and a valid body for its kind.
Status CheckEntries(const Manifest& m) {
  std::set<std::pair<std::string_view, int32_t>> names;
  for (const EntryRecord& e : m.entries) {
    const std::string where =
        "entry " + Quote(e.name) +
        (e.owner >= 0 ? " of rank " + std::to_string(e.owner) : "");
    if (Status s = ValidateEntryName(e.name); !s.ok()) return Bad(s.message());
    if (e.owner < -1 || e.owner >= m.world_size) {
      return Bad(where + ": owner rank out of range");
    }
    if (!names.insert({e.name, e.owner}).second) {
      return Bad("duplicate " + where);
    }
    CKPT_RETURN_IF_ERROR(e.kind == EntryKind::kMetadata
                             ? CheckMetadataEntry(e, where)
                             : CheckDataEntry(m, e, where));
  }
  return Status();
}

}  // namespace

Status CheckPieceAlone(const Manifest& m, const EntryRecord& e,
                       const PieceRecord& p, const std::string& where) {
  uint64_t covered = 0;
  return CheckPiece(m, e, p, where, covered);
}

Status CheckPiecesDisjoint(const EntryRecord& e, const std::string& where) {
  std::vector<BoxRef> boxes;
  boxes.reserve(e.pieces.size());
  for (const PieceRecord& p : e.pieces) {
    boxes.push_back({&p.offsets, &p.lengths});
  }
  if (auto pair = FindOverlap(boxes)) {
    const PieceRecord& a = e.pieces[pair->first];
    const PieceRecord& b = e.pieces[pair->second];
    return Bad(where + " piece #" + std::to_string(pair->second) + " (rank " +
               std::to_string(b.rank) + ") overlaps piece #" +
               std::to_string(pair->first) + " (rank " +
               std::to_string(a.rank) + ")");
  }
  return Status();
}

Status CheckChunksDisjoint(const Manifest& m) {
  // Placed by object (a counting sort), each object's chunks in the order
  // the pieces list them: a save writes an object's chunks in that order,
  // so checking each object's run is linear and a sort is left for the
  // rest. One vector of spans: a manifest has millions of chunks.
  std::vector<size_t> start(m.objects.size() + 1, 0);
  for (const EntryRecord& e : m.entries) {
    for (const PieceRecord& p : e.pieces) {
      for (const ChunkRecord& c : p.chunks) {
        if (c.object >= m.objects.size()) return Bad("chunk names no object");
        ++start[c.object + 1];
      }
    }
  }
  for (size_t o = 1; o < start.size(); ++o) start[o] += start[o - 1];
  std::vector<ChunkSpan> spans(start.back());
  std::vector<size_t> next(start.begin(), start.end() - 1);
  for (const EntryRecord& e : m.entries) {
    for (const PieceRecord& p : e.pieces) {
      for (const ChunkRecord& c : p.chunks) {
        spans[next[c.object]++] = {c.offset, c.StoredLength(), &e, &p};
      }
    }
  }
  const auto before = [](const ChunkSpan& a, const ChunkSpan& b) {
    return a.offset < b.offset;
  };
  for (size_t o = 0; o < m.objects.size(); ++o) {
    const auto first = spans.begin() + start[o];
    const auto last = spans.begin() + start[o + 1];
    if (!std::is_sorted(first, last, before)) std::sort(first, last, before);
    for (auto it = first; it != last && it + 1 != last; ++it) {
      const ChunkSpan& a = *it;
      const ChunkSpan& b = *(it + 1);
      // Inside their object (CheckPiece), so the end cannot wrap.
      if (a.offset + a.length > b.offset) {
        return Bad(
            "object " + Quote(m.objects[o].key) + ": bytes [" +
            std::to_string(b.offset) + ", " +
            std::to_string(b.offset + b.length) + ") of " + SpanOwner(b) +
            " overlap bytes [" + std::to_string(a.offset) + ", " +
            std::to_string(a.offset + a.length) + ") of " + SpanOwner(a));
      }
    }
  }
  return Status();
}

// The checks run in this order, so a manifest with several faults is
// reported by the first.
Status ValidateManifest(const Manifest& m) {
  CKPT_RETURN_IF_ERROR(CheckHeader(m));
  CKPT_RETURN_IF_ERROR(CheckObjects(m));
  std::set<int64_t> deps;
  CKPT_RETURN_IF_ERROR(CheckDependsOn(m, deps));
  CKPT_RETURN_IF_ERROR(CheckObjectSteps(m, deps));
  CKPT_RETURN_IF_ERROR(CheckMetrics(m));
  CKPT_RETURN_IF_ERROR(CheckEntries(m));
  return CheckChunksDisjoint(m);
}

std::string EncodeManifest(const Manifest& manifest) {
  // ValidateManifest rejects text that is not UTF-8; should an unvalidated
  // manifest hold some, it is replaced rather than thrown about (no
  // exception leaves ckpt, and the checksum covers what is written).
  const std::string body = EncodeBody(manifest).dump(
      -1, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
  std::string out;
  out.reserve(body.size() + 64);
  out += kEnvelopePrefix;
  out += Xxh3_128(body).Hex();
  out += kEnvelopeMiddle;
  out += body;
  out += kEnvelopeSuffix;
  return out;
}

}  // namespace ckpt::format
