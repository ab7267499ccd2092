// libFuzzer target: hostile version 3 metadata (format/index.h). The first
// byte picks what the rest is:
//   0, 1  a whole index or directory object, as stored;
//   2, 3  the body of one, framed here with a valid length and checksum so
//         the mutations reach the decoder past the checksum;
//   4     two bodies (a directory, then an index, the first two bytes the
//         directory body's length), framed, decoded and assembled.
// Decoding and assembling return a value or DataLoss, never crash, hang or
// allocate beyond the input's size; an accepted object re-encodes to exactly
// its bytes (one spelling per value).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "format/binary.h"
#include "format/constants.h"
#include "format/index.h"

namespace {

using namespace ckpt;

std::string Framed(std::string_view magic, std::string_view body) {
  format::ByteWriter w;
  w.bytes().append(magic);
  w.U64(body.size());
  w.Sum(Xxh3_128(body));
  w.bytes().append(body);
  return std::move(w.bytes());
}

void Expect(const Status& s) {
  if (!s.ok() && s.code() != ErrorCode::kDataLoss) std::abort();
}

void Index(const std::string& bytes) {
  auto x = format::DecodeRankIndex(bytes, "fuzz");
  Expect(x.status());
  if (x.ok() && format::EncodeRankIndex(*x) != bytes) std::abort();
}

void Directory(const std::string& bytes) {
  auto d = format::DecodeDirectory(bytes, "fuzz");
  Expect(d.status());
  if (d.ok() && format::EncodeDirectory(*d) != bytes) std::abort();
}

void Assembled(std::string_view in) {
  if (in.size() < 2) return;
  const size_t n =
      static_cast<uint8_t>(in[0]) | (static_cast<uint8_t>(in[1]) << 8);
  in.remove_prefix(2);
  if (n > in.size()) return;
  auto d = format::DecodeDirectory(
      Framed(format::kDirectoryMagic, in.substr(0, n)), "fuzz");
  auto x = format::DecodeRankIndex(Framed(format::kIndexMagic, in.substr(n)),
                                   "fuzz");
  if (!d.ok() || !x.ok()) return;
  format::Manifest header;
  header.version = format::kScalableManifestVersion;
  header.step = d->step;
  header.world_size = d->world_size;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(d->attempt));
  header.attempt = hex;
  header.chunk_size = 4096;
  const bool all = d->world_size == 1;
  Expect(format::Assemble(header, *d, {*x}, all, "fuzz").status());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0:
      Index(rest);
      break;
    case 1:
      Directory(rest);
      break;
    case 2:
      Index(Framed(format::kIndexMagic, rest));
      break;
    case 3:
      Directory(Framed(format::kDirectoryMagic, rest));
      break;
    case 4:
      Assembled(rest);
      break;
  }
  return 0;
}
