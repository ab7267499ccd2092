#include "testing/temp_dir.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <system_error>
#include <utility>

namespace ckpt::testing {
namespace {

namespace fs = std::filesystem;

int FailedParts(const ::testing::TestInfo* test) {
  const ::testing::TestResult* result = test->result();
  int failed = 0;
  for (int i = 0; i < result->total_part_count(); ++i) {
    if (result->GetTestPartResult(i).failed()) ++failed;
  }
  return failed;
}

}  // namespace

TempDir::TempDir(std::string_view name, const fs::path& parent) {
  string_ = MakeTempDir(name, parent);
  if (string_.empty()) {
    throw std::system_error(errno, std::generic_category(),
                            "make a temporary folder ckpt-" +
                                std::string(name) + "-XXXXXX in " +
                                parent.string());
  }
  path_ = string_;
  ::testing::UnitTest* unit = ::testing::UnitTest::GetInstance();
  test_ = unit->current_test_info();
  if (test_ != nullptr) test_failures_at_start_ = FailedParts(test_);
  failed_tests_at_start_ = unit->failed_test_count();
}

TempDir::~TempDir() { Release(); }

TempDir::TempDir(TempDir&& other) noexcept
    : path_(std::exchange(other.path_, {})),
      string_(std::exchange(other.string_, {})),
      test_(other.test_),
      test_failures_at_start_(other.test_failures_at_start_),
      failed_tests_at_start_(other.failed_tests_at_start_) {}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    Release();
    path_ = std::exchange(other.path_, {});
    string_ = std::exchange(other.string_, {});
    test_ = other.test_;
    test_failures_at_start_ = other.test_failures_at_start_;
    failed_tests_at_start_ = other.failed_tests_at_start_;
  }
  return *this;
}

void TempDir::Release() {
  if (string_.empty()) return;
  // Within the test that made it, only that test's failures since count: a
  // test that makes a folder per round keeps the round that failed, not
  // every later one. Outside it (a folder shared by several tests), any
  // test that failed since.
  ::testing::UnitTest* unit = ::testing::UnitTest::GetInstance();
  const ::testing::TestInfo* now = unit->current_test_info();
  const bool failed =
      now != nullptr && now == test_
          ? FailedParts(now) > test_failures_at_start_
          : unit->failed_test_count() > failed_tests_at_start_ ||
                (now != nullptr && now->result()->Failed());
  if (failed) {
    std::fprintf(stderr, "kept for inspection: %s\n", string_.c_str());
  } else {
    std::error_code ec;
    fs::remove_all(path_, ec);
    if (ec) {
      std::fprintf(stderr, "could not remove %s: %s\n", string_.c_str(),
                   ec.message().c_str());
    }
  }
  path_.clear();
  string_.clear();
}

}  // namespace ckpt::testing
