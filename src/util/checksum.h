// xxh3-128 checksums of chunks and manifests (libxxhash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

struct Checksum128 {
  uint64_t high = 0;
  uint64_t low = 0;

  // 32 lower-case hex digits, high half first (XXH128's canonical order).
  std::string Hex() const;
  // Parses exactly 32 hex digits; nullopt otherwise.
  static std::optional<Checksum128> FromHex(std::string_view hex);

  friend bool operator==(const Checksum128&, const Checksum128&) = default;
};

// Where the CPU has AVX2, these run xxHash's AVX2 code (xxh3_avx2.c);
// elsewhere, or with $CKPT_XXH3_PORTABLE=1, the system libxxhash's. Both
// give the same checksums.
bool Xxh3UsesAvx2();

Checksum128 Xxh3_128(std::span<const std::byte> data);
Checksum128 Xxh3_128(std::string_view data);
// XXH3-64: a compressed chunk's stored bytes (the chunk's own bytes keep
// their XXH3-128).
uint64_t Xxh3_64(std::span<const std::byte> data);
// 16 lower-case hex digits, most significant first; FromHex64 parses
// exactly that.
std::string Hex64(uint64_t v);
std::optional<uint64_t> FromHex64(std::string_view hex);

// Streaming form, for checksumming a chunk while it is being written.
class Xxh3Hasher {
 public:
  Xxh3Hasher();
  ~Xxh3Hasher();
  Xxh3Hasher(const Xxh3Hasher&) = delete;
  Xxh3Hasher& operator=(const Xxh3Hasher&) = delete;

  void Reset();
  void Update(std::span<const std::byte> data);
  Checksum128 Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of the header
};

}  // namespace ckpt
