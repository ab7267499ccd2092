#include "codec/chunk_codec.h"

// For ZSTD_c_literalCompressionMode (EntropyContext), a parameter of
// zstd's advanced API that its shared library takes like any other.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>

namespace ckpt::codec {
namespace {

constexpr std::array<std::string_view, kLastCodec + 1> kNames = {
    "raw",          "zstd",         "zstd-planes2", "zstd-planes4",
    "zstd-planes8", "zstd-float16", "zstd-float32", "zstd-float64"};

// The element width a codec splits into planes (1: none), and whether it
// is a float codec (rotated, only the top plane compressed).
size_t Planes(Codec codec) {
  switch (codec) {
    case Codec::kZstdPlanes2:
    case Codec::kZstdFloat16:
      return 2;
    case Codec::kZstdPlanes4:
    case Codec::kZstdFloat32:
      return 4;
    case Codec::kZstdPlanes8:
    case Codec::kZstdFloat64:
      return 8;
    default:
      return 1;
  }
}

bool IsFloat(Codec codec) {
  return codec == Codec::kZstdFloat16 || codec == Codec::kZstdFloat32 ||
         codec == Codec::kZstdFloat64;
}

template <size_t W>
struct Word;
template <>
struct Word<2> {
  using T = uint16_t;
};
template <>
struct Word<4> {
  using T = uint32_t;
};
template <>
struct Word<8> {
  using T = uint64_t;
};

// Where a chunk's byte planes go: plane b of the W - 1 lower ones at
// lower + b * elems, the top plane (W - 1) at `top`, and the bytes past the
// last whole element (a chunk cut inside an element) at `tail`, as they are.
// A float codec keeps the top plane apart (it alone is framed) and the tail
// right after the lower planes, so that what is stored after the frame is
// one contiguous run; the integer codecs lay everything out in order.
struct PlaneLayout {
  std::byte* lower;
  std::byte* top;
  std::byte* tail;
};
struct ConstPlaneLayout {
  const std::byte* lower;
  const std::byte* top;
  const std::byte* tail;
};

// Element i's byte b goes to plane b at i (a float rotated left by one bit
// first).
template <size_t W, bool kRotate>
void Split(const std::byte* in, size_t n, PlaneLayout out) {
  using T = typename Word<W>::T;
  const size_t elems = n / W;
  for (size_t i = 0; i < elems; ++i) {
    T v;
    std::memcpy(&v, in + i * W, W);
    if constexpr (kRotate) v = static_cast<T>((v << 1) | (v >> (8 * W - 1)));
    for (size_t b = 0; b + 1 < W; ++b) {
      out.lower[b * elems + i] = static_cast<std::byte>(v >> (8 * b));
    }
    out.top[i] = static_cast<std::byte>(v >> (8 * (W - 1)));
  }
  std::memcpy(out.tail, in + elems * W, n - elems * W);
}

template <size_t W, bool kRotate>
void Join(ConstPlaneLayout in, size_t n, std::byte* out) {
  using T = typename Word<W>::T;
  const size_t elems = n / W;
  for (size_t i = 0; i < elems; ++i) {
    T v = static_cast<T>(static_cast<T>(in.top[i]) << (8 * (W - 1)));
    for (size_t b = 0; b + 1 < W; ++b) {
      v |= static_cast<T>(static_cast<T>(in.lower[b * elems + i]) << (8 * b));
    }
    if constexpr (kRotate) v = static_cast<T>((v >> 1) | (v << (8 * W - 1)));
    std::memcpy(out + i * W, &v, W);
  }
  std::memcpy(out + elems * W, in.tail, n - elems * W);
}

// The two- and four-byte floats, the common case, as loops over whole
// words that the compiler turns into vector code (this file is built with
// -O3): the generic loops above move a byte at a time.
void SplitFloat16(const std::byte* in, size_t n, PlaneLayout out) {
  const size_t elems = n / 2;
  auto* lo = reinterpret_cast<uint8_t*>(out.lower);
  auto* hi = reinterpret_cast<uint8_t*>(out.top);
  for (size_t i = 0; i < elems; ++i) {
    uint16_t v;
    std::memcpy(&v, in + 2 * i, 2);
    v = static_cast<uint16_t>((v << 1) | (v >> 15));
    lo[i] = static_cast<uint8_t>(v);
    hi[i] = static_cast<uint8_t>(v >> 8);
  }
  std::memcpy(out.tail, in + 2 * elems, n - 2 * elems);
}

void JoinFloat16(ConstPlaneLayout in, size_t n, std::byte* out) {
  const size_t elems = n / 2;
  const auto* lo = reinterpret_cast<const uint8_t*>(in.lower);
  const auto* hi = reinterpret_cast<const uint8_t*>(in.top);
  for (size_t i = 0; i < elems; ++i) {
    const uint16_t v = static_cast<uint16_t>(lo[i] | (hi[i] << 8));
    const uint16_t r = static_cast<uint16_t>((v >> 1) | (v << 15));
    std::memcpy(out + 2 * i, &r, 2);
  }
  std::memcpy(out + 2 * elems, in.tail, n - 2 * elems);
}

void SplitFloat32(const std::byte* in, size_t n, PlaneLayout out) {
  const size_t elems = n / 4;
  auto* p0 = reinterpret_cast<uint8_t*>(out.lower);
  auto* p1 = p0 + elems;
  auto* p2 = p1 + elems;
  auto* p3 = reinterpret_cast<uint8_t*>(out.top);
  for (size_t i = 0; i < elems; ++i) {
    uint32_t v;
    std::memcpy(&v, in + 4 * i, 4);
    v = (v << 1) | (v >> 31);
    p0[i] = static_cast<uint8_t>(v);
    p1[i] = static_cast<uint8_t>(v >> 8);
    p2[i] = static_cast<uint8_t>(v >> 16);
    p3[i] = static_cast<uint8_t>(v >> 24);
  }
  std::memcpy(out.tail, in + 4 * elems, n - 4 * elems);
}

void JoinFloat32(ConstPlaneLayout in, size_t n, std::byte* out) {
  const size_t elems = n / 4;
  const auto* p0 = reinterpret_cast<const uint8_t*>(in.lower);
  const auto* p1 = p0 + elems;
  const auto* p2 = p1 + elems;
  const auto* p3 = reinterpret_cast<const uint8_t*>(in.top);
  for (size_t i = 0; i < elems; ++i) {
    const uint32_t v =
        static_cast<uint32_t>(p0[i]) | static_cast<uint32_t>(p1[i]) << 8 |
        static_cast<uint32_t>(p2[i]) << 16 | static_cast<uint32_t>(p3[i]) << 24;
    const uint32_t r = (v >> 1) | (v << 31);
    std::memcpy(out + 4 * i, &r, 4);
  }
  std::memcpy(out + 4 * elems, in.tail, n - 4 * elems);
}

void SplitPlanes(Codec codec, std::span<const std::byte> in, PlaneLayout out) {
  if (codec == Codec::kZstdFloat16) {
    return SplitFloat16(in.data(), in.size(), out);
  }
  if (codec == Codec::kZstdFloat32) {
    return SplitFloat32(in.data(), in.size(), out);
  }
  const bool f = IsFloat(codec);
  switch (Planes(codec)) {
    case 2:
      return f ? Split<2, true>(in.data(), in.size(), out)
               : Split<2, false>(in.data(), in.size(), out);
    case 4:
      return f ? Split<4, true>(in.data(), in.size(), out)
               : Split<4, false>(in.data(), in.size(), out);
    default:
      return f ? Split<8, true>(in.data(), in.size(), out)
               : Split<8, false>(in.data(), in.size(), out);
  }
}

void JoinPlanes(Codec codec, ConstPlaneLayout in, size_t n, std::byte* out) {
  if (codec == Codec::kZstdFloat16) return JoinFloat16(in, n, out);
  if (codec == Codec::kZstdFloat32) return JoinFloat32(in, n, out);
  const bool f = IsFloat(codec);
  switch (Planes(codec)) {
    case 2:
      return f ? Join<2, true>(in, n, out) : Join<2, false>(in, n, out);
    case 4:
      return f ? Join<4, true>(in, n, out) : Join<4, false>(in, n, out);
    default:
      return f ? Join<8, true>(in, n, out) : Join<8, false>(in, n, out);
  }
}

// The layout of a chunk of n bytes in `base` (n bytes): a float codec's
// lower planes and tail first, its top plane last; the planes in order and
// the tail after them otherwise.
template <typename Layout, typename Byte>
Layout LayOut(Codec codec, Byte* base, size_t n) {
  const size_t planes = Planes(codec);
  const size_t elems = n / planes;
  const size_t rest = n - elems;  // lower planes and tail
  if (IsFloat(codec)) {
    return {base, base + rest, base + (planes - 1) * elems};
  }
  return {base, base + (planes - 1) * elems, base + planes * elems};
}

// Per thread: a save's and a load's threads each compress or decompress one
// chunk at a time, and a context costs more to make than a chunk of 4 MiB
// to compress at level 1.
struct ThreadState {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx{nullptr,
                                                          ZSTD_freeCCtx};
  // For a float's top plane (EntropyContext).
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> ectx{nullptr,
                                                          ZSTD_freeCCtx};
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx{nullptr,
                                                          ZSTD_freeDCtx};
  std::vector<std::byte> planes;  // scratch: a chunk in byte planes
};
thread_local ThreadState t_state;

std::span<std::byte> Scratch(size_t n) {
  // Grown to the chunk, never beyond: a chunk's stated length bounds what
  // its decoding may allocate.
  if (t_state.planes.size() < n) t_state.planes.resize(n);
  return {t_state.planes.data(), n};
}

// The levels from which a float's top plane is given to zstd at its level
// (its optimal parsers, which find about 1% more there at a thousandth of
// the speed); below, it is coded for its entropy (EntropyContext).
constexpr int kSearchTopPlaneFrom = 16;

// A context that codes a float's top plane for its entropy: zstd's fastest
// match search with its Huffman coder for literals forced on (zstd turns
// it off at its fastest settings). The exponents of trained weights repeat
// little but are few (about 2.6 bits each): on them this is both smaller
// (0.322 of the plane against 0.345 at level 1, 0.353 at level 9) and three
// times as fast as level 1. The frame is an ordinary zstd frame.
ZSTD_CCtx* EntropyContext() {
  if (!t_state.ectx) {
    t_state.ectx.reset(ZSTD_createCCtx());
    if (!t_state.ectx) return nullptr;
    ZSTD_CCtx* c = t_state.ectx.get();
    if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel,
                                            ZSTD_minCLevel())) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_literalCompressionMode,
                                            ZSTD_ps_enable))) {
      t_state.ectx.reset();
    }
  }
  return t_state.ectx.get();
}

// Checks that `frame` is exactly one zstd frame declaring `size` bytes.
Status CheckFrame(std::span<const std::byte> frame, size_t size) {
  const unsigned long long declared =
      ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (declared != size) {
    return DataLossError("the zstd frame declares " +
                         (declared == ZSTD_CONTENTSIZE_UNKNOWN ||
                                  declared == ZSTD_CONTENTSIZE_ERROR
                              ? std::string("no size")
                              : std::to_string(declared) + " bytes") +
                         " where " + std::to_string(size) + " are stated");
  }
  return Status();
}

// Decompresses the one frame `frame` (checked by CheckFrame) into `out`.
Status DecodeFrame(std::span<const std::byte> frame, std::span<std::byte> out) {
  if (!t_state.dctx) t_state.dctx.reset(ZSTD_createDCtx());
  if (!t_state.dctx) return UnavailableError("zstd: no memory for a context");
  const size_t n = ZSTD_decompressDCtx(t_state.dctx.get(), out.data(),
                                       out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n)) {
    return DataLossError(std::string("zstd: ") + ZSTD_getErrorName(n));
  }
  if (n != out.size()) {
    return DataLossError("the zstd frame yields " + std::to_string(n) +
                         " bytes where " + std::to_string(out.size()) +
                         " are stated");
  }
  return Status();
}

// Whether the lower planes of a float chunk (`planes`, each of
// `plane_bytes`) are worth giving to zstd: 4 KiB of each plane's bytes,
// spread over it, and their order-0 entropy added up, asking for 2% to
// gain. A trained float's mantissa bytes are random, and zstd would take
// as long over them as over the top plane for nothing; a moment whose sign
// never changes, or rounded values, are not random.
bool LowerPlanesPay(std::span<const std::byte> planes, size_t plane_bytes) {
  if (plane_bytes == 0) return false;
  const size_t count = planes.size() / plane_bytes;
  constexpr size_t kSample = 4096;
  double bits = 0;
  size_t sampled = 0;
  for (size_t p = 0; p < count; ++p) {
    std::array<uint32_t, 256> seen{};
    const size_t n = std::min(kSample, plane_bytes);
    const size_t stride = plane_bytes / n;
    for (size_t i = 0; i < n; ++i) {
      ++seen[static_cast<uint8_t>(planes[p * plane_bytes + i * stride])];
    }
    for (uint32_t c : seen) {
      if (c == 0) continue;
      const double q = static_cast<double>(c) / static_cast<double>(n);
      bits -= static_cast<double>(c) * std::log2(q);
    }
    sampled += n;
  }
  return bits < 0.98 * 8.0 * static_cast<double>(sampled);
}

}  // namespace

std::string_view CodecName(Codec codec) {
  const auto i = static_cast<uint8_t>(codec);
  return i <= kLastCodec ? kNames[i] : std::string_view("unknown");
}

std::optional<Codec> CodecFromName(std::string_view name) {
  for (uint8_t i = 0; i <= kLastCodec; ++i) {
    if (kNames[i] == name) return static_cast<Codec>(i);
  }
  return std::nullopt;
}

std::optional<Codec> CodecFromByte(uint8_t value) {
  if (value > kLastCodec) return std::nullopt;
  return static_cast<Codec>(value);
}

Codec CodecFor(DType dtype) {
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16:
      return Codec::kZstdFloat16;
    case DType::kF32:
      return Codec::kZstdFloat32;
    case DType::kF64:
      return Codec::kZstdFloat64;
    default:
      break;
  }
  switch (DTypeSize(dtype)) {
    case 2:
      return Codec::kZstdPlanes2;
    case 4:
      return Codec::kZstdPlanes4;
    case 8:
      return Codec::kZstdPlanes8;
    default:
      return Codec::kZstd;
  }
}

bool Compress(Codec codec, int level, std::span<const std::byte> raw,
              std::vector<std::byte>& out) {
  if (codec == Codec::kRaw || static_cast<uint8_t>(codec) > kLastCodec ||
      raw.size() < 2) {
    return false;
  }
  if (!t_state.cctx) t_state.cctx.reset(ZSTD_createCCtx());
  if (!t_state.cctx) return false;
  const size_t planes = Planes(codec);
  // Room for one byte less than the raw chunk: zstd stops with an error
  // instead of finishing a frame that would not pay.
  out.resize(raw.size() - 1);
  if (planes == 1) {
    const size_t n =
        ZSTD_compressCCtx(t_state.cctx.get(), out.data(), out.size(),
                          raw.data(), raw.size(), level);
    if (ZSTD_isError(n)) return false;
    out.resize(n);
    return true;
  }
  std::span<std::byte> scratch = Scratch(raw.size());
  const PlaneLayout layout =
      LayOut<PlaneLayout>(codec, scratch.data(), raw.size());
  SplitPlanes(codec, raw, layout);
  if (!IsFloat(codec)) {
    const size_t n =
        ZSTD_compressCCtx(t_state.cctx.get(), out.data(), out.size(),
                          scratch.data(), scratch.size(), level);
    if (ZSTD_isError(n)) return false;
    out.resize(n);
    return true;
  }
  // A float codec frames the top plane; the rest (lower planes, then the
  // bytes past the last whole element, one run in `scratch`) follows as a
  // second frame where the sample says it pays and it does, else as it is
  // (then exactly `rest` bytes, which a frame never is: it is used only
  // when smaller).
  const size_t top = raw.size() / planes;
  const size_t rest = raw.size() - top;
  if (rest >= out.size()) return false;
  ZSTD_CCtx* top_ctx =
      level >= kSearchTopPlaneFrom ? t_state.cctx.get() : EntropyContext();
  if (top_ctx == nullptr) return false;
  const size_t n =
      level >= kSearchTopPlaneFrom
          ? ZSTD_compressCCtx(top_ctx, out.data(), out.size() - rest,
                              layout.top, top, level)
          : ZSTD_compress2(top_ctx, out.data(), out.size() - rest, layout.top,
                           top);
  if (ZSTD_isError(n)) return false;
  const std::span<const std::byte> lower = scratch.first(rest);
  if (LowerPlanesPay(lower.first((planes - 1) * top), top)) {
    const size_t m = ZSTD_compressCCtx(t_state.cctx.get(), out.data() + n,
                                       std::min(rest - 1, out.size() - n),
                                       lower.data(), lower.size(), level);
    if (!ZSTD_isError(m)) {
      out.resize(n + m);
      return true;
    }
  }
  std::memcpy(out.data() + n, lower.data(), rest);
  out.resize(n + rest);
  return true;
}

Status Decompress(Codec codec, std::span<const std::byte> stored,
                  std::span<std::byte> out) {
  if (codec == Codec::kRaw) {
    if (stored.size() != out.size()) {
      return DataLossError("a raw chunk of " + std::to_string(stored.size()) +
                           " bytes where " + std::to_string(out.size()) +
                           " are stated");
    }
    std::memcpy(out.data(), stored.data(), stored.size());
    return Status();
  }
  if (static_cast<uint8_t>(codec) > kLastCodec) {
    return DataLossError("unknown codec " +
                         std::to_string(static_cast<int>(codec)));
  }
  const size_t planes = Planes(codec);
  const size_t top = out.size() / planes;
  const size_t rest = IsFloat(codec) ? out.size() - top : 0;
  // The frame comes first. After a float codec's: its other planes, as
  // they are (exactly `rest` bytes) or as one more frame (fewer).
  const size_t frame =
      ZSTD_findFrameCompressedSize(stored.data(), stored.size());
  if (ZSTD_isError(frame)) {
    return DataLossError(std::string("not a whole zstd frame (") +
                         ZSTD_getErrorName(frame) + ")");
  }
  const size_t after = stored.size() - frame;
  if (IsFloat(codec) ? after > rest : after != 0) {
    return DataLossError("a zstd frame of " + std::to_string(frame) +
                         " bytes and " + std::to_string(after) +
                         " bytes after it, where at most " +
                         std::to_string(rest) + " may follow");
  }
  const std::span<const std::byte> framed = stored.first(frame);
  CKPT_RETURN_IF_ERROR(CheckFrame(framed, IsFloat(codec) ? top : out.size()));
  if (planes == 1) return DecodeFrame(framed, out);
  std::span<std::byte> scratch = Scratch(out.size());
  if (!IsFloat(codec)) {
    CKPT_RETURN_IF_ERROR(DecodeFrame(framed, scratch));
    JoinPlanes(
        codec,
        LayOut<ConstPlaneLayout>(
            codec, static_cast<const std::byte*>(scratch.data()), out.size()),
        out.size(), out.data());
    return Status();
  }
  // The top plane decoded into the scratch's end; the lower planes and the
  // tail joined from the stored bytes as they are, or decoded into the
  // scratch's start.
  CKPT_RETURN_IF_ERROR(DecodeFrame(framed, scratch.subspan(rest, top)));
  const std::span<const std::byte> tail = stored.subspan(frame);
  const std::byte* lower = tail.data();
  if (after < rest) {
    if (ZSTD_findFrameCompressedSize(tail.data(), tail.size()) != after) {
      return DataLossError(
          "the bytes after the zstd frame are not one whole frame");
    }
    CKPT_RETURN_IF_ERROR(CheckFrame(tail, rest));
    CKPT_RETURN_IF_ERROR(DecodeFrame(tail, scratch.first(rest)));
    lower = scratch.data();
  }
  JoinPlanes(codec,
             ConstPlaneLayout{lower, scratch.data() + rest,
                              lower + (planes - 1) * top},
             out.size(), out.data());
  return Status();
}

}  // namespace ckpt::codec
