// Byte-level encoding of ckpt's binary metadata objects (the directory and
// the per-rank indexes of a version 3 checkpoint, docs/format.md section 8):
// unsigned LEB128 integers, zigzag for the few signed ones, strings as a
// length and bytes, checksums as two little-endian 64-bit halves.
//
// The reader is bounds-checked and sticky: the first problem is kept, every
// later read returns zero, so a decoder reads straight through and checks
// once before it trusts a value for a loop bound or an allocation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/checksum.h"

namespace ckpt::format {

class ByteWriter {
 public:
  void Var(uint64_t v) {
    // Into a local buffer, one append: an index holds millions of these.
    char buf[10];
    size_t n = 0;
    while (v >= 0x80) {
      buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    buf[n++] = static_cast<char>(v);
    out_.append(buf, n);
  }
  // Zigzag, so small negative numbers stay short.
  void SignedVar(int64_t v) {
    Var((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U64(uint64_t v) {
    char buf[8];
    for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>(v >> (8 * i));
    out_.append(buf, 8);
  }
  void Str(std::string_view s) {
    Var(s.size());
    out_.append(s);
  }
  void Sum(const Checksum128& c) {
    U64(c.high);
    U64(c.low);
  }
  void Reserve(size_t n) { out_.reserve(n); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  uint64_t Var() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return Fail("ends inside an integer");
      const uint8_t b = static_cast<uint8_t>(in_[pos_++]);
      // The tenth byte may hold only the top bit of 64.
      if (shift == 63 && b > 1) return Fail("integer overflows 64 bits");
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) {
        // One spelling per value: a trailing zero byte is refused, so
        // equal bytes mean equal metadata.
        if (b == 0 && shift > 0) return Fail("integer has a redundant byte");
        return v;
      }
    }
    return Fail("integer longer than 10 bytes");
  }
  int64_t SignedVar() {
    const uint64_t v = Var();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  // An integer that must be at most `max` (`what` names it in the error).
  uint64_t VarMax(uint64_t max, const char* what) {
    const uint64_t v = Var();
    if (v > max) {
      return Fail(std::string(what) + " " + std::to_string(v) +
                  " is out of range");
    }
    return v;
  }
  uint8_t U8() {
    if (pos_ >= in_.size()) return static_cast<uint8_t>(Fail("ends early"));
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t U64() {
    if (in_.size() - pos_ < 8) return Fail("ends early");
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i]))
           << (8 * i);
    }
    pos_ += 8;
    return v;
  }
  std::string_view Str() {
    const uint64_t n = Var();
    if (!ok_) return {};
    if (n > in_.size() - pos_) {
      Fail("string of " + std::to_string(n) + " bytes runs past the end");
      return {};
    }
    std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Checksum128 Sum() {
    Checksum128 c;
    c.high = U64();
    c.low = U64();
    return c;
  }
  // Whether `n` more records of at least `min_bytes` each can still fit:
  // a count is checked before anything is reserved for it.
  bool Room(uint64_t n, uint64_t min_bytes) {
    if (ok_ && n > (in_.size() - pos_) / min_bytes) {
      Fail("count " + std::to_string(n) + " exceeds the bytes left");
    }
    return ok_;
  }

  uint64_t Fail(std::string why) {
    if (ok_) {
      ok_ = false;
      error_ = std::move(why) + " at byte " + std::to_string(pos_);
    }
    pos_ = in_.size();
    return 0;
  }
  bool ok() const { return ok_; }
  bool done() const { return pos_ == in_.size(); }
  const std::string& error() const { return error_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  bool ok_ = true;
  std::string error_;
};

}  // namespace ckpt::format
