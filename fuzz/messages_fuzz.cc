// libFuzzer target: hostile messages between ranks (checkpoint/messages.h).
// The first byte picks the decoder, the rest is the message. A decoder must
// return a value or DataLoss, never crash, hang or allocate beyond the
// input's size; an accepted message re-encodes to exactly the input, so the
// wire form has one spelling per value and nothing is silently dropped.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "checkpoint/messages.h"

namespace {

template <typename Decode, typename Encode>
void RoundTrip(std::string_view bytes, Decode decode, Encode encode) {
  auto m = decode(bytes);
  if (!m.ok()) {
    if (m.status().code() != ckpt::ErrorCode::kDataLoss) std::abort();
    return;
  }
  if (encode(*m) != bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ckpt;
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1,
                               size - 1);
  switch (data[0] % 6) {
    case 0:
      RoundTrip(bytes, DecodeSaveDecision, EncodeSaveDecision);
      break;
    case 1:
      RoundTrip(bytes, DecodeReferenceStats, EncodeReferenceStats);
      break;
    case 2:
      RoundTrip(bytes, DecodeWriteResult, EncodeWriteResult);
      break;
    case 3:
      RoundTrip(bytes, DecodeSaveOutcome, EncodeSaveOutcome);
      break;
    case 4:
      RoundTrip(bytes, DecodeLoadSteps, EncodeLoadSteps);
      break;
    case 5:
      RoundTrip(bytes, DecodeOffer, EncodeOffer);
      break;
  }
  return 0;
}
