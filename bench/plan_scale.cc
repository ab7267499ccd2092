// plan_scale: the metadata cost of a save at scale, without tensor bytes.
//
// Simulates R ranks each holding 100 pieces (100 tensors split by rows across
// all ranks) and measures what the coordinator does: agreeing the plan
// (MakePlan over every rank's offer), building, validating, encoding and
// decoding the manifest. Prints time and manifest size per world size and the
// growth ratio against the smallest, to show planning stays linear in ranks.
//
// Then the same checkpoint's metadata in both layouts: the JSON manifest
// (version 1) and version 3 (a commit record, a directory, an index per
// rank): bytes in all, what one loading rank reads and decodes to load its
// own pieces back and to load twice as much at half the ranks, and the
// coordinator's commit work. In version 3 that is building the directory
// from the plan and the ranks' index digests and encoding it and the commit
// record; each rank encodes its own index in parallel (index_encode_s is
// one rank's share). The directory's summary of every piece
// (DirectoryEntries) is built while the ranks write (PendingDirectoryEntries
// in a save), so it is timed apart (directory_entries_s), not in commit_s.
//
//   bench_plan_scale [--ranks 1024,4096,16384] [--pieces 100] [--json]
//   bench_plan_scale --ranks 16384 --write-root /var/tmp/r16k
//       writes that checkpoint (data of zeros) for timing the ckpt CLI
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "data/planner.h"
#include "data/writer.h"
#include "format/constants.h"
#include "format/index.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "util/proc_status.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

[[noreturn]] void Die(const char* what, const ckpt::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

constexpr int64_t kRowsPerRank = 4, kCols = 64;

// The most resident memory `fn` adds, in bytes: the kernel's peak (VmHWM)
// reset to the current size first (clear_refs), after the allocator gave
// back what it holds free, so that memory freed earlier is not reused
// unseen.
uint64_t PeakAbove(const std::function<void()>& fn) {
  malloc_trim(0);
  const uint64_t before = ckpt::ProcStatus("VmRSS");
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  fn();
  const uint64_t peak = ckpt::ProcStatus("VmHWM");
  return peak > before ? peak - before : 0;
}

// What every rank offers: a row block of each of `pieces` BF16 tensors.
std::vector<ckpt::Offer> Offers(int ranks, int pieces) {
  std::vector<ckpt::Offer> offers(ranks);
  for (int r = 0; r < ranks; ++r) {
    offers[r].host = "node" + std::to_string(r / 8);
    for (int k = 0; k < pieces; ++k) {
      ckpt::PieceOffer p;
      p.name = "layers." + std::to_string(k) + ".weight";
      p.dtype = ckpt::DType::kBF16;
      p.shape = {ranks * kRowsPerRank, kCols};
      p.offsets = {r * kRowsPerRank, 0};
      p.lengths = {kRowsPerRank, kCols};
      offers[r].pieces.push_back(std::move(p));
    }
  }
  return offers;
}

// Writes step 1 of a `ranks`-rank job into the root `url` as a save would
// (version 3, every rank's data object of zeros and index, the directory,
// the commit record), one simulated rank after another, so that the ckpt
// CLI can be timed on it: `ckpt ls`, `show`, `verify`.
void WriteRoot(int ranks, int pieces, const std::string& url) {
  auto storage = ckpt::OpenStorage(url);
  if (!storage.ok()) Die("open the root", storage.status());
  auto plan = ckpt::MakePlan(Offers(ranks, pieces));
  if (!plan.ok()) Die("plan", plan.status());
  const std::string attempt = "0123456789abcdef";
  ckpt::format::Directory dir;
  dir.step = 1;
  dir.world_size = ranks;
  ckpt::format::ParseAttempt(attempt, &dir.attempt);
  dir.hosts = plan->hosts;
  dir.entries = ckpt::DirectoryEntries(*plan);
  const std::vector<std::byte> zeros(kRowsPerRank * kCols * 2);
  std::vector<std::vector<size_t>> mine(ranks);
  for (size_t i = 0; i < plan->pieces.size(); ++i) {
    mine[plan->pieces[i].writer].push_back(i);
  }
  uint64_t data_bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<ckpt::PieceToWrite> write;
    for (size_t i : mine[r]) {
      const ckpt::PlannedPiece& p = plan->pieces[i];
      write.push_back({plan->entries[p.entry].name, ckpt::DType::kBF16,
                       p.lengths, zeros, false});
    }
    const std::string key = ckpt::format::DataObjectKey(1, r, attempt);
    auto written = ckpt::WriteDataObject(**storage, key, write, 4 << 20);
    if (!written.ok()) Die("write a data object", written.status());
    ckpt::format::RankIndex x;
    x.step = 1;
    x.rank = r;
    x.world_size = ranks;
    x.attempt = dir.attempt;
    x.objects.push_back({1, r, dir.attempt, written->size});
    for (size_t k = 0; k < mine[r].size(); ++k) {
      const ckpt::PlannedPiece& p = plan->pieces[mine[r][k]];
      ckpt::format::IndexPiece ip{static_cast<uint32_t>(p.entry), p.offsets,
                                  p.lengths, written->chunks[k]};
      auto& sum = dir.entries[p.entry].pieces_sum;
      sum = ckpt::format::AddSums(
          sum, ckpt::format::PieceHash(ip.offsets, ip.lengths, ip.chunks));
      x.pieces.push_back(std::move(ip));
    }
    const std::string index = ckpt::format::EncodeRankIndex(x);
    if (auto s = (*storage)->PutString(
            ckpt::format::IndexObjectKey(1, r, attempt), index);
        !s.ok()) {
      Die("write an index", s);
    }
    dir.indexes.push_back({index.size(), ckpt::Xxh3_128(index)});
    dir.objects.push_back(x.objects[0]);
    data_bytes += written->size;
  }
  const std::string directory = ckpt::format::EncodeDirectory(dir);
  ckpt::format::Manifest record;
  record.version = ckpt::format::kScalableManifestVersion;
  record.job_id = "bench_plan_scale";
  record.step = 1;
  record.attempt = attempt;
  record.world_size = ranks;
  record.chunk_size = 4 << 20;
  record.directory = {ckpt::format::DirectoryKey(1, attempt), directory.size(),
                      ckpt::Xxh3_128(directory)};
  record.data_bytes = record.own_data_bytes = data_bytes;
  if (auto s = (*storage)->PutString(record.directory.key, directory);
      !s.ok()) {
    Die("write the directory", s);
  }
  if (auto s = (*storage)->PutString(ckpt::format::ManifestKey(1),
                                     ckpt::format::EncodeManifest(record),
                                     ckpt::PutMode::kCreateIfAbsent);
      !s.ok()) {
    Die("write the commit record", s);
  }
  std::printf("wrote step 1 of %d ranks x %d pieces to %s\n", ranks, pieces,
              url.c_str());
}

// One layout's metadata figures at one world size.
struct Layout {
  int version;
  uint64_t total_bytes, chunks;
  uint64_t load_bytes, reshard_bytes;
  double load_s, reshard_s, commit_s, index_encode_s;
  double entries_s = 0;  // version 3: the directory's entries, beside writes
  // Decoding all of it (a JSON manifest; version 3's record, directory and
  // every index, assembled as verify does): the most memory it added.
  uint64_t decode_peak_bytes = 0;
};

struct Row {
  int ranks;
  double plan_s, build_s, validate_s, encode_s, decode_s;
  size_t manifest_bytes;
  Layout json, v3;
};

// What a rank reads and decodes to load the rows [row0, row0 + rows) of
// every tensor from a version 3 checkpoint: the commit record, the
// directory and the indexes of the ranks whose pieces meet those rows.
// Returns seconds; adds the bytes read to `bytes`.
double LoadV3(const std::string& record, const std::string& directory,
              const std::vector<std::string>& indexes, int64_t row0,
              int64_t rows, int64_t cols, uint64_t& bytes) {
  auto t0 = Clock::now();
  auto header = ckpt::format::DecodeManifest(record, "commit record");
  if (!header.ok()) Die("decode commit record", header.status());
  auto dir = ckpt::format::DecodeDirectory(directory, "directory");
  if (!dir.ok()) Die("decode directory", dir.status());
  bytes += record.size() + directory.size();
  std::vector<int32_t> ranks;
  for (const ckpt::format::DirectoryEntry& e : dir->entries) {
    ckpt::format::RanksMeeting(e, {row0, 0}, {rows, cols}, ranks);
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<ckpt::format::RankIndex> read;
  for (int32_t r : ranks) {
    bytes += indexes[r].size();
    auto x = ckpt::format::DecodeRankIndex(indexes[r], "index");
    if (!x.ok()) Die("decode index", x.status());
    read.push_back(std::move(*x));
  }
  auto m = ckpt::format::Assemble(*header, *dir, std::move(read), false,
                                  "version 3 metadata");
  if (!m.ok()) Die("assemble", m.status());
  return Seconds(t0, Clock::now());
}

Row Measure(int ranks, int pieces_per_rank) {
  std::vector<ckpt::Offer> offers = Offers(ranks, pieces_per_rank);
  Row row{ranks};
  auto t0 = Clock::now();
  auto plan = ckpt::MakePlan(offers);
  auto t1 = Clock::now();
  if (!plan.ok()) {
    std::fprintf(stderr, "plan: %s\n", plan.status().ToString().c_str());
    std::exit(1);
  }
  row.plan_s = Seconds(t0, t1);

  // The manifest the coordinator would write: one object per rank, one chunk
  // per piece (each piece is 512 bytes, below any chunk size).
  ckpt::format::Manifest m;
  m.version = 1;
  m.job_id = "bench";
  m.step = 1;
  m.attempt = "0123456789abcdef";
  m.world_size = ranks;
  m.hosts = plan->hosts;
  m.chunk_size = 4 << 20;
  std::vector<uint64_t> cursor(ranks, 64);
  for (int r = 0; r < ranks; ++r) {
    m.objects.push_back({ckpt::format::DataObjectKey(1, r, m.attempt),
                         64 + plan->bytes_per_rank[r], r});
  }
  for (const ckpt::PlannedEntry& e : plan->entries) {
    ckpt::format::EntryRecord rec;
    rec.name = e.name;
    rec.dtype = e.dtype;
    rec.shape = e.shape;
    for (size_t pi : e.pieces) {
      const ckpt::PlannedPiece& p = plan->pieces[pi];
      const uint64_t off = cursor[p.writer];
      cursor[p.writer] += p.bytes;
      rec.pieces.push_back({p.offsets,
                            p.lengths,
                            p.writer,
                            {{.object = static_cast<uint32_t>(p.writer),
                              .offset = off,
                              .length = p.bytes,
                              .checksum = ckpt::Checksum128{pi, off}}}});
    }
    m.entries.push_back(std::move(rec));
  }
  auto t2 = Clock::now();
  row.build_s = Seconds(t1, t2);
  ckpt::Status valid = ckpt::format::ValidateManifest(m);
  auto t3 = Clock::now();
  if (!valid.ok()) {
    std::fprintf(stderr, "validate: %s\n", valid.ToString().c_str());
    std::exit(1);
  }
  row.validate_s = Seconds(t2, t3);
  const std::string bytes = ckpt::format::EncodeManifest(m);
  auto t4 = Clock::now();
  row.encode_s = Seconds(t3, t4);
  auto back = ckpt::format::DecodeManifest(bytes, "bench manifest");
  auto t5 = Clock::now();
  if (!back.ok()) {
    std::fprintf(stderr, "decode: %s\n", back.status().ToString().c_str());
    std::exit(1);
  }
  row.decode_s = Seconds(t4, t5);
  row.manifest_bytes = bytes.size();

  // The JSON layout: every rank reads and decodes the whole manifest.
  uint64_t chunks = 0;
  for (const auto& e : m.entries) {
    for (const auto& p : e.pieces) chunks += p.chunks.size();
  }
  row.json = {1,
              bytes.size(),
              chunks,
              bytes.size(),
              bytes.size(),
              row.decode_s,
              row.decode_s,
              row.build_s + row.validate_s + row.encode_s,
              0};

  row.json.decode_peak_bytes = PeakAbove([&] {
    auto again = ckpt::format::DecodeManifest(bytes, "bench manifest");
    if (!again.ok()) Die("decode", again.status());
  });

  // Version 3. The ranks' indexes (each rank encodes its own).
  m.version = ckpt::format::kScalableManifestVersion;
  auto t6 = Clock::now();
  auto split = ckpt::format::Split(m);
  auto t7 = Clock::now();
  if (!split.ok()) Die("split", split.status());
  Layout& v3 = row.v3;
  v3.index_encode_s = Seconds(t6, t7) / ranks;
  // The coordinator's commit work, best of three as the loads below: a
  // single timing of a few milliseconds is mostly noise at 1,024 ranks.
  v3.commit_s = 1e9;
  v3.entries_s = 1e9;
  std::string directory, record_bytes;
  for (int round = 0; round < 3; ++round) {
    // While the ranks write: the coordinator summarizes the plan's pieces.
    auto te = Clock::now();
    std::vector<ckpt::format::DirectoryEntry> entries =
        ckpt::DirectoryEntries(*plan);
    v3.entries_s = std::min(v3.entries_s, Seconds(te, Clock::now()));
    directory.clear();
    record_bytes.clear();
    t7 = Clock::now();
    // The coordinator: the directory from the plan (no chunk row), with the
    // digests the ranks sent, then the commit record.
    ckpt::format::Directory dir;
    dir.step = m.step;
    dir.world_size = ranks;
    ckpt::format::ParseAttempt(m.attempt, &dir.attempt);
    dir.hosts = plan->hosts;
    // Each rank checksums its own index (inside Split here).
    dir.indexes = split->directory.indexes;
    for (const auto& o : m.objects) {
      ckpt::format::DataObjectId id;
      ckpt::format::ParseDataObjectId(o.key, &id);
      id.size = o.size;
      dir.objects.push_back(id);
    }
    dir.entries = std::move(entries);
    // The sums of each entry's pieces, which the ranks send with their digests.
    for (size_t e = 0; e < dir.entries.size(); ++e) {
      dir.entries[e].pieces_sum = split->directory.entries[e].pieces_sum;
    }
    // Checked as the coordinator checks it before writing it.
    if (ckpt::Status s = ckpt::format::CheckDirectory(dir, "bench directory");
        !s.ok()) {
      Die("check the directory", s);
    }
    directory = ckpt::format::EncodeDirectory(dir);
    ckpt::format::Manifest record;
    record.version = m.version;
    record.job_id = m.job_id;
    record.step = m.step;
    record.attempt = m.attempt;
    record.world_size = m.world_size;
    record.chunk_size = m.chunk_size;
    record.directory = {ckpt::format::DirectoryKey(m.step, m.attempt),
                        directory.size(), ckpt::Xxh3_128(directory)};
    for (const auto& o : dir.objects) record.data_bytes += o.size;
    record.own_data_bytes = record.data_bytes;
    record_bytes = ckpt::format::EncodeManifest(record);
    auto t8 = Clock::now();
    v3.commit_s = std::min(v3.commit_s, Seconds(t7, t8));
  }
  if (directory != split->directory_bytes) {
    std::fprintf(stderr, "the directory built from the plan differs\n");
    std::exit(1);
  }
  v3.version = ckpt::format::kScalableManifestVersion;
  v3.chunks = chunks;
  v3.total_bytes = record_bytes.size() + directory.size();
  for (const std::string& x : split->indexes) v3.total_bytes += x.size();
  // What verify decodes: the commit record and the directory, then every
  // index one at a time, as ManifestStore::ForEachRank walks them
  // (format::IndexWalk): one rank's pieces and a span per chunk at once.
  v3.decode_peak_bytes = PeakAbove([&] {
    auto header = ckpt::format::DecodeManifest(record_bytes, "commit record");
    if (!header.ok()) Die("decode commit record", header.status());
    auto d = ckpt::format::DecodeDirectory(directory, "directory");
    if (!d.ok()) Die("decode directory", d.status());
    ckpt::format::IndexWalk walk(*header, *d, "version 3 metadata");
    if (auto s = walk.CheckEntriesDisjoint(); !s.ok()) Die("walk", s);
    for (const std::string& x : split->indexes) {
      auto index = ckpt::format::DecodeRankIndex(x, "index");
      if (!index.ok()) Die("decode index", index.status());
      auto one = walk.Next(std::move(*index));
      if (!one.ok()) Die("walk index", one.status());
    }
    if (auto s = walk.Finish(); !s.ok()) Die("walk", s);
  });
  // A rank in the middle loads its own rows back; at half the ranks, a
  // rank loads the rows of two old ranks.
  const int64_t mid = ranks / 2;
  // Best of three: a loading rank is one process among many, timed warm.
  v3.load_s = v3.reshard_s = 1e9;
  for (int round = 0; round < 3; ++round) {
    v3.load_bytes = v3.reshard_bytes = 0;
    v3.load_s = std::min(v3.load_s, LoadV3(record_bytes, directory,
                                           split->indexes, mid * kRowsPerRank,
                                           kRowsPerRank, kCols, v3.load_bytes));
    v3.reshard_s =
        std::min(v3.reshard_s, LoadV3(record_bytes, directory, split->indexes,
                                      mid * kRowsPerRank, 2 * kRowsPerRank,
                                      kCols, v3.reshard_bytes));
  }
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {1024, 4096, 16384};
  int pieces = 100;
  bool json = false;
  std::string write_root;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ranks") && i + 1 < argc) {
      ranks.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) {
        ranks.push_back(std::atoi(item.c_str()));
      }
    } else if (!std::strcmp(argv[i], "--pieces") && i + 1 < argc) {
      pieces = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else if (!std::strcmp(argv[i], "--write-root") && i + 1 < argc) {
      write_root = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_plan_scale [--ranks 1024,4096,16384] "
                   "[--pieces 100] [--json] [--write-root URL]\n");
      return 2;
    }
  }
  if (!write_root.empty()) {
    // A checkpoint on storage instead of figures: the largest world.
    WriteRoot(ranks.back(), pieces, write_root);
    return 0;
  }
  std::vector<Row> rows;
  for (int r : ranks) rows.push_back(Measure(r, pieces));
  const Row& base = rows.front();
  const double base_total = base.plan_s + base.validate_s;
  if (json) {
    // ratios.metadata_peak_vs_bound: the worst over layouts at the largest
    // world of the memory decoding adds ÷ (2 × the metadata's bytes + 64
    // MiB), the bound forged metadata is already held to.
    const Row& top = rows.back();
    double worst = 0;
    for (const Layout* l : {&top.json, &top.v3}) {
      const double bound = 2.0 * l->total_bytes + 64.0 * (1 << 20);
      worst = std::max(worst, l->decode_peak_bytes / bound);
    }
    std::printf(
        "{\"ratios\":{\"metadata_peak_vs_bound\":%.4f,"
        "\"json_metadata_peak_vs_bound\":%.4f,"
        "\"v3_metadata_peak_vs_bound\":%.4f},\"rows\":[",
        worst,
        top.json.decode_peak_bytes /
            (2.0 * top.json.total_bytes + 64.0 * (1 << 20)),
        top.v3.decode_peak_bytes /
            (2.0 * top.v3.total_bytes + 64.0 * (1 << 20)));
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      for (const Layout* l : {&r.json, &r.v3}) {
        std::printf(
            "%s{\"ranks\":%d,\"pieces_per_rank\":%d,\"format_version\":%d,"
            "\"plan_s\":%.4f,\"build_s\":%.4f,\"validate_s\":%.4f,"
            "\"encode_s\":%.4f,\"decode_s\":%.4f,\"manifest_bytes\":%zu,"
            "\"plan_validate_growth\":%.2f,\"rank_growth\":%.2f,"
            "\"metadata_bytes_total\":%llu,\"bytes_per_chunk\":%.1f,"
            "\"load_rank_bytes_read\":%llu,\"load_rank_decode_s\":%.5f,"
            "\"reshard_rank_bytes_read\":%llu,"
            "\"reshard_rank_decode_s\":%.5f,\"commit_s\":%.4f,"
            "\"index_encode_s\":%.6f,\"directory_entries_s\":%.4f,"
            "\"decode_peak_bytes\":%llu}",
            (i || l == &r.v3) ? "," : "", r.ranks, pieces, l->version, r.plan_s,
            r.build_s, r.validate_s, r.encode_s, r.decode_s, r.manifest_bytes,
            (r.plan_s + r.validate_s) / base_total,
            static_cast<double>(r.ranks) / base.ranks,
            static_cast<unsigned long long>(l->total_bytes),
            static_cast<double>(l->total_bytes) / l->chunks,
            static_cast<unsigned long long>(l->load_bytes), l->load_s,
            static_cast<unsigned long long>(l->reshard_bytes), l->reshard_s,
            l->commit_s, l->index_encode_s, l->entries_s,
            static_cast<unsigned long long>(l->decode_peak_bytes));
      }
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("%d pieces per rank, no tensor bytes\n\n", pieces);
  std::printf("%8s %9s %9s %9s %9s %9s %12s %10s %8s\n", "ranks", "plan s",
              "build s", "valid s", "encode s", "decode s", "manifest MB",
              "plan+val x", "ranks x");
  for (const Row& r : rows) {
    std::printf("%8d %9.3f %9.3f %9.3f %9.3f %9.3f %12.1f %10.2f %8.2f\n",
                r.ranks, r.plan_s, r.build_s, r.validate_s, r.encode_s,
                r.decode_s, r.manifest_bytes / 1e6,
                (r.plan_s + r.validate_s) / base_total,
                static_cast<double>(r.ranks) / base.ranks);
  }
  std::printf(
      "\nmetadata per layout (a loading rank: its own rows; reshard: twice "
      "the rows at half the ranks)\n\n");
  std::printf("%8s %8s %10s %8s %11s %10s %11s %10s %9s %10s\n", "ranks",
              "version", "total MB", "B/chunk", "load KB", "load s",
              "reshard KB", "reshard s", "commit s", "beside s");
  for (const Row& r : rows) {
    for (const Layout* l : {&r.json, &r.v3}) {
      std::printf(
          "%8d %8d %10.1f %8.1f %11.1f %10.4f %11.1f %10.4f %9.4f %10.4f\n",
          r.ranks, l->version, l->total_bytes / 1e6,
          static_cast<double>(l->total_bytes) / l->chunks, l->load_bytes / 1e3,
          l->load_s, l->reshard_bytes / 1e3, l->reshard_s, l->commit_s,
          l->entries_s);
    }
  }
  std::printf(
      "\n(beside s: the directory's summary of every piece, which the "
      "coordinator builds while the ranks write)\n");
  if (rows.size() > 1) {
    const Layout& a = rows.front().v3;
    const Layout& b = rows.back().v3;
    const double n =
        static_cast<double>(rows.back().ranks) / rows.front().ranks;
    std::printf(
        "version 3 growth for %.0fx the ranks (linear within 1.2x: <= %.1f): "
        "load decode %.1fx, reshard decode %.1fx, commit %.1fx, beside "
        "%.1fx\n",
        n, 1.2 * n, b.load_s / a.load_s, b.reshard_s / a.reshard_s,
        b.commit_s / a.commit_s, b.entries_s / a.entries_s);
  }
  std::printf(
      "\ntargets at the largest world (version 3): a loading rank reads "
      "<= 1 MB in <= 0.1 s, <= 40 B per chunk, commit <= 2 s\n");
  const Layout& top = rows.back().v3;
  std::printf(
      "  read %.3f MB, decode %.4f s, %.1f B/chunk, commit %.3f s: %s\n",
      top.load_bytes / 1e6, top.load_s,
      static_cast<double>(top.total_bytes) / top.chunks, top.commit_s,
      (top.load_bytes <= 1000000 && top.load_s <= 0.1 &&
       top.total_bytes <= 40 * top.chunks && top.commit_s <= 2)
          ? "met"
          : "NOT met");
  return 0;
}
