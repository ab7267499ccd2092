// The manifest: the one file that says what a checkpoint holds and where
// every byte is. Writing it (create-if-absent) is the commit. docs/format.md
// describes the JSON in prose.
//
// It is shaped for many ranks: every entry is a list of pieces (boxes of the
// global shape), each piece names the rank that wrote it and the chunks that
// hold its bytes, and a chunk names its object by index into `objects`, so an
// incremental checkpoint can point at an earlier checkpoint's data file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/state.h"
#include "ckpt/status.h"
#include "codec/chunk_codec.h"
#include "util/checksum.h"

namespace ckpt::format {

struct ChunkRecord {
  uint32_t object = 0;  // index into Manifest::objects
  // A compressed chunk's codec (top 4 bits) and stored length (the low
  // 28: a compressed chunk is shorter than kMaxCompressedChunk, 256 MiB),
  // in the word the object index leaves: a record stays 48 bytes, and a
  // manifest holds millions. 0 for a raw chunk.
  uint32_t packed = 0;
  uint64_t offset = 0;  // byte offset inside that object
  // The chunk's bytes as the tensor holds them (decompressed): what a piece
  // is made of, what incremental saves compare and what a load checks last.
  uint64_t length = 0;
  Checksum128 checksum;  // xxh3-128 of those bytes
  // A compressed chunk's stored bytes' xxh3-64, so that damage is found
  // before decompressing (docs/format.md, "Compressed chunks").
  uint64_t stored_checksum = 0;

  static constexpr uint64_t kMaxStoredLength = (uint64_t{1} << 28) - 1;
  codec::Codec codec() const { return static_cast<codec::Codec>(packed >> 28); }
  bool compressed() const { return codec() != codec::Codec::kRaw; }
  uint64_t stored_length() const { return packed & kMaxStoredLength; }
  // Marks the chunk compressed: `stored` (at most kMaxStoredLength) bytes
  // with codec `c` (not kRaw) and xxh3-64 `sum`.
  void SetCompressed(codec::Codec c, uint64_t stored, uint64_t sum) {
    packed = static_cast<uint32_t>(static_cast<uint32_t>(c) << 28 |
                                   (stored & kMaxStoredLength));
    stored_checksum = sum;
  }
  void SetRaw() {
    packed = 0;
    stored_checksum = 0;
  }
  // The bytes of the object the chunk occupies.
  uint64_t StoredLength() const {
    return compressed() ? stored_length() : length;
  }
  uint64_t StoredEnd() const { return offset + StoredLength(); }
};
static_assert(sizeof(ChunkRecord) == 48);

struct PieceRecord {
  // The box of the global shape this piece covers (both empty for 0-d).
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  int32_t rank = 0;  // the rank that wrote it
  // The piece's bytes, in row-major order of the box, in chunk order.
  std::vector<ChunkRecord> chunks;
};

struct EntryRecord {
  std::string name;
  EntryKind kind = EntryKind::kTensor;
  DType dtype = DType::kU8;    // tensors and blobs (U8)
  std::vector<int64_t> shape;  // the global shape
  std::vector<PieceRecord> pieces;
  std::string json;  // metadata entries: a JSON object, as text
  // A rank-local entry's rank; -1 for an entry of the whole job. Names are
  // unique per owner, so every rank can save its own "loader".
  int32_t owner = -1;
  // Version 3 without the indexes (Manifest::pieces kNone): what the
  // directory says of the pieces, which `pieces` does not hold.
  uint64_t piece_count = 0;
  Checksum128 pieces_sum;  // PiecesSum of all of them
};

// What an entry's pieces hold, independent of their order: the sum (128-bit,
// wrapping) over pieces of PieceHash, XXH3-128 of the box and the chunk
// checksums. Equal sums mean equal boxes holding equal bytes, in any
// manifest version; the directory of version 3 records it per entry.
Checksum128 PieceHash(const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& lengths,
                      const std::vector<ChunkRecord>& chunks);
Checksum128 AddSums(const Checksum128& a, const Checksum128& b);
Checksum128 PiecesSum(const EntryRecord& e);

struct ObjectRecord {
  std::string
      key;  // relative to the root, e.g. "step-.../r00000-....safetensors"
  uint64_t size = 0;
  int32_t rank = 0;
};

// Version 3: where the checkpoint's directory object is (index.h).
struct DirectoryRef {
  std::string key;  // "step-.../directory-<attempt>.ckptdir"
  uint64_t size = 0;
  Checksum128 checksum;  // xxh3-128 of the whole object
};

// How long the save that wrote a checkpoint took, as its coordinator
// measured it (docs/format.md, section 3.2 `timing`); informative only.
struct SaveTimingRecord {
  struct Rank {
    int32_t rank = 0;
    int64_t write_ms = 0;
    int64_t wait_ms = 0;
  };
  int64_t save_ms = 0;
  int64_t commit_ms = 0;
  int64_t stall_ms = 0;
  bool async = false;
  std::vector<Rank> ranks;  // at most kMaxTimedRanks, the slowest writers
};
inline constexpr size_t kMaxTimedRanks = 256;

struct Manifest {
  int version = 0;
  std::string job_id;
  int64_t step = 0;
  int64_t epoch = -1;  // -1: not given
  int64_t created_unix_ms = 0;
  std::string attempt;
  int32_t world_size = 1;
  std::vector<std::string> hosts;  // one per rank
  uint64_t chunk_size = 0;
  std::vector<ObjectRecord> objects;
  std::vector<int64_t> depends_on;  // steps whose objects chunks point into
  // Version 2 (incremental) only: the checkpoint this one was compared with,
  // and how many incremental saves in a row led here (1 right after a full
  // save). -1 and 0 in a version 1 manifest.
  int64_t parent = -1;
  int64_t chain = 0;
  std::vector<EntryRecord> entries;
  std::map<std::string, std::string> metadata;  // the user's, per checkpoint
  std::map<std::string, double> metrics;        // for keep-best retention
  // Absent in checkpoints saved before ckpt recorded it.
  std::optional<SaveTimingRecord> timing;
  // Version 3 only. The commit record names the directory and carries the
  // data bytes, so listing needs no other object.
  DirectoryRef directory;
  uint64_t data_bytes = 0;      // all data objects the indexes name
  uint64_t own_data_bytes = 0;  // those in this step's directory
  // What of a version 3 checkpoint's metadata this holds: kAll (every piece;
  // always so for versions 1 and 2), kNone (the commit record, or that and
  // the directory: entries without pieces), kSome (the pieces of
  // `loaded_ranks`, every entry's pieces that meet what a rank loads;
  // `objects` then lists only the data objects their chunks name, and
  // `metadata_objects` nothing).
  enum class Pieces { kAll, kNone, kSome };
  Pieces pieces = Pieces::kAll;
  std::vector<int32_t> loaded_ranks;  // kSome: sorted
  // Version 3 with the directory read: the directory and every index
  // object, which garbage collection must keep and completeness checks
  // must find (`objects` are the data objects).
  std::vector<ObjectRecord> metadata_objects;
  // Entry name -> index into `entries`, built by Reindex(). A stale index
  // (entries changed since) is detected by Find, which then scans.
  std::unordered_map<std::string, size_t> entry_index;

  // The entry named `name`, or null. Constant time once Reindex() has run
  // (DecodeManifest runs it); a linear scan otherwise.
  const EntryRecord* Find(std::string_view name) const;
  // The rank-local entry `name` of rank `owner`, or null.
  const EntryRecord* FindLocal(std::string_view name, int32_t owner) const;
  void Reindex();
  // Total bytes of the data objects this checkpoint names.
  uint64_t TotalObjectBytes() const;
  // Bytes of the data objects in this checkpoint's own step directory: what
  // its save wrote (the rest it references).
  uint64_t OwnObjectBytes() const;
  // Whether every piece of every entry is here (see `pieces`).
  bool HasAllPieces() const { return pieces == Pieces::kAll; }
};

// The manifest file's bytes: the checksum envelope around the JSON body.
// Version 3 writes the commit record: the header fields, the directory
// reference and the data bytes, no hosts, objects or entries.
std::string EncodeManifest(const Manifest& manifest);

// Parses and validates a manifest file; `what` names it in errors. A
// checksum mismatch, bad JSON, an unknown version or any inconsistency is
// DataLoss, and nothing of the manifest is returned. A version 3 commit
// record decodes to a Manifest with `pieces` kNone and no entries (index.h
// reads the rest).
Result<Manifest> DecodeManifest(std::string_view bytes, std::string_view what);

// The consistency checks DecodeManifest applies (also used before writing):
// names valid and unique, dtypes known, shapes without overflow, pieces inside
// the shape and their bytes equal to their chunks' lengths, chunks inside
// their objects and not overlapping, hosts match the world size.
Status ValidateManifest(const Manifest& manifest);

// One piece of `e` checked alone, as ValidateManifest checks every piece:
// its box inside the shape, its rank inside the world, its chunks inside
// their objects of `m` and holding exactly the box's bytes. DataLoss naming
// `where` otherwise.
Status CheckPieceAlone(const Manifest& m, const EntryRecord& e,
                       const PieceRecord& p, const std::string& where);

// The checks across pieces, O(n log n) in pieces and chunks, which a
// reader of only some pieces (index.h, Assemble) applies to those it holds
// and ValidateManifest to all: no two pieces of `e` share an element
// (DataLoss naming `where` and both pieces), and no two chunks of `m` share
// a byte of an object (naming the object, both byte ranges and entries).
// Every piece must have passed CheckPieceAlone.
Status CheckPiecesDisjoint(const EntryRecord& e, const std::string& where);
Status CheckChunksDisjoint(const Manifest& m);

// A metadata entry's JSON: an object, nested no deeper than a manifest can
// hold; DataLoss naming `where` otherwise.
Status CheckMetadataJson(const std::string& text, const std::string& where);

}  // namespace ckpt::format
