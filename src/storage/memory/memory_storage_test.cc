#include "storage/memory/memory_storage.h"

#include <gtest/gtest.h>

#include <string>

#include "ckpt/storage.h"
#include "testing/storage_conformance.h"

namespace ckpt {
namespace {

INSTANTIATE_TEST_SUITE_P(Memory, StorageConformanceTest,
                         ::testing::Values(StorageConformanceParams{
                             .name = "Memory",
                             .backend = testing::Backend::kMemory}),
                         StorageConformanceTestName);

TEST(MemoryStorageTest, UrlWithoutANameIsInvalid) {
  Result<std::unique_ptr<Storage>> storage = OpenStorage("mem://");
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(storage.status().message().find("mem://"), std::string::npos)
      << storage.status().ToString();
}

TEST(MemoryStorageTest, UnknownNameWithoutCreateIsNotFound) {
  StorageOptions options;
  options.create = false;
  Result<std::unique_ptr<Storage>> storage =
      OpenStorage("mem://never-created", options);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(storage.status().message().find("mem://never-created"),
            std::string::npos)
      << storage.status().ToString();
  // The failed open did not create the store either.
  EXPECT_FALSE(OpenStorage("mem://never-created", options).ok());
}

TEST(MemoryStorageTest, HandlesOnOneNameShareObjects) {
  Result<std::unique_ptr<Storage>> a = OpenStorage("mem://shared-handles");
  Result<std::unique_ptr<Storage>> b = OpenStorage("mem://shared-handles");
  Result<std::unique_ptr<Storage>> other =
      OpenStorage("mem://shared-handles/other");
  ASSERT_TRUE(a.ok() && b.ok() && other.ok());
  ASSERT_TRUE((*a)->PutString("k", "v").ok());
  Result<std::string> read = (*b)->ReadAll("k");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, "v");
  EXPECT_EQ((*other)->Stat("k").status().code(), ErrorCode::kNotFound);
  DropMemoryStore("shared-handles");
  DropMemoryStore("shared-handles/other");
}

TEST(MemoryStorageTest, NewMemoryStorageIsFreshEachTime) {
  std::unique_ptr<Storage> a = NewMemoryStorage();
  std::unique_ptr<Storage> b = NewMemoryStorage();
  ASSERT_TRUE(a->PutString("k", "v").ok());
  EXPECT_EQ(b->Stat("k").status().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace ckpt
