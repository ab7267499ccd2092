// The Catalog over a SqlConnection: the same statements on SQLite and
// PostgreSQL (only the schema's DDL differs, schema.cc). Opening migrates
// the schema under a lock (SQLite's write lock; a PostgreSQL advisory lock),
// so processes that open a new catalog at once create it exactly once.
#pragma once

#include <memory>
#include <string_view>

#include "catalog/sql.h"
#include "ckpt/catalog.h"

namespace ckpt::catalog {

// Brings `conn`'s schema to kSchemaVersion and wraps it. FailedPrecondition
// if the database holds a newer schema. No call waits for the database
// longer than options.timeout_ms.
Result<std::unique_ptr<Catalog>> OpenSqlCatalog(
    std::unique_ptr<SqlConnection> conn, const CatalogOptions& options = {});

// A raw connection to the database a catalog URL names (not "none"), with
// no schema work: for tests and repairs.
Result<std::unique_ptr<SqlConnection>> ConnectSql(
    std::string_view url, const CatalogOptions& options = {});

}  // namespace ckpt::catalog
