#include "util/checksum.h"

#include <xxhash.h>

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

Checksum128 Xxh3_128(std::span<const std::byte> data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return Checksum128{h.high64, h.low64};
}

Checksum128 Xxh3_128(std::string_view data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return Checksum128{h.high64, h.low64};
}

Xxh3Hasher::Xxh3Hasher() : state_(XXH3_createState()) { Reset(); }
Xxh3Hasher::~Xxh3Hasher() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void Xxh3Hasher::Reset() {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}

void Xxh3Hasher::Update(std::span<const std::byte> data) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data.data(),
                      data.size());
}

Checksum128 Xxh3Hasher::Digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Checksum128{h.high64, h.low64};
}

}  // namespace ckpt
