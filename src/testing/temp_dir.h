// A fresh temporary folder for one test, and what became of it afterwards:
//
//   testing::TempDir dir("file-storage");  // $TMPDIR/ckpt-file-storage-*
//   OpenStorage(dir.url() + "/root");
//
// The folder is made with mkdtemp(3) under $TMPDIR (/tmp when unset), or
// under the parent given (/var/tmp where a test needs O_DIRECT, /dev/shm
// where it wants speed). When the TempDir goes away it removes the folder
// if no test failure was recorded while it existed; otherwise it keeps it
// and prints "kept for inspection: PATH" on stderr, so that the log of a
// failed run says where to look.
//
// A folder that cannot be made throws std::system_error: GoogleTest reports
// the exception as a failure of the test that asked for it, with the
// reason, and the test goes no further.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "testing/files.h"

namespace testing {
class TestInfo;
}  // namespace testing

namespace ckpt::testing {

class TempDir {
 public:
  // Makes PARENT/ckpt-NAME-XXXXXX; `name` says which test made it.
  explicit TempDir(std::string_view name = "test",
                   const std::filesystem::path& parent = TempParent());
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::string& string() const { return string_; }
  // file://PATH, the folder as a storage root.
  std::string url() const { return "file://" + string_; }

 private:
  void Release();

  std::filesystem::path path_;
  std::string string_;
  // The test that made the folder and its failures then, and the number
  // of failed tests then: more of either at the end keep the folder.
  const ::testing::TestInfo* test_ = nullptr;
  int test_failures_at_start_ = 0;
  int failed_tests_at_start_ = 0;
};

}  // namespace ckpt::testing
