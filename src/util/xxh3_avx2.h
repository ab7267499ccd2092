// xxh3-128 compiled for AVX2 (xxh3_avx2.c), for checksum.cc to call where
// the CPU has AVX2. A state is an XXH3_state_t of the same libxxhash header,
// made by XXH3_createState. out[0] is the high half, out[1] the low.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void ckpt_xxh3_128_avx2(const void* data, size_t len, uint64_t out[2]);
void ckpt_xxh3_128_reset_avx2(void* state);
void ckpt_xxh3_128_update_avx2(void* state, const void* data, size_t len);
void ckpt_xxh3_128_digest_avx2(const void* state, uint64_t out[2]);

#ifdef __cplusplus
}
#endif
