// One test suite for every Catalog database: the same cases run on SQLite
// and PostgreSQL. A database's test fills in CatalogConformanceParams and
// instantiates the suite:
//
//   INSTANTIATE_TEST_SUITE_P(Sqlite, CatalogConformanceTest,
//                            testing::Values(SqliteParams()),
//                            CatalogConformanceTestName);
//
// As with the storage suite, PrintTo and CatalogConformanceTestName live in
// catalog_conformance.cc next to the cases, so instantiating the suite pulls
// the cases out of the archive.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "ckpt/catalog.h"

namespace ckpt {

struct CatalogConformanceParams {
  // Names the instantiation in test names: letters, digits and '_' only.
  std::string name;
  // The URL of a fresh, empty database; an error fails the test with its
  // message. Called at the start of every test, and again by tests that
  // need a second database.
  std::function<Result<std::string>()> new_url;
};

void PrintTo(const CatalogConformanceParams& params, std::ostream* os);

std::string CatalogConformanceTestName(
    const testing::TestParamInfo<CatalogConformanceParams>& info);

class CatalogConformanceTest
    : public testing::TestWithParam<CatalogConformanceParams> {
 protected:
  void SetUp() override;

  Catalog& catalog() { return *catalog_; }

  std::string url_;
  std::unique_ptr<Catalog> catalog_;
};

}  // namespace ckpt
