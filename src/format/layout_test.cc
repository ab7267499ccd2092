// The layout names of format/layout.h: every maker's output parses back to
// what it was made from, and every parser refuses whatever its maker cannot
// produce. (The first cases of StepDirName and DataObjectKey are in
// manifest_test.cc, from before the names had a file of their own.)
#include "format/layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "format/constants.h"

namespace ckpt::format {
namespace {

constexpr std::string_view kAttempt = "0123456789abcdef";

TEST(LayoutTest, StepDirNamesOutsideTheRangeDoNotParse) {
  // A step the layout cannot name must not come back as another step.
  for (int64_t step : {int64_t{-1}, int64_t{-42}, kMaxStep + 1,
                       std::numeric_limits<int64_t>::max(),
                       std::numeric_limits<int64_t>::min()}) {
    EXPECT_EQ(ParseStepDirName(StepDirName(step)), -1) << step;
  }
  EXPECT_EQ(ParseStepDirName(StepDirName(kMaxStep)), kMaxStep);
}

TEST(LayoutTest, ManifestKeyRoundTripsThroughSplitStepKey) {
  for (int64_t step : {int64_t{0}, int64_t{42}, kMaxStep}) {
    int64_t s = -1;
    std::string_view file;  // points into key, which must outlive it
    const std::string key = ManifestKey(step);
    ASSERT_TRUE(SplitStepKey(key, &s, &file)) << step;
    EXPECT_EQ(s, step);
    EXPECT_EQ(file, kManifestName);
  }
}

TEST(LayoutTest, SplitStepKeyOfADataObject) {
  const std::string key = DataObjectKey(7, 3, kAttempt);
  int64_t step = -1;
  std::string_view file;
  ASSERT_TRUE(SplitStepKey(key, &step, &file));
  EXPECT_EQ(step, 7);
  EXPECT_EQ(file, "r00003-0123456789abcdef.safetensors");
  // Any file name will do, temporaries included; null outputs are allowed.
  EXPECT_TRUE(SplitStepKey("step-000000000007/x.ckpt-tmp-1", nullptr, nullptr));
}

TEST(LayoutTest, SplitStepKeyRejects) {
  for (std::string_view key :
       {"", "/", "step-000000000042", "step-000000000042/",
        "step-000000000042//MANIFEST.json", "step-000000000042/sub/file",
        "step-000000000042/MANIFEST.json/", "/step-000000000042/MANIFEST.json",
        "step-42/MANIFEST.json", "step-0000000000042/MANIFEST.json",
        "step-00000000004x/MANIFEST.json", "step--00000000001/MANIFEST.json",
        "step-+00000000042/MANIFEST.json", "Step-000000000042/MANIFEST.json",
        "LATEST", "MANIFEST.json", "xstep-000000000042/MANIFEST.json"}) {
    int64_t step = -7;
    std::string_view file = "untouched";
    EXPECT_FALSE(SplitStepKey(key, &step, &file)) << key;
    // A rejected key fills in nothing.
    EXPECT_EQ(step, -7) << key;
    EXPECT_EQ(file, "untouched") << key;
  }
}

TEST(LayoutTest, StepOfKey) {
  EXPECT_EQ(StepOfKey(ManifestKey(42)), 42);
  EXPECT_EQ(StepOfKey(DataObjectKey(0, 1, kAttempt)), 0);
  EXPECT_EQ(StepOfKey("step-000000000042/sub/deeper"), 42);
  EXPECT_EQ(StepOfKey("step-000000000042/"), 42);
  for (std::string_view key :
       {"", "/", "step-000000000042", "LATEST", "/step-000000000042/x",
        "step-42/x", "step-0000000000042/x", "step-00000000004x/x",
        "step--00000000001/x"}) {
    EXPECT_EQ(StepOfKey(key), -1) << key;
  }
}

TEST(LayoutTest, DataObjectKeysOutsideTheRangeDoNotParse) {
  // Ranks have 5 digits and steps 12: what does not fit is refused, never
  // read back as another rank or step.
  for (int rank : {-1, 100000, std::numeric_limits<int>::max()}) {
    EXPECT_FALSE(ParseDataObjectKey(DataObjectKey(42, rank, kAttempt), nullptr,
                                    nullptr, nullptr))
        << rank;
  }
  for (int64_t step : {int64_t{-1}, kMaxStep + 1}) {
    EXPECT_FALSE(ParseDataObjectKey(DataObjectKey(step, 0, kAttempt), nullptr,
                                    nullptr, nullptr))
        << step;
  }
}

TEST(LayoutTest, DataObjectKeyRefusesAttemptsThatAreNotLowerHex) {
  for (std::string_view attempt :
       {"0123456789ABCDEF", "0123456789abcdeg", "0123456789abcde ",
        " 123456789abcdef", "0123456789abcd-f", "0x23456789abcdef",
        "0123456789abcde", "0123456789abcdef0", "", "0123456789abcde\xff"}) {
    EXPECT_FALSE(ParseDataObjectKey(DataObjectKey(42, 0, attempt), nullptr,
                                    nullptr, nullptr))
        << attempt;
  }
}

TEST(LayoutTest, LatestKey) {
  EXPECT_EQ(LatestKey(), "LATEST");
  EXPECT_EQ(StepOfKey(LatestKey()), -1);
  EXPECT_FALSE(SplitStepKey(LatestKey(), nullptr, nullptr));
}

TEST(LayoutTest, LeaseKeysRoundTripAndNothingElseParses) {
  for (int64_t g :
       {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{999999999999}}) {
    EXPECT_EQ(ParseLeaseKey(LeaseKey(g)), g) << g;
    EXPECT_TRUE(LeaseKey(g).starts_with(LeasePrefix()));
  }
  EXPECT_EQ(LeaseKey(7), "LEASE-000000000007");
  for (std::string_view bad :
       {"LEASE-", "LEASE-7", "LEASE-00000000000x", "LEASE-0000000000070",
        "lease-000000000007", "LEASE-000000000007.ckpt-tmp-0123456789abcdef",
        "step-000000000007/LEASE-000000000007", "LATEST"}) {
    EXPECT_EQ(ParseLeaseKey(bad), -1) << bad;
  }
  // 13 digits do not fit the name: such a generation does not come back as
  // another one.
  EXPECT_EQ(ParseLeaseKey(LeaseKey(1000000000000)), -1);
}

TEST(LayoutTest, RunTensorNameRoundTrip) {
  EXPECT_EQ(RunTensorName("emb", 12), "emb@12");
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{10}, uint64_t{12345},
                     std::numeric_limits<uint64_t>::max()}) {
    for (std::string_view entry : {"emb", "model.layers.0.w", "a@b", "x"}) {
      EXPECT_TRUE(IsRunOf(RunTensorName(entry, n), entry)) << entry << n;
    }
  }
}

TEST(LayoutTest, IsRunOfRejects) {
  for (std::string_view name : {"emb",
                                "emb@",
                                "emb@-1",
                                "emb@+1",
                                "emb@01",
                                "emb@00",
                                "emb@1x",
                                "emb@x",
                                "emb@ 1",
                                "emb@1 ",
                                "emb@1.5",
                                "emb@0x1",
                                "emb#1",
                                "emb1",
                                "emb@@1",
                                "emb@1@2",
                                "emb@18446744073709551616",
                                "emb@99999999999999999999",
                                "em@1",
                                "embx@1",
                                "Emb@1",
                                "@1",
                                ""}) {
    EXPECT_FALSE(IsRunOf(name, "emb")) << name;
  }
  // Another entry whose name extends this one's is not a run of it.
  EXPECT_FALSE(IsRunOf(RunTensorName("emb2", 3), "emb"));
  EXPECT_FALSE(IsRunOf(RunTensorName("emb", 3), "emb2"));
}

}  // namespace
}  // namespace ckpt::format
