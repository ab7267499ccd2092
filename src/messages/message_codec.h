// The one wire form of every message between ranks (messages.h): the
// Writer that encodes and the bounds-checked Reader that decodes, shared by
// messages.cc (save and load) and tier_messages.cc (tiers and the runner).
// Only those two files include it.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/status.h"
#include "messages/messages.h"
#include "util/checksum.h"

namespace ckpt::wire {

enum class MessageType : uint8_t {
  kSaveDecision = 1,
  kReferenceStats,
  kWriteResult,
  kSaveOutcome,
  kLoadSteps,
  kOffer,
  kLoadVote,
  kRankStatus,
  kNodePlace,
  kNodeShares,
  kDurableSteps,
  kShareOutcome,
  kShareEntries,
  kLackingShares,
  kTransferPart,
  kRunnerVote,
  kResumeStep,
  kReadOncePlan,
  kReadOnceBatch,
  kReadOnceRates,
  kReadOnceNodeMemory,
};

inline std::string_view TypeName(MessageType type) {
  switch (type) {
    case MessageType::kSaveDecision:
      return "save decision";
    case MessageType::kReferenceStats:
      return "reference statistics";
    case MessageType::kWriteResult:
      return "write result";
    case MessageType::kSaveOutcome:
      return "save outcome";
    case MessageType::kLoadSteps:
      return "load steps";
    case MessageType::kLoadVote:
      return "load vote";
    case MessageType::kOffer:
      return "offer";
    case MessageType::kRankStatus:
      return "rank status";
    case MessageType::kNodePlace:
      return "node place";
    case MessageType::kNodeShares:
      return "node shares";
    case MessageType::kDurableSteps:
      return "durable steps";
    case MessageType::kShareOutcome:
      return "share outcome";
    case MessageType::kShareEntries:
      return "share entries";
    case MessageType::kLackingShares:
      return "lacking shares";
    case MessageType::kTransferPart:
      return "transfer part";
    case MessageType::kRunnerVote:
      return "runner vote";
    case MessageType::kResumeStep:
      return "resume step";
    case MessageType::kReadOncePlan:
      return "read-once plan";
    case MessageType::kReadOnceBatch:
      return "read-once batch";
    case MessageType::kReadOnceRates:
      return "read-once rates";
    case MessageType::kReadOnceNodeMemory:
      return "read-once node memory";
  }
  return "message";
}

inline constexpr char kMagic[2] = {'c', 'k'};

class Writer {
 public:
  explicit Writer(MessageType type) {
    out_.append(kMagic, sizeof(kMagic));
    U8(kMessageVersion);
    U8(static_cast<uint8_t>(type));
  }

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  // A counted string made of `parts` back to back, copied once.
  void StrOf(const std::vector<std::string_view>& parts) {
    size_t n = 0;
    for (std::string_view p : parts) n += p.size();
    out_.reserve(out_.size() + 4 + n);
    Count(n);
    for (std::string_view p : parts) out_.append(p);
  }
  void U32(uint32_t v) { Fixed(v); }
  void U64(uint64_t v) { Fixed(v); }
  void I64(int64_t v) { Fixed(static_cast<uint64_t>(v)); }
  void I32(int32_t v) { I64(v); }  // read back range-checked
  void Bool(bool v) { U8(v ? 1 : 0); }
  void Str(std::string_view s) {
    Count(s.size());
    out_.append(s);
  }
  void Count(size_t n) { U32(static_cast<uint32_t>(n)); }
  void I64s(const std::vector<int64_t>& v) {
    Count(v.size());
    for (int64_t x : v) I64(x);
  }
  void Sum(const Checksum128& c) {
    U64(c.high);
    U64(c.low);
  }
  void F64(double v) { U64(std::bit_cast<uint64_t>(v)); }
  void Strs(const std::vector<std::string>& v) {
    Count(v.size());
    for (const std::string& s : v) Str(s);
  }
  void Stat(const Status& s) {
    U8(static_cast<uint8_t>(s.code()));
    Str(s.message());
  }

  std::string Take() { return std::move(out_); }

 private:
  template <typename T>
  void Fixed(T v) {
    for (size_t i = 0; i < sizeof(T); ++i) {
      out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
  }

  std::string out_;
};

// Reads a message; the first problem sticks and every later read returns a
// zero, so a decoder reads straight through and checks once at the end.
class Reader {
 public:
  Reader(std::string_view bytes, MessageType type) : in_(bytes), type_(type) {
    if (in_.size() < 4 || std::memcmp(in_.data(), kMagic, 2) != 0) {
      Fail("not a ckpt message");
      return;
    }
    if (static_cast<uint8_t>(in_[2]) != kMessageVersion) {
      Fail("message version " + std::to_string(static_cast<uint8_t>(in_[2])) +
           ", this build " + "speaks version " +
           std::to_string(kMessageVersion) +
           " (are all ranks running the same ckpt?)");
      return;
    }
    if (static_cast<uint8_t>(in_[3]) != static_cast<uint8_t>(type)) {
      Fail("a message of another type (" +
           std::to_string(static_cast<uint8_t>(in_[3])) + ")");
      return;
    }
    pos_ = 4;
  }

  uint8_t U8() { return Fixed<uint8_t>(); }
  uint32_t U32() { return Fixed<uint32_t>(); }
  uint64_t U64() { return Fixed<uint64_t>(); }
  int64_t I64() { return static_cast<int64_t>(Fixed<uint64_t>()); }
  int32_t I32() {
    const int64_t v = I64();
    if (v < INT32_MIN || v > INT32_MAX) Fail("a 32-bit field out of range");
    return static_cast<int32_t>(v);
  }
  bool Bool() {
    const uint8_t v = U8();
    if (v > 1) Fail("a flag that is neither 0 nor 1");
    return v == 1;
  }
  std::string Str() { return std::string(View()); }
  // A counted string as a view into the bytes being decoded (no copy).
  std::string_view View() {
    const size_t n = Count(1);
    if (!ok()) return {};
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A list's length, checked against the bytes left (each element takes at
  // least `min_element_bytes`), so a corrupt count cannot allocate wildly.
  size_t Count(size_t min_element_bytes) {
    const uint32_t n = U32();
    if (ok() &&
        static_cast<uint64_t>(n) * min_element_bytes > in_.size() - pos_) {
      Fail("a count of " + std::to_string(n) + " beyond the message's end");
      return 0;
    }
    return ok() ? n : 0;
  }
  std::vector<int64_t> I64s() {
    std::vector<int64_t> v(Count(8));
    for (int64_t& x : v) x = I64();
    return v;
  }
  double F64() { return std::bit_cast<double>(U64()); }
  std::vector<std::string> Strs() {
    std::vector<std::string> v(Count(4));
    for (std::string& s : v) s = Str();
    return v;
  }
  Checksum128 Sum() {
    Checksum128 c;
    c.high = U64();
    c.low = U64();
    return c;
  }
  Status Stat() {
    const uint8_t code = U8();
    std::string message = Str();
    if (code > static_cast<uint8_t>(ErrorCode::kFailedPrecondition)) {
      Fail("an unknown error code " + std::to_string(code));
      return Status();
    }
    if (code == 0) {
      if (!message.empty()) Fail("an OK status with a message");
      return Status();
    }
    return Status(static_cast<ErrorCode>(code), std::move(message));
  }
  template <typename E>
  E Enum(E last) {
    const uint8_t v = U8();
    if (v > static_cast<uint8_t>(last)) {
      Fail("an enum value " + std::to_string(v) + " out of range");
    }
    return ok() ? static_cast<E>(v) : E{};
  }

  bool ok() const { return error_.empty(); }
  void Fail(std::string why) {
    if (ok()) error_ = std::move(why);
  }

  // The decoded value, or DataLoss naming the message and the problem.
  template <typename T>
  Result<T> Finish(T value) {
    if (ok() && pos_ != in_.size()) {
      Fail(std::to_string(in_.size() - pos_) + " bytes past its end");
    }
    if (!ok()) {
      return DataLossError("a rank sent a malformed " +
                           std::string(TypeName(type_)) + ": " + error_);
    }
    return value;
  }

 private:
  template <typename T>
  T Fixed() {
    if (!ok()) return 0;
    if (in_.size() - pos_ < sizeof(T)) {
      Fail("truncated");
      return 0;
    }
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<T>(static_cast<T>(static_cast<uint8_t>(in_[pos_ + i]))
                          << (8 * i));
    }
    pos_ += sizeof(T);
    return v;
  }

  std::string_view in_;
  size_t pos_ = 0;
  MessageType type_;
  std::string error_;
};

}  // namespace ckpt::wire
