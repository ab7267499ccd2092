// xxh3-128 built for AVX2: this file alone is compiled with -mavx2, and
// checksum.cc calls it only where the CPU has AVX2. On data in cache it
// checksums at about twice the speed of the SSE2 code of the system's
// libxxhash (docs/benchmarks.md, "After reading tmpfs through its pages"),
// which is what a load that checks each piece as it arrives waits for. The
// algorithm, and so every checksum, is the same: the tests compare it with
// libxxhash.
//
// C, not C++, so that nothing compiled here with AVX2 (an inline function
// of a C++ header) can be picked by the linker for code that runs on a CPU
// without it. XXH_INLINE_ALL makes every xxHash function static to this file.
#define XXH_INLINE_ALL
#include "util/xxh3_avx2.h"

#include <xxhash.h>

void ckpt_xxh3_128_avx2(const void* data, size_t len, uint64_t out[2]) {
  const XXH128_hash_t h = XXH3_128bits(data, len);
  out[0] = h.high64;
  out[1] = h.low64;
}

void ckpt_xxh3_128_reset_avx2(void* state) {
  XXH3_128bits_reset((XXH3_state_t*)state);
}

void ckpt_xxh3_128_update_avx2(void* state, const void* data, size_t len) {
  XXH3_128bits_update((XXH3_state_t*)state, data, len);
}

void ckpt_xxh3_128_digest_avx2(const void* state, uint64_t out[2]) {
  const XXH128_hash_t h = XXH3_128bits_digest((const XXH3_state_t*)state);
  out[0] = h.high64;
  out[1] = h.low64;
}
