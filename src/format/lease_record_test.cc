// The lease record: what EncodeLease writes decodes to the same record, and
// whatever it could not have written is DataLoss naming the object.
#include "format/lease_record.h"

#include <gtest/gtest.h>

#include <string>

namespace ckpt::format {
namespace {

LeaseRecord Sample() {
  LeaseRecord l;
  l.owner = "0123456789abcdef";
  l.job_id = "llama-7b";
  l.purpose = "save";
  l.host = "node17";
  l.boot_id = "6c8b2f1e-0000-4000-8000-000000000000";
  l.pid = 4242;
  l.started_unix_ms = 1000;
  l.renewed_unix_ms = 2000;
  l.expires_unix_ms = 62000;
  return l;
}

TEST(LeaseRecordTest, RoundTrips) {
  for (bool released : {false, true}) {
    LeaseRecord l = Sample();
    l.released = released;
    Result<LeaseRecord> back = DecodeLease(EncodeLease(l), "LEASE-1");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->owner, l.owner);
    EXPECT_EQ(back->job_id, l.job_id);
    EXPECT_EQ(back->purpose, l.purpose);
    EXPECT_EQ(back->host, l.host);
    EXPECT_EQ(back->boot_id, l.boot_id);
    EXPECT_EQ(back->pid, l.pid);
    EXPECT_EQ(back->started_unix_ms, l.started_unix_ms);
    EXPECT_EQ(back->renewed_unix_ms, l.renewed_unix_ms);
    EXPECT_EQ(back->expires_unix_ms, l.expires_unix_ms);
    EXPECT_EQ(back->released, released);
  }
}

TEST(LeaseRecordTest, RefusesWhatItCouldNotHaveWritten) {
  const std::string good = EncodeLease(Sample());
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::string cases[] = {
      "",
      "[]",
      "{\"version\":1}",
      good.substr(0, good.size() / 2),
      replaced("\"version\":1", "\"version\":2"),
      replaced("\"pid\":4242", "\"pid\":-1"),
      replaced("\"pid\":4242", "\"pid\":\"4242\""),
      replaced("\"pid\":4242", "\"pid\":18446744073709551615"),
      replaced("\"owner\":\"0123456789abcdef\"", "\"owner\":\"\""),
      replaced("\"released\":false", "\"released\":0"),
      replaced("\"expires_unix_ms\":62000", "\"expires_unix_ms\":10"),
      replaced("\"host\":\"node17\"", "\"host\":\"a\",\"host\":\"b\""),
      std::string(kMaxLeaseBytes + 1, ' '),
  };
  for (const std::string& bad : cases) {
    Result<LeaseRecord> l = DecodeLease(bad, "LEASE-000000000003");
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().code(), ErrorCode::kDataLoss) << bad;
    EXPECT_NE(l.status().message().find("LEASE-000000000003"),
              std::string::npos)
        << l.status().ToString();
  }
}

}  // namespace
}  // namespace ckpt::format
