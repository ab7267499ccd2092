#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

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

}  // namespace
}  // namespace ckpt
