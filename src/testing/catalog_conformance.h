// One test suite for every Catalog database: the same cases run on SQLite
// and PostgreSQL. A database's test fills in CatalogConformanceParams and
// instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(
//       Sqlite, CatalogConformanceTest,
//       ::testing::Values(CatalogConformanceParams{
//           .name = "Sqlite", .database = testing::CatalogDatabase::kSqlite}),
//       CatalogConformanceTestName);
//
// As with the storage suite, PrintTo and CatalogConformanceTestName live in
// catalog_conformance.cc next to the cases, so instantiating the suite pulls
// the cases out of the archive.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <ostream>
#include <string>

#include "ckpt/catalog.h"
#include "testing/catalog_databases.h"
#include "testing/temp_dir.h"

namespace ckpt {

struct CatalogConformanceParams {
  // Names the instantiation in test names: letters, digits and '_' only.
  std::string name;
  // Where every test gets a fresh, empty database (and tests that need a
  // second one, another); an error fails the test with its message.
  testing::CatalogDatabase database = testing::CatalogDatabase::kSqlite;
};

void PrintTo(const CatalogConformanceParams& params, std::ostream* os);

std::string CatalogConformanceTestName(
    const ::testing::TestParamInfo<CatalogConformanceParams>& info);

class CatalogConformanceTest
    : public ::testing::TestWithParam<CatalogConformanceParams> {
 protected:
  void SetUp() override;

  Catalog& catalog() { return *catalog_; }
  // The URL of another fresh, empty database of the same kind.
  Result<std::string> NewDatabase() const;

  const testing::TempDir dir_{"catalog-conformance"};
  std::string url_;
  std::unique_ptr<Catalog> catalog_;
};

}  // namespace ckpt
