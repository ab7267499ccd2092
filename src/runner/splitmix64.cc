#include "ckpt/sampler.h"

namespace ckpt {

uint64_t SplitMix64::Next() {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Lemire's multiply-shift: the high half of a 128-bit product, redrawn in
// the rare case that the low half falls where it would bias the result.
uint64_t SplitMix64::Below(uint64_t bound) {
  unsigned __int128 p = static_cast<unsigned __int128>(Next()) * bound;
  uint64_t low = static_cast<uint64_t>(p);
  if (low < bound) {
    const uint64_t threshold = -bound % bound;
    while (low < threshold) {
      p = static_cast<unsigned __int128>(Next()) * bound;
      low = static_cast<uint64_t>(p);
    }
  }
  return static_cast<uint64_t>(p >> 64);
}

}  // namespace ckpt
