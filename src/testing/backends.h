// The storage backends a test suite runs on, and a fresh root on one of them
// for each test. A suite parametrized by backend:
//
//   class RoundTripTest : public ::testing::TestWithParam<testing::Backend> {
//    protected:
//     testing::TestRoot root_{GetParam(), "round-trip"};
//   };
//   INSTANTIATE_TEST_SUITE_P(Backends, RoundTripTest,
//                            ::testing::Values(testing::Backend::kMemory,
//                                              testing::Backend::kFile),
//                            testing::BackendTestName);
//
// A suite with more in its parameter puts a Backend in its struct and
// BackendName() in its test names.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "ckpt/storage.h"
#include "testing/temp_dir.h"

namespace ckpt::testing {

enum class Backend {
  kMemory,  // mem://: a named in-memory store of this process
  kFile,    // file://: a TempDir
  kS3,      // s3://: a prefix on this process's moto (testing/moto_s3.h)
  kRgw,     // s3://: a prefix on this process's radosgw (testing/rgw.h)
};

// "Memory", "File", "S3", "Rgw": for test names and messages.
std::string BackendName(Backend backend);
void PrintTo(Backend backend, std::ostream* os);
// Names the instances of a suite parametrized by Backend alone.
std::string BackendTestName(const ::testing::TestParamInfo<Backend>& info);

// A fresh, empty root on one backend, gone with the object:
//   - mem://NAME-PID-N, dropped at the end;
//   - file://DIR, DIR a TempDir (under `file_parent`), so kept and named
//     on stderr when a test failed while it existed;
//   - s3://BUCKET/NAME-PID-N on the shared moto server, started on first use;
//     the AWS_* environment is exported, so that the bare URL reaches it
//     from this process and the programs it starts. Its objects go with
//     the server at exit;
//   - for kRgw, the same on the shared radosgw (a one-node Ceph cluster).
// A root that cannot be made (no temp folder, no moto) throws, and
// GoogleTest reports that as a failure of the test with the reason.
class TestRoot {
 public:
  // `name` (letters, digits, '-') says which test made the root.
  explicit TestRoot(Backend backend, std::string_view name = "root",
                    const std::filesystem::path& file_parent = TempParent());
  ~TestRoot();
  TestRoot(const TestRoot&) = delete;
  TestRoot& operator=(const TestRoot&) = delete;

  Backend backend() const { return backend_; }
  const std::string& url() const { return url_; }
  // Options that reach the root (for s3://, the server's endpoint and
  // credentials), with `create` as given.
  StorageOptions storage_options(bool create = true) const;
  // OpenStorage(url(), storage_options(create)).
  Result<std::unique_ptr<Storage>> Open(bool create = true) const;

 private:
  // s3:// roots: a prefix on the process's shared `server`.
  template <typename Server>
  void UseSharedServer(Result<Server*> server, const char* what,
                       std::string_view name);

  Backend backend_;
  std::string url_;
  std::optional<TempDir> dir_;  // kFile
  std::string memory_name_;     // kMemory
  StorageOptions options_;
};

}  // namespace ckpt::testing
