#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "ckpt/catalog.h"
#include "testing/catalog_conformance.h"
#include "testing/files.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

INSTANTIATE_TEST_SUITE_P(Sqlite, CatalogConformanceTest,
                         ::testing::Values(CatalogConformanceParams{
                             .name = "Sqlite",
                             .database = testing::CatalogDatabase::kSqlite}),
                         CatalogConformanceTestName);

TEST(SqliteCatalogTest, PlainPathCreatesMissingFoldersPrivately) {
  const testing::TempDir temp("sqlite");
  const std::string dir = temp.string() + "/state/deeper";
  auto catalog = OpenCatalog(dir + "/catalog.sqlite");
  ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
  EXPECT_EQ((*catalog)->url(), "sqlite://" + dir + "/catalog.sqlite");
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // WAL: readers never wait for the writer.
  EXPECT_TRUE(fs::exists(dir + "/catalog.sqlite-wal"));
}

TEST(SqliteCatalogTest, AFileThatIsNotADatabaseIsAnErrorAtOpen) {
  const testing::TempDir temp("sqlite");
  const std::string path = temp.string() + "/not-a-database";
  ASSERT_TRUE(testing::WriteFile(path, std::string(4096, 'x')));
  auto catalog = OpenCatalog(path);
  ASSERT_FALSE(catalog.ok());
  EXPECT_EQ(catalog.status().code(), ErrorCode::kDataLoss)
      << catalog.status().ToString();
  EXPECT_NE(catalog.status().message().find(path), std::string::npos)
      << catalog.status().ToString();
}

TEST(SqliteCatalogTest, AnUnwritableFolderIsAnErrorAtOpen) {
  auto catalog = OpenCatalog("/proc/ckpt/catalog.sqlite");
  ASSERT_FALSE(catalog.ok());
  EXPECT_NE(catalog.status().message().find("/proc/ckpt"), std::string::npos)
      << catalog.status().ToString();
}

// In this process (a child's): a mount namespace of its own in which
// `dir` is mounted read-only. Only system calls.
bool ReadOnlyMount(const std::string& dir) {
  return ::unshare(CLONE_NEWNS) == 0 &&
         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
         ::mount(nullptr, dir.c_str(), nullptr,
                 MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
}

// A catalog on a read-only mount (a snapshot, a colleague's share) answers
// queries: SQLite in WAL mode failed to open it ("unable to open database
// file"), as it makes side files to read. A write-ahead log with records
// not in the file is refused, naming it, rather than read past.
TEST(SqliteCatalogTest, AReadOnlyMountIsQueried) {
  const testing::TempDir temp("sqlite-ro");
  const std::string dir = temp.string() + "/shared";
  const std::string path = dir + "/catalog.sqlite";
  {
    auto catalog = OpenCatalog(path);
    ASSERT_TRUE(catalog.ok()) << catalog.status().ToString();
    CatalogCheckpoint c;
    c.job_id = "run-ro";
    c.root = "file:///data/run-ro";
    c.step = 7;
    c.scheme = "file";
    c.hosts = {"h"};
    c.manifest_checksum = std::string(32, 'a');
    c.created_unix_ms = 1'700'000'000'000;
    ASSERT_TRUE((*catalog)->Record(c).ok());
  }
  ASSERT_FALSE(fs::exists(path + "-wal"));
  const pid_t probe = ::fork();
  ASSERT_GE(probe, 0);
  if (probe == 0) ::_exit(ReadOnlyMount(dir) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(probe, &status, 0), probe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    GTEST_SKIP() << "skipped: no mount namespace with a read-only bind mount "
                    "here (needs root and CAP_SYS_ADMIN)";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!ReadOnlyMount(dir)) std::_Exit(2);
        auto catalog = OpenCatalog(path, {.must_exist = true});
        if (!catalog.ok()) {
          std::fprintf(stderr, "%s\n", catalog.status().ToString().c_str());
          std::_Exit(3);
        }
        auto latest = (*catalog)->Latest("run-ro");
        if (!latest.ok() || !*latest || (*latest)->step != 7) std::_Exit(4);
        auto jobs = (*catalog)->Jobs();
        if (!jobs.ok() || jobs->size() != 1) std::_Exit(5);
        std::fprintf(stderr, "read step %lld\n",
                     static_cast<long long>((*latest)->step));
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "read step 7");
  ASSERT_TRUE(testing::WriteFile(path + "-wal", std::string(4096, 'w')));
  EXPECT_EXIT(
      {
        if (!ReadOnlyMount(dir)) std::_Exit(2);
        auto catalog = OpenCatalog(path, {.must_exist = true});
        std::fprintf(stderr, "%s\n", catalog.status().ToString().c_str());
        std::_Exit(catalog.ok() ? 3 : 0);
      },
      ::testing::ExitedWithCode(0),
      // The death test runs in a process of its own, with a temporary
      // folder of its own.
      "write-ahead log /[^ ]*/shared/catalog.sqlite-wal holds records not "
      "yet in");
}

}  // namespace
}  // namespace ckpt
