// One conformance suite for every Storage backend: the same cases run on
// mem://, file:// and s3://, so the commit protocol can rely on the
// interface rather than on a backend. A backend's test fills in
// StorageConformanceParams and instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Memory, StorageConformanceTest,
//       ::testing::Values(StorageConformanceParams{
//           .name = "Memory", .backend = testing::Backend::kMemory}),
//       StorageConformanceTestName);
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
#include <optional>
#include <ostream>
#include <string>

#include "ckpt/storage.h"
#include "testing/backends.h"

namespace ckpt {

// Deterministic bytes that differ with `seed`, so reading the wrong object
// or the wrong offset shows.
std::string TestPattern(size_t size, uint64_t seed);

struct StorageConformanceParams {
  // Names the instantiation in test names: letters, digits and '_' only.
  std::string name;
  // Where every test gets its fresh, empty root (a testing::TestRoot, which
  // removes it afterwards).
  testing::Backend backend = testing::Backend::kMemory;
  // Opens the root at `url`: with `create` at the start of every test, and
  // without it for another handle on the same data (what a restarted
  // process opens; the first handle may be gone by then). nullptr fails the
  // test. Unset: OpenStorage with the options that reach the root.
  std::function<std::unique_ptr<Storage>(const std::string& url, bool create)>
      open;
  // The longest key component the store keeps: 255 (NAME_MAX) where a file
  // system holds each component. A test server may keep less.
  size_t longest_key_component = 255;
  // Keep an extra object in the folder that ConcurrentWritesAndDeletes...
  // shares, so no Delete ever empties it. For a server whose file store
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
  // A second handle on the same data, via params.open without create.
  std::unique_ptr<Storage> Reopen();

  std::optional<testing::TestRoot> root_;
  std::unique_ptr<Storage> storage_;
  std::string url_;
};

}  // namespace ckpt
