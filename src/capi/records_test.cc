// The records' JSON: DescriptionText writes what Dump(DescriptionJson)
// would, byte for byte, whatever the names hold.
#include "capi/records.h"

#include <gtest/gtest.h>

#include <string>

namespace ckpt::records {
namespace {

EntryInfo Entry(std::string name, EntryKind kind, std::vector<int64_t> shape) {
  EntryInfo e;
  e.name = std::move(name);
  e.kind = kind;
  e.dtype = DType::kF32;
  e.shape = std::move(shape);
  e.num_pieces = 2;
  e.bytes = 4096;
  return e;
}

TEST(RecordsTest, DescriptionTextIsTheDumpOfDescriptionJson) {
  CheckpointDescription d;
  d.info.step = 7;
  d.info.job_id = "job \"q\"";
  d.info.metrics["loss"] = 0.25;
  EXPECT_EQ(DescriptionText(d), Dump(DescriptionJson(d)));  // no entries

  d.entries.push_back(Entry("opt.0", EntryKind::kTensor, {1024}));
  d.entries.push_back(Entry("scalar", EntryKind::kTensor, {}));
  d.entries.push_back(
      Entry("m\xc3\xa9t\"a\\\x01\x7f", EntryKind::kTensor, {2, 3}));
  d.entries.push_back(Entry("bad \xff utf-8", EntryKind::kBlob, {}));
  EntryInfo m = Entry("cfg", EntryKind::kMetadata, {});
  m.json = "{\"a\":[1,\"x\\n\"]}";
  d.entries.push_back(m);
  d.entries.back().owner = 3;
  EXPECT_EQ(DescriptionText(d), Dump(DescriptionJson(d)));
}

}  // namespace
}  // namespace ckpt::records
