// libFuzzer target: hostile compressed chunks (codec/chunk_codec.h). The
// first byte picks the codec (values past the last are unknown codecs), the
// next three the chunk's stated length (up to 16 MiB), the rest are the
// stored bytes. Decompress returns the bytes or an error, never crashes,
// hangs or allocates beyond the stated length; bytes it accepts compress
// and decompress back to themselves.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "codec/chunk_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckpt;
  if (size < 4) return 0;
  const auto codec =
      static_cast<codec::Codec>(data[0] % (codec::kLastCodec + 2));
  const size_t stated =
      size_t{data[1]} | size_t{data[2]} << 8 | size_t{data[3]} << 16;
  const std::span<const std::byte> stored(
      reinterpret_cast<const std::byte*>(data + 4), size - 4);
  std::vector<std::byte> out(stated);
  const Status s = codec::Decompress(codec, stored, out);
  if (!s.ok()) {
    if (s.code() != ErrorCode::kDataLoss) std::abort();
    return 0;
  }
  if (codec == codec::Codec::kRaw) return 0;
  std::vector<std::byte> again;
  if (!codec::Compress(codec, 1, out, again)) return 0;
  std::vector<std::byte> back(stated);
  if (!codec::Decompress(codec, again, back).ok() || back != out) std::abort();
  return 0;
}
