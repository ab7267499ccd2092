// The databases a catalog test suite runs on, as backends.h is for storage:
//
//   class MyTest : public ::testing::TestWithParam<testing::CatalogDatabase> {
//    protected:
//     void SetUp() override {
//       Result<std::string> url = testing::NewCatalogDatabase(GetParam(),
//                                                             dir_.path());
//       ASSERT_TRUE(url.ok()) << url.status().ToString();
//       ...
//     }
//     testing::TempDir dir_{"my"};
//   };
//   INSTANTIATE_TEST_SUITE_P(Databases, MyTest, testing::AllCatalogDatabases(),
//                            testing::CatalogDatabaseTestName);
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <string>

#include "ckpt/status.h"

namespace ckpt::testing {

enum class CatalogDatabase {
  kSqlite,    // a file in the test's folder
  kPostgres,  // a database on this process's server (postgres_server.h)
};

// "Sqlite", "Postgres": for test names and messages.
std::string CatalogDatabaseName(CatalogDatabase database);
void PrintTo(CatalogDatabase database, std::ostream* os);
// Names the instances of a suite parametrized by CatalogDatabase alone.
std::string CatalogDatabaseTestName(
    const ::testing::TestParamInfo<CatalogDatabase>& info);
// Every database, for INSTANTIATE_TEST_SUITE_P.
inline auto AllCatalogDatabases() {
  return ::testing::Values(CatalogDatabase::kSqlite,
                           CatalogDatabase::kPostgres);
}

// The URL of a fresh, empty database: sqlite://DIR/catalog-N.sqlite, or a
// new database on the shared PostgreSQL server (started on first use; its
// error, binaries missing included, is returned).
Result<std::string> NewCatalogDatabase(CatalogDatabase database,
                                       const std::filesystem::path& dir);

}  // namespace ckpt::testing
