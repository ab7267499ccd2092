#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "ckpt/catalog.h"
#include "testing/catalog_conformance.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// A temp folder for this process's SQLite files, removed at exit.
const std::string& TempDir() {
  static const struct Dir {
    std::string path;
    Dir() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::string(tmp && *tmp ? tmp : "/tmp") + "/ckpt_sqlite.XXXXXX";
      if (mkdtemp(path.data()) == nullptr) path.clear();
    }
    ~Dir() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } dir;
  return dir.path;
}

CatalogConformanceParams SqliteParams() {
  CatalogConformanceParams params;
  params.name = "Sqlite";
  params.new_url = []() -> Result<std::string> {
    static std::atomic<int> counter{0};
    if (TempDir().empty()) return IOError("no temp folder");
    return "sqlite://" + TempDir() + "/catalog-" +
           std::to_string(counter.fetch_add(1)) + ".sqlite";
  };
  return params;
}

INSTANTIATE_TEST_SUITE_P(Sqlite, CatalogConformanceTest,
                         testing::Values(SqliteParams()),
                         CatalogConformanceTestName);

TEST(SqliteCatalogTest, PlainPathCreatesMissingFoldersPrivately) {
  const std::string dir = TempDir() + "/state/deeper";
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
  const std::string path = TempDir() + "/not-a-database";
  std::ofstream(path) << std::string(4096, 'x');
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
