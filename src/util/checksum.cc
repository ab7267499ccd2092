#include "util/checksum.h"

#include <xxhash.h>

#include <cstdlib>

#include "util/xxh3_avx2.h"

namespace ckpt {

std::string Checksum128::Hex() const {
  static const char* kDigits = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(high >> (4 * i)) & 15];
    out[31 - i] = kDigits[(low >> (4 * i)) & 15];
  }
  return out;
}

std::optional<Checksum128> Checksum128::FromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  Checksum128 out;
  for (size_t i = 0; i < 32; ++i) {
    const char c = hex[i];
    uint64_t v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    uint64_t& half = i < 16 ? out.high : out.low;
    half = (half << 4) | v;
  }
  return out;
}

namespace {

#if defined(CKPT_XXH3_AVX2)
// Whether this CPU takes the AVX2 build of xxh3 (xxh3_avx2.c).
// $CKPT_XXH3_PORTABLE=1 keeps to libxxhash's own code.
bool UseAvx2() {
  static const bool use = [] {
    const char* v = std::getenv("CKPT_XXH3_PORTABLE");
    if (v != nullptr && std::string_view(v) == "1") return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return use;
}
#else
bool UseAvx2() { return false; }
#endif

Checksum128 OneShot(const void* data, size_t len) {
#if defined(CKPT_XXH3_AVX2)
  if (UseAvx2()) {
    uint64_t out[2];
    ckpt_xxh3_128_avx2(data, len, out);
    return Checksum128{out[0], out[1]};
  }
#endif
  XXH128_hash_t h = XXH3_128bits(data, len);
  return Checksum128{h.high64, h.low64};
}

}  // namespace

bool Xxh3UsesAvx2() { return UseAvx2(); }

Checksum128 Xxh3_128(std::span<const std::byte> data) {
  return OneShot(data.data(), data.size());
}

Checksum128 Xxh3_128(std::string_view data) {
  return OneShot(data.data(), data.size());
}

uint64_t Xxh3_64(std::span<const std::byte> data) {
  return XXH3_64bits(data.data(), data.size());
}

std::string Hex64(uint64_t v) {
  // The low half of a Checksum128's spelling.
  return Checksum128{0, v}.Hex().substr(16);
}

std::optional<uint64_t> FromHex64(std::string_view hex) {
  if (hex.size() != 16) return std::nullopt;
  std::optional<Checksum128> sum =
      Checksum128::FromHex(std::string(16, '0') + std::string(hex));
  if (!sum) return std::nullopt;
  return sum->low;
}

Xxh3Hasher::Xxh3Hasher() : state_(XXH3_createState()) { Reset(); }
Xxh3Hasher::~Xxh3Hasher() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void Xxh3Hasher::Reset() {
#if defined(CKPT_XXH3_AVX2)
  if (UseAvx2()) return ckpt_xxh3_128_reset_avx2(state_);
#endif
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}

void Xxh3Hasher::Update(std::span<const std::byte> data) {
#if defined(CKPT_XXH3_AVX2)
  if (UseAvx2()) {
    return ckpt_xxh3_128_update_avx2(state_, data.data(), data.size());
  }
#endif
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data.data(),
                      data.size());
}

Checksum128 Xxh3Hasher::Digest() const {
#if defined(CKPT_XXH3_AVX2)
  if (UseAvx2()) {
    uint64_t out[2];
    ckpt_xxh3_128_digest_avx2(state_, out);
    return Checksum128{out[0], out[1]};
  }
#endif
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Checksum128{h.high64, h.low64};
}

}  // namespace ckpt
