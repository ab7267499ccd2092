// One conformance suite for every Storage backend: the same cases run on
// mem://, file:// and s3://, so the commit protocol can rely on the
// interface rather than on a backend. A backend's test fills in
// StorageConformanceParams and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Memory, StorageConformanceTest,
//                            testing::Values(MemoryParams()),
//                            StorageConformanceTestName);
//
// PrintTo and StorageConformanceTestName live in storage_conformance.cc, next
// to the cases: instantiating the suite references them, and that is what
// makes the linker take the cases out of the ckpt_testing archive (it drops
// object files that nothing references).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "ckpt/storage.h"

namespace ckpt {

// Deterministic bytes that differ with `seed`, so reading the wrong object
// or the wrong offset shows.
std::string TestPattern(size_t size, uint64_t seed);

struct StorageConformanceParams {
  // Names the instantiation in test names: letters, digits and '_' only.
  std::string name;
  // Returns a fresh, empty storage; called once at the start of every test.
  // nullptr fails the test.
  std::function<std::unique_ptr<Storage>()> open;
  // Returns another handle on the data of the storage at `url` (what a
  // restarted process opens); the first handle may be gone by then.
  std::function<std::unique_ptr<Storage>(const std::string& url)> reopen;
  // Removes what `open` made (a temp directory, a named store); may be empty.
  std::function<void(const std::string& url)> cleanup;
  // The longest key component the store keeps: 255 (NAME_MAX) where a file
  // system holds each component. A test server may keep less (s3rver stores
  // "<name>._S3rver_metadata.json" files, so 233).
  size_t longest_key_component = 255;
  // Keep an extra object in the folder that ConcurrentWritesAndDeletes...
  // shares, so no Delete ever empties it. For s3rver, whose file store
  // removes an emptied folder after answering the DELETE and can take a
  // concurrent PUT's new object with it; S3 itself has no folders.
  bool keep_shared_folder_nonempty = false;
};

// Keeps GoogleTest from dumping the struct's bytes in messages.
void PrintTo(const StorageConformanceParams& params, std::ostream* os);

std::string StorageConformanceTestName(
    const ::testing::TestParamInfo<StorageConformanceParams>& info);

class StorageConformanceTest
    : public ::testing::TestWithParam<StorageConformanceParams> {
 protected:
  void SetUp() override;
  void TearDown() override;

  Storage& storage() { return *storage_; }
  // A second handle on the same data, via params.reopen.
  std::unique_ptr<Storage> Reopen();

  std::unique_ptr<Storage> storage_;
  std::string url_;
};

}  // namespace ckpt
