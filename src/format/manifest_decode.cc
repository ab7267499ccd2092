// Reading a manifest: the envelope, the JSON body, and the records in it.
#include <deque>
#include <optional>
#include <span>

#include "format/constants.h"
#include "format/json.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "util/names.h"

namespace ckpt::format {

using nlohmann::json;

namespace {

// Field readers that turn a missing or mistyped field into DataLoss.
class Reader {
 public:
  explicit Reader(std::string what) : what_(std::move(what)) {}

  Status Fail(const std::string& why) const {
    return DataLossError(what_ + ": " + why);
  }

  Result<const json*> Field(const json& obj, const char* name,
                            const std::string& where) const {
    auto it = obj.find(name);
    if (it == obj.end()) {
      return Fail(where + " has no field \"" + std::string(name) + "\"");
    }
    return &*it;
  }

  Result<int64_t> Int(const json& obj, const char* name,
                      const std::string& where) const {
    CKPT_ASSIGN_OR_RETURN(const json* v, Field(obj, name, where));
    if (!v->is_number_integer()) {
      return Fail(where + " field \"" + name + "\" is not an integer");
    }
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Fail(where + " field \"" + name + "\" is out of range");
    }
    return v->get<int64_t>();
  }

  Result<uint64_t> UInt(const json& v, const std::string& where) const {
    if (!v.is_number_unsigned()) {
      return Fail(where + " is not a non-negative integer");
    }
    return v.get<uint64_t>();
  }

  Result<std::string> Str(const json& obj, const char* name,
                          const std::string& where) const {
    CKPT_ASSIGN_OR_RETURN(const json* v, Field(obj, name, where));
    if (!v->is_string()) {
      return Fail(where + " field \"" + name + "\" is not a string");
    }
    return v->get<std::string>();
  }

  Result<std::vector<int64_t>> IntArray(const json& obj, const char* name,
                                        const std::string& where) const {
    CKPT_ASSIGN_OR_RETURN(const json* v, Field(obj, name, where));
    if (!v->is_array() || v->size() > 64) {
      return Fail(where + " field \"" + name + "\" is not a short array");
    }
    std::vector<int64_t> out;
    for (const json& x : *v) {
      if (!x.is_number_unsigned() ||
          x.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return Fail(where + " field \"" + name +
                    "\" holds something other than a non-negative integer");
      }
      out.push_back(x.get<int64_t>());
    }
    return out;
  }

 private:
  std::string what_;
};

// A piece FoldPiece left in the tree: something in it is wrong, and this
// says what, in the order of its fields.
Result<PieceRecord> ReadPiece(const Manifest& m, const json& jp,
                              const std::string& pw, const Reader& r) {
  if (!jp.is_object()) return r.Fail(pw + " is not an object");
  PieceRecord p;
  CKPT_ASSIGN_OR_RETURN(p.offsets, r.IntArray(jp, "offsets", pw));
  CKPT_ASSIGN_OR_RETURN(p.lengths, r.IntArray(jp, "lengths", pw));
  CKPT_ASSIGN_OR_RETURN(int64_t rank, r.Int(jp, "rank", pw));
  if (rank < 0 || rank >= m.world_size)
    return r.Fail(pw + " rank out of range");
  p.rank = static_cast<int32_t>(rank);
  CKPT_ASSIGN_OR_RETURN(const json* chunks, r.Field(jp, "chunks", pw));
  if (!chunks->is_array()) return r.Fail(pw + " chunks is not an array");
  for (const json& jc : *chunks) {
    const std::string cw = pw + " chunk #" + std::to_string(p.chunks.size());
    // Four elements, or seven for a compressed chunk: its codec, stored
    // length and stored checksum follow.
    if (!jc.is_array() || (jc.size() != 4 && jc.size() != 7) ||
        !jc[3].is_string()) {
      return r.Fail(cw +
                    " is not [object, offset, length, checksum] nor [object, "
                    "offset, length, checksum, codec, stored length, stored "
                    "checksum]");
    }
    ChunkRecord c;
    CKPT_ASSIGN_OR_RETURN(uint64_t object, r.UInt(jc[0], cw + " object"));
    if (object >= m.objects.size()) return r.Fail(cw + " names no object");
    c.object = static_cast<uint32_t>(object);
    CKPT_ASSIGN_OR_RETURN(c.offset, r.UInt(jc[1], cw + " offset"));
    CKPT_ASSIGN_OR_RETURN(c.length, r.UInt(jc[2], cw + " length"));
    std::optional<Checksum128> sum =
        Checksum128::FromHex(jc[3].get<std::string>());
    if (!sum) return r.Fail(cw + " checksum is not 32 hex digits");
    c.checksum = *sum;
    if (jc.size() == 7) {
      const std::optional<codec::Codec> codec =
          jc[4].is_string() ? codec::CodecFromName(jc[4].get<std::string>())
                            : std::nullopt;
      if (!codec || *codec == codec::Codec::kRaw) {
        return r.Fail(cw + " codec is not one ckpt knows");
      }
      CKPT_ASSIGN_OR_RETURN(const uint64_t stored,
                            r.UInt(jc[5], cw + " stored length"));
      if (stored > ChunkRecord::kMaxStoredLength) {
        return r.Fail(cw + " stored length " + std::to_string(stored) +
                      " is past a compressed chunk's");
      }
      const std::optional<uint64_t> stored_sum =
          jc[6].is_string() ? FromHex64(jc[6].get<std::string>())
                            : std::nullopt;
      if (!stored_sum) {
        return r.Fail(cw + " stored checksum is not 16 hex digits");
      }
      c.SetCompressed(*codec, stored, *stored_sum);
    }
    p.chunks.push_back(c);
  }
  return p;
}

Status DecodeUserFields(const json& j, const Reader& r, Manifest& m);
Status DecodeCommitRecord(const json& j, const Reader& r, Manifest& m);

// The body's fields, in the order of docs/format.md, with the pieces that
// FoldPiece took out of the tree, in document order, in `folded`.
Result<Manifest> DecodeBody(const json& j, const Reader& r,
                            std::deque<PieceRecord>& folded) {
  if (!j.is_object()) return r.Fail("manifest is not a JSON object");
  Manifest m;
  CKPT_ASSIGN_OR_RETURN(std::string magic, r.Str(j, "format", "manifest"));
  if (magic != kManifestMagic) {
    return r.Fail("format is " + Quote(magic) + ", not \"ckpt-manifest\"");
  }
  CKPT_ASSIGN_OR_RETURN(int64_t version, r.Int(j, "version", "manifest"));
  if (version != kManifestVersion && version != kIncrementalManifestVersion &&
      version != kScalableManifestVersion) {
    return r.Fail("manifest version " + std::to_string(version) +
                  " is not supported (this build reads versions 1 to " +
                  std::to_string(kScalableManifestVersion) + ")");
  }
  m.version = static_cast<int>(version);
  CKPT_ASSIGN_OR_RETURN(m.job_id, r.Str(j, "job_id", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.step, r.Int(j, "step", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.epoch, r.Int(j, "epoch", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.created_unix_ms,
                        r.Int(j, "created_unix_ms", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.attempt, r.Str(j, "attempt", "manifest"));
  CKPT_ASSIGN_OR_RETURN(int64_t world, r.Int(j, "world_size", "manifest"));
  if (world < 1 || world > kMaxWorldSize)
    return r.Fail("world_size out of range");
  m.world_size = static_cast<int32_t>(world);
  if (m.version == kScalableManifestVersion) {
    CKPT_RETURN_IF_ERROR(DecodeCommitRecord(j, r, m));
    return m;
  }
  CKPT_ASSIGN_OR_RETURN(const json* hosts, r.Field(j, "hosts", "manifest"));
  if (!hosts->is_array()) return r.Fail("hosts is not an array");
  for (const json& h : *hosts) {
    if (!h.is_string()) return r.Fail("hosts holds a non-string");
    m.hosts.push_back(h.get<std::string>());
  }
  CKPT_ASSIGN_OR_RETURN(const json* chunk_size,
                        r.Field(j, "chunk_size", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.chunk_size, r.UInt(*chunk_size, "chunk_size"));

  CKPT_ASSIGN_OR_RETURN(const json* objects, r.Field(j, "objects", "manifest"));
  if (!objects->is_array()) return r.Fail("objects is not an array");
  for (const json& o : *objects) {
    const std::string where = "object #" + std::to_string(m.objects.size());
    if (!o.is_object()) return r.Fail(where + " is not an object");
    ObjectRecord rec;
    CKPT_ASSIGN_OR_RETURN(rec.key, r.Str(o, "key", where));
    CKPT_ASSIGN_OR_RETURN(const json* size, r.Field(o, "size", where));
    CKPT_ASSIGN_OR_RETURN(rec.size, r.UInt(*size, where + " size"));
    CKPT_ASSIGN_OR_RETURN(int64_t rank, r.Int(o, "rank", where));
    if (rank < 0 || rank >= m.world_size)
      return r.Fail(where + " rank out of range");
    rec.rank = static_cast<int32_t>(rank);
    m.objects.push_back(std::move(rec));
  }
  CKPT_ASSIGN_OR_RETURN(m.depends_on, r.IntArray(j, "depends_on", "manifest"));
  if (m.version >= kIncrementalManifestVersion) {
    CKPT_ASSIGN_OR_RETURN(m.parent, r.Int(j, "parent", "manifest"));
    CKPT_ASSIGN_OR_RETURN(m.chain, r.Int(j, "chain", "manifest"));
  }

  CKPT_ASSIGN_OR_RETURN(const json* entries, r.Field(j, "entries", "manifest"));
  if (!entries->is_array()) return r.Fail("entries is not an array");
  for (const json& je : *entries) {
    const std::string pos = "entry #" + std::to_string(m.entries.size());
    if (!je.is_object()) return r.Fail(pos + " is not an object");
    EntryRecord e;
    CKPT_ASSIGN_OR_RETURN(e.name, r.Str(je, "name", pos));
    const std::string where = "entry " + Quote(e.name);
    CKPT_ASSIGN_OR_RETURN(std::string kind, r.Str(je, "kind", where));
    if (kind == "tensor") {
      e.kind = EntryKind::kTensor;
    } else if (kind == "blob") {
      e.kind = EntryKind::kBlob;
    } else if (kind == "metadata") {
      e.kind = EntryKind::kMetadata;
    } else {
      return r.Fail(where + " has unknown kind " + Quote(kind));
    }
    if (je.contains("owner")) {
      CKPT_ASSIGN_OR_RETURN(int64_t owner, r.Int(je, "owner", where));
      if (owner < 0 || owner >= m.world_size) {
        return r.Fail(where + " owner rank out of range");
      }
      e.owner = static_cast<int32_t>(owner);
    }
    if (e.kind == EntryKind::kMetadata) {
      CKPT_ASSIGN_OR_RETURN(const json* v, r.Field(je, "json", where));
      if (!v->is_object()) return r.Fail(where + " json is not an object");
      e.json = v->dump();
      // Its pieces are ignored, but FoldPiece may have taken some.
      if (auto it = je.find("pieces"); it != je.end() && it->is_array()) {
        for (const json& jp : *it) {
          if (jp.is_discarded()) folded.pop_front();
        }
      }
      m.entries.push_back(std::move(e));
      continue;
    }
    CKPT_ASSIGN_OR_RETURN(std::string dtype, r.Str(je, "dtype", where));
    std::optional<DType> dt = ParseDType(dtype);
    if (!dt) return r.Fail(where + " has unknown dtype " + Quote(dtype));
    e.dtype = *dt;
    CKPT_ASSIGN_OR_RETURN(e.shape, r.IntArray(je, "shape", where));
    CKPT_ASSIGN_OR_RETURN(const json* pieces, r.Field(je, "pieces", where));
    if (!pieces->is_array()) return r.Fail(where + " pieces is not an array");
    e.pieces.reserve(pieces->size());
    for (const json& jp : *pieces) {
      const auto pw = [&] {
        return where + " piece #" + std::to_string(e.pieces.size());
      };
      if (jp.is_discarded()) {
        // Folded as it closed (FoldPiece): only the checks against fields
        // read since are left, in the order ReadPiece makes them.
        PieceRecord p = std::move(folded.front());
        folded.pop_front();
        if (p.rank >= m.world_size) return r.Fail(pw() + " rank out of range");
        for (size_t k = 0; k < p.chunks.size(); ++k) {
          if (p.chunks[k].object >= m.objects.size()) {
            return r.Fail(pw() + " chunk #" + std::to_string(k) +
                          " names no object");
          }
        }
        e.pieces.push_back(std::move(p));
        continue;
      }
      CKPT_ASSIGN_OR_RETURN(PieceRecord p, ReadPiece(m, jp, pw(), r));
      e.pieces.push_back(std::move(p));
    }
    m.entries.push_back(std::move(e));
  }
  CKPT_RETURN_IF_ERROR(DecodeUserFields(j, r, m));
  return m;
}

// The optional `timing` (docs/format.md section 3.2): absent in older
// checkpoints; when present, every field as specified, at most
// kMaxTimedRanks ranks, each inside the world.
Status DecodeTiming(const json& j, const Reader& r, Manifest& m) {
  auto it = j.find("timing");
  if (it == j.end()) return Status();
  const json& t = *it;
  if (!t.is_object()) return r.Fail("timing is not an object");
  SaveTimingRecord out;
  for (auto [name, field] : {std::pair{"save_ms", &out.save_ms},
                             std::pair{"commit_ms", &out.commit_ms},
                             std::pair{"stall_ms", &out.stall_ms}}) {
    CKPT_ASSIGN_OR_RETURN(*field, r.Int(t, name, "timing"));
    if (*field < 0) return r.Fail(std::string("timing ") + name + " < 0");
  }
  CKPT_ASSIGN_OR_RETURN(const json* async, r.Field(t, "async", "timing"));
  if (!async->is_boolean()) return r.Fail("timing async is not a boolean");
  out.async = async->get<bool>();
  CKPT_ASSIGN_OR_RETURN(const json* ranks, r.Field(t, "ranks", "timing"));
  if (!ranks->is_array() || ranks->size() > kMaxTimedRanks) {
    return r.Fail("timing ranks is not an array of at most " +
                  std::to_string(kMaxTimedRanks));
  }
  for (const json& row : *ranks) {
    if (!row.is_array() || row.size() != 3) {
      return r.Fail("timing ranks holds something other than 3 integers");
    }
    int64_t v[3];
    for (size_t k = 0; k < 3; ++k) {
      if (!row[k].is_number_unsigned() ||
          row[k].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return r.Fail(
            "timing ranks holds a value that is not a non-negative integer");
      }
      v[k] = row[k].get<int64_t>();
    }
    if (v[0] >= m.world_size) return r.Fail("timing names a rank out of range");
    out.ranks.push_back({static_cast<int32_t>(v[0]), v[1], v[2]});
  }
  m.timing = std::move(out);
  return Status();
}

// The user's metadata and metrics, in every version.
Status DecodeUserFields(const json& j, const Reader& r, Manifest& m) {
  CKPT_ASSIGN_OR_RETURN(const json* meta, r.Field(j, "metadata", "manifest"));
  if (!meta->is_object()) return r.Fail("metadata is not an object");
  for (auto& [k, v] : meta->items()) {
    if (!v.is_string())
      return r.Fail("metadata " + Quote(k) + " is not a string");
    m.metadata[k] = v.get<std::string>();
  }
  CKPT_ASSIGN_OR_RETURN(const json* metrics, r.Field(j, "metrics", "manifest"));
  if (!metrics->is_object()) return r.Fail("metrics is not an object");
  for (auto& [k, v] : metrics->items()) {
    if (!v.is_number())
      return r.Fail("metric " + Quote(k) + " is not a number");
    m.metrics[k] = v.get<double>();
  }
  return DecodeTiming(j, r, m);
}

// Version 3's commit record after the common header: dependencies, the
// directory's reference and the data bytes (docs/format.md section 8).
Status DecodeCommitRecord(const json& j, const Reader& r, Manifest& m) {
  CKPT_ASSIGN_OR_RETURN(const json* chunk_size,
                        r.Field(j, "chunk_size", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.chunk_size, r.UInt(*chunk_size, "chunk_size"));
  CKPT_ASSIGN_OR_RETURN(m.depends_on, r.IntArray(j, "depends_on", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.parent, r.Int(j, "parent", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.chain, r.Int(j, "chain", "manifest"));
  CKPT_ASSIGN_OR_RETURN(const json* dir, r.Field(j, "directory", "manifest"));
  if (!dir->is_object()) return r.Fail("directory is not an object");
  CKPT_ASSIGN_OR_RETURN(m.directory.key, r.Str(*dir, "key", "directory"));
  CKPT_ASSIGN_OR_RETURN(const json* size, r.Field(*dir, "size", "directory"));
  CKPT_ASSIGN_OR_RETURN(m.directory.size, r.UInt(*size, "directory size"));
  CKPT_ASSIGN_OR_RETURN(std::string sum, r.Str(*dir, "xxh3_128", "directory"));
  std::optional<Checksum128> c = Checksum128::FromHex(sum);
  if (!c) return r.Fail("directory xxh3_128 is not 32 hex digits");
  m.directory.checksum = *c;
  CKPT_ASSIGN_OR_RETURN(const json* data, r.Field(j, "data_bytes", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.data_bytes, r.UInt(*data, "data_bytes"));
  CKPT_ASSIGN_OR_RETURN(const json* own,
                        r.Field(j, "own_data_bytes", "manifest"));
  CKPT_ASSIGN_OR_RETURN(m.own_data_bytes, r.UInt(*own, "own_data_bytes"));
  CKPT_RETURN_IF_ERROR(DecodeUserFields(j, r, m));
  if (m.directory.key != DirectoryKey(m.step, m.attempt)) {
    return r.Fail("directory key " + Quote(m.directory.key) + " is not " +
                  Quote(DirectoryKey(m.step, m.attempt)));
  }
  if (m.own_data_bytes > m.data_bytes) {
    return r.Fail("own_data_bytes exceeds data_bytes");
  }
  m.pieces = Manifest::Pieces::kNone;
  return Status();
}

// A JSON integer without a minus sign, as Reader::UInt accepts.
std::optional<uint64_t> NonNegative(const json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<uint64_t>();
}

bool ShortArray(const json& obj, const char* name, std::vector<int64_t>& out) {
  auto it = obj.find(name);
  if (it == obj.end() || !it->is_array() || it->size() > 64) return false;
  out.reserve(it->size());
  for (const json& x : *it) {
    std::optional<uint64_t> v = NonNegative(x);
    if (!v || *v > static_cast<uint64_t>(INT64_MAX)) return false;
    out.push_back(static_cast<int64_t>(*v));
  }
  return true;
}

// The piece `jp` if ReadPiece would accept it whatever world_size and objects
// say (they may come later in the body: ckpt sorts keys, "entries" first),
// else nullopt. Only the
// rank and the chunks' object indices are left to check. Strings for error
// messages are made only by ReadPiece, for the rare piece that has an error.
std::optional<PieceRecord> FoldPiece(const json& jp) {
  if (!jp.is_object()) return std::nullopt;
  PieceRecord p;
  if (!ShortArray(jp, "offsets", p.offsets) ||
      !ShortArray(jp, "lengths", p.lengths)) {
    return std::nullopt;
  }
  auto rank = jp.find("rank");
  if (rank == jp.end() || !rank->is_number_integer()) return std::nullopt;
  // Unsigned first: a value above INT64_MAX must not wrap to a valid rank.
  if (rank->is_number_unsigned()
          ? rank->get<uint64_t>() >= static_cast<uint64_t>(kMaxWorldSize)
          : rank->get<int64_t>() < 0) {
    return std::nullopt;
  }
  p.rank = static_cast<int32_t>(rank->get<int64_t>());
  auto chunks = jp.find("chunks");
  if (chunks == jp.end() || !chunks->is_array()) return std::nullopt;
  p.chunks.reserve(chunks->size());
  for (const json& jc : *chunks) {
    // A compressed chunk's row of seven goes to ReadPiece.
    if (!jc.is_array() || jc.size() != 4 || !jc[3].is_string()) {
      return std::nullopt;
    }
    std::optional<uint64_t> object = NonNegative(jc[0]);
    std::optional<uint64_t> offset = NonNegative(jc[1]);
    std::optional<uint64_t> length = NonNegative(jc[2]);
    std::optional<Checksum128> sum =
        Checksum128::FromHex(jc[3].get_ref<const std::string&>());
    if (!object || *object > UINT32_MAX || !offset || !length || !sum) {
      return std::nullopt;
    }
    p.chunks.push_back({.object = static_cast<uint32_t>(*object),
                        .offset = *offset,
                        .length = *length,
                        .checksum = *sum});
  }
  return p;
}

}  // namespace

Result<Manifest> DecodeManifest(std::string_view bytes, std::string_view what) {
  const std::string w(what);
  const size_t head = kEnvelopePrefix.size() + 32 + kEnvelopeMiddle.size();
  if (bytes.size() < head + kEnvelopeSuffix.size() ||
      !bytes.starts_with(kEnvelopePrefix) ||
      bytes.substr(kEnvelopePrefix.size() + 32, kEnvelopeMiddle.size()) !=
          kEnvelopeMiddle ||
      !bytes.ends_with(kEnvelopeSuffix)) {
    return DataLossError(
        w + ": not a ckpt manifest (truncated or damaged envelope)");
  }
  std::optional<Checksum128> expect =
      Checksum128::FromHex(bytes.substr(kEnvelopePrefix.size(), 32));
  if (!expect)
    return DataLossError(w + ": manifest checksum is not 32 hex digits");
  std::string_view body =
      bytes.substr(head, bytes.size() - head - kEnvelopeSuffix.size());
  if (Xxh3_128(body) != *expect) {
    return DataLossError(w +
                         ": manifest checksum mismatch (the file is damaged)");
  }
  // A manifest's bulk is its pieces: each is turned into a PieceRecord as it
  // closes, so the tree never holds them (it would take about 8 times the
  // text's size).
  std::deque<PieceRecord> folded;
  const JsonFold fold = [&folded](std::span<const JsonStep> path, json& v) {
    if (path.size() != 4 || path[0].in_array || path[0].key != "entries" ||
        !path[1].in_array || path[2].in_array || path[2].key != "pieces" ||
        !path[3].in_array) {
      return false;
    }
    std::optional<PieceRecord> p = FoldPiece(v);
    if (p) folded.push_back(std::move(*p));
    return p.has_value();
  };
  Manifest m;
  {
    // The tree goes before validation, which needs memory of its own.
    CKPT_ASSIGN_OR_RETURN(json j, ParseJsonStrict(body, what, fold));
    CKPT_ASSIGN_OR_RETURN(m, DecodeBody(j, Reader(w), folded));
  }
  CKPT_RETURN_IF_ERROR_CTX(ValidateManifest(m), w);
  m.Reindex();
  return m;
}

}  // namespace ckpt::format
