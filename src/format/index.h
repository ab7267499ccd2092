// Version 3 metadata: a small commit record (MANIFEST.json, manifest.h), one
// binary directory per checkpoint and one binary index per rank, so that a
// rank loading its own pieces reads kilobytes, not every rank's chunk list.
// docs/format.md section 8 describes the bytes.
//
//   directory   the world (hosts), every rank's index object (size and
//               checksum), every data object any index names (size), and
//               the tensor directory: each entry's name, kind, dtype and
//               global shape with its pieces summarized as runs (pieces of
//               equal size at regular offsets, written by ranks at a regular
//               stride), so a reader finds the ranks whose pieces meet a box
//               without reading their indexes.
//   rank index  the pieces one rank wrote, with their chunk rows, and the
//               data objects those rows point into.
//
// Decoding is bounds-checked and checksummed; Assemble checks an index
// against the directory before its pieces become part of a Manifest.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "format/manifest.h"

namespace ckpt::format {

// A data object a version 3 checkpoint names: always a key of the form
// DataObjectKey(step, rank, attempt), stored as its parts.
struct DataObjectId {
  int64_t step = 0;
  int32_t rank = 0;
  uint64_t attempt = 0;  // the 16 hex digits, as a number
  uint64_t size = 0;
  std::string Key() const;
};

// Parses `key` as a DataObjectKey into `out` (size untouched).
bool ParseDataObjectId(std::string_view key, DataObjectId* out);
// The 16-hex-digit attempt as a number; false if it is not one.
bool ParseAttempt(std::string_view attempt, uint64_t* out);

struct IndexPiece {
  uint32_t entry = 0;  // index into Directory::entries
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  // ChunkRecord::object indexes RankIndex::objects.
  std::vector<ChunkRecord> chunks;
};

struct RankIndex {
  int64_t step = 0;
  int32_t rank = 0;
  int32_t world_size = 1;
  uint64_t attempt = 0;
  std::vector<DataObjectId> objects;
  std::vector<IndexPiece> pieces;
};

// Pieces i = 0 .. count-1 of an entry: rank first_rank + i * rank_stride
// wrote the box at offsets + i * delta with `lengths`.
struct PieceRun {
  int32_t first_rank = 0;
  int32_t rank_stride = 0;
  uint64_t count = 1;
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  std::vector<int64_t> delta;
};

struct DirectoryEntry {
  std::string name;
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;
  int32_t owner = -1;
  std::vector<int64_t> shape;
  std::string json;  // metadata entries
  std::vector<PieceRun> runs;
  Checksum128 pieces_sum;  // tensors and blobs: PiecesSum (manifest.h)
};

struct IndexRef {
  uint64_t size = 0;
  Checksum128 checksum;
};

struct Directory {
  int64_t step = 0;
  int32_t world_size = 1;
  uint64_t attempt = 0;
  std::vector<std::string> hosts;     // by rank
  std::vector<IndexRef> indexes;      // by rank: every rank writes one
  std::vector<DataObjectId> objects;  // every data object an index names
  std::vector<DirectoryEntry> entries;
};

// A piece as the directory sees it, for summarizing.
struct PieceBox {
  const std::vector<int64_t>* offsets;
  const std::vector<int64_t>* lengths;
  int32_t rank;
};

// Builds runs one piece at a time, in the order given (callers give an
// entry's pieces by rank): a piece joins the current run when its lengths
// match and its offsets and rank continue the run's stride.
class RunBuilder {
 public:
  void Add(const std::vector<int64_t>& offsets,
           const std::vector<int64_t>& lengths, int32_t rank);
  std::vector<PieceRun> Take() { return std::move(runs_); }

 private:
  std::vector<PieceRun> runs_;
};

// The runs of `pieces`, in the order given.
std::vector<PieceRun> SummarizePieces(const std::vector<PieceBox>& pieces);

// Appends to `ranks` (unsorted, possibly repeated) every rank whose pieces of
// `e` share an element with the box (offsets, lengths). O(runs x dims).
void RanksMeeting(const DirectoryEntry& e, const std::vector<int64_t>& offsets,
                  const std::vector<int64_t>& lengths,
                  std::vector<int32_t>& ranks);

std::string EncodeRankIndex(const RankIndex& index);
Result<RankIndex> DecodeRankIndex(std::string_view bytes,
                                  std::string_view what);
std::string EncodeDirectory(const Directory& dir);
// Also checks what can be checked without the indexes: names, kinds,
// dtypes, shapes, runs inside the world and the shape, runs covering every
// element exactly in count.
Result<Directory> DecodeDirectory(std::string_view bytes,
                                  std::string_view what);

// What DecodeDirectory checks after the bytes parse.
Status CheckDirectory(const Directory& dir, const std::string& what);

// The Manifest of a version 3 checkpoint: `header` (its commit record), the
// directory, and the indexes of some ranks (`all` when they are every
// rank's). Each index must hold exactly the pieces the directory's runs give
// its rank, with chunks that hold each box's bytes inside objects the
// directory lists. With every index, the result is checked like a version 2
// manifest (ValidateManifest: overlaps, coverage) and lists every object as
// WithDirectory does; with some, each piece is checked alone, `objects`
// holds only the data objects their chunks name and `metadata_objects` is
// empty.
Result<Manifest> Assemble(const Manifest& header, const Directory& dir,
                          std::vector<RankIndex> indexes, bool all,
                          std::string_view what);

// Assemble of one index at a time (some = that one) against one header
// and directory, as verify's walk needs: what does not depend on the index
// (the directory's object lookup, every entry without pieces) is built
// once, not per index. Its manifests leave `hosts` empty.
class IndexAssembler {
 public:
  IndexAssembler(const Manifest& header, const Directory& dir,
                 std::string what);
  ~IndexAssembler();
  Result<Manifest> Assemble(RankIndex index) const;

 private:
  struct Lookup;
  const Manifest& header_;
  const Directory& dir_;
  const std::string what_;
  const Status same_save_;
  Manifest base_;
  std::unique_ptr<const Lookup> lookup_;
};

// Piece i of `run` (i < run.count): its box's offsets into `offsets`
// (offsets + i × delta, the run's lengths); returns the rank that wrote it.
int32_t RunPiece(const PieceRun& run, uint64_t i,
                 std::vector<int64_t>& offsets);

// "entry NAME" (and " of rank R" for a rank-local one), for messages.
std::string EntryWhere(const DirectoryEntry& e);

// What Assemble checks with every index, one index at a time (verify of a
// checkpoint of many ranks): memory for one rank's pieces and a span per
// chunk, not every piece at once. CheckEntriesDisjoint first (no two of
// the pieces the directory's runs give an entry overlap; the directory
// checked that they cover it in count), then Next with each rank's index
// (Assemble of that index alone, its pieces' sums and chunk spans kept),
// then Finish: every rank's index seen, each entry's pieces summing as the
// directory says, and no two chunks of an object overlapping.
class IndexWalk {
 public:
  IndexWalk(const Manifest& header, const Directory& dir, std::string what);
  Status CheckEntriesDisjoint() const;
  Result<Manifest> Next(RankIndex index);
  Status Finish();

 private:
  struct Span {
    uint64_t offset;
    uint64_t length;
    uint32_t entry;
    int32_t rank;
  };
  const Directory& dir_;
  const std::string what_;
  const IndexAssembler assembler_;
  std::vector<bool> seen_;                               // by rank
  std::vector<Checksum128> sums_;                        // by directory entry
  std::vector<std::vector<Span>> spans_;                 // by directory object
  std::unordered_map<std::string, uint32_t> object_at_;  // key -> object
};

// The header and directory alone: every entry without pieces. Without
// `list_objects`, `objects` and `metadata_objects` stay empty (a key string
// for every rank's objects is most of the cost at 16,384 ranks).
Manifest WithDirectory(const Manifest& header, const Directory& dir,
                       bool list_objects = true);

// Splits a full manifest into the version 3 directory and one index per
// rank (`indexes[r]` for rank r): what ranks write in parallel on save.
// The directory's index refs are filled from the encoded indexes; `header`
// gets the commit record's fields (version 3, data bytes).
struct SplitMetadata {
  Directory directory;
  std::vector<std::string> indexes;  // encoded, by rank
  std::string directory_bytes;
};
Result<SplitMetadata> Split(const Manifest& m);

}  // namespace ckpt::format
