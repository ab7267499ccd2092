// libFuzzer target: a hostile manifest file. DecodeManifest must return a
// value or DataLoss, never crash or hang; an accepted manifest validates,
// names no object outside its root, and survives a re-encoding.
//
// Almost every mutation breaks the checksum envelope, which would keep the
// fuzzer away from the JSON body parser and the validation behind it; so
// each input is decoded as it is, and then once more with its body (the
// part inside the envelope, or the whole input) sealed with a correct
// checksum.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "format/constants.h"
#include "format/manifest.h"
#include "util/checksum.h"
#include "util/names.h"

namespace {

void Check(std::string_view bytes) {
  using namespace ckpt::format;
  auto m = DecodeManifest(bytes, "fuzz MANIFEST.json");
  if (!m.ok()) return;
  if (!ValidateManifest(*m).ok()) std::abort();
  for (const auto& o : m->objects) {
    if (!ckpt::ValidateKey(o.key).ok()) std::abort();
  }
  auto again = DecodeManifest(EncodeManifest(*m), "re-encoded manifest");
  if (!again.ok() || again->objects.size() != m->objects.size() ||
      again->entries.size() != m->entries.size() || again->step != m->step) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckpt::format;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Check(bytes);
  std::string_view body = bytes;
  const size_t head = kEnvelopePrefix.size() + 32 + kEnvelopeMiddle.size();
  if (bytes.size() >= head + kEnvelopeSuffix.size() &&
      bytes.starts_with(kEnvelopePrefix) && bytes.ends_with(kEnvelopeSuffix)) {
    body = bytes.substr(head, bytes.size() - head - kEnvelopeSuffix.size());
  }
  std::string sealed(kEnvelopePrefix);
  sealed += ckpt::Xxh3_128(body).Hex();
  sealed += kEnvelopeMiddle;
  sealed += body;
  sealed += kEnvelopeSuffix;
  Check(sealed);
  return 0;
}
