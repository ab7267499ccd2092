// libFuzzer target: hostile version 3 metadata that is signed again after
// every mutation, so that the checksums never stop it and the structural
// checks are what the fuzzer meets (docs/format.md section 8).
//
// An input is a base checkpoint and a script:
//
//   byte 0        which base: 0 one rank (a tensor in four chunks, a blob, a
//                 metadata entry), 1 four ranks (rows, a 2 x 2 grid, a tensor
//                 of empty pieces, a rank-local entry per rank)
//   then          operations of kOpBytes each: kind, a, b, value (u64 LE)
//
// The base is built here (a Manifest split into its directory and indexes,
// with data objects of known bytes); the operations edit the decoded
// directory and indexes: run counts, boxes, strides, chunk offsets and
// lengths, copies of chunks, pieces and runs, object sizes, shapes. Then
// everything is signed again as a save would: each chunk's checksum from
// the data bytes it now names, each entry's pieces sum, each index's size
// and checksum in the directory, the directory's in the commit record. The
// result goes through the decoders and Assemble (every rank's index, and
// each rank's alone), and through Verify and Load of a CheckpointManager on
// a mem:// root. Each returns a value or DataLoss, never crashes or
// allocates past -malloc_limit_mb; metadata that Assemble accepts has no
// two overlapping pieces of an entry nor chunks of an object (checked here
// pair by pair).
//
// LLVMFuzzerCustomMutator edits the script (new operations with values
// that matter: 0, 1, 2^62, 2^64-1, the chunk size, an object's size), and
// sometimes lets libFuzzer mutate the bytes as they are.
//
// The seeds in fuzz/corpus/resigned are written by running the target with
// CKPT_WRITE_SEEDS=<folder>.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/constants.h"
#include "format/index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "storage/memory/memory_storage.h"
#include "util/boxes.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using namespace ckpt;
using format::ChunkRecord;
using format::Directory;
using format::EntryRecord;
using format::Manifest;
using format::PieceRecord;
using format::RankIndex;

constexpr int64_t kStep = 9;
constexpr std::string_view kAttempt = "0123456789abcdef";
constexpr uint64_t kObjectBytes = 1024;
constexpr uint64_t kDataStart = 64;
constexpr uint64_t kChunk = 64;
constexpr size_t kOpBytes = 11;
constexpr size_t kMaxOps = 16;
constexpr int kKinds = 16;
// Tensors at most this large are loaded; a hostile shape is only verified.
constexpr uint64_t kMaxLoadBytes = 1 << 20;

struct Base {
  Manifest header;  // the commit record
  Directory dir;
  std::vector<RankIndex> indexes;
  std::vector<std::string> data;  // by rank
};

std::string DataBytes(int rank) {
  std::mt19937_64 gen(rank + 1);
  std::string out(kObjectBytes, '\0');
  for (char& c : out) c = static_cast<char>(gen());
  return out;
}

// A Manifest of `world` ranks with `entries`, split as a save would.
Base Build(int world, std::vector<EntryRecord> entries) {
  Manifest m;
  m.version = format::kManifestVersion;
  m.job_id = "fuzz";
  m.step = kStep;
  m.attempt = std::string(kAttempt);
  m.world_size = world;
  m.chunk_size = kChunk;
  Base b;
  for (int r = 0; r < world; ++r) {
    m.hosts.push_back("h" + std::to_string(r / 2));
    m.objects.push_back(
        {format::DataObjectKey(kStep, r, kAttempt), kObjectBytes, r});
    b.data.push_back(DataBytes(r));
  }
  std::vector<uint64_t> used(world, kDataStart);
  for (EntryRecord& e : entries) {
    for (PieceRecord& p : e.pieces) {
      uint64_t bytes = DTypeSize(e.dtype);
      for (int64_t l : p.lengths) bytes *= static_cast<uint64_t>(l);
      for (uint64_t done = 0; done < bytes;) {
        const uint64_t n = std::min(kChunk, bytes - done);
        const uint64_t at = used[p.rank];
        p.chunks.push_back(
            {.object = static_cast<uint32_t>(p.rank),
             .offset = at,
             .length = n,
             .checksum =
                 Xxh3_128(std::string_view(b.data[p.rank]).substr(at, n))});
        used[p.rank] += n;
        done += n;
      }
    }
  }
  m.entries = std::move(entries);
  m.Reindex();
  if (!format::ValidateManifest(m).ok()) std::abort();
  Result<format::SplitMetadata> split = format::Split(m);
  if (!split.ok()) std::abort();
  b.dir = split->directory;
  for (const std::string& x : split->indexes) {
    b.indexes.push_back(format::DecodeRankIndex(x, "base").value());
  }
  b.header = m;
  b.header.version = format::kScalableManifestVersion;
  b.header.hosts.clear();
  b.header.objects.clear();
  b.header.entries.clear();
  b.header.directory.key = format::DirectoryKey(kStep, kAttempt);
  b.header.data_bytes = b.header.own_data_bytes = world * kObjectBytes;
  return b;
}

EntryRecord Tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                   int32_t owner = -1) {
  EntryRecord e;
  e.name = std::move(name);
  e.kind = EntryKind::kTensor;
  e.dtype = dtype;
  e.shape = std::move(shape);
  e.owner = owner;
  return e;
}

PieceRecord Piece(std::vector<int64_t> o, std::vector<int64_t> l, int rank) {
  return {std::move(o), std::move(l), rank, {}};
}

const Base& Bases(size_t i) {
  static const std::vector<Base> bases = [] {
    std::vector<Base> out;
    {
      EntryRecord w = Tensor("w", DType::kF32, {64});
      w.pieces.push_back(Piece({0}, {64}, 0));
      EntryRecord rng = Tensor("rng", DType::kU8, {7});
      rng.kind = EntryKind::kBlob;
      rng.pieces.push_back(Piece({0}, {7}, 0));
      EntryRecord cfg;
      cfg.name = "cfg";
      cfg.kind = EntryKind::kMetadata;
      cfg.json = R"({"lr":"0.1"})";
      out.push_back(Build(1, {w, rng, cfg}));
    }
    {
      EntryRecord w = Tensor("w", DType::kF32, {8, 4});
      EntryRecord g = Tensor("grid", DType::kBF16, {4, 6});
      EntryRecord z = Tensor("z", DType::kF32, {4, 0});
      std::vector<EntryRecord> entries;
      for (int r = 0; r < 4; ++r) {
        w.pieces.push_back(Piece({2 * r, 0}, {2, 4}, r));
        g.pieces.push_back(Piece({2 * (r / 2), 3 * (r % 2)}, {2, 3}, r));
        z.pieces.push_back(Piece({r, 0}, {1, 0}, r));
        EntryRecord l = Tensor("loader", DType::kI64, {3}, r);
        l.pieces.push_back(Piece({0}, {3}, r));
        entries.push_back(std::move(l));
      }
      entries.insert(entries.begin(), {w, g, z});
      out.push_back(Build(4, std::move(entries)));
    }
    return out;
  }();
  return bases[i % bases.size()];
}

struct Op {
  uint8_t kind, a, b;
  uint64_t v;
};

std::vector<Op> ParseOps(const uint8_t* data, size_t size) {
  std::vector<Op> ops;
  for (size_t at = 0; at + kOpBytes <= size && ops.size() < kMaxOps;
       at += kOpBytes) {
    Op op{data[at], data[at + 1], data[at + 2], 0};
    for (int i = 0; i < 8; ++i) {
      op.v |= static_cast<uint64_t>(data[at + 3 + i]) << (8 * i);
    }
    ops.push_back(op);
  }
  return ops;
}

void PutOp(std::string& out, const Op& op) {
  out.push_back(static_cast<char>(op.kind));
  out.push_back(static_cast<char>(op.a));
  out.push_back(static_cast<char>(op.b));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(op.v >> (8 * i)));
}

template <typename T>
T* Pick(std::vector<T*>& all, uint8_t i) {
  return all.empty() ? nullptr : all[i % all.size()];
}

int64_t& Dim(std::vector<int64_t>& v, uint8_t i) {
  static int64_t sink;
  return v.empty() ? sink : v[i % v.size()];
}

// The script applied to the decoded directory and indexes.
void Apply(const std::vector<Op>& ops, Directory& dir,
           std::vector<RankIndex>& indexes) {
  for (const Op& op : ops) {
    std::vector<format::PieceRun*> runs;
    std::vector<std::vector<format::PieceRun>*> run_lists;
    for (format::DirectoryEntry& e : dir.entries) {
      for (format::PieceRun& r : e.runs) {
        runs.push_back(&r);
        run_lists.push_back(&e.runs);
      }
    }
    std::vector<format::IndexPiece*> pieces;
    std::vector<RankIndex*> owners;
    std::vector<ChunkRecord*> chunks;
    std::vector<format::IndexPiece*> chunk_pieces;
    for (RankIndex& x : indexes) {
      for (format::IndexPiece& p : x.pieces) {
        pieces.push_back(&p);
        owners.push_back(&x);
        for (ChunkRecord& c : p.chunks) {
          chunks.push_back(&c);
          chunk_pieces.push_back(&p);
        }
      }
    }
    const int64_t sv = static_cast<int64_t>(op.v);
    format::PieceRun* run = Pick(runs, op.a);
    format::IndexPiece* piece = Pick(pieces, op.a);
    ChunkRecord* chunk = Pick(chunks, op.a);
    switch (op.kind % kKinds) {
      case 0:
        if (run) run->count = op.v;
        break;
      case 1:
        if (run) Dim(run->lengths, op.b) = sv;
        break;
      case 2:
        if (run) Dim(run->offsets, op.b) = sv;
        break;
      case 3:
        if (run) Dim(run->delta, op.b) = sv;
        break;
      case 4:
        if (run) {
          run->first_rank = static_cast<int32_t>(op.v % 100'000);
          run->rank_stride = static_cast<int32_t>(op.b) - 128;
        }
        break;
      case 5:
        if (run) run_lists[op.a % runs.size()]->push_back(*run);
        break;
      case 6:
        if (chunk) chunk->offset = op.v;
        break;
      case 7:
        if (chunk) chunk->length = op.v;
        break;
      case 8:
        if (chunk && !chunks.empty()) *chunk = *chunks[op.b % chunks.size()];
        break;
      case 9:
        if (chunk) chunk_pieces[op.a % chunks.size()]->chunks.push_back(*chunk);
        break;
      case 10:
        if (piece) Dim(piece->offsets, op.b) = sv;
        break;
      case 11:
        if (piece) Dim(piece->lengths, op.b) = sv;
        break;
      case 12:
        if (piece) owners[op.a % pieces.size()]->pieces.push_back(*piece);
        break;
      case 13: {
        // The same size in the index and the directory, so the mismatch
        // between them does not hide what a larger object would let pass.
        RankIndex& x = indexes[op.a % indexes.size()];
        if (x.objects.empty()) break;
        format::DataObjectId& o = x.objects[op.b % x.objects.size()];
        for (format::DataObjectId& d : dir.objects) {
          if (d.step == o.step && d.rank == o.rank && d.attempt == o.attempt) {
            d.size = op.v;
          }
        }
        o.size = op.v;
        break;
      }
      case 14:
        if (!dir.entries.empty()) {
          Dim(dir.entries[op.a % dir.entries.size()].shape, op.b) = sv;
        }
        break;
      case 15:
        if (piece) {
          RankIndex& x = *owners[op.a % pieces.size()];
          x.pieces.erase(x.pieces.begin() + (piece - x.pieces.data()));
        }
        break;
    }
  }
}

// Signs everything again, as a save would; returns the commit record.
std::string Resign(const Base& base, Directory& dir,
                   std::vector<RankIndex>& indexes,
                   std::vector<std::string>& index_bytes,
                   std::string& dir_bytes) {
  std::vector<Checksum128> sums(dir.entries.size());
  for (RankIndex& x : indexes) {
    for (format::IndexPiece& p : x.pieces) {
      for (ChunkRecord& c : p.chunks) {
        if (c.object >= x.objects.size()) continue;
        const format::DataObjectId& o = x.objects[c.object];
        if (o.step != kStep || o.rank < 0 ||
            static_cast<size_t>(o.rank) >= base.data.size()) {
          continue;
        }
        const std::string& bytes = base.data[o.rank];
        if (c.offset <= bytes.size() && c.length <= bytes.size() - c.offset) {
          c.checksum =
              Xxh3_128(std::string_view(bytes).substr(c.offset, c.length));
        }
      }
      if (p.entry < sums.size()) {
        sums[p.entry] = format::AddSums(
            sums[p.entry], format::PieceHash(p.offsets, p.lengths, p.chunks));
      }
    }
  }
  for (size_t i = 0; i < dir.entries.size(); ++i) {
    dir.entries[i].pieces_sum = sums[i];
  }
  for (size_t r = 0; r < indexes.size(); ++r) {
    index_bytes.push_back(format::EncodeRankIndex(indexes[r]));
    if (r < dir.indexes.size()) {
      dir.indexes[r] = {index_bytes[r].size(), Xxh3_128(index_bytes[r])};
    }
  }
  dir_bytes = format::EncodeDirectory(dir);
  Manifest h = base.header;
  h.directory.size = dir_bytes.size();
  h.directory.checksum = Xxh3_128(dir_bytes);
  return format::EncodeManifest(h);
}

// CKPT_FUZZ_VERBOSE=1: print what each check said (to see where a seed
// is stopped).
const bool kVerbose = std::getenv("CKPT_FUZZ_VERBOSE") != nullptr;

void Expect(const Status& s) {
  if (kVerbose) std::fprintf(stderr, "  %s\n", s.ToString().c_str());
  if (!s.ok() && s.code() != ErrorCode::kDataLoss) {
    std::fprintf(stderr, "unexpected: %s\n", s.ToString().c_str());
    std::abort();
  }
}

// What Assemble accepted has no overlap, checked pair by pair.
void CheckAccepted(const Manifest& m) {
  std::vector<const ChunkRecord*> chunks;
  for (const EntryRecord& e : m.entries) {
    for (size_t i = 0; i < e.pieces.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (BoxesOverlap({&e.pieces[i].offsets, &e.pieces[i].lengths},
                         {&e.pieces[j].offsets, &e.pieces[j].lengths})) {
          std::abort();
        }
      }
      for (const ChunkRecord& c : e.pieces[i].chunks) chunks.push_back(&c);
    }
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const ChunkRecord& a = *chunks[i];
      const ChunkRecord& b = *chunks[j];
      if (a.object == b.object && a.offset < b.offset + b.length &&
          b.offset < a.offset + a.length) {
        std::abort();
      }
    }
  }
}

void Decoded(const Manifest& header, const std::string& dir_bytes,
             const std::vector<std::string>& index_bytes) {
  Result<Directory> dir = format::DecodeDirectory(dir_bytes, "fuzz");
  Expect(dir.status());
  if (!dir.ok()) return;
  std::vector<RankIndex> all;
  for (const std::string& x : index_bytes) {
    Result<RankIndex> index = format::DecodeRankIndex(x, "fuzz");
    Expect(index.status());
    if (!index.ok()) return;
    all.push_back(*index);
  }
  for (const RankIndex& x : all) {
    Result<Manifest> one = format::Assemble(header, *dir, {x}, false, "fuzz");
    Expect(one.status());
    if (one.ok()) CheckAccepted(*one);
  }
  Result<Manifest> whole = format::Assemble(header, *dir, all, true, "fuzz");
  Expect(whole.status());
  if (whole.ok()) CheckAccepted(*whole);
}

// Verify and Load through a CheckpointManager, on a fresh mem:// root.
void Managed(const Base& base, const Directory& dir, const std::string& record,
             const std::string& dir_bytes,
             const std::vector<std::string>& index_bytes) {
  static int roots = 0;
  const std::string name = "resigned-fuzz-" + std::to_string(roots++);
  {
    StorageOptions so;
    so.create = true;
    std::unique_ptr<Storage> storage = OpenStorage("mem://" + name, so).value();
    for (size_t r = 0; r < base.data.size(); ++r) {
      (void)storage->PutString(
          format::DataObjectKey(kStep, static_cast<int>(r), kAttempt),
          base.data[r]);
    }
    for (size_t r = 0; r < index_bytes.size(); ++r) {
      (void)storage->PutString(
          format::IndexObjectKey(kStep, static_cast<int>(r), kAttempt),
          index_bytes[r]);
    }
    (void)storage->PutString(format::DirectoryKey(kStep, kAttempt), dir_bytes);
    (void)storage->PutString(format::ManifestKey(kStep), record);
    Options o;
    o.job_id = "fuzz";
    Result<std::unique_ptr<CheckpointManager>> mgr =
        CheckpointManager::Open("mem://" + name, o);
    if (!mgr.ok()) std::abort();
    Result<VerifyReport> report = (*mgr)->Verify(kStep);
    Expect(report.status());
    // The state a one-rank job would load: every global entry small enough.
    State state;
    std::vector<std::vector<std::byte>> buffers;
    buffers.reserve(dir.entries.size());
    for (const format::DirectoryEntry& e : dir.entries) {
      if (e.kind == EntryKind::kMetadata || e.owner >= 0) continue;
      uint64_t bytes = DTypeSize(e.dtype);
      bool small = true;
      for (int64_t l : e.shape) {
        if (l < 0 || (l > 0 && bytes > kMaxLoadBytes / l)) small = false;
        if (small) bytes *= static_cast<uint64_t>(l);
      }
      if (!small || bytes > kMaxLoadBytes) continue;
      if (e.kind == EntryKind::kBlob) {
        state.AddBlob(e.name, std::string(bytes, '\0'));
        continue;
      }
      std::vector<std::byte>& b = buffers.emplace_back(bytes);
      state.AddTensor(e.name, TensorView{e.dtype, e.shape, b.data(), true});
    }
    if (state.status().ok()) {
      Result<CheckpointInfo> loaded = (*mgr)->Load(kStep, state);
      if (kVerbose) {
        std::fprintf(stderr, "  load: %s\n",
                     loaded.status().ToString().c_str());
      }
      const ErrorCode code = loaded.status().code();
      if (!loaded.ok() && code != ErrorCode::kDataLoss &&
          code != ErrorCode::kNotFound && code != ErrorCode::kInvalidArgument &&
          code != ErrorCode::kFailedPrecondition) {
        std::fprintf(stderr, "load: %s\n", loaded.status().ToString().c_str());
        std::abort();
      }
    }
  }
  DropMemoryStore(name);
}

void WriteSeeds(const char* folder) {
  std::filesystem::create_directories(folder);
  const auto op = [](uint8_t kind, uint8_t a, uint8_t b, uint64_t v) {
    std::string s;
    PutOp(s, {kind, a, b, v});
    return s;
  };
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"one-rank", std::string(1, '\0')},
      {"four-ranks", std::string(1, '\1')},
      // A run of 2^62 empty boxes added to "w", all of rank 0.
      {"huge-count-empty-run", std::string(1, '\0') + op(5, 0, 0, 0) +
                                   op(0, 1, 0, uint64_t{1} << 62) +
                                   op(1, 1, 0, 0)},
      // The empty pieces of "z", all rank 0's: 2^62 of them.
      {"huge-count-zero-size", std::string(1, '\1') + op(4, 3, 128, 0) +
                                   op(3, 3, 0, 0) +
                                   op(0, 3, 0, uint64_t{1} << 62)},
      // Chunk 1 of "w" over chunk 0, signed again.
      {"overlapping-chunks", std::string(1, '\0') + op(6, 1, 0, kDataStart)},
      // Chunk 1 a copy of chunk 0.
      {"copied-chunk", std::string(1, '\0') + op(8, 1, 0, 0)},
      // The rows of "w" at a stride of one row, two rows each: every
      // rank's overlaps the next one's, in the directory and the indexes.
      {"overlapping-pieces", std::string(1, '\1') + op(3, 0, 0, 1) +
                                 op(10, 4, 0, 1) + op(10, 8, 0, 2) +
                                 op(10, 12, 0, 3)},
      // Chunk lengths that wrap 64 bits to the box's bytes.
      {"wrapping-lengths", std::string(1, '\0') + op(13, 0, 0, UINT64_MAX) +
                               op(7, 0, 0, uint64_t{1} << 63) +
                               op(7, 1, 0, (uint64_t{1} << 63) + kChunk)},
      // A chunk past the end of its object.
      {"chunk-past-end", std::string(1, '\0') + op(6, 3, 0, kObjectBytes - 8)},
      // A shape of 2^62 rows.
      {"huge-shape", std::string(1, '\1') + op(14, 0, 0, uint64_t{1} << 62)},
  };
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(std::string(folder) + "/" + name, std::ios::binary) << bytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* folder = std::getenv("CKPT_WRITE_SEEDS")) {
    WriteSeeds(folder);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Base& base = Bases(data[0]);
  Directory dir = base.dir;
  std::vector<RankIndex> indexes = base.indexes;
  Apply(ParseOps(data + 1, size - 1), dir, indexes);
  std::vector<std::string> index_bytes;
  std::string dir_bytes;
  const std::string record = Resign(base, dir, indexes, index_bytes, dir_bytes);
  Result<Manifest> header = format::DecodeManifest(record, "fuzz");
  if (!header.ok()) std::abort();  // the record is never what is fuzzed
  Decoded(*header, dir_bytes, index_bytes);
  Managed(base, dir, record, dir_bytes, index_bytes);
  return 0;
}

// Mostly a new or changed operation with a value that matters; now and
// then libFuzzer's own byte mutation.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size,
                                          size_t max_size, unsigned seed) {
  std::mt19937 gen(seed);
  if (size == 0 || gen() % 8 == 0) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  std::vector<Op> ops = ParseOps(data + 1, size - 1);
  static const uint64_t kValues[] = {0,
                                     1,
                                     2,
                                     3,
                                     kChunk,
                                     kChunk - 1,
                                     kDataStart,
                                     kObjectBytes,
                                     kObjectBytes - 1,
                                     100'000,
                                     uint64_t{1} << 31,
                                     uint64_t{1} << 32,
                                     uint64_t{1} << 62,
                                     uint64_t{1} << 63,
                                     UINT64_MAX,
                                     UINT64_MAX - 1};
  Op op{static_cast<uint8_t>(gen()), static_cast<uint8_t>(gen() % 16),
        static_cast<uint8_t>(gen()), 0};
  op.v = gen() % 4 == 0 ? gen() : kValues[gen() % std::size(kValues)];
  switch (gen() % 4) {
    case 0:
      if (!ops.empty()) {
        ops.erase(ops.begin() + gen() % ops.size());
        break;
      }
      [[fallthrough]];
    case 1:
      if (!ops.empty()) {
        ops[gen() % ops.size()].v = op.v;
        break;
      }
      [[fallthrough]];
    default:
      if (ops.size() < kMaxOps) ops.push_back(op);
  }
  std::string out(1, static_cast<char>(data[0]));
  for (const Op& o : ops) PutOp(out, o);
  if (out.size() > max_size) return size;
  std::memcpy(data, out.data(), out.size());
  return out.size();
}
