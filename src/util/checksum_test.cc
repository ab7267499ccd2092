#include "util/checksum.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace ckpt {
namespace {

std::span<const std::byte> AsBytes(const std::vector<uint8_t>& v) {
  return {reinterpret_cast<const std::byte*>(v.data()), v.size()};
}

// The pseudo-random buffer of xxHash's own sanity check
// (cli/xsum_sanity_check.c, XSUM_fillTestBuffer), so the expected values
// below come from xxHash's test vectors, not from the code under test.
std::vector<uint8_t> SanityBuffer(size_t len) {
  constexpr uint64_t kPrime32 = 2654435761U;
  constexpr uint64_t kPrime64 = 11400714785074694797ULL;
  std::vector<uint8_t> out(len);
  uint64_t gen = kPrime32;
  for (size_t i = 0; i < len; ++i) {
    out[i] = static_cast<uint8_t>(gen >> 56);
    gen *= kPrime64;
  }
  return out;
}

struct KnownAnswer {
  size_t len;
  uint64_t low;
  uint64_t high;
};

// XXH3_128bits with seed 0, from xxHash's XSUM_XXH128_testdata. The lengths
// cover every code path: empty, 1-3, 4-8, 9-16, 17-128, 129-240, and the
// long-input loop with and without a partial last stripe and block.
constexpr KnownAnswer kKnownAnswers[] = {
    {0, 0x6001C324468D497FULL, 0x99AA06D3014798D8ULL},
    {1, 0xC44BDFF4074EECDBULL, 0xA6CD5E9392000F6AULL},
    {6, 0x3E7039BDDA43CFC6ULL, 0x082AFE0B8162D12AULL},
    {12, 0x061A192713F69AD9ULL, 0x6E3EFD8FC7802B18ULL},
    {24, 0x1E7044D28B1B901DULL, 0x0CE966E4678D3761ULL},
    {48, 0xF942219AED80F67BULL, 0xA002AC4E5478227EULL},
    {81, 0x5E8BAFB9F95FB803ULL, 0x4952F58181AB0042ULL},
    {222, 0xF1AEBD597CEC6B3AULL, 0x337E09641B948717ULL},
    {403, 0xCDEB804D65C6DEA4ULL, 0x1B6DE21E332DD73DULL},
    {512, 0x617E49599013CB6BULL, 0x18D2D110DCC9BCA1ULL},
    {2048, 0xDD59E2C3A5F038E0ULL, 0xF736557FD47073A5ULL},
    {2240, 0x6E73A90539CF2948ULL, 0xCCB134FBFA7CE49DULL},
    {2367, 0xCB37AEB9E5D361EDULL, 0xE89C0F6FF369B427ULL},
};

TEST(Xxh3Test, EmptyInputKnownAnswer) {
  const Checksum128 expect{0x99aa06d3014798d8ULL, 0x6001c324468d497fULL};
  // The library we link agrees with the published value ...
  const XXH128_hash_t direct = XXH3_128bits("", 0);
  EXPECT_EQ(direct.high64, expect.high);
  EXPECT_EQ(direct.low64, expect.low);
  // ... and so do both of our overloads and the streaming form.
  EXPECT_EQ(Xxh3_128(std::string_view()), expect);
  EXPECT_EQ(Xxh3_128(std::span<const std::byte>()), expect);
  Xxh3Hasher h;
  EXPECT_EQ(h.Digest(), expect);
  EXPECT_EQ(expect.Hex(), "99aa06d3014798d86001c324468d497f");
}

TEST(Xxh3Test, SanityVectors) {
  const std::vector<uint8_t> buffer = SanityBuffer(4096 + 64 + 1);
  for (const KnownAnswer& ka : kKnownAnswers) {
    const std::vector<uint8_t> data(buffer.begin(), buffer.begin() + ka.len);
    const Checksum128 expect{ka.high, ka.low};
    EXPECT_EQ(Xxh3_128(AsBytes(data)), expect) << "len " << ka.len;
    EXPECT_EQ(Xxh3_128(std::string_view(
                  reinterpret_cast<const char*>(data.data()), data.size())),
              expect)
        << "len " << ka.len;
    Xxh3Hasher h;
    h.Update(AsBytes(data));
    EXPECT_EQ(h.Digest(), expect) << "len " << ka.len;
    Xxh3Hasher bytewise;
    for (size_t i = 0; i < data.size(); ++i) {
      bytewise.Update(AsBytes(data).subspan(i, 1));
    }
    EXPECT_EQ(bytewise.Digest(), expect) << "len " << ka.len;
  }
}

TEST(Xxh3Test, MatchesLibxxhashOnRandomData) {
  std::mt19937_64 rng(42);
  for (size_t len :
       {1u, 3u, 16u, 17u, 128u, 129u, 240u, 241u, 1000u, 65536u, 1000003u}) {
    std::vector<uint8_t> data(len);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const XXH128_hash_t direct = XXH3_128bits(data.data(), data.size());
    EXPECT_EQ(Xxh3_128(AsBytes(data)),
              (Checksum128{direct.high64, direct.low64}))
        << "len " << len;
  }
}

// The AVX2 build (xxh3_avx2.c) is used wherever the CPU has AVX2, and its
// checksums are libxxhash's, one-shot and streamed, across the block sizes
// where its vector loops begin and end.
TEST(Xxh3Test, TheAvx2BuildIsUsedWhereTheCpuHasItAndAgreesWithLibxxhash) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const char* portable = std::getenv("CKPT_XXH3_PORTABLE");
  const bool want = __builtin_cpu_supports("avx2") &&
                    !(portable != nullptr && std::string(portable) == "1");
  EXPECT_EQ(Xxh3UsesAvx2(), want);
#endif
  std::printf("xxh3: %s\n", Xxh3UsesAvx2() ? "AVX2 build" : "libxxhash");
  std::mt19937_64 rng(11);
  std::vector<uint8_t> data(5 << 20);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  XXH3_state_t* lib = XXH3_createState();
  Xxh3Hasher ours;
  for (size_t len : {0u, 255u, 256u, 1023u, 1024u, 1025u, 4095u, 65536u,
                     262144u, 262145u, 5u << 20}) {
    const std::span<const std::byte> whole = AsBytes(data).first(len);
    const XXH128_hash_t direct = XXH3_128bits(data.data(), len);
    EXPECT_EQ(Xxh3_128(whole), (Checksum128{direct.high64, direct.low64}))
        << "len " << len;
    XXH3_128bits_reset(lib);
    ours.Reset();
    for (size_t pos = 0; pos < len;) {
      const size_t n = std::min<size_t>(len - pos, 1 + rng() % 300000);
      XXH3_128bits_update(lib, data.data() + pos, n);
      ours.Update(whole.subspan(pos, n));
      pos += n;
    }
    const XXH128_hash_t streamed = XXH3_128bits_digest(lib);
    EXPECT_EQ(ours.Digest(), (Checksum128{streamed.high64, streamed.low64}))
        << "len " << len;
  }
  XXH3_freeState(lib);
}

TEST(Xxh3Test, StreamingEqualsOneShotOverRandomSplits) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> data(300000);
  for (auto& b : data) b = static_cast<uint8_t>(rng());
  Xxh3Hasher h;
  for (int trial = 0; trial < 200; ++trial) {
    const size_t len = rng() % (trial < 100 ? 3000 : data.size() + 1);
    const std::span<const std::byte> whole = AsBytes(data).first(len);
    const Checksum128 expect = Xxh3_128(whole);
    h.Reset();
    size_t pos = 0;
    while (pos < len) {
      // Mostly small pieces, sometimes large ones, sometimes empty ones.
      const size_t max = (rng() % 4 == 0) ? 70000 : 300;
      const size_t n = std::min<size_t>(len - pos, rng() % (max + 1));
      h.Update(whole.subspan(pos, n));
      pos += n;
    }
    EXPECT_EQ(h.Digest(), expect) << "trial " << trial << " len " << len;
  }
}

TEST(Xxh3Test, DigestDoesNotEndTheStream) {
  const std::string a = "hello, ", b = "world";
  Xxh3Hasher h;
  h.Update(std::as_bytes(std::span(a)));
  EXPECT_EQ(h.Digest(), Xxh3_128(a));
  h.Update(std::as_bytes(std::span(b)));
  EXPECT_EQ(h.Digest(), Xxh3_128(a + b));
  h.Reset();
  EXPECT_EQ(h.Digest(), Xxh3_128(""));
}

TEST(Xxh3Test, DifferentInputsDiffer) {
  EXPECT_NE(Xxh3_128("a"), Xxh3_128("b"));
  EXPECT_NE(Xxh3_128("a"), Xxh3_128(std::string_view("a\0", 2)));
}

TEST(ChecksumHexTest, HighHalfFirstLowerCase) {
  const Checksum128 c{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(c.Hex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(Checksum128{}.Hex(), std::string(32, '0'));
  EXPECT_EQ((Checksum128{~0ULL, ~0ULL}.Hex()), std::string(32, 'f'));
  EXPECT_EQ((Checksum128{0, 1}.Hex()), std::string(31, '0') + "1");
  EXPECT_EQ((Checksum128{1, 0}.Hex()),
            std::string(15, '0') + "1" + std::string(16, '0'));
}

TEST(ChecksumHexTest, RoundTrip) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 1000; ++i) {
    const Checksum128 c{rng(), rng()};
    const std::string hex = c.Hex();
    ASSERT_EQ(hex.size(), 32u);
    const std::optional<Checksum128> back = Checksum128::FromHex(hex);
    ASSERT_TRUE(back.has_value()) << hex;
    EXPECT_EQ(*back, c);
  }
  for (const KnownAnswer& ka : kKnownAnswers) {
    const Checksum128 c{ka.high, ka.low};
    EXPECT_EQ(Checksum128::FromHex(c.Hex()), c);
  }
}

TEST(ChecksumHexTest, FromHexRejectsWrongLength) {
  const std::string good = "99aa06d3014798d86001c324468d497f";
  ASSERT_TRUE(Checksum128::FromHex(good).has_value());
  EXPECT_FALSE(Checksum128::FromHex("").has_value());
  EXPECT_FALSE(Checksum128::FromHex(good.substr(0, 31)).has_value());
  EXPECT_FALSE(Checksum128::FromHex(good + "0").has_value());
  EXPECT_FALSE(Checksum128::FromHex(good + good).has_value());
  EXPECT_FALSE(Checksum128::FromHex(good.substr(0, 16)).has_value());
}

TEST(ChecksumHexTest, FromHexRejectsUpperCase) {
  EXPECT_FALSE(
      Checksum128::FromHex("99AA06D3014798D86001C324468D497F").has_value());
  EXPECT_FALSE(
      Checksum128::FromHex("99aa06d3014798d86001c324468d497F").has_value());
}

TEST(ChecksumHexTest, FromHexRejectsNonHex) {
  const std::string good = "99aa06d3014798d86001c324468d497f";
  for (char bad : {'g', 'z', 'x', ' ', '-', '+', '\0', '\n', '/', ':', '`', '@',
                   'G', '\xff'}) {
    for (size_t pos : {0u, 15u, 16u, 31u}) {
      std::string s = good;
      s[pos] = bad;
      EXPECT_FALSE(Checksum128::FromHex(s).has_value())
          << "char " << static_cast<int>(bad) << " at " << pos;
    }
  }
  EXPECT_FALSE(
      Checksum128::FromHex("0x99aa06d3014798d86001c324468d49").has_value());
}

}  // namespace
}  // namespace ckpt
