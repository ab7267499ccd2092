// Little-endian byte coding, independent of the host's byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckpt {

inline void EncodeU64LE(uint64_t v, void* out) {
  auto* p = static_cast<unsigned char*>(out);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline uint64_t DecodeU64LE(const void* in) {
  const auto* p = static_cast<const unsigned char*>(in);
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace ckpt
