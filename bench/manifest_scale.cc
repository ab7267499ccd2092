// manifest_scale: the cost of reading a large manifest, and of checking that
// many pieces do not overlap, without tensor bytes.
//
// Decode: builds a version 2 (incremental) manifest of N chunk rows — tensors
// of up to 100,000 row pieces, one chunk each, spread over 256 ranks, half the
// chunks referencing the parent step's objects — encodes it, and measures
// DecodeManifest (parse and validate) and the peak RSS it adds
// (VmHWM, reset before it through /proc/self/clear_refs).
//
// Overlap: one 3-d tensor of 80,000 pieces split along dimension 0, 1 or 2,
// or as a 200 x 400 grid over dimensions 0 and 2, timed through
// ValidateManifest and through MakePlan (one rank per piece).
//
//   bench_manifest_scale [--rows 10000,100000,1000000] [--pieces 80000]
//                        [--json]
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/planner.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "util/proc_status.h"

namespace {

using Clock = std::chrono::steady_clock;
using ckpt::ProcStatus;
using ckpt::format::Manifest;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

[[noreturn]] void Die(const char* what, const ckpt::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Resets VmHWM to the current RSS, so the next reading is this phase's peak.
// Free heap pages go back to the kernel first: decoding into pages that
// building and encoding the manifest left resident would hide its cost.
void ResetHighWaterMark() {
  malloc_trim(0);
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  if (!out) {
    std::fprintf(stderr, "cannot write /proc/self/clear_refs\n");
    std::exit(1);
  }
}

struct DecodeRow {
  int64_t rows;
  size_t manifest_bytes;
  double decode_s;
  uint64_t peak_increase;  // bytes
};

std::string MakeManifestBytes(int64_t rows) {
  constexpr int kRanks = 256, kPiecesPerEntry = 100'000;
  constexpr int64_t kRowsPerPiece = 4, kCols = 64, kBytes = 4 * 64 * 2;
  Manifest m;
  m.version = 2;
  m.job_id = "bench";
  m.step = 2;
  m.parent = 1;
  m.chain = 1;
  m.depends_on = {1};
  m.attempt = "0123456789abcdef";
  m.world_size = kRanks;
  for (int r = 0; r < kRanks; ++r)
    m.hosts.push_back("node" + std::to_string(r));
  m.chunk_size = 4 << 20;
  // Objects 0..255 are this step's, 256..511 the parent's.
  std::vector<uint64_t> cursor(2 * kRanks, 64);
  for (int64_t i = 0; i < rows; i += kPiecesPerEntry) {
    ckpt::format::EntryRecord e;
    e.name = "layers." + std::to_string(i / kPiecesPerEntry) + ".weight";
    e.dtype = ckpt::DType::kBF16;
    const int64_t pieces = std::min<int64_t>(kPiecesPerEntry, rows - i);
    e.shape = {pieces * kRowsPerPiece, kCols};
    for (int64_t p = 0; p < pieces; ++p) {
      const int rank = static_cast<int>((i + p) % kRanks);
      const uint32_t object = rank + ((i + p) / kRanks % 2 ? kRanks : 0);
      e.pieces.push_back(
          {{p * kRowsPerPiece, 0},
           {kRowsPerPiece, kCols},
           rank,
           {{.object = object,
             .offset = cursor[object],
             .length = kBytes,
             .checksum = ckpt::Checksum128{static_cast<uint64_t>(i + p),
                                           cursor[object]}}}});
      cursor[object] += kBytes;
    }
    m.entries.push_back(std::move(e));
  }
  for (int o = 0; o < 2 * kRanks; ++o) {
    m.objects.push_back(
        {ckpt::format::DataObjectKey(o < kRanks ? 2 : 1, o % kRanks, m.attempt),
         cursor[o], o % kRanks});
  }
  if (ckpt::Status s = ckpt::format::ValidateManifest(m); !s.ok()) {
    Die("validate", s);
  }
  return ckpt::format::EncodeManifest(m);
}

DecodeRow MeasureDecode(int64_t rows) {
  DecodeRow row{rows};
  const std::string bytes = MakeManifestBytes(rows);
  row.manifest_bytes = bytes.size();
  ResetHighWaterMark();
  const uint64_t before = ProcStatus("VmRSS");
  auto t0 = Clock::now();
  auto m = ckpt::format::DecodeManifest(bytes, "bench manifest");
  auto t1 = Clock::now();
  if (!m.ok()) Die("decode", m.status());
  row.decode_s = Seconds(t0, t1);
  row.peak_increase = ProcStatus("VmHWM") - before;
  return row;
}

struct OverlapRow {
  const char* split;
  double validate_s, plan_s;
};

// 80,000 U8 pieces of a 3-d tensor; `grid` pieces along each dimension.
OverlapRow MeasureOverlap(const char* split, std::vector<int64_t> grid) {
  constexpr int64_t kSide = 4;  // each piece is 4 x 4 x 4
  Manifest m;
  m.version = 1;
  m.job_id = "bench";
  m.step = 1;
  m.attempt = "0123456789abcdef";
  m.chunk_size = 4 << 20;
  m.hosts = {"node0"};
  ckpt::format::EntryRecord e;
  e.name = "t";
  e.dtype = ckpt::DType::kU8;
  for (int64_t g : grid) e.shape.push_back(g * kSide);
  const int64_t n = grid[0] * grid[1] * grid[2];
  std::vector<ckpt::Offer> offers(n);
  uint64_t cursor = 64;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t idx[3] = {i / (grid[1] * grid[2]), i / grid[2] % grid[1],
                            i % grid[2]};
    ckpt::format::PieceRecord p;
    for (int d = 0; d < 3; ++d) {
      p.offsets.push_back(idx[d] * kSide);
      p.lengths.push_back(kSide);
    }
    p.chunks = {{.offset = cursor, .length = kSide * kSide * kSide}};
    cursor += kSide * kSide * kSide;
    offers[i].host = "node" + std::to_string(i);
    offers[i].pieces.push_back({.name = "t",
                                .dtype = e.dtype,
                                .shape = e.shape,
                                .offsets = p.offsets,
                                .lengths = p.lengths});
    e.pieces.push_back(std::move(p));
  }
  m.entries.push_back(std::move(e));
  m.objects.push_back(
      {ckpt::format::DataObjectKey(1, 0, m.attempt), cursor, 0});
  OverlapRow row{split};
  auto t0 = Clock::now();
  ckpt::Status valid = ckpt::format::ValidateManifest(m);
  auto t1 = Clock::now();
  if (!valid.ok()) Die("validate", valid);
  auto plan = ckpt::MakePlan(offers);
  auto t2 = Clock::now();
  if (!plan.ok()) Die("plan", plan.status());
  row.validate_s = Seconds(t0, t1);
  row.plan_s = Seconds(t1, t2);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> rows = {10'000, 100'000, 1'000'000};
  int64_t pieces = 80'000;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rows") && i + 1 < argc) {
      rows.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) {
        rows.push_back(std::atoll(item.c_str()));
      }
    } else if (!std::strcmp(argv[i], "--pieces") && i + 1 < argc) {
      pieces = std::atoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json")) {
      json = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench_manifest_scale [--rows 10000,100000,1000000] "
                   "[--pieces 80000] [--json]\n");
      return 2;
    }
  }
  std::vector<DecodeRow> decodes;
  for (int64_t r : rows) decodes.push_back(MeasureDecode(r));
  // The grid keeps the piece count: 200 x 400 for 80,000.
  const int64_t a = pieces / 400 > 0 ? pieces / 400 : 1;
  const std::vector<OverlapRow> overlaps = {
      MeasureOverlap("dim 0", {pieces, 1, 1}),
      MeasureOverlap("dim 1", {1, pieces, 1}),
      MeasureOverlap("dim 2 (last)", {1, 1, pieces}),
      MeasureOverlap("grid dims 0, 2", {a, 1, pieces / a}),
  };
  if (json) {
    std::printf("{\"decode\":[");
    for (size_t i = 0; i < decodes.size(); ++i) {
      const DecodeRow& d = decodes[i];
      std::printf(
          "%s{\"chunk_rows\":%lld,\"manifest_bytes\":%zu,\"decode_s\":%.4f,"
          "\"peak_rss_increase_bytes\":%llu}",
          i ? "," : "", static_cast<long long>(d.rows), d.manifest_bytes,
          d.decode_s, static_cast<unsigned long long>(d.peak_increase));
    }
    std::printf("],\"overlap\":[");
    for (size_t i = 0; i < overlaps.size(); ++i) {
      const OverlapRow& o = overlaps[i];
      std::printf(
          "%s{\"pieces\":%lld,\"split\":\"%s\",\"validate_s\":%.4f,"
          "\"plan_s\":%.4f}",
          i ? "," : "", static_cast<long long>(pieces), o.split, o.validate_s,
          o.plan_s);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf("decode (parse + validate) of a version 2 manifest\n");
  std::printf("%10s %12s %10s %14s %8s\n", "chunk rows", "manifest MB",
              "decode s", "peak +RSS MB", "x size");
  for (const DecodeRow& d : decodes) {
    std::printf("%10lld %12.1f %10.3f %14.1f %8.2f\n",
                static_cast<long long>(d.rows), d.manifest_bytes / 1e6,
                d.decode_s, d.peak_increase / 1e6,
                static_cast<double>(d.peak_increase) / d.manifest_bytes);
  }
  std::printf("\n%lld pieces of one tensor\n", static_cast<long long>(pieces));
  std::printf("%16s %11s %9s\n", "split", "validate s", "plan s");
  for (const OverlapRow& o : overlaps) {
    std::printf("%16s %11.3f %9.3f\n", o.split, o.validate_s, o.plan_s);
  }
  return 0;
}
