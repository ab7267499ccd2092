#include "codec/chunk_codec.h"

#include <zstd.h>

#include <array>
#include <cstring>
#include <memory>

namespace ckpt::codec {
namespace {

constexpr std::array<std::string_view, kLastCodec + 1> kNames = {
    "raw", "zstd", "zstd-planes2", "zstd-planes4", "zstd-planes8"};

size_t Planes(Codec codec) {
  switch (codec) {
    case Codec::kZstdPlanes2:
      return 2;
    case Codec::kZstdPlanes4:
      return 4;
    case Codec::kZstdPlanes8:
      return 8;
    default:
      return 1;
  }
}

// Element i's byte b goes to plane b at i; bytes past the last whole element
// (a chunk cut inside an element) follow the planes as they are.
template <size_t W>
void Split(const std::byte* in, size_t n, std::byte* out) {
  const size_t elems = n / W;
  for (size_t i = 0; i < elems; ++i) {
    for (size_t b = 0; b < W; ++b) out[b * elems + i] = in[i * W + b];
  }
  std::memcpy(out + elems * W, in + elems * W, n - elems * W);
}

template <size_t W>
void Join(const std::byte* in, size_t n, std::byte* out) {
  const size_t elems = n / W;
  for (size_t i = 0; i < elems; ++i) {
    for (size_t b = 0; b < W; ++b) out[i * W + b] = in[b * elems + i];
  }
  std::memcpy(out + elems * W, in + elems * W, n - elems * W);
}

void SplitPlanes(size_t planes, std::span<const std::byte> in, std::byte* out) {
  switch (planes) {
    case 2:
      return Split<2>(in.data(), in.size(), out);
    case 4:
      return Split<4>(in.data(), in.size(), out);
    default:
      return Split<8>(in.data(), in.size(), out);
  }
}

void JoinPlanes(size_t planes, std::span<const std::byte> in, std::byte* out) {
  switch (planes) {
    case 2:
      return Join<2>(in.data(), in.size(), out);
    case 4:
      return Join<4>(in.data(), in.size(), out);
    default:
      return Join<8>(in.data(), in.size(), out);
  }
}

// Per thread: a save's and a load's threads each compress or decompress one
// chunk at a time, and a context costs more to make than a chunk of 4 MiB
// to compress at level 1.
struct ThreadState {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx{nullptr,
                                                          ZSTD_freeCCtx};
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx{nullptr,
                                                          ZSTD_freeDCtx};
  std::vector<std::byte> planes;  // scratch: a chunk in byte planes
};
thread_local ThreadState t_state;

std::span<std::byte> Scratch(size_t n) {
  // Sized to the chunk, not to a larger earlier one's capacity: a chunk's
  // stated length bounds what its decoding may allocate.
  if (t_state.planes.size() < n) t_state.planes.resize(n);
  return {t_state.planes.data(), n};
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
  if (codec == Codec::kRaw || raw.empty()) return false;
  if (!t_state.cctx) t_state.cctx.reset(ZSTD_createCCtx());
  if (!t_state.cctx) return false;
  std::span<const std::byte> input = raw;
  const size_t planes = Planes(codec);
  if (planes > 1) {
    std::span<std::byte> scratch = Scratch(raw.size());
    SplitPlanes(planes, raw, scratch.data());
    input = scratch;
  }
  // Room for one byte less than the raw chunk: zstd stops with an error
  // instead of finishing a frame that would not pay.
  out.resize(raw.size() - 1);
  if (out.empty()) return false;
  const size_t n = ZSTD_compressCCtx(t_state.cctx.get(), out.data(), out.size(),
                                     input.data(), input.size(), level);
  if (ZSTD_isError(n)) return false;
  out.resize(n);
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
  const size_t frame =
      ZSTD_findFrameCompressedSize(stored.data(), stored.size());
  if (ZSTD_isError(frame) || frame != stored.size()) {
    return DataLossError("not one whole zstd frame (" +
                         std::string(ZSTD_isError(frame)
                                         ? ZSTD_getErrorName(frame)
                                         : "bytes after the frame") +
                         ")");
  }
  const unsigned long long declared =
      ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (declared != out.size()) {
    return DataLossError("the zstd frame declares " +
                         (declared == ZSTD_CONTENTSIZE_UNKNOWN ||
                                  declared == ZSTD_CONTENTSIZE_ERROR
                              ? std::string("no size")
                              : std::to_string(declared) + " bytes") +
                         " where " + std::to_string(out.size()) +
                         " are stated");
  }
  if (!t_state.dctx) t_state.dctx.reset(ZSTD_createDCtx());
  if (!t_state.dctx) return UnavailableError("zstd: no memory for a context");
  const size_t planes = Planes(codec);
  std::span<std::byte> target = planes > 1 ? Scratch(out.size()) : out;
  const size_t n =
      ZSTD_decompressDCtx(t_state.dctx.get(), target.data(), target.size(),
                          stored.data(), stored.size());
  if (ZSTD_isError(n)) {
    return DataLossError(std::string("zstd: ") + ZSTD_getErrorName(n));
  }
  if (n != out.size()) {
    return DataLossError("the zstd frame yields " + std::to_string(n) +
                         " bytes where " + std::to_string(out.size()) +
                         " are stated");
  }
  if (planes > 1) JoinPlanes(planes, target, out.data());
  return Status();
}

}  // namespace ckpt::codec
