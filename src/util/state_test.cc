#include "ckpt/state.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "util/dtype_text.h"

namespace ckpt {
namespace {

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::vector<std::string> Names(const State& state) {
  std::vector<std::string> out;
  for (const Entry& e : state.entries()) out.push_back(e.name);
  return out;
}

TEST(StateTest, EmptyStateIsOk) {
  State state;
  EXPECT_TRUE(state.status().ok());
  EXPECT_EQ(state.size(), 0u);
  EXPECT_EQ(state.Find("x"), nullptr);
}

TEST(StateTest, KeepsInsertionOrder) {
  std::vector<float> a(4), c(2);
  std::vector<int64_t> b(3);
  State state;
  state.AddTensor("zeta", View(a))
      .AddBlob("alpha", std::string("rng"))
      .AddTensor("mid/b", View(b))
      .AddMetadata("beta", {{"k", "v"}})
      .AddTensor("a", View(c));
  ASSERT_TRUE(state.status().ok()) << state.status().ToString();
  EXPECT_EQ(Names(state),
            (std::vector<std::string>{"zeta", "alpha", "mid/b", "beta", "a"}));
  EXPECT_EQ(state.size(), 5u);
  EXPECT_EQ(state.entries()[0].kind, EntryKind::kTensor);
  EXPECT_EQ(state.entries()[1].kind, EntryKind::kBlob);
  EXPECT_EQ(state.entries()[3].kind, EntryKind::kMetadata);
}

TEST(StateTest, FindReturnsTheEntry) {
  std::vector<double> w(5);
  State state;
  state.AddTensor("w", View(w));
  const State& cstate = state;
  ASSERT_NE(cstate.Find("w"), nullptr);
  EXPECT_EQ(cstate.Find("w")->name, "w");
  EXPECT_EQ(cstate.Find("w")->tensor.data,
            reinterpret_cast<std::byte*>(w.data()));
  ASSERT_NE(state.Find("w"), nullptr);
  EXPECT_EQ(state.Find("v"), nullptr);
}

TEST(StateTest, DuplicateIsAlreadyExistsAndSticks) {
  std::vector<float> a(2), b(3), c(1);
  State state;
  state.AddTensor("w", View(a));
  state.AddTensor("w", View(b));
  EXPECT_EQ(state.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_CONTAINS(state.status().message(), "\"w\"");
  // The first entry stays as it was.
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state.entries()[0].tensor.shape, std::vector<int64_t>{2});
  // Later adds are ignored and the first error stays.
  state.AddTensor("other", View(c));
  state.AddTensor("/bad", View(c));
  state.AddBlob("blob", std::string("x"));
  state.AddMetadata("meta", {});
  EXPECT_EQ(state.size(), 1u);
  EXPECT_EQ(state.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_CONTAINS(state.status().message(), "\"w\"");
}

TEST(StateTest, DuplicateAcrossKindsIsAlreadyExists) {
  std::vector<float> a(2);
  State state;
  state.AddTensor("x", View(a)).AddBlob("x", std::string("b"));
  EXPECT_EQ(state.status().code(), ErrorCode::kAlreadyExists);
  EXPECT_EQ(state.size(), 1u);
}

TEST(StateTest, BadNameSticksInvalidArgument) {
  std::vector<float> a(2);
  State state;
  state.AddTensor("a/../b", View(a));
  EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(state.status().message(), "a/../b");
  EXPECT_EQ(state.size(), 0u);
  state.AddTensor("good", View(a));
  state.AddTensor("good", View(a));  // would be AlreadyExists
  EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(state.size(), 0u);
}

TEST(StateTest, ReservedNameIsRejected) {
  State state;
  state.AddBlob("__metadata__", std::string("x"));
  EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument);
}

TEST(StateTest, ViewPicksDTypeForEachType) {
  std::vector<uint8_t> u8(1);
  std::vector<int8_t> i8(1);
  std::vector<uint16_t> u16(1);
  std::vector<int16_t> i16(1);
  std::vector<uint32_t> u32(1);
  std::vector<int32_t> i32(1);
  std::vector<float> f32(1);
  std::vector<uint64_t> u64(1);
  std::vector<int64_t> i64(1);
  std::vector<double> f64(1);
  bool b[3] = {true, false, true};
  EXPECT_EQ(View(u8).dtype, DType::kU8);
  EXPECT_EQ(View(i8).dtype, DType::kI8);
  EXPECT_EQ(View(u16).dtype, DType::kU16);
  EXPECT_EQ(View(i16).dtype, DType::kI16);
  EXPECT_EQ(View(u32).dtype, DType::kU32);
  EXPECT_EQ(View(i32).dtype, DType::kI32);
  EXPECT_EQ(View(f32).dtype, DType::kF32);
  EXPECT_EQ(View(u64).dtype, DType::kU64);
  EXPECT_EQ(View(i64).dtype, DType::kI64);
  EXPECT_EQ(View(f64).dtype, DType::kF64);
  TensorView bv = View(std::span<bool>(b), {3});
  EXPECT_EQ(bv.dtype, DType::kBool);
  EXPECT_EQ(*bv.ByteSize(), 3u);
  static_assert(DTypeOf<float>() == DType::kF32);
  static_assert(DTypeOf<int64_t>() == DType::kI64);
}

TEST(StateTest, ViewOfVectorIsOneDimensionalAndWritable) {
  std::vector<float> v(7);
  TensorView t = View(v);
  EXPECT_EQ(t.shape, std::vector<int64_t>{7});
  EXPECT_EQ(t.data, reinterpret_cast<std::byte*>(v.data()));
  EXPECT_TRUE(t.writable);
  EXPECT_EQ(*t.NumElements(), 7u);
  EXPECT_EQ(*t.ByteSize(), 28u);
}

TEST(StateTest, ViewOfConstDataIsNotWritable) {
  const std::vector<double> cv(3);
  TensorView t = View(cv);
  EXPECT_FALSE(t.writable);
  EXPECT_EQ(t.dtype, DType::kF64);
  EXPECT_EQ(t.data,
            reinterpret_cast<std::byte*>(const_cast<double*>(cv.data())));

  const int32_t arr[6] = {};
  TensorView s = View(std::span<const int32_t>(arr), {2, 3});
  EXPECT_FALSE(s.writable);
  EXPECT_EQ(s.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*s.ByteSize(), 24u);

  int32_t marr[6] = {};
  EXPECT_TRUE(View(std::span<int32_t>(marr), {6}).writable);
}

TEST(TensorViewTest, ScalarHasOneElement) {
  TensorView t{DType::kF64, {}, nullptr, false};
  EXPECT_EQ(*t.NumElements(), 1u);
  EXPECT_EQ(*t.ByteSize(), 8u);
}

TEST(TensorViewTest, ZeroDimensionMeansNoElements) {
  TensorView t{DType::kF32, {4, 0, 3}, nullptr, false};
  EXPECT_EQ(*t.NumElements(), 0u);
  EXPECT_EQ(*t.ByteSize(), 0u);
  TensorView u{DType::kI16, {0}, nullptr, false};
  EXPECT_EQ(*u.ByteSize(), 0u);
}

TEST(TensorViewTest, ByteSizeUsesDTypeSize) {
  for (DType d : AllDTypes()) {
    TensorView t{d, {3, 5}, nullptr, false};
    EXPECT_EQ(*t.ByteSize(), 15 * DTypeSize(d)) << DTypeName(d);
  }
}

TEST(TensorViewTest, ElementCountOverflowIsAnError) {
  TensorView t{DType::kF64, {int64_t{1} << 62, 8}, nullptr, false};
  EXPECT_EQ(t.NumElements().status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(t.ByteSize().status().code(), ErrorCode::kInvalidArgument);
}

TEST(TensorViewTest, ByteCountOverflowIsAnError) {
  // 2^63 elements fit in 64 bits, 2^66 bytes do not.
  TensorView t{DType::kF64, {int64_t{1} << 62, 2}, nullptr, false};
  ASSERT_TRUE(t.NumElements().ok());
  EXPECT_EQ(*t.NumElements(), uint64_t{1} << 63);
  EXPECT_EQ(t.ByteSize().status().code(), ErrorCode::kInvalidArgument);
  // One byte per element: no overflow.
  TensorView u{DType::kU8, {int64_t{1} << 62, 2}, nullptr, false};
  EXPECT_EQ(*u.ByteSize(), uint64_t{1} << 63);
}

TEST(TensorViewTest, NegativeDimensionIsAnError) {
  TensorView t{DType::kF32, {2, -1}, nullptr, false};
  EXPECT_EQ(t.NumElements().status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(t.ByteSize().status().code(), ErrorCode::kInvalidArgument);
}

TEST(StateTest, OverflowingTensorSticksError) {
  State state;
  state.AddTensor("huge", TensorView{DType::kF64,
                                     {int64_t{1} << 62, 8},
                                     reinterpret_cast<std::byte*>(&state),
                                     false});
  EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(state.status().message(), "huge");
  EXPECT_EQ(state.size(), 0u);
}

TEST(StateTest, NullDataWithBytesIsAnError) {
  State state;
  state.AddTensor("w", TensorView{DType::kF32, {4}, nullptr, true});
  EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(state.status().message(), "\"w\"");
  EXPECT_EQ(state.size(), 0u);
}

TEST(StateTest, NullDataWithoutBytesIsFine) {
  State state;
  state.AddTensor("empty", TensorView{DType::kF32, {0, 5}, nullptr, true});
  ASSERT_TRUE(state.status().ok()) << state.status().ToString();
  EXPECT_EQ(state.size(), 1u);
  EXPECT_EQ(state.Find("empty")->tensor.shape, (std::vector<int64_t>{0, 5}));
}

TEST(StateTest, ScalarTensor) {
  double x = 3.5;
  State state;
  state.AddTensor("lr", View(std::span<double>(&x, 1), {}));
  ASSERT_TRUE(state.status().ok());
  const Entry* e = state.Find("lr");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->tensor.shape.empty());
  EXPECT_EQ(*e->tensor.ByteSize(), 8u);
}

TEST(StateTest, BorrowedBlob) {
  const std::string rng("mersenne twister\0state", 22);
  State state;
  state.AddBlob("rng", AsBytes(rng));
  ASSERT_TRUE(state.status().ok());
  const Entry* e = state.Find("rng");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind, EntryKind::kBlob);
  EXPECT_EQ(e->tensor.dtype, DType::kU8);
  EXPECT_EQ(e->tensor.shape,
            std::vector<int64_t>{static_cast<int64_t>(rng.size())});
  EXPECT_FALSE(e->tensor.writable);
  // Borrowed: the State points at the caller's bytes.
  EXPECT_EQ(reinterpret_cast<const char*>(e->tensor.data), rng.data());
  Result<std::span<const std::byte>> blob = state.Blob("rng");
  ASSERT_TRUE(blob.ok());
  EXPECT_EQ(blob->data(), reinterpret_cast<const std::byte*>(rng.data()));
  EXPECT_EQ(blob->size(), rng.size());
  EXPECT_EQ(*state.BlobString("rng"), rng);
}

TEST(StateTest, OwnedBlobIsACopy) {
  std::string bytes("abc\0def", 7);
  const std::string original = bytes;
  State state;
  state.AddBlob("opt", std::string(bytes));
  bytes.assign(7, 'x');
  ASSERT_TRUE(state.status().ok());
  EXPECT_EQ(*state.BlobString("opt"), original);
  EXPECT_EQ(state.Blob("opt")->size(), 7u);
  EXPECT_TRUE(state.Find("opt")->tensor.writable);
}

TEST(StateTest, EmptyBlobs) {
  State state;
  state.AddBlob("owned", std::string());
  state.AddBlob("borrowed", std::span<const std::byte>());
  ASSERT_TRUE(state.status().ok());
  EXPECT_EQ(*state.BlobString("owned"), "");
  EXPECT_EQ(*state.BlobString("borrowed"), "");
  EXPECT_EQ(state.Blob("owned")->size(), 0u);
}

TEST(StateTest, BlobOfWrongKindOrMissingIsNotFound) {
  std::vector<uint8_t> t(3);
  State state;
  state.AddTensor("t", View(t)).AddMetadata("m", {});
  EXPECT_EQ(state.Blob("t").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(state.Blob("m").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(state.Blob("missing").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(state.BlobString("missing").status().code(), ErrorCode::kNotFound);
  EXPECT_CONTAINS(state.Blob("missing").status().message(), "missing");
}

TEST(StateTest, MetadataMapRoundTrip) {
  const std::map<std::string, std::string> values = {
      {"epoch", "3"},
      {"optimizer", "adam"},
      {"empty", ""},
      {"quote\"and\\slash", "line\nbreak"},
      {"utf8 \xc3\xa4", "\xe2\x82\xac"}};
  State state;
  state.AddMetadata("run", values);
  ASSERT_TRUE(state.status().ok()) << state.status().ToString();
  const Entry* e = state.Find("run");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind, EntryKind::kMetadata);
  Result<std::map<std::string, std::string>> back = state.Metadata("run");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, values);
}

TEST(StateTest, EmptyMetadataMap) {
  State state;
  state.AddMetadata("m", {});
  ASSERT_TRUE(state.status().ok());
  EXPECT_TRUE(state.Metadata("m")->empty());
}

TEST(StateTest, MetadataJsonNonStringValuesAreDumped) {
  State state;
  state.AddMetadataJson("m", R"({"s": "x", "n": 3, "b": true, "o": {"a": 1}})");
  ASSERT_TRUE(state.status().ok());
  Result<std::map<std::string, std::string>> m = state.Metadata("m");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->at("s"), "x");
  EXPECT_EQ(m->at("n"), "3");
  EXPECT_EQ(m->at("b"), "true");
  EXPECT_EQ(m->at("o"), R"({"a":1})");
}

TEST(StateTest, MetadataJsonIsCanonical) {
  State a, b;
  a.AddMetadataJson("m", R"({ "b" : 1 , "a" : 2 })");
  b.AddMetadataJson("m", R"({"a":2,"b":1})");
  ASSERT_TRUE(a.status().ok());
  EXPECT_EQ(a.Find("m")->json, b.Find("m")->json);
}

TEST(StateTest, MetadataJsonRejectsNonObjects) {
  for (const char* json : {"[]", "[1, 2]", "3", "\"str\"", "null", "true"}) {
    State state;
    state.AddMetadataJson("m", json);
    EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument) << json;
    EXPECT_CONTAINS(state.status().message(), "\"m\"");
    EXPECT_EQ(state.size(), 0u) << json;
  }
}

TEST(StateTest, MetadataJsonRejectsInvalidJson) {
  for (const char* json :
       {"", "{", "{\"a\":}", "{'a': 1}", "{\"a\": 1,}", "{\"a\" 1}", "}"}) {
    State state;
    state.AddMetadataJson("m", json);
    EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument) << json;
    EXPECT_EQ(state.size(), 0u) << json;
  }
}

TEST(StateTest, MetadataNestedDeeperThanAManifestHoldsIsRefused) {
  auto nested = [](size_t depth) {
    // {"a":[{"a":[...]}]} with brackets inside strings that must not count.
    std::string open, close;
    for (size_t i = 0; i < depth; ++i) {
      open += i % 2 == 0 ? "{\"[{\\\"\":" : "[";
      close = (i % 2 == 0 ? "}" : "]") + close;
    }
    return open + "1" + close;
  };
  // The value 1 inside n containers is n + 1 levels deep.
  State ok;
  ok.AddMetadataJson("m", nested(State::kMaxMetadataDepth - 1));
  EXPECT_TRUE(ok.status().ok()) << ok.status().ToString();
  // An empty array counts its own level only: {"a":[[...[]...]]}.
  auto arrays = [](size_t n) {
    return "{\"a\":" + std::string(n, '[') + std::string(n, ']') + "}";
  };
  State empty_inside;
  empty_inside.AddMetadataJson("m", arrays(State::kMaxMetadataDepth - 1));
  EXPECT_TRUE(empty_inside.status().ok()) << empty_inside.status().ToString();
  State one_more;
  one_more.AddMetadataJson("m", arrays(State::kMaxMetadataDepth));
  EXPECT_EQ(one_more.status().code(), ErrorCode::kInvalidArgument);
  State deep;
  deep.AddMetadataJson("m", nested(State::kMaxMetadataDepth));
  EXPECT_EQ(deep.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(deep.status().message(), "\"m\" nests 63 levels");
  EXPECT_EQ(deep.size(), 0u);
  // Far too deep for a recursive parser: refused by the count alone.
  State hostile;
  hostile.AddMetadataJson("m", std::string(1 << 20, '[') + "]");
  EXPECT_EQ(hostile.status().code(), ErrorCode::kInvalidArgument);
}

TEST(StateTest, MetadataOfWrongKindIsNotFound) {
  State state;
  state.AddBlob("b", std::string("x"));
  EXPECT_EQ(state.Metadata("b").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(state.Metadata("nope").status().code(), ErrorCode::kNotFound);
}

TEST(StateTest, InvalidUtf8MetadataIsAnErrorNotAnException) {
  // JSON text must be UTF-8; a byte string that is not cannot be stored as
  // metadata, and the State must say so instead of throwing.
  State state;
  state.AddMetadata("m", {{"k", "\xff\xfe"}});
  EXPECT_EQ(state.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(state.status().message(), "\"m\"");
  EXPECT_EQ(state.size(), 0u);
  State keys;
  keys.AddMetadata("m", {{"\xc3", "v"}});
  EXPECT_EQ(keys.status().code(), ErrorCode::kInvalidArgument);
}

TEST(StateTest, AllocateTensorGivesWritableViewOfRightSize) {
  State state;
  Result<TensorView> v = state.AllocateTensor("w", DType::kBF16, {3, 5});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->dtype, DType::kBF16);
  EXPECT_EQ(v->shape, (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(v->writable);
  ASSERT_NE(v->data, nullptr);
  EXPECT_EQ(*v->ByteSize(), 30u);
  // Every byte is writable (the sanitizer build checks the bounds).
  std::memset(v->data, 0xab, 30);
  const Entry* e = state.Find("w");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->kind, EntryKind::kTensor);
  EXPECT_EQ(e->tensor.data, v->data);
  EXPECT_EQ(e->tensor.shape, v->shape);
  EXPECT_EQ(static_cast<unsigned char>(e->tensor.data[29]), 0xab);
}

TEST(StateTest, AllocateTensorScalarAndEmpty) {
  State state;
  Result<TensorView> s = state.AllocateTensor("s", DType::kI64, {});
  ASSERT_TRUE(s.ok());
  ASSERT_NE(s->data, nullptr);
  std::memset(s->data, 1, 8);
  Result<TensorView> e = state.AllocateTensor("e", DType::kF32, {0});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e->ByteSize(), 0u);
  EXPECT_EQ(state.size(), 2u);
}

TEST(StateTest, AllocateTensorErrors) {
  State state;
  EXPECT_EQ(state.AllocateTensor("big", DType::kF64, {int64_t{1} << 62, 8})
                .status()
                .code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(state.size(), 0u);
  ASSERT_TRUE(state.AllocateTensor("w", DType::kU8, {1}).ok());
  EXPECT_EQ(state.AllocateTensor("w", DType::kU8, {1}).status().code(),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(state.status().code(), ErrorCode::kAlreadyExists);
  // The sticky error is returned to later allocations too.
  EXPECT_EQ(state.AllocateTensor("x", DType::kU8, {1}).status().code(),
            ErrorCode::kAlreadyExists);
  EXPECT_EQ(state.size(), 1u);

  State bad;
  EXPECT_EQ(bad.AllocateTensor("../x", DType::kU8, {1}).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(bad.status().code(), ErrorCode::kInvalidArgument);
}

TEST(StateTest, SetBlobReplaces) {
  const std::string borrowed = "old";
  State state;
  state.AddBlob("b", AsBytes(borrowed));
  ASSERT_TRUE(state.SetBlob("b", std::string("brand new bytes")).ok());
  EXPECT_EQ(*state.BlobString("b"), "brand new bytes");
  EXPECT_EQ(state.Find("b")->tensor.shape, std::vector<int64_t>{15});
  EXPECT_EQ(borrowed, "old");  // the caller's buffer is not written
  ASSERT_TRUE(state.SetBlob("b", std::string()).ok());
  EXPECT_EQ(*state.BlobString("b"), "");
  EXPECT_EQ(state.size(), 1u);
}

TEST(StateTest, SetBlobOnMissingOrWrongKindIsNotFound) {
  std::vector<float> t(1);
  State state;
  state.AddTensor("t", View(t));
  EXPECT_EQ(state.SetBlob("t", "x").code(), ErrorCode::kNotFound);
  EXPECT_EQ(state.SetBlob("missing", "x").code(), ErrorCode::kNotFound);
}

TEST(StateTest, SetMetadataJsonReplaces) {
  State state;
  state.AddMetadata("m", {{"a", "1"}});
  ASSERT_TRUE(state.SetMetadataJson("m", R"({"b":"2","c":"3"})").ok());
  EXPECT_EQ(*state.Metadata("m"),
            (std::map<std::string, std::string>{{"b", "2"}, {"c", "3"}}));
  EXPECT_EQ(state.SetMetadataJson("nope", "{}").code(), ErrorCode::kNotFound);
  state.AddBlob("b", std::string());
  EXPECT_EQ(state.SetMetadataJson("b", "{}").code(), ErrorCode::kNotFound);
}

TEST(StateTest, MoveKeepsEntriesAndOwnedBytes) {
  State a;
  a.AddBlob("b", std::string("owned bytes"));
  State b = std::move(a);
  EXPECT_EQ(*b.BlobString("b"), "owned bytes");
  ASSERT_NE(b.Find("b"), nullptr);
}

TEST(EntryKindTest, Names) {
  EXPECT_EQ(EntryKindName(EntryKind::kTensor), "tensor");
  EXPECT_EQ(EntryKindName(EntryKind::kBlob), "blob");
  EXPECT_EQ(EntryKindName(EntryKind::kMetadata), "metadata");
}

TEST(DTypeTest, NamesAndSizesRoundTrip) {
  ASSERT_EQ(AllDTypes().size(), 15u);
  for (DType d : AllDTypes()) {
    EXPECT_EQ(ParseDType(DTypeName(d)), d) << DTypeName(d);
  }
  EXPECT_EQ(DTypeName(DType::kBF16), "BF16");
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeSize(DType::kF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_FALSE(ParseDType("F7").has_value());
  EXPECT_FALSE(ParseDType("f32").has_value());
  EXPECT_FALSE(ParseDType("").has_value());
}

TEST(DTypeTest, ErrorsNameATensorTypeOneWay) {
  const std::vector<int64_t> shape = {2, 3};
  EXPECT_EQ(DescribeTensorType(DType::kF32, shape), "F32 [2, 3]");
  EXPECT_EQ(DescribeTensorType(DType::kBF16, {}), "BF16 []");
}

}  // namespace
}  // namespace ckpt
