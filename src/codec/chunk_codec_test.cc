#include "codec/chunk_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace ckpt::codec {
namespace {

// Bytes shaped like trained weights: floats near zero of a narrow spread,
// whose exponents take a few values (random bytes would not compress, and
// zeros would compress whatever the planes do).
std::vector<std::byte> WeightLike(DType dtype, size_t bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::byte> out(bytes);
  const size_t w = DTypeSize(dtype);
  for (size_t i = 0; i + w <= bytes; i += w) {
    const float f = normal(rng);
    if (dtype == DType::kF64) {
      const double d = f;
      std::memcpy(&out[i], &d, 8);
    } else if (w == 4) {
      std::memcpy(&out[i], &f, 4);
    } else if (w == 2) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t top = static_cast<uint16_t>(u >> 16);  // bfloat16
      std::memcpy(&out[i], &top, 2);
    } else {
      out[i] = static_cast<std::byte>(static_cast<int>(f * 1000) & 0x0f);
    }
  }
  return out;
}

TEST(ChunkCodec, NamesAndBytesRoundTrip) {
  for (uint8_t i = 0; i <= kLastCodec; ++i) {
    const Codec c = *CodecFromByte(i);
    EXPECT_EQ(CodecFromName(CodecName(c)), c);
  }
  EXPECT_FALSE(CodecFromByte(kLastCodec + 1).has_value());
  EXPECT_FALSE(CodecFromName("gzip").has_value());
  EXPECT_EQ(CodecFor(DType::kBF16), Codec::kZstdFloat16);
  EXPECT_EQ(CodecFor(DType::kF16), Codec::kZstdFloat16);
  EXPECT_EQ(CodecFor(DType::kF32), Codec::kZstdFloat32);
  EXPECT_EQ(CodecFor(DType::kF64), Codec::kZstdFloat64);
  EXPECT_EQ(CodecFor(DType::kI16), Codec::kZstdPlanes2);
  EXPECT_EQ(CodecFor(DType::kU32), Codec::kZstdPlanes4);
  EXPECT_EQ(CodecFor(DType::kI64), Codec::kZstdPlanes8);
  EXPECT_EQ(CodecFor(DType::kU8), Codec::kZstd);
}

TEST(ChunkCodec, EveryDTypeRoundTripsBitForBit) {
  for (DType dtype : AllDTypes()) {
    // A length cut inside an element, as the last chunk of a piece whose
    // chunk size is not a multiple of the element is.
    for (size_t n : {size_t{1} << 16, (size_t{1} << 16) + 3}) {
      const std::vector<std::byte> raw = WeightLike(dtype, n, 7);
      std::vector<std::byte> stored;
      const Codec codec = CodecFor(dtype);
      ASSERT_TRUE(Compress(codec, kDefaultLevel, raw, stored))
          << DTypeName(dtype);
      EXPECT_LT(stored.size(), raw.size());
      std::vector<std::byte> back(n);
      ASSERT_TRUE(Decompress(codec, stored, back).ok()) << DTypeName(dtype);
      EXPECT_EQ(back, raw) << DTypeName(dtype);
    }
  }
}

TEST(ChunkCodec, PlanesShrinkTrainedLikeFloatsMoreThanPlainZstd) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const std::vector<std::byte> raw = WeightLike(dtype, 1 << 20, 3);
    std::vector<std::byte> floats, planes, plain;
    ASSERT_TRUE(Compress(CodecFor(dtype), 1, raw, floats));
    ASSERT_TRUE(Compress(
        dtype == DType::kBF16 ? Codec::kZstdPlanes2 : Codec::kZstdPlanes4, 1,
        raw, planes));
    ASSERT_TRUE(Compress(Codec::kZstd, 1, raw, plain));
    EXPECT_LT(planes.size(), plain.size()) << DTypeName(dtype);
    // The float codec leaves random mantissa planes raw (which is what
    // makes it fast) and loses at most 1% for it.
    EXPECT_LE(floats.size(), planes.size() * 101 / 100) << DTypeName(dtype);
  }
}

// Both ways a float's top plane is coded (entropy-coded below level 16,
// zstd's search from it) and both ways its lower planes are stored (as
// they are for trained weights; as a second frame for values rounded to
// few mantissa bits, whose low bytes are zero), with a tail.
TEST(ChunkCodec, FloatChunksRoundTripAtEveryLevelAndLowerPlaneForm) {
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF64}) {
    for (bool rounded : {false, true}) {
      std::vector<std::byte> raw = WeightLike(dtype, (1 << 16) + 3, 5);
      const size_t w = DTypeSize(dtype);
      if (rounded) {
        for (size_t i = 0; i + w <= raw.size(); i += w) {
          for (size_t b = 0; b + 1 < w; ++b) raw[i + b] = std::byte{0};
        }
      }
      for (int level : {kMinLevel, 1, 15, 16, kMaxLevel}) {
        std::vector<std::byte> stored;
        ASSERT_TRUE(Compress(CodecFor(dtype), level, raw, stored))
            << DTypeName(dtype) << " level " << level;
        if (rounded) {
          // Only the second frame makes it this small: the lower planes
          // alone are (w - 1) / w of the chunk.
          EXPECT_LT(stored.size(), raw.size() / w) << DTypeName(dtype);
        }
        std::vector<std::byte> back(raw.size());
        ASSERT_TRUE(Decompress(CodecFor(dtype), stored, back).ok())
            << DTypeName(dtype) << " level " << level;
        EXPECT_EQ(back, raw) << DTypeName(dtype) << " level " << level;
      }
    }
  }
}

TEST(ChunkCodec, EveryCodecRoundTripsAnyLength) {
  for (uint8_t c = 1; c <= kLastCodec; ++c) {
    const Codec codec = *CodecFromByte(c);
    for (size_t n : {size_t{2}, size_t{3}, size_t{7}, size_t{9}, size_t{4099},
                     size_t{65536}}) {
      const std::vector<std::byte> raw = WeightLike(DType::kU8, n, 11);
      std::vector<std::byte> stored;
      if (!Compress(codec, 1, raw, stored)) continue;  // did not shrink
      std::vector<std::byte> back(n);
      ASSERT_TRUE(Decompress(codec, stored, back).ok())
          << CodecName(codec) << " " << n;
      EXPECT_EQ(back, raw) << CodecName(codec) << " " << n;
    }
  }
}

TEST(ChunkCodec, RandomBytesAreNotCompressed) {
  std::mt19937_64 rng(1);
  std::vector<std::byte> raw(1 << 16);
  for (std::byte& b : raw) b = static_cast<std::byte>(rng());
  std::vector<std::byte> out;
  EXPECT_FALSE(Compress(Codec::kZstd, 1, raw, out));
  EXPECT_FALSE(Compress(Codec::kZstdPlanes4, 1, raw, out));
  EXPECT_FALSE(Compress(Codec::kZstdFloat32, 1, raw, out));
  EXPECT_FALSE(Compress(Codec::kRaw, 1, raw, out));
  EXPECT_FALSE(Compress(Codec::kZstd, 1, {}, out));
}

TEST(ChunkCodec, AFloatChunkCutOrExtendedIsAnError) {
  const std::vector<std::byte> raw = WeightLike(DType::kF32, 1 << 16, 5);
  std::vector<std::byte> stored;
  ASSERT_TRUE(Compress(Codec::kZstdFloat32, 1, raw, stored));
  std::vector<std::byte> out(raw.size());
  EXPECT_EQ(Decompress(Codec::kZstdFloat32,
                       std::span(stored).first(stored.size() - 1), out)
                .code(),
            ErrorCode::kDataLoss);
  std::vector<std::byte> longer = stored;
  longer.push_back(std::byte{0});
  EXPECT_EQ(Decompress(Codec::kZstdFloat32, longer, out).code(),
            ErrorCode::kDataLoss);
  // Read as another codec, the same bytes are refused or come out other.
  std::vector<std::byte> small(raw.size() - 4);
  EXPECT_EQ(Decompress(Codec::kZstdFloat32, stored, small).code(),
            ErrorCode::kDataLoss);
  ASSERT_TRUE(Decompress(Codec::kZstdFloat32, stored, out).ok());
  EXPECT_EQ(out, raw);
}

TEST(ChunkCodec, DamagedOrForgedFramesAreErrorsNotAllocations) {
  const std::vector<std::byte> raw = WeightLike(DType::kF32, 1 << 16, 5);
  std::vector<std::byte> stored;
  ASSERT_TRUE(Compress(Codec::kZstdPlanes4, 1, raw, stored));
  std::vector<std::byte> out(raw.size());
  // Another stated length than the frame declares: refused before decoding.
  std::vector<std::byte> small(raw.size() - 4);
  EXPECT_EQ(Decompress(Codec::kZstdPlanes4, stored, small).code(),
            ErrorCode::kDataLoss);
  // Cut short, or with bytes after the frame.
  EXPECT_EQ(Decompress(Codec::kZstdPlanes4,
                       std::span(stored).first(stored.size() - 1), out)
                .code(),
            ErrorCode::kDataLoss);
  std::vector<std::byte> longer = stored;
  longer.push_back(std::byte{0});
  EXPECT_EQ(Decompress(Codec::kZstdPlanes4, longer, out).code(),
            ErrorCode::kDataLoss);
  // Garbage and an unknown codec.
  std::vector<std::byte> garbage(64, std::byte{0x5a});
  EXPECT_EQ(Decompress(Codec::kZstd, garbage, out).code(),
            ErrorCode::kDataLoss);
  EXPECT_EQ(Decompress(static_cast<Codec>(9), stored, out).code(),
            ErrorCode::kDataLoss);
  // A raw chunk of the wrong length.
  EXPECT_EQ(Decompress(Codec::kRaw, stored, out).code(), ErrorCode::kDataLoss);
  // The frame itself still decodes.
  ASSERT_TRUE(Decompress(Codec::kZstdPlanes4, stored, out).ok());
  EXPECT_EQ(out, raw);
}

}  // namespace
}  // namespace ckpt::codec
