#include "util/names.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

namespace ckpt {
namespace {

// gmock is not linked into the tests; gtest's IsSubstring does the job.
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, needle, haystack)
#define EXPECT_NOT_CONTAINS(haystack, needle) \
  EXPECT_PRED_FORMAT2(::testing::IsNotSubstring, needle, haystack)

// Both validators share the path rules; each case runs against both.
using Validator = Status (*)(std::string_view);

class PathRulesTest : public ::testing::TestWithParam<Validator> {
 protected:
  Status Check(std::string_view name) const { return GetParam()(name); }
};

TEST_P(PathRulesTest, AcceptsGoodNames) {
  for (std::string_view name :
       {"w", "model.layer1.weight", "a/b/c", "optimizer state/step",
        "layer 3 / bias", "gewichte/\xc3\xa4\xc3\xb6\xc3\xbc",
        "\xe6\xa8\xa1\xe5\x9e\x8b/\xe6\x9d\x83\xe9\x87\x8d", "a.b", "..a",
        "a..", "a/.b/c", "...", "-", "_"}) {
    EXPECT_TRUE(Check(name).ok())
        << Quote(name) << ": " << Check(name).ToString();
  }
}

TEST_P(PathRulesTest, AcceptsNameOfExactlyMaxLength) {
  EXPECT_TRUE(Check(std::string(kMaxNameLength, 'x')).ok());
}

TEST_P(PathRulesTest, RejectsBadNames) {
  const std::string with_nul("a\0b", 3);
  const std::string only_nul(1, '\0');
  const std::string too_long(kMaxNameLength + 1, 'x');
  for (std::string_view name :
       {std::string_view(""),       std::string_view("/abs"),
        std::string_view("/"),      std::string_view("a/../b"),
        std::string_view(".."),     std::string_view("a/.."),
        std::string_view("./a"),    std::string_view("."),
        std::string_view("a/./b"),  std::string_view("a//b"),
        std::string_view("a/"),     std::string_view("a/b/"),
        std::string_view(with_nul), std::string_view(only_nul),
        std::string_view("a\nb"),   std::string_view("a\tb"),
        std::string_view("\x01"),   std::string_view("a\x1f"),
        std::string_view("a\x7f"),  std::string_view("a\rb"),
        std::string_view("a\\b"),   std::string_view("..\\etc"),
        std::string_view(too_long)}) {
    const Status s = Check(name);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument)
        << Quote(name) << ": " << s.ToString();
  }
}

TEST_P(PathRulesTest, RejectsInvalidUtf8) {
  // Names go into JSON, which holds only UTF-8 (nlohmann::json would throw).
  for (std::string_view name :
       {"\xff",
        "a\x80"
        "b",
        "\xc3", "a/\xc3", "\xc0\xaf" /* overlong '/' */, "\xe0\x80\xaf",
        "\xed\xa0\x80" /* surrogate */, "\xf4\x90\x80\x80" /* > U+10FFFF */,
        "\xf8\x88\x80\x80\x80", "\xe2\x82"}) {
    const Status s = Check(name);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << Quote(name);
    EXPECT_CONTAINS(s.message(), "UTF-8");
  }
  // Every length of well-formed sequence is accepted.
  EXPECT_TRUE(
      Check("\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf").ok());
}

TEST_P(PathRulesTest, MessageQuotesTheName) {
  const Status s = Check("a/../b");
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "\"a/../b\"");
}

TEST_P(PathRulesTest, MessageEscapesControlBytes) {
  const Status s = Check(std::string("evil\n\x1b[2Jname\0", 15));
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NOT_CONTAINS(s.message(), "\n");
  EXPECT_NOT_CONTAINS(s.message(), "\x1b");
  EXPECT_EQ(s.message().find('\0'), std::string::npos);
}

TEST_P(PathRulesTest, MessageOfLongNameIsShort) {
  const Status s = Check(std::string(100000, 'y'));
  ASSERT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_LT(s.message().size(), 1000u);
}

INSTANTIATE_TEST_SUITE_P(Validators, PathRulesTest,
                         ::testing::Values(&ValidateEntryName, &ValidateKey),
                         [](const ::testing::TestParamInfo<Validator>& info) {
                           return std::string(info.param == &ValidateEntryName
                                                  ? "EntryName"
                                                  : "Key");
                         });

TEST(ValidateEntryNameTest, RejectsReservedMetadataName) {
  const Status s = ValidateEntryName("__metadata__");
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_CONTAINS(s.message(), "__metadata__");
}

TEST(ValidateEntryNameTest, ReservedNameOnlyWhenExact) {
  EXPECT_TRUE(ValidateEntryName("__metadata__x").ok());
  EXPECT_TRUE(ValidateEntryName("a/__metadata__").ok());
  EXPECT_TRUE(ValidateEntryName("__metadata").ok());
}

TEST(ValidateKeyTest, MetadataIsAnOrdinaryKey) {
  EXPECT_TRUE(ValidateKey("__metadata__").ok());
}

TEST(ValidateKeyTest, AcceptsLayoutKeys) {
  EXPECT_TRUE(ValidateKey("step-000000000042/MANIFEST.json").ok());
  EXPECT_TRUE(
      ValidateKey("step-000000000042/r00000-0123456789abcdef.safetensors")
          .ok());
  EXPECT_TRUE(ValidateKey("LATEST").ok());
}

TEST(QuoteTest, PlainNameIsQuoted) {
  EXPECT_EQ(Quote("model.w"), "\"model.w\"");
  EXPECT_EQ(Quote(""), "\"\"");
}

TEST(QuoteTest, KeepsUtf8) { EXPECT_EQ(Quote("\xc3\xa4"), "\"\xc3\xa4\""); }

TEST(QuoteTest, EscapesControlBytes) {
  EXPECT_EQ(Quote(std::string("a\0b", 3)), "\"a\\x00b\"");
  EXPECT_EQ(Quote("a\nb"), "\"a\\x0ab\"");
  EXPECT_EQ(Quote("\x1b[31m"), "\"\\x1b[31m\"");
  EXPECT_EQ(Quote("\x7f"), "\"\\x7f\"");
  EXPECT_EQ(Quote("\x1f"), "\"\\x1f\"");
}

TEST(QuoteTest, EscapesQuoteAndBackslash) {
  // An embedded quote cannot end the quoted name early.
  EXPECT_EQ(Quote("a\"b"), "\"a\\x22b\"");
  EXPECT_EQ(Quote("a\\b"), "\"a\\x5cb\"");
}

TEST(QuoteTest, EscapesBytesThatAreNotUtf8) {
  EXPECT_EQ(Quote("\xff"), "\"\\xff\"");
  EXPECT_EQ(Quote("a\xc3"), "\"a\\xc3\"");
  EXPECT_EQ(Quote("\xc0\xaf"), "\"\\xc0\\xaf\"");
  EXPECT_EQ(Quote("\xed\xa0\x80"), "\"\\xed\\xa0\\x80\"");
  EXPECT_EQ(Quote("\xf0\x9f\x98\x80"), "\"\xf0\x9f\x98\x80\"");
}

TEST(QuoteTest, ShorteningNeverSplitsACharacter) {
  // 199 ASCII bytes, then a 2-byte character across the 200-byte cut.
  const std::string name = std::string(199, 'a') + "\xc3\xa4" + "tail";
  const std::string q = Quote(name);
  EXPECT_CONTAINS(q, "...");
  EXPECT_NOT_CONTAINS(q, "tail");
  // The partial character is escaped, never emitted raw.
  for (unsigned char c : q) EXPECT_LT(c, 0x80);
}

TEST(QuoteTest, NoRawControlByteSurvives) {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string q = Quote(all);
  for (unsigned char c : q) {
    EXPECT_FALSE(c < 0x20 || c >= 0x7f) << static_cast<int>(c);
  }
}

TEST(QuoteTest, ShortensLongNames) {
  const std::string long_name(5000, 'z');
  const std::string q = Quote(long_name);
  EXPECT_LT(q.size(), 300u);
  EXPECT_LT(q.size(), long_name.size());
  EXPECT_CONTAINS(q, "...");
  EXPECT_EQ(q.front(), '"');
  EXPECT_EQ(q.back(), '"');
  // The beginning of the name is kept, so a reader can still recognize it.
  EXPECT_EQ(q.substr(1, 100), long_name.substr(0, 100));
}

TEST(QuoteTest, ShortNameIsNotShortened) {
  const std::string name(150, 'q');
  EXPECT_EQ(Quote(name), "\"" + name + "\"");
}

}  // namespace
}  // namespace ckpt
