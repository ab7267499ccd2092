// Version 3 metadata as a Manifest: checking a directory, summarizing pieces
// into runs, finding the ranks whose pieces meet a box, assembling a
// Manifest from a directory and some indexes, and splitting one apart.
#include <algorithm>
#include <set>
#include <tuple>
#include <unordered_map>

#include "format/constants.h"
#include "format/index.h"
#include "format/layout.h"
#include "util/names.h"

namespace ckpt::format {

namespace {

using Wide = __int128;

Status Bad(const std::string& what, const std::string& why) {
  return DataLossError(what + ": " + why);
}

// Elements of a box, or -1 past 2^63.
Wide Elements(const std::vector<int64_t>& lengths) {
  Wide n = 1;
  for (int64_t l : lengths) {
    n *= l;
    if (n > INT64_MAX) return -1;
  }
  return n;
}

// Whether the box of element i of `run` lies inside `shape`.
bool RunElementInside(const PieceRun& run, Wide i,
                      const std::vector<int64_t>& shape) {
  for (size_t d = 0; d < shape.size(); ++d) {
    const Wide o = run.offsets[d] + i * run.delta[d];
    if (o < 0 || o + run.lengths[d] > shape[d]) return false;
  }
  return true;
}

// Floor division for 128-bit values (b > 0).
Wide FloorDiv(Wide a, Wide b) {
  Wide q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

// Order-free digest of a piece's identity, to compare the pieces indexes
// hold with those the directory's runs promise without sorting boxes.
uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  return h ^ (h >> 29);
}

uint64_t PieceDigest(uint32_t entry, int32_t rank,
                     const std::vector<int64_t>& o,
                     const std::vector<int64_t>& l) {
  uint64_t h = Mix(entry, static_cast<uint64_t>(rank));
  for (size_t d = 0; d < o.size(); ++d) {
    h = Mix(h, static_cast<uint64_t>(o[d]));
    h = Mix(h, static_cast<uint64_t>(l[d]));
  }
  return h;
}

// Digests of the pieces the directory gives the ranks in `ranks` (every rank
// when null).
std::vector<uint64_t> PromisedPieces(const Directory& dir,
                                     const std::vector<int32_t>* ranks) {
  std::vector<uint64_t> out;
  std::vector<int64_t> offsets;
  for (uint32_t ei = 0; ei < dir.entries.size(); ++ei) {
    for (const PieceRun& run : dir.entries[ei].runs) {
      const auto emit = [&](uint64_t i) {
        const int32_t rank = RunPiece(run, i, offsets);
        out.push_back(PieceDigest(ei, rank, offsets, run.lengths));
      };
      if (ranks == nullptr) {
        for (uint64_t i = 0; i < run.count; ++i) emit(i);
        continue;
      }
      for (int32_t r : *ranks) {
        const int64_t k = r - run.first_rank;
        if (run.rank_stride == 0) {
          if (k == 0) {
            for (uint64_t i = 0; i < run.count; ++i) emit(i);
          }
        } else if (k % run.rank_stride == 0 && k / run.rank_stride >= 0 &&
                   static_cast<uint64_t>(k / run.rank_stride) < run.count) {
          emit(static_cast<uint64_t>(k / run.rank_stride));
        }
      }
    }
  }
  return out;
}

// How many pieces PromisedPieces would list, counted without listing them:
// a run's count is the directory's word, and only the indexes' own pieces,
// which their bytes hold, may size the lists compared.
Wide PromisedCount(const Directory& dir, const std::vector<int32_t>* ranks) {
  Wide n = 0;
  for (const DirectoryEntry& e : dir.entries) {
    for (const PieceRun& run : e.runs) {
      if (ranks == nullptr) {
        n += run.count;
        continue;
      }
      for (int32_t r : *ranks) {
        const int64_t k = r - run.first_rank;
        if (run.rank_stride == 0) {
          if (k == 0) n += run.count;
        } else if (k % run.rank_stride == 0 && k / run.rank_stride >= 0 &&
                   static_cast<uint64_t>(k / run.rank_stride) < run.count) {
          n += 1;
        }
      }
    }
  }
  return n;
}

// The fewest bytes an index spends on one piece of `ndim` dimensions: its
// entry, ndim, the box and the chunk count, one byte each at least, and
// for a piece that holds bytes at least one chunk (three one-byte integers
// and a checksum).
uint64_t MinIndexPieceBytes(size_t ndim, bool holds_bytes) {
  return 3 + 2 * ndim + (holds_bytes ? 3 + 16 : 0);
}

using ObjectKeyParts = std::tuple<int64_t, int32_t, uint64_t>;

ObjectKeyParts Parts(const DataObjectId& o) {
  return {o.step, o.rank, o.attempt};
}

}  // namespace

int32_t RunPiece(const PieceRun& run, uint64_t i,
                 std::vector<int64_t>& offsets) {
  offsets = run.offsets;
  for (size_t d = 0; d < offsets.size(); ++d) {
    offsets[d] += static_cast<int64_t>(i) * run.delta[d];
  }
  return static_cast<int32_t>(run.first_rank +
                              static_cast<int64_t>(i) * run.rank_stride);
}

std::string EntryWhere(const DirectoryEntry& e) {
  return "entry " + Quote(e.name) +
         (e.owner >= 0 ? " of rank " + std::to_string(e.owner) : "");
}

Status CheckDirectory(const Directory& dir, const std::string& what) {
  // Every piece a run promises is a record in some rank's index, so the
  // index sizes recorded here bound the pieces: a run of 2^62 empty boxes
  // is refused here, not listed when the indexes are compared.
  if (dir.indexes.size() != static_cast<size_t>(dir.world_size)) {
    return Bad(what, "lists " + std::to_string(dir.indexes.size()) +
                         " indexes for a world of " +
                         std::to_string(dir.world_size));
  }
  for (size_t r = 0; r < dir.hosts.size(); ++r) {
    if (dir.hosts[r].size() > kMaxHostNameBytes) {
      return Bad(what, "the host name of rank " + std::to_string(r) + " is " +
                           std::to_string(dir.hosts[r].size()) +
                           " bytes, longer than " +
                           std::to_string(kMaxHostNameBytes));
    }
  }
  Wide index_bytes = 0;
  for (size_t r = 0; r < dir.indexes.size(); ++r) {
    const uint64_t size = dir.indexes[r].size;
    if (size <= kBinaryHeaderBytes || size > kMaxBinaryMetadataBytes) {
      return Bad(what, "the index of rank " + std::to_string(r) + " records " +
                           std::to_string(size) +
                           " bytes, outside what an index can be");
    }
    index_bytes += size - kBinaryHeaderBytes;
  }
  Wide piece_bytes = 0;
  std::vector<Wide> one_rank_bytes(dir.indexes.size());  // rank-stride-0 runs
  std::set<std::pair<std::string_view, int32_t>> names;
  std::set<std::string_view> global, local;
  for (const DirectoryEntry& e : dir.entries) {
    const std::string where = EntryWhere(e);
    if (Status s = ValidateEntryName(e.name); !s.ok()) {
      return Bad(what, s.message());
    }
    if (e.owner >= dir.world_size) {
      return Bad(what, where + ": owner rank out of range");
    }
    if (!names.insert({e.name, e.owner}).second) {
      return Bad(what, "duplicate " + where);
    }
    (e.owner >= 0 ? local : global).insert(e.name);
    if (e.kind == EntryKind::kMetadata) {
      CKPT_RETURN_IF_ERROR_CTX(CheckMetadataJson(e.json, where), what);
      continue;
    }
    if (e.kind == EntryKind::kBlob &&
        (e.dtype != DType::kU8 || e.shape.size() != 1)) {
      return Bad(what, where + ": a blob must be U8 with one dimension");
    }
    const Wide total = Elements(e.shape);
    if (total < 0 ||
        total * static_cast<Wide>(DTypeSize(e.dtype)) > INT64_MAX) {
      return Bad(what, where + ": shape byte count overflows");
    }
    Wide covered = 0;
    for (const PieceRun& run : e.runs) {
      const Wide last =
          run.first_rank + static_cast<Wide>(run.count - 1) * run.rank_stride;
      if (last < 0 || last >= dir.world_size) {
        return Bad(what, where + ": a run's ranks leave the world");
      }
      // The boxes move linearly, so the first and last bound them all.
      if (!RunElementInside(run, 0, e.shape) ||
          !RunElementInside(run, static_cast<Wide>(run.count - 1), e.shape)) {
        return Bad(what, where + ": a run's boxes leave the shape");
      }
      const Wide elements = Elements(run.lengths);
      const Wide need = static_cast<Wide>(run.count) *
                        MinIndexPieceBytes(e.shape.size(), elements > 0);
      piece_bytes += need;
      if (run.rank_stride == 0) one_rank_bytes[run.first_rank] += need;
      if (piece_bytes > index_bytes ||
          (run.rank_stride == 0 &&
           one_rank_bytes[run.first_rank] >
               dir.indexes[run.first_rank].size - kBinaryHeaderBytes)) {
        return Bad(what, where + ": a run of " + std::to_string(run.count) +
                             " pieces promises more pieces than the "
                             "indexes' recorded bytes can hold");
      }
      covered += static_cast<Wide>(run.count) * elements;
      if (covered > total) break;
    }
    if (covered != total) {
      return Bad(what, where +
                           ": pieces cover a different number of "
                           "elements than the shape holds");
    }
  }
  for (std::string_view n : local) {
    if (global.count(n)) {
      return Bad(what, "entry " + Quote(n) + " is both rank-local and global");
    }
  }
  std::vector<std::tuple<int64_t, int32_t, uint64_t>> ids;
  ids.reserve(dir.objects.size());
  for (const DataObjectId& o : dir.objects) {
    if (o.step > dir.step) {
      return Bad(what, "object " + Quote(o.Key()) + " lies after this step");
    }
    ids.emplace_back(o.step, o.rank, o.attempt);
  }
  // A save lists its objects by rank, already in order: checking that is
  // linear, where sorting 16,384 of them again on every load was not.
  if (!std::is_sorted(ids.begin(), ids.end())) {
    std::sort(ids.begin(), ids.end());
  }
  if (auto it = std::adjacent_find(ids.begin(), ids.end()); it != ids.end()) {
    DataObjectId o{std::get<0>(*it), std::get<1>(*it), std::get<2>(*it), 0};
    return Bad(what, "object " + Quote(o.Key()) + " listed twice");
  }
  return Status();
}

void RunBuilder::Add(const std::vector<int64_t>& offsets,
                     const std::vector<int64_t>& lengths, int32_t rank) {
  if (!runs_.empty()) {
    PieceRun& run = runs_.back();
    if (lengths == run.lengths) {
      const size_t dims = run.offsets.size();
      if (run.count == 1) {
        for (size_t d = 0; d < dims; ++d) {
          run.delta[d] = offsets[d] - run.offsets[d];
        }
        run.rank_stride = rank - run.first_rank;
        run.count = 2;
        return;
      }
      const int64_t n = static_cast<int64_t>(run.count);
      bool follows = rank == run.first_rank + n * run.rank_stride;
      for (size_t d = 0; follows && d < dims; ++d) {
        follows = offsets[d] == run.offsets[d] + n * run.delta[d];
      }
      if (follows) {
        ++run.count;
        return;
      }
    }
  }
  PieceRun run;
  run.first_rank = rank;
  run.offsets = offsets;
  run.lengths = lengths;
  run.delta.assign(offsets.size(), 0);
  runs_.push_back(std::move(run));
}

std::vector<PieceRun> SummarizePieces(const std::vector<PieceBox>& pieces) {
  RunBuilder b;
  for (const PieceBox& p : pieces) b.Add(*p.offsets, *p.lengths, p.rank);
  return b.Take();
}

void RanksMeeting(const DirectoryEntry& e, const std::vector<int64_t>& offsets,
                  const std::vector<int64_t>& lengths,
                  std::vector<int32_t>& ranks) {
  for (const PieceRun& run : e.runs) {
    Wide lo = 0, hi = static_cast<Wide>(run.count);  // [lo, hi)
    for (size_t d = 0; d < offsets.size() && lo < hi; ++d) {
      const Wide a = offsets[d], w = lengths[d];
      const Wide o = run.offsets[d], l = run.lengths[d], s = run.delta[d];
      if (w == 0 || l == 0) {
        hi = lo;  // an empty box meets nothing
      } else if (s == 0) {
        if (!(o < a + w && o + l > a)) hi = lo;
      } else if (s > 0) {
        // o + i*s < a + w  and  o + i*s + l > a
        hi = std::min(hi, FloorDiv(a + w - o - 1, s) + 1);
        lo = std::max(lo, FloorDiv(a - l - o, s) + 1);
      } else {
        const Wide t = -s;
        lo = std::max(lo, FloorDiv(o - a - w, t) + 1);
        hi = std::min(hi, FloorDiv(o + l - a - 1, t) + 1);
      }
    }
    if (lo >= hi) continue;
    if (run.rank_stride == 0) {
      ranks.push_back(run.first_rank);
      continue;
    }
    for (Wide i = lo; i < hi; ++i) {
      ranks.push_back(
          static_cast<int32_t>(run.first_rank + i * run.rank_stride));
    }
  }
}

namespace {

// Every data object by key, and the directory and every index as metadata
// objects: what garbage collection, listing and completeness checks need.
void ListObjects(const Manifest& header, const Directory& dir, Manifest& m) {
  m.objects.reserve(dir.objects.size());
  for (const DataObjectId& o : dir.objects) {
    m.objects.push_back({o.Key(), o.size, o.rank});
  }
  m.metadata_objects.reserve(dir.world_size + 1);
  m.metadata_objects.push_back(
      {header.directory.key, header.directory.size, 0});
  for (int32_t r = 0; r < dir.world_size; ++r) {
    // The data object's key with the index's suffix, built without
    // formatting (a directory has one per rank).
    std::string key = DataObjectId{m.step, r, dir.attempt, 0}.Key();
    key.replace(key.size() - kDataSuffix.size(), kDataSuffix.size(),
                kIndexSuffix);
    m.metadata_objects.push_back({std::move(key), dir.indexes[r].size, r});
  }
}

}  // namespace

namespace detail {

// Finds a directory's data objects by (step, rank, attempt) without a key
// string or a hash entry per object: a save lists them in order, so a
// binary search over the directory itself serves; otherwise over a sorted
// list of positions.
class ObjectFinder {
 public:
  explicit ObjectFinder(const std::vector<DataObjectId>& objects)
      : objects_(objects) {
    auto less = [&](uint32_t a, uint32_t b) {
      return Parts(objects_[a]) < Parts(objects_[b]);
    };
    for (uint32_t i = 1; i < objects_.size() && sorted_; ++i) {
      sorted_ = !less(i, i - 1);
    }
    if (sorted_) return;
    order_.resize(objects_.size());
    for (uint32_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(), less);
  }
  // The position of `o` in the directory's list, or -1.
  int64_t Find(const DataObjectId& o) const {
    const ObjectKeyParts want = Parts(o);
    size_t lo = 0, hi = objects_.size();
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (Parts(objects_[At(mid)]) < want) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == objects_.size() || Parts(objects_[At(lo)]) != want) return -1;
    return At(lo);
  }

 private:
  uint32_t At(size_t k) const {
    return sorted_ ? static_cast<uint32_t>(k) : order_[k];
  }
  const std::vector<DataObjectId>& objects_;
  bool sorted_ = true;
  std::vector<uint32_t> order_;
};

}  // namespace detail

using detail::ObjectFinder;

Manifest WithDirectory(const Manifest& header, const Directory& dir,
                       bool list_objects) {
  Manifest m = header;
  m.hosts = dir.hosts;
  m.objects.clear();
  m.metadata_objects.clear();
  if (list_objects) ListObjects(header, dir, m);
  m.entries.clear();
  m.entries.reserve(dir.entries.size());
  for (const DirectoryEntry& de : dir.entries) {
    EntryRecord e;
    e.name = de.name;
    e.kind = de.kind;
    e.dtype = de.dtype;
    e.shape = de.shape;
    e.json = de.json;
    e.owner = de.owner;
    for (const PieceRun& run : de.runs) e.piece_count += run.count;
    e.pieces_sum = de.pieces_sum;
    m.entries.push_back(std::move(e));
  }
  m.pieces = Manifest::Pieces::kNone;
  m.loaded_ranks.clear();
  m.Reindex();
  return m;
}

namespace {

Status CheckSameSave(const Manifest& header, const Directory& dir,
                     const std::string& w) {
  uint64_t attempt = 0;
  if (!ParseAttempt(header.attempt, &attempt) || attempt != dir.attempt ||
      dir.step != header.step || dir.world_size != header.world_size) {
    return Bad(w,
               "the directory belongs to another save (step, attempt or "
               "world size are not the commit record's)");
  }
  return Status();
}

// Assemble's work on `m`, WithDirectory's manifest (with every object
// listed when `all`; with some indexes, `objects` lists only what their
// chunks name: a loading rank builds no key for every rank's objects).
Result<Manifest> AssembleInto(Manifest m, const Manifest& header,
                              const Directory& dir, const ObjectFinder& finder,
                              std::vector<RankIndex> indexes, bool all,
                              const std::string& w) {
  std::unordered_map<uint32_t, uint32_t> listed;  // directory's -> m.objects
  std::vector<uint64_t> found;
  std::vector<int32_t> ranks;
  for (RankIndex& x : indexes) {
    const std::string iw = w + ": index of rank " + std::to_string(x.rank);
    if (x.step != dir.step || x.world_size != dir.world_size ||
        x.attempt != dir.attempt || x.rank < 0 || x.rank >= dir.world_size) {
      return Bad(iw, "belongs to another save");
    }
    ranks.push_back(x.rank);
    std::vector<uint32_t> global(x.objects.size());
    for (size_t i = 0; i < x.objects.size(); ++i) {
      const int64_t at = finder.Find(x.objects[i]);
      if (at < 0 || dir.objects[at].size != x.objects[i].size) {
        return Bad(iw, "object " + Quote(x.objects[i].Key()) +
                           " is not in the directory with that size");
      }
      if (all) {
        global[i] = static_cast<uint32_t>(at);
        continue;
      }
      auto [it, added] = listed.try_emplace(
          static_cast<uint32_t>(at), static_cast<uint32_t>(m.objects.size()));
      if (added) {
        const DataObjectId& o = dir.objects[at];
        m.objects.push_back({o.Key(), o.size, o.rank});
      }
      global[i] = it->second;
    }
    for (size_t pi = 0; pi < x.pieces.size(); ++pi) {
      IndexPiece& p = x.pieces[pi];
      const std::string pw = iw + " piece #" + std::to_string(pi);
      if (p.entry >= dir.entries.size() ||
          dir.entries[p.entry].kind == EntryKind::kMetadata) {
        return Bad(pw, "names no tensor or blob entry");
      }
      EntryRecord& e = m.entries[p.entry];
      PieceRecord rec;
      rec.offsets = std::move(p.offsets);
      rec.lengths = std::move(p.lengths);
      rec.rank = x.rank;
      for (ChunkRecord& c : p.chunks) c.object = global[c.object];
      rec.chunks = std::move(p.chunks);
      found.push_back(PieceDigest(p.entry, x.rank, rec.offsets, rec.lengths));
      e.pieces.push_back(std::move(rec));
    }
  }
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    return Bad(w, "an index is given twice");
  }
  // Counted first: the runs' counts are the directory's word, `found` is
  // what the indexes' bytes hold.
  if (PromisedCount(dir, all ? nullptr : &ranks) !=
      static_cast<Wide>(found.size())) {
    return Bad(w, "the indexes do not hold the pieces the directory lists (" +
                      std::to_string(found.size()) +
                      " pieces where its runs promise another number)");
  }
  std::vector<uint64_t> promised = PromisedPieces(dir, all ? nullptr : &ranks);
  std::sort(found.begin(), found.end());
  std::sort(promised.begin(), promised.end());
  if (found != promised) {
    return Bad(w, "the indexes do not hold the pieces the directory lists");
  }
  if (all && ranks.size() != static_cast<size_t>(dir.world_size)) {
    return Bad(w, "an index is missing");
  }
  // Each piece alone (box inside the shape, chunks inside their objects
  // holding the box's bytes), named by the index that holds it.
  for (size_t ei = 0; ei < m.entries.size(); ++ei) {
    const EntryRecord& e = m.entries[ei];
    for (const PieceRecord& p : e.pieces) {
      CKPT_RETURN_IF_ERROR_CTX(
          CheckPieceAlone(m, e, p,
                          EntryWhere(dir.entries[ei]) + " piece of rank " +
                              std::to_string(p.rank)),
          w + ": index " + IndexObjectKey(m.step, p.rank, header.attempt));
    }
  }
  if (all) {
    m.pieces = Manifest::Pieces::kAll;
    CKPT_RETURN_IF_ERROR_CTX(ValidateManifest(m), w);
    for (const EntryRecord& e : m.entries) {
      if (e.kind != EntryKind::kMetadata && PiecesSum(e) != e.pieces_sum) {
        return Bad(w, "entry " + Quote(e.name) +
                          ": its pieces are not those the directory sums");
      }
    }
    return m;
  }
  // Only these ranks' pieces: checked against each other too (no two boxes
  // of an entry, no two chunks of an object overlap), so that no load
  // places one chunk's bytes where another's belong. Coverage needs every
  // piece; ValidateManifest checks it when all are read.
  for (size_t ei = 0; ei < m.entries.size(); ++ei) {
    CKPT_RETURN_IF_ERROR(CheckPiecesDisjoint(
        m.entries[ei], w + ": " + EntryWhere(dir.entries[ei])));
  }
  CKPT_RETURN_IF_ERROR_CTX(CheckChunksDisjoint(m), w);
  m.pieces = Manifest::Pieces::kSome;
  m.loaded_ranks = std::move(ranks);
  return m;
}

}  // namespace

Result<Manifest> Assemble(const Manifest& header, const Directory& dir,
                          std::vector<RankIndex> indexes, bool all,
                          std::string_view what) {
  const std::string w(what);
  CKPT_RETURN_IF_ERROR(CheckSameSave(header, dir, w));
  return AssembleInto(WithDirectory(header, dir, all), header, dir,
                      ObjectFinder(dir.objects), std::move(indexes), all, w);
}

struct IndexAssembler::Lookup {
  explicit Lookup(const Directory& dir) : finder(dir.objects) {}
  const ObjectFinder finder;
};

IndexAssembler::IndexAssembler(const Manifest& header, const Directory& dir,
                               std::string what)
    : header_(header),
      dir_(dir),
      what_(std::move(what)),
      same_save_(CheckSameSave(header, dir, what_)),
      lookup_(std::make_unique<Lookup>(dir)) {
  base_ = WithDirectory(header, dir, false);
  // A copy per index: 16,384 host names each time would be most of it.
  base_.hosts.clear();
}

IndexAssembler::~IndexAssembler() = default;

Result<Manifest> IndexAssembler::Assemble(RankIndex index) const {
  CKPT_RETURN_IF_ERROR(same_save_);
  std::vector<RankIndex> one;
  one.push_back(std::move(index));
  return AssembleInto(base_, header_, dir_, lookup_->finder, std::move(one),
                      false, what_);
}

Result<SplitMetadata> Split(const Manifest& m) {
  SplitMetadata out;
  Directory& dir = out.directory;
  dir.step = m.step;
  dir.world_size = m.world_size;
  if (!ParseAttempt(m.attempt, &dir.attempt)) {
    return InvalidArgumentError("attempt " + Quote(m.attempt) +
                                " is not 16 hex digits");
  }
  dir.hosts = m.hosts;
  std::vector<RankIndex> indexes(m.world_size);
  for (int32_t r = 0; r < m.world_size; ++r) {
    indexes[r].step = m.step;
    indexes[r].rank = r;
    indexes[r].world_size = m.world_size;
    indexes[r].attempt = dir.attempt;
  }
  for (const ObjectRecord& o : m.objects) {
    DataObjectId id;
    if (!ParseDataObjectId(o.key, &id)) {
      return InvalidArgumentError("object " + Quote(o.key) +
                                  " is not named like a data object");
    }
    id.size = o.size;
    dir.objects.push_back(id);
  }
  // Per rank: global object index -> its own table's.
  std::vector<std::unordered_map<uint32_t, uint32_t>> local(m.world_size);
  for (uint32_t ei = 0; ei < m.entries.size(); ++ei) {
    const EntryRecord& e = m.entries[ei];
    DirectoryEntry de{e.name, e.kind, e.dtype, e.owner, e.shape, e.json, {}};
    std::vector<size_t> order(e.pieces.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return e.pieces[a].rank < e.pieces[b].rank;
    });
    std::vector<PieceBox> boxes;
    for (size_t i : order) {
      const PieceRecord& p = e.pieces[i];
      boxes.push_back({&p.offsets, &p.lengths, p.rank});
      RankIndex& x = indexes[p.rank];
      IndexPiece ip{ei, p.offsets, p.lengths, p.chunks};
      for (ChunkRecord& c : ip.chunks) {
        auto [it, fresh] = local[p.rank].emplace(
            c.object, static_cast<uint32_t>(x.objects.size()));
        if (fresh) x.objects.push_back(dir.objects[c.object]);
        c.object = it->second;
      }
      x.pieces.push_back(std::move(ip));
    }
    de.runs = SummarizePieces(boxes);
    if (e.kind != EntryKind::kMetadata) de.pieces_sum = PiecesSum(e);
    dir.entries.push_back(std::move(de));
  }
  for (const RankIndex& x : indexes) {
    out.indexes.push_back(EncodeRankIndex(x));
    dir.indexes.push_back(
        {out.indexes.back().size(), Xxh3_128(out.indexes.back())});
  }
  out.directory_bytes = EncodeDirectory(dir);
  return out;
}

}  // namespace ckpt::format
