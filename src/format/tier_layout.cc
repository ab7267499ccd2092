#include "format/tier_layout.h"

#include <cstdio>

#include "format/layout.h"

namespace ckpt::format {
namespace {

bool ParseDigits(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 18) return false;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

std::string ShareDirName(int rank) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "r%05d", rank);
  return buf;
}

std::string TierMarkerPrefix(int64_t step) {
  return std::string(kTierMarkerPrefix) + StepDirName(step).substr(5) + "-w";
}

std::string TierMarkerKey(int64_t step, int world_size) {
  return TierMarkerPrefix(step) + std::to_string(world_size);
}

bool ParseTierMarkerKey(std::string_view key, int64_t* step, int* world_size) {
  if (!key.starts_with(kTierMarkerPrefix)) return false;
  key.remove_prefix(kTierMarkerPrefix.size());
  const size_t dash = key.find("-w");
  if (dash != 12) return false;
  int64_t s = 0, w = 0;
  if (!ParseDigits(key.substr(0, dash), &s) ||
      !ParseDigits(key.substr(dash + 2), &w) || w < 1 || w > (1 << 24)) {
    return false;
  }
  *step = s;
  *world_size = static_cast<int>(w);
  return true;
}

bool SplitShareKey(std::string_view key, int* rank, std::string_view* rest) {
  if (key.size() < 7 || key[0] != 'r' || key[6] != '/') return false;
  int64_t r = 0;
  if (!ParseDigits(key.substr(1, 5), &r)) return false;
  *rank = static_cast<int>(r);
  *rest = key.substr(7);
  return true;
}

}  // namespace ckpt::format
