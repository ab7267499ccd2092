#include "format/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "format/constants.h"
#include "util/bytes.h"

namespace ckpt::format {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

constexpr std::string_view kWhat = "bad.safetensors";

// A file as a hostile writer would build it: the 8-byte little-endian
// length, the header bytes exactly as given, then `data_bytes` bytes.
std::string RawFile(std::string_view header, size_t data_bytes) {
  std::string out(8, '\0');
  EncodeU64LE(header.size(), out.data());
  out += header;
  out.append(data_bytes, '\x5a');
  return out;
}

// A file whose length prefix says `length`, whatever follows.
std::string WithLength(uint64_t length, std::string_view rest) {
  std::string out(8, '\0');
  EncodeU64LE(length, out.data());
  out += rest;
  return out;
}

std::string Tensor(std::string_view dtype, std::string_view shape,
                   std::string_view offsets) {
  return "{\"dtype\":\"" + std::string(dtype) +
         "\",\"shape\":" + std::string(shape) +
         ",\"data_offsets\":" + std::string(offsets) + "}";
}

// A message from a hostile file must stay printable and fit into JSON
// (nlohmann::json throws on text that is not UTF-8).
void ExpectUtf8(const std::string& message) {
  EXPECT_NO_THROW(nlohmann::json(message).dump()) << message;
}

// Parses `file` and expects DataLoss naming the file and, when given, the
// tensor (quoted).
void ExpectDataLoss(const std::string& file, std::string_view tensor = {}) {
  Result<SafetensorsHeader> r = ParseSafetensorsFile(file, kWhat);
  ASSERT_FALSE(r.ok()) << "accepted: " << file.substr(8);
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss) << r.status().ToString();
  EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  ExpectUtf8(r.status().message());
  if (!tensor.empty()) {
    EXPECT_CONTAINS(r.status().message(), "\"" + std::string(tensor) + "\"");
  }
}

std::string EncodeFile(std::vector<TensorLayout>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Result<std::string> head = EncodeSafetensorsHeader(tensors, metadata);
  EXPECT_TRUE(head.ok()) << head.status().ToString();
  if (!head.ok()) return "";
  uint64_t data = tensors.empty() ? 0 : tensors.back().end;
  std::string file = *head;
  // Distinct bytes, so a wrong offset would show.
  for (uint64_t i = 0; i < data; ++i) file += static_cast<char>(i * 7 + 1);
  return file;
}

TensorLayout Layout(std::string name, DType dtype, std::vector<int64_t> shape) {
  TensorLayout t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

void ExpectSameLayouts(const std::vector<TensorLayout>& expect,
                       const std::vector<TensorLayout>& got) {
  std::map<std::string, const TensorLayout*> by_name;
  for (const TensorLayout& t : got) by_name[t.name] = &t;
  ASSERT_EQ(by_name.size(), expect.size());
  for (const TensorLayout& e : expect) {
    ASSERT_TRUE(by_name.count(e.name)) << e.name;
    const TensorLayout& g = *by_name[e.name];
    EXPECT_EQ(g.dtype, e.dtype) << e.name;
    EXPECT_EQ(g.shape, e.shape) << e.name;
    EXPECT_EQ(g.begin, e.begin) << e.name;
    EXPECT_EQ(g.end, e.end) << e.name;
  }
}

// --- Round trips ------------------------------------------------------------

TEST(SafetensorsTest, RoundTripEveryDType) {
  std::vector<TensorLayout> tensors;
  for (DType d : AllDTypes()) {
    tensors.push_back(Layout("t." + std::string(DTypeName(d)), d, {2, 3}));
  }
  const std::string file = EncodeFile(tensors, {});
  // Encoding laid them out back to back in order.
  uint64_t offset = 0;
  for (const TensorLayout& t : tensors) {
    EXPECT_EQ(t.begin, offset) << t.name;
    EXPECT_EQ(t.end - t.begin, 6 * DTypeSize(t.dtype)) << t.name;
    offset = t.end;
  }
  Result<SafetensorsHeader> h = ParseSafetensorsFile(file, kWhat);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ExpectSameLayouts(tensors, h->tensors);
  EXPECT_TRUE(h->metadata.empty());
  EXPECT_EQ(h->data_size, offset);
  EXPECT_EQ(h->data_start + h->data_size, file.size());
  // Sorted by offset.
  for (size_t i = 1; i < h->tensors.size(); ++i) {
    EXPECT_LE(h->tensors[i - 1].end, h->tensors[i].begin);
  }
}

TEST(SafetensorsTest, RoundTripScalarEmptyAndMetadata) {
  std::vector<TensorLayout> tensors = {
      Layout("scalar", DType::kF64, {}),
      Layout("empty", DType::kF32, {0, 4}),
      Layout("w", DType::kBF16, {3}),
      Layout("also/empty", DType::kI64, {5, 0}),
      Layout("flag", DType::kBool, {}),
  };
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"epoch", "12"}, {"note", "\"quoted\"\n\xc3\xa4"}};
  const std::string file = EncodeFile(tensors, metadata);
  EXPECT_EQ(tensors[0].end - tensors[0].begin, 8u);
  EXPECT_EQ(tensors[1].end, tensors[1].begin);
  Result<SafetensorsHeader> h = ParseSafetensorsFile(file, kWhat);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ExpectSameLayouts(tensors, h->tensors);
  EXPECT_EQ(h->metadata, metadata);
  EXPECT_EQ(h->data_size, 8u + 6u + 1u);
}

TEST(SafetensorsTest, NoTensors) {
  std::vector<TensorLayout> none;
  const std::string file = EncodeFile(none, {{"k", "v"}});
  Result<SafetensorsHeader> h = ParseSafetensorsFile(file, kWhat);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->tensors.empty());
  EXPECT_EQ(h->data_size, 0u);
  EXPECT_EQ(h->metadata.at("k"), "v");

  Result<SafetensorsHeader> bare =
      ParseSafetensorsFile(RawFile("{}", 0), kWhat);
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_TRUE(bare->tensors.empty());
}

TEST(SafetensorsTest, HeaderIsPaddedToAlignment) {
  // Names of every length move the unpadded end through every residue.
  for (size_t len = 1; len <= 3 * kSafetensorsAlignment; ++len) {
    std::vector<TensorLayout> tensors = {
        Layout(std::string(len, 'n'), DType::kF32, {2})};
    Result<std::string> head = EncodeSafetensorsHeader(tensors, {});
    ASSERT_TRUE(head.ok());
    EXPECT_EQ(head->size() % kSafetensorsAlignment, 0u) << len;
    EXPECT_EQ(DecodeU64LE(head->data()), head->size() - 8) << len;
    // Padding is spaces after the JSON, and the header is still plain JSON.
    const std::string json = head->substr(8);
    const size_t close = json.rfind('}');
    ASSERT_NE(close, std::string::npos);
    EXPECT_LT(json.size() - close - 1, kSafetensorsAlignment);
    EXPECT_EQ(json.find_first_not_of(' ', close + 1), std::string::npos);
    EXPECT_TRUE(nlohmann::json::accept(json)) << json;

    std::string file = *head + std::string(8, '\0');
    Result<SafetensorsHeader> h = ParseSafetensorsFile(file, kWhat);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    EXPECT_EQ(h->data_start % kSafetensorsAlignment, 0u);
    EXPECT_EQ(h->data_start, head->size());
  }
}

TEST(SafetensorsTest, HeaderIsStandardSafetensorsJson) {
  std::vector<TensorLayout> tensors = {Layout("a", DType::kF16, {2, 2}),
                                       Layout("b", DType::kU8, {3})};
  Result<std::string> head = EncodeSafetensorsHeader(tensors, {{"m", "v"}});
  ASSERT_TRUE(head.ok());
  const nlohmann::json j = nlohmann::json::parse(head->substr(8));
  EXPECT_EQ(j["a"]["dtype"], "F16");
  EXPECT_EQ(j["a"]["shape"], nlohmann::json::array({2, 2}));
  EXPECT_EQ(j["a"]["data_offsets"], nlohmann::json::array({0, 8}));
  EXPECT_EQ(j["b"]["data_offsets"], nlohmann::json::array({8, 11}));
  EXPECT_EQ(j["__metadata__"]["m"], "v");
  EXPECT_EQ(j.size(), 3u);
}

// Names that JSON must escape, or that are not ASCII, come back as written
// (ckpt's names hold no backslash or control character); a scalar and an
// empty tensor keep their shapes.
TEST(SafetensorsTest, NamesAreEscapedAsJsonNeeds) {
  const std::vector<std::string> names = {"q\"uote", "caf\xc3\xa9",
                                          "\xe2\x82\xac/x", "s"};
  std::vector<TensorLayout> tensors;
  for (const std::string& n : names) {
    tensors.push_back(Layout(n, DType::kF32, {2, 0}));
  }
  tensors.back().shape = {};
  Result<std::string> head = EncodeSafetensorsHeader(tensors, {});
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  const nlohmann::json j = nlohmann::json::parse(head->substr(8));
  ASSERT_EQ(j.size(), names.size());
  for (const std::string& n : names) {
    ASSERT_TRUE(j.contains(n)) << n;
    EXPECT_EQ(j[n]["shape"], n == "s" ? nlohmann::json::array()
                                      : nlohmann::json::array({2, 0}))
        << n;
  }
  EXPECT_EQ(j["s"]["data_offsets"], nlohmann::json::array({0, 4}));
}

TEST(SafetensorsTest, AcceptsUnsortedAndUnpaddedFilesFromOtherWriters) {
  // Keys in any order, no padding, tensors listed out of file order.
  const std::string header = "{\"z\":" + Tensor("U8", "[2]", "[0,2]") +
                             ",\"a\":" + Tensor("I16", "[1]", "[2,4]") + "}";
  Result<SafetensorsHeader> h = ParseSafetensorsFile(RawFile(header, 4), kWhat);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[0].name, "z");
  EXPECT_EQ(h->tensors[1].name, "a");
  EXPECT_EQ(h->data_start, 8 + header.size());
}

TEST(SafetensorsTest, EncodeRejectsBadInput) {
  {
    std::vector<TensorLayout> t = {Layout("a/../b", DType::kU8, {1})};
    EXPECT_EQ(EncodeSafetensorsHeader(t, {}).status().code(),
              ErrorCode::kInvalidArgument);
  }
  {
    std::vector<TensorLayout> t = {Layout("__metadata__", DType::kU8, {1})};
    EXPECT_EQ(EncodeSafetensorsHeader(t, {}).status().code(),
              ErrorCode::kInvalidArgument);
  }
  {
    std::vector<TensorLayout> t = {Layout("a", DType::kU8, {1}),
                                   Layout("a", DType::kU8, {2})};
    Result<std::string> r = EncodeSafetensorsHeader(t, {});
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_CONTAINS(r.status().message(), "\"a\"");
  }
  {
    std::vector<TensorLayout> t = {
        Layout("big", DType::kF64, {int64_t{1} << 62, 8})};
    Result<std::string> r = EncodeSafetensorsHeader(t, {});
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_CONTAINS(r.status().message(), "\"big\"");
  }
  {
    // Each fits in 64 bits; together they do not.
    std::vector<TensorLayout> t = {
        Layout("a", DType::kU8, {int64_t{1} << 62, 3}),
        Layout("b", DType::kU8, {int64_t{1} << 62, 2})};
    EXPECT_EQ(EncodeSafetensorsHeader(t, {}).status().code(),
              ErrorCode::kInvalidArgument);
  }
  {
    std::vector<TensorLayout> t = {Layout("neg", DType::kU8, {-1})};
    EXPECT_EQ(EncodeSafetensorsHeader(t, {}).status().code(),
              ErrorCode::kInvalidArgument);
  }
}

TEST(SafetensorsTest, EncodeRejectsNonUtf8InsteadOfThrowing) {
  std::vector<TensorLayout> t = {Layout("w\xff", DType::kU8, {1})};
  EXPECT_EQ(EncodeSafetensorsHeader(t, {}).status().code(),
            ErrorCode::kInvalidArgument);
  std::vector<TensorLayout> ok = {Layout("w", DType::kU8, {1})};
  EXPECT_EQ(EncodeSafetensorsHeader(ok, {{"k", "v\xc3"}}).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(EncodeSafetensorsHeader(ok, {{"\xff", "v"}}).status().code(),
            ErrorCode::kInvalidArgument);
}

// --- Hostile files ----------------------------------------------------------

TEST(SafetensorsHostileTest, HandBuiltValidFilesParse) {
  // The builders below make valid files when not told to break them, so
  // every rejection that follows is for the reason its test names.
  Result<SafetensorsHeader> one = ParseSafetensorsFile(
      RawFile("{\"w\":" + Tensor("F32", "[1]", "[0,4]") + "}", 4), kWhat);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->tensors[0].end, 4u);
  const std::string two = "{\"a\":" + Tensor("U8", "[8]", "[0,8]") +
                          ",\"b\":" + Tensor("U8", "[4]", "[8,12]") +
                          ",\"__metadata__\":{\"k\":\"v\"}}";
  Result<SafetensorsHeader> h = ParseSafetensorsFile(RawFile(two, 12), kWhat);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->metadata.at("k"), "v");
  EXPECT_TRUE(
      ParseSafetensorsFile(
          RawFile("{\"w\":" + Tensor("U8", "[2]", "[0,2]") + "}", 2), kWhat)
          .ok());
  EXPECT_TRUE(
      ParseSafetensorsFile(
          RawFile("{\"w\":" + Tensor("U8", "[0]", "[0,0]") + "}", 0), kWhat)
          .ok());
}

TEST(SafetensorsHostileTest, ShorterThanEightBytes) {
  for (size_t n = 0; n < 8; ++n) ExpectDataLoss(std::string(n, '\x01'));
  ExpectDataLoss(std::string(7, '\0'));
}

TEST(SafetensorsHostileTest, HeaderLengthPastEndOfFile) {
  ExpectDataLoss(WithLength(100, "{}"));
  ExpectDataLoss(WithLength(3, "{}"));
  ExpectDataLoss(WithLength(1, ""));
  ExpectDataLoss(WithLength(UINT64_MAX, "{}"));
  ExpectDataLoss(WithLength(UINT64_MAX - 7, "{}"));
}

TEST(SafetensorsHostileTest, HeaderLengthOverLimit) {
  Result<SafetensorsHeader> r =
      ParseSafetensorsFile(WithLength(kMaxSafetensorsHeader + 1, "{}"), kWhat);
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  EXPECT_CONTAINS(r.status().message(), "limit");
  // The limit is checked on the prefix alone, before the header is read: a
  // file that claims a huge header is refused even when it is that large.
  const std::string prefix = WithLength(kMaxSafetensorsHeader + 1, "");
  Result<uint64_t> n = DecodeSafetensorsHeaderLength(
      std::as_bytes(std::span(prefix)), uint64_t{1} << 40, kWhat);
  EXPECT_EQ(n.status().code(), ErrorCode::kDataLoss);
  // Exactly the limit is allowed by the prefix check.
  const std::string at_limit = WithLength(kMaxSafetensorsHeader, "");
  Result<uint64_t> at = DecodeSafetensorsHeaderLength(
      std::as_bytes(std::span(at_limit)), uint64_t{1} << 40, kWhat);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(*at, kMaxSafetensorsHeader);
}

TEST(SafetensorsHostileTest, DecodeLengthChecksPrefixAndFileSize) {
  const std::string p = WithLength(10, "");
  EXPECT_EQ(
      DecodeSafetensorsHeaderLength(std::as_bytes(std::span(p)), 18, kWhat)
          .value(),
      10u);
  EXPECT_EQ(
      DecodeSafetensorsHeaderLength(std::as_bytes(std::span(p)), 17, kWhat)
          .status()
          .code(),
      ErrorCode::kDataLoss);
  EXPECT_EQ(DecodeSafetensorsHeaderLength(std::as_bytes(std::span(p)), 7, kWhat)
                .status()
                .code(),
            ErrorCode::kDataLoss);
  EXPECT_EQ(DecodeSafetensorsHeaderLength(std::as_bytes(std::span(p)).first(7),
                                          100, kWhat)
                .status()
                .code(),
            ErrorCode::kDataLoss);
}

TEST(SafetensorsHostileTest, ParseHeaderChecksItFitsTheFile) {
  const std::string json = "{}";
  EXPECT_TRUE(ParseSafetensorsHeader(json, 10, kWhat).ok());
  EXPECT_EQ(ParseSafetensorsHeader(json, 9, kWhat).status().code(),
            ErrorCode::kDataLoss);
  EXPECT_EQ(ParseSafetensorsHeader(json, 1, kWhat).status().code(),
            ErrorCode::kDataLoss);
  EXPECT_EQ(ParseSafetensorsHeader(json, 0, kWhat).status().code(),
            ErrorCode::kDataLoss);
}

TEST(SafetensorsHostileTest, HeaderNotJson) {
  ExpectDataLoss(RawFile("", 0));
  ExpectDataLoss(RawFile("not json at all", 0));
  ExpectDataLoss(RawFile("{\"a\":", 0));
  ExpectDataLoss(RawFile("{} trailing", 0));
  ExpectDataLoss(RawFile(std::string("{\0}", 3), 0));
  ExpectDataLoss(RawFile("{\"a\xff\":1}", 0));  // not UTF-8
  ExpectDataLoss(RawFile("{\"a\":1e99999}", 0));
}

TEST(SafetensorsHostileTest, HeaderNotAnObject) {
  ExpectDataLoss(RawFile("[]", 0));
  ExpectDataLoss(RawFile("[{\"a\":1}]", 0));
  ExpectDataLoss(RawFile("\"str\"", 0));
  ExpectDataLoss(RawFile("17", 0));
  ExpectDataLoss(RawFile("null", 0));
}

TEST(SafetensorsHostileTest, DeeplyNestedJson) {
  const int depth = 100000;
  ExpectDataLoss(RawFile(std::string(depth, '[') + std::string(depth, ']'), 0));
  ExpectDataLoss(RawFile("{\"__metadata__\":" + std::string(depth, '[') +
                             std::string(depth, ']') + "}",
                         0));
  ExpectDataLoss(RawFile(std::string(depth, '['), 0));
}

TEST(SafetensorsHostileTest, DuplicateTensorName) {
  const std::string t = Tensor("U8", "[4]", "[0,4]");
  ExpectDataLoss(RawFile("{\"a\":" + t + ",\"a\":" + t + "}", 4), "a");
  // Duplicate keys inside a tensor object are just as ambiguous.
  ExpectDataLoss(
      RawFile("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\","
              "\"shape\":[4],\"data_offsets\":[0,4]}}",
              4));
}

TEST(SafetensorsHostileTest, UnknownDType) {
  ExpectDataLoss(RawFile("{\"w\":" + Tensor("F7", "[1]", "[0,1]") + "}", 1),
                 "w");
  ExpectDataLoss(RawFile("{\"w\":" + Tensor("f32", "[1]", "[0,4]") + "}", 4),
                 "w");
  ExpectDataLoss(
      RawFile("{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
      "w");
  ExpectDataLoss(RawFile("{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4),
                 "w");
}

TEST(SafetensorsHostileTest, BadShapes) {
  for (const char* shape :
       {"[-1]", "[2,-3]", "[\"2\"]", "[2.0]", "[2.5]", "[1e2]", "[null]",
        "[true]", "[[2]]", "2", "\"[2]\"", "null", "{}",
        "[18446744073709551615]", "[9223372036854775808]",
        "[18446744073709551616]"}) {
    SCOPED_TRACE(shape);
    ExpectDataLoss(RawFile("{\"w\":" + Tensor("U8", shape, "[0,2]") + "}", 2),
                   "w");
  }
  ExpectDataLoss(
      RawFile("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,2]}}", 2), "w");
  // More than 64 dimensions.
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += i ? ",1" : "1";
  many += "]";
  ExpectDataLoss(RawFile("{\"w\":" + Tensor("U8", many, "[0,1]") + "}", 1),
                 "w");
}

TEST(SafetensorsHostileTest, BadDataOffsets) {
  for (const char* offsets : {"[8,0]", "[0,3]", "[0,5]", "[0]", "[0,4,8]", "[]",
                              "[-4,0]", "[0,-4]", "[\"0\",\"4\"]", "[0.0,4.0]",
                              "null", "{}", "4", "[0,18446744073709551616]"}) {
    SCOPED_TRACE(offsets);
    ExpectDataLoss(RawFile("{\"w\":" + Tensor("F32", "[1]", offsets) + "}", 4),
                   "w");
  }
  ExpectDataLoss(RawFile("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4), "w");
}

TEST(SafetensorsHostileTest, OverlappingTensors) {
  const std::string header = "{\"a\":" + Tensor("U8", "[8]", "[0,8]") +
                             ",\"b\":" + Tensor("U8", "[8]", "[4,12]") + "}";
  ExpectDataLoss(RawFile(header, 12), "b");
  // The same range twice.
  const std::string twice = "{\"a\":" + Tensor("U8", "[8]", "[0,8]") +
                            ",\"b\":" + Tensor("U8", "[8]", "[0,8]") + "}";
  ExpectDataLoss(RawFile(twice, 8));
  // An empty tensor inside another one.
  const std::string inside = "{\"a\":" + Tensor("U8", "[8]", "[0,8]") +
                             ",\"e\":" + Tensor("U8", "[0]", "[4,4]") + "}";
  ExpectDataLoss(RawFile(inside, 8), "e");
}

TEST(SafetensorsHostileTest, HoleBetweenTensors) {
  const std::string header = "{\"a\":" + Tensor("U8", "[4]", "[0,4]") +
                             ",\"b\":" + Tensor("U8", "[4]", "[8,12]") + "}";
  ExpectDataLoss(RawFile(header, 12), "b");
  // A hole at the start.
  ExpectDataLoss(RawFile("{\"a\":" + Tensor("U8", "[4]", "[4,8]") + "}", 8),
                 "a");
}

TEST(SafetensorsHostileTest, OffsetsPastTheEnd) {
  ExpectDataLoss(RawFile("{\"a\":" + Tensor("U8", "[16]", "[0,16]") + "}", 8));
  ExpectDataLoss(RawFile("{\"a\":" + Tensor("U8", "[1]", "[0,1]") + "}", 0));
  ExpectDataLoss(RawFile("{\"a\":" +
                             Tensor("U8", "[4]",
                                    "[18446744073709551611,"
                                    "18446744073709551615]") +
                             "}",
                         4),
                 "a");
}

TEST(SafetensorsHostileTest, TrailingBytes) {
  Result<SafetensorsHeader> r = ParseSafetensorsFile(
      RawFile("{\"a\":" + Tensor("U8", "[8]", "[0,8]") + "}", 12), kWhat);
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  EXPECT_CONTAINS(r.status().message(), "trailing");
  ExpectDataLoss(RawFile("{}", 1));
}

TEST(SafetensorsHostileTest, ShapeByteCountOverflows) {
  // 2^32 * 2^32 elements, and 2^62 * 8 bytes.
  ExpectDataLoss(
      RawFile(
          "{\"w\":" + Tensor("U8", "[4294967296,4294967296]", "[0,0]") + "}",
          0),
      "w");
  ExpectDataLoss(
      RawFile("{\"w\":" + Tensor("F64", "[4611686018427387904]", "[0,0]") + "}",
              0),
      "w");
  ExpectDataLoss(
      RawFile("{\"w\":" +
                  Tensor("F32", "[9223372036854775807,9223372036854775807]",
                         "[0,0]") +
                  "}",
              0),
      "w");
}

TEST(SafetensorsHostileTest, PathLikeNamesRejected) {
  const std::string t = Tensor("U8", "[1]", "[0,1]");
  for (const char* name :
       {"a/../b", "/etc/passwd", "..", "a//b", "a/", "./a", "a\\\\b"}) {
    SCOPED_TRACE(name);
    ExpectDataLoss(RawFile("{\"" + std::string(name) + "\":" + t + "}", 1));
  }
  // The message still names the tensor, escaped.
  Result<SafetensorsHeader> r =
      ParseSafetensorsFile(RawFile("{\"a/../b\":" + t + "}", 1), kWhat);
  EXPECT_CONTAINS(r.status().message(), "\"a/../b\"");
  Result<SafetensorsHeader> abs =
      ParseSafetensorsFile(RawFile("{\"/etc/passwd\":" + t + "}", 1), kWhat);
  EXPECT_CONTAINS(abs.status().message(), "\"/etc/passwd\"");
}

TEST(SafetensorsHostileTest, ControlCharactersInNamesRejected) {
  const std::string t = Tensor("U8", "[1]", "[0,1]");
  Result<SafetensorsHeader> r =
      ParseSafetensorsFile(RawFile("{\"a\\u0000b\":" + t + "}", 1), kWhat);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss);
  EXPECT_CONTAINS(r.status().message(), std::string(kWhat));
  EXPECT_CONTAINS(r.status().message(), "\"a\\x00b\"");
  EXPECT_EQ(r.status().message().find('\0'), std::string::npos);
  ExpectDataLoss(RawFile("{\"a\\nb\":" + t + "}", 1));
  ExpectDataLoss(RawFile("{\"\\u001b[2J\":" + t + "}", 1));
  ExpectDataLoss(RawFile("{\"\":" + t + "}", 1));
}

TEST(SafetensorsHostileTest, UnknownFieldInTensor) {
  ExpectDataLoss(RawFile("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                         "\"data_offsets\":[0,1],\"extra\":0}}",
                         1),
                 "w");
  ExpectDataLoss(RawFile("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
                         "\"data_offsets\":[0,1],\"Dtype\":\"U8\"}}",
                         1),
                 "w");
}

TEST(SafetensorsHostileTest, TensorNotAnObject) {
  ExpectDataLoss(RawFile("{\"w\":3}", 0), "w");
  ExpectDataLoss(RawFile("{\"w\":[\"U8\",[1],[0,1]]}", 1), "w");
  ExpectDataLoss(RawFile("{\"w\":null}", 0), "w");
}

TEST(SafetensorsHostileTest, BadMetadata) {
  ExpectDataLoss(RawFile("{\"__metadata__\":{\"k\":1}}", 0), "k");
  ExpectDataLoss(RawFile("{\"__metadata__\":{\"k\":null}}", 0), "k");
  ExpectDataLoss(RawFile("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0), "k");
  ExpectDataLoss(RawFile("{\"__metadata__\":{\"k\":[\"v\"]}}", 0), "k");
  ExpectDataLoss(RawFile("{\"__metadata__\":[]}", 0));
  ExpectDataLoss(RawFile("{\"__metadata__\":\"x\"}", 0));
  ExpectDataLoss(RawFile("{\"__metadata__\":{},\"__metadata__\":{}}", 0));
}

TEST(SafetensorsHostileTest, ErrorsDoNotReturnPartialHeaders) {
  // A good tensor followed by a bad one: nothing is returned.
  const std::string header = "{\"a\":" + Tensor("U8", "[4]", "[0,4]") +
                             ",\"b\":" + Tensor("F7", "[4]", "[4,8]") + "}";
  Result<SafetensorsHeader> r = ParseSafetensorsFile(RawFile(header, 8), kWhat);
  EXPECT_FALSE(r.ok());
}

// --- Randomized robustness -----------------------------------------------

TEST(SafetensorsFuzzTest, MutatedHeadersNeverCrash) {
  std::vector<TensorLayout> tensors = {
      Layout("model.embed", DType::kF32, {4, 3}),
      Layout("model.bias", DType::kBF16, {5}),
      Layout("scalar", DType::kI64, {}),
      Layout("empty", DType::kU8, {0, 2}),
      Layout("opt/state", DType::kF8E4M3, {7}),
  };
  const std::string valid = EncodeFile(tensors, {{"epoch", "3"}, {"a", "b"}});
  ASSERT_TRUE(ParseSafetensorsFile(valid, kWhat).ok());
  const size_t header_end = 8 + DecodeU64LE(valid.data());

  // Bytes that make small edits meaningful to a JSON parser.
  std::string interesting = "{}[]\":,-.0123456789eE \\u\x7f\xff";
  interesting.push_back('\0');
  std::mt19937_64 rng(20240611);
  int accepted = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string file = valid;
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 || op == 3) {
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) {
        const size_t pos = rng() % header_end;
        file[pos] = static_cast<char>(file[pos] ^ (1u << (rng() % 8)));
      }
    }
    if (op == 1) {
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < edits; ++f) {
        const size_t pos = 8 + rng() % (header_end - 8);
        file[pos] = interesting[rng() % interesting.size()];
      }
    }
    if (op == 2 || op == 3) {
      file.resize(rng() % (header_end + 1));
    }
    Result<SafetensorsHeader> r = ParseSafetensorsFile(file, kWhat);
    if (!r.ok()) {
      EXPECT_TRUE(r.status().code() == ErrorCode::kDataLoss)
          << r.status().ToString();
      EXPECT_EQ(r.status().message().rfind(std::string(kWhat), 0), 0u)
          << r.status().ToString();
      ExpectUtf8(r.status().message());
      continue;
    }
    ++accepted;
    const SafetensorsHeader& h = *r;
    EXPECT_GE(h.data_start, 8u);
    EXPECT_EQ(h.data_start + h.data_size, file.size());
    uint64_t expect = 0;
    for (const TensorLayout& t : h.tensors) {
      EXPECT_LE(t.begin, t.end);
      EXPECT_EQ(t.begin, expect);
      EXPECT_LE(t.end, h.data_size);
      EXPECT_LE(h.data_start + t.end, file.size());
      expect = t.end;
      TensorLayout copy = t;
      std::vector<TensorLayout> one = {copy};
      // What was accepted re-encodes.
      EXPECT_TRUE(EncodeSafetensorsHeader(one, {}).ok()) << t.name;
    }
  }
  // Some mutations (a digit in a metadata value, padding) keep the file valid.
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace ckpt::format
