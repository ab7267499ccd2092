// libFuzzer target: hostile messages between ranks (messages/messages.h).
// The first byte picks the decoder, the rest is the message. A decoder must
// return a value or DataLoss, never crash, hang or allocate beyond the
// input's size; an accepted message re-encodes to exactly the input, so the
// wire form has one spelling per value and nothing is silently dropped.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "messages/messages.h"

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
  // Every message of messages.h; the seeds in corpus/messages are named by
  // the message their first byte picks.
  switch (data[0] % 21) {
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
    case 6:
      RoundTrip(bytes, DecodeLoadVote, EncodeLoadVote);
      break;
    case 7:
      RoundTrip(bytes, DecodeRankStatus, EncodeRankStatus);
      break;
    case 8:
      RoundTrip(bytes, DecodeNodePlace, EncodeNodePlace);
      break;
    case 9:
      RoundTrip(bytes, DecodeNodeShares, EncodeNodeShares);
      break;
    case 10:
      RoundTrip(bytes, DecodeDurableSteps, EncodeDurableSteps);
      break;
    case 11:
      RoundTrip(bytes, DecodeShareOutcome, EncodeShareOutcome);
      break;
    case 12:
      RoundTrip(bytes, DecodeShareEntries, EncodeShareEntries);
      break;
    case 13:
      RoundTrip(bytes, DecodeLackingShares, EncodeLackingShares);
      break;
    case 14:
      RoundTrip(bytes, DecodeTransferPart, EncodeTransferPart);
      break;
    case 15:
      RoundTrip(bytes, DecodeRunnerVote, EncodeRunnerVote);
      break;
    case 16:
      RoundTrip(bytes, DecodeResumeStep, EncodeResumeStep);
      break;
    case 17:
      RoundTrip(bytes, DecodeReadOncePlan, EncodeReadOncePlan);
      break;
    case 18:
      RoundTrip(bytes, DecodeReadOnceBatch,
                [](const ReadOnceBatch& m) { return EncodeReadOnceBatch(m); });
      break;
    case 19:
      RoundTrip(bytes, DecodeReadOnceRates, EncodeReadOnceRates);
      break;
    case 20:
      RoundTrip(bytes, DecodeReadOnceNodeMemory, EncodeReadOnceNodeMemory);
      break;
  }
  return 0;
}
