#include "testing/catalog_databases.h"

#include <atomic>

#include "testing/postgres_server.h"

namespace ckpt::testing {

std::string CatalogDatabaseName(CatalogDatabase database) {
  switch (database) {
    case CatalogDatabase::kSqlite:
      return "Sqlite";
    case CatalogDatabase::kPostgres:
      return "Postgres";
  }
  return "Database" + std::to_string(static_cast<int>(database));
}

void PrintTo(CatalogDatabase database, std::ostream* os) {
  *os << CatalogDatabaseName(database);
}

std::string CatalogDatabaseTestName(
    const ::testing::TestParamInfo<CatalogDatabase>& info) {
  return CatalogDatabaseName(info.param);
}

Result<std::string> NewCatalogDatabase(CatalogDatabase database,
                                       const std::filesystem::path& dir) {
  if (database == CatalogDatabase::kPostgres) {
    CKPT_ASSIGN_OR_RETURN(PostgresServer * server, SharedPostgresServer());
    return server->NewDatabase();
  }
  static std::atomic<int> counter{0};
  return "sqlite://" +
         (dir / ("catalog-" + std::to_string(counter.fetch_add(1)) + ".sqlite"))
             .string();
}

}  // namespace ckpt::testing
