// Lossless compression of one chunk (docs/format.md, "Compressed chunks").
//
// A chunk of a tensor of 2-, 4- or 8-byte elements is split into byte
// planes first (every element's byte 0, then every byte 1, ...). A float's
// bits are first rotated left by one, which puts its sign at the bottom and
// its exponent's top eight bits in the top plane: a trained float's
// exponent takes few values while its mantissa bytes are close to random,
// so only the top plane goes to zstd and the others are stored as they
// are, which zstd would spend time on for nothing. An integer's planes all
// go to zstd (its high bytes are mostly equal); one-byte elements and
// opaque bytes go to zstd as they are.
//
// Decoding is bounded by the chunk's stated length: the caller gives the
// output buffer, and a stored frame that claims another size, holds more
// than one frame or ends early is an error, never a larger allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/status.h"

namespace ckpt::codec {

// The codec of a stored chunk, as the formats record it (a u8 in an index,
// a name in a JSON manifest). Values are part of the format: never reuse one.
enum class Codec : uint8_t {
  kRaw = 0,          // the bytes as they are
  kZstd = 1,         // one zstd frame of the bytes
  kZstdPlanes2 = 2,  // one zstd frame of the bytes in 2 byte planes
  kZstdPlanes4 = 3,  // ... in 4 byte planes
  kZstdPlanes8 = 4,  // ... in 8 byte planes
  // Floats of 2, 4 and 8 bytes: rotated left by one bit, in byte planes;
  // one zstd frame of the top plane, then the other planes as they are.
  kZstdFloat16 = 5,
  kZstdFloat32 = 6,
  kZstdFloat64 = 7,
};
inline constexpr uint8_t kLastCodec = 7;

// "raw", "zstd", "zstd-planes2", "zstd-planes4", "zstd-planes8",
// "zstd-float16", "zstd-float32", "zstd-float64".
std::string_view CodecName(Codec codec);
std::optional<Codec> CodecFromName(std::string_view name);
std::optional<Codec> CodecFromByte(uint8_t value);

// The compressed codec for chunks of `dtype`: the float codec of its width
// (F16, BF16, F32, F64), byte planes as wide as its element (integers), or
// plain zstd for one-byte elements.
Codec CodecFor(DType dtype);

// zstd's levels that ckpt accepts: 1 (fastest) to 19. Negative (faster
// still) levels are accepted too, down to -7.
inline constexpr int kMinLevel = -7;
inline constexpr int kMaxLevel = 19;
inline constexpr int kDefaultLevel = 1;

// Compresses `raw` with `codec` (not kRaw) at `level` into `out` (resized to
// the stored bytes). Returns false, leaving `out` unspecified, when the
// result would not be smaller than `raw`: the caller stores the chunk raw.
// Thread-safe: each thread keeps its own zstd context and scratch memory.
bool Compress(Codec codec, int level, std::span<const std::byte> raw,
              std::vector<std::byte>& out);

// Decompresses `stored`, written by Compress with `codec`, into `out`, whose
// size is the chunk's stated raw length. An error (a message saying what is
// wrong, for the caller to name the chunk) unless `stored` is exactly one
// zstd frame that declares and yields exactly out.size() bytes. Allocates
// at most out.size() bytes of scratch (byte planes), whatever `stored` says.
Status Decompress(Codec codec, std::span<const std::byte> stored,
                  std::span<std::byte> out);

}  // namespace ckpt::codec
