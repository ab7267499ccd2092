// What the two halves of bench_nodes share: the driver (bench/nodes.cc),
// which brings up the node bed and starts the jobs under mpirun, and the
// ranks of those jobs (bench/nodes_rank.cc), which save and load.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ckpt_bench_nodes {

// The state: `tensors` U32 tensors of rows x cols. Rows are a multiple of
// 24, so that 6, 8 and 12 ranks split them evenly (and the boxes of 6 and
// 12 straddle the pieces of 8).
struct Shape {
  int tensors = 32;
  int64_t rows = 0;
  int64_t cols = 1024;  // 4 KiB rows

  uint64_t TensorBytes() const { return rows * cols * 4; }
  uint64_t Bytes() const { return TensorBytes() * tensors; }
};

// At least `mib` MiB in `tensors` tensors.
inline Shape ShapeFor(int64_t mib, int tensors) {
  Shape s;
  s.tensors = tensors;
  const uint64_t row_bytes = s.cols * 4;
  const uint64_t per_tensor =
      ((static_cast<uint64_t>(mib) << 20) + tensors - 1) / tensors;
  const uint64_t rows = (per_tensor + row_bytes - 1) / row_bytes;
  s.rows = static_cast<int64_t>((rows + 23) / 24 * 24);
  return s;
}

// The value of element `i` (global, row-major) of tensor `t`: a load that
// puts any byte in the wrong place, or none at all, reads another value.
inline uint32_t Pattern(int t, uint64_t i) {
  return static_cast<uint32_t>(i * 2654435761u + t * 0x9E3779B9u + 0x5bd1e995u);
}

// The rows of dimension 0 that rank `rank` of `world` holds: an even split.
inline int64_t FirstRow(const Shape& s, int rank, int world) {
  return s.rows * rank / world;
}

inline std::string TensorName(int t) {
  char name[16];
  std::snprintf(name, sizeof(name), "t%03d", t);
  return name;
}

// The two layouts of the state on disk.
inline constexpr char kReplicated[] = "replicated";
inline constexpr char kSharded[] = "sharded";

// A rank of a job under mpirun (`bench_nodes --rank ...`); the exit code.
int RankMain(int argc, char** argv);

}  // namespace ckpt_bench_nodes
