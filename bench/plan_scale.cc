// plan_scale: the metadata cost of a save at scale, without tensor bytes.
//
// Simulates R ranks each holding 100 pieces (100 tensors split by rows across
// all ranks) and measures what the coordinator does: agreeing the plan
// (MakePlan over every rank's offer), building, validating, encoding and
// decoding the manifest. Prints time and manifest size per world size and the
// growth ratio against the smallest, to show planning stays linear in ranks.
//
//   bench_plan_scale [--ranks 1024,4096,16384] [--pieces 100] [--json]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "checkpoint/planner.h"
#include "format/layout.h"
#include "format/manifest.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Row {
  int ranks;
  double plan_s, build_s, validate_s, encode_s, decode_s;
  size_t manifest_bytes;
};

Row Measure(int ranks, int pieces_per_rank) {
  constexpr int64_t kRowsPerRank = 4, kCols = 64;
  std::vector<ckpt::Offer> offers(ranks);
  for (int r = 0; r < ranks; ++r) {
    offers[r].host = "node" + std::to_string(r / 8);
    for (int k = 0; k < pieces_per_rank; ++k) {
      ckpt::PieceOffer p;
      p.name = "layers." + std::to_string(k) + ".weight";
      p.dtype = ckpt::DType::kBF16;
      p.shape = {ranks * kRowsPerRank, kCols};
      p.offsets = {r * kRowsPerRank, 0};
      p.lengths = {kRowsPerRank, kCols};
      offers[r].pieces.push_back(std::move(p));
    }
  }
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
                            {{static_cast<uint32_t>(p.writer), off, p.bytes,
                              ckpt::Checksum128{pi, off}}}});
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
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {1024, 4096, 16384};
  int pieces = 100;
  bool json = false;
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
    } else {
      std::fprintf(stderr,
                   "usage: bench_plan_scale [--ranks 1024,4096,16384] "
                   "[--pieces 100] [--json]\n");
      return 2;
    }
  }
  std::vector<Row> rows;
  for (int r : ranks) rows.push_back(Measure(r, pieces));
  const Row& base = rows.front();
  const double base_total = base.plan_s + base.validate_s;
  if (json) {
    std::printf("[");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "%s{\"ranks\":%d,\"pieces_per_rank\":%d,\"plan_s\":%.4f,"
          "\"build_s\":%.4f,\"validate_s\":%.4f,\"encode_s\":%.4f,"
          "\"decode_s\":%.4f,\"manifest_bytes\":%zu,"
          "\"plan_validate_growth\":%.2f,\"rank_growth\":%.2f}",
          i ? "," : "", r.ranks, pieces, r.plan_s, r.build_s, r.validate_s,
          r.encode_s, r.decode_s, r.manifest_bytes,
          (r.plan_s + r.validate_s) / base_total,
          static_cast<double>(r.ranks) / base.ranks);
    }
    std::printf("]\n");
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
  return 0;
}
