#include "util/names.h"

#include <cstdint>
#include <string>

namespace ckpt {
namespace {

// Length of the well-formed UTF-8 sequence that starts `s` (1 to 4), or 0 if
// it is not one: a stray continuation byte, a truncated sequence, an overlong
// form, a surrogate or a code point past U+10FFFF.
size_t Utf8SequenceLength(std::string_view s) {
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t n;         // bytes in the sequence
  uint32_t cp;      // the code point, built up below
  uint32_t min_cp;  // smallest code point that needs n bytes
  if ((c & 0xe0) == 0xc0) {
    n = 2;
    cp = c & 0x1f;
    min_cp = 0x80;
  } else if ((c & 0xf0) == 0xe0) {
    n = 3;
    cp = c & 0x0f;
    min_cp = 0x800;
  } else if ((c & 0xf8) == 0xf0) {
    n = 4;
    cp = c & 0x07;
    min_cp = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    const unsigned char d = s[i];
    if ((d & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3f);
  }
  if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

}  // namespace

std::string Quote(std::string_view s) {
  // Printable form for messages: control bytes and bytes that are not UTF-8
  // are escaped, so a hostile name cannot garble a terminal or a log, and a
  // message stays valid UTF-8 (it can be put into JSON).
  static const char* kHex = "0123456789abcdef";
  const std::string_view head = s.substr(0, 200);
  std::string out = "\"";
  for (size_t i = 0; i < head.size();) {
    const unsigned char c = head[i];
    const size_t n = Utf8SequenceLength(head.substr(i));
    if (n == 0 || c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      ++i;
    } else {
      out += head.substr(i, n);
      i += n;
    }
  }
  if (s.size() > 200) out += "...";
  out += "\"";
  return out;
}

std::string Printable(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = Utf8SequenceLength(s.substr(i));
    if (n == 0 || c < 0x20 || c == 0x7f) return Quote(s);
    i += n;
  }
  return std::string(s);
}

namespace {

Status ValidatePathLike(std::string_view name, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError(std::string(what) + " " + Quote(name) + " " +
                                std::string(why));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > kMaxNameLength) return bad("is too long");
  for (unsigned char c : name) {
    if (c == 0) return bad("contains a NUL byte");
    if (c < 0x20 || c == 0x7f) return bad("contains a control character");
    if (c == '\\') return bad("contains a backslash");
  }
  // Names end up in JSON (data-file headers, the manifest), which holds only
  // UTF-8; S3 keys are UTF-8 too.
  for (size_t i = 0; i < name.size();) {
    const size_t n = Utf8SequenceLength(name.substr(i));
    if (n == 0) return bad("is not valid UTF-8");
    i += n;
  }
  if (name.front() == '/') return bad("is an absolute path");
  size_t start = 0;
  while (true) {
    size_t end = name.find('/', start);
    std::string_view part = name.substr(start, end == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : end - start);
    if (part.empty()) return bad("has an empty path component");
    if (part == "." || part == "..") return bad("has a '.' or '..' component");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return Status();
}

}  // namespace

Status ValidateEntryName(std::string_view name) {
  if (name == "__metadata__") {
    return InvalidArgumentError(
        "entry name \"__metadata__\" is reserved by safetensors");
  }
  return ValidatePathLike(name, "entry name");
}

Status ValidateKey(std::string_view key) {
  return ValidatePathLike(key, "storage key");
}

}  // namespace ckpt
