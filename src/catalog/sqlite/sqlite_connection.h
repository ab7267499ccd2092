// A SqlConnection on a SQLite file (Debian's libsqlite3).
//
// The file is opened in WAL mode with a busy handler, so readers never block
// the writer and concurrent writers (other processes) wait their turn rather
// than fail, until the call's deadline (CatalogOptions::timeout_ms). Missing
// parent folders are created (0700: a user's state).
#pragma once

#include <memory>
#include <string>

#include "catalog/sql.h"
#include "ckpt/catalog.h"

namespace ckpt::catalog {

Result<std::unique_ptr<SqlConnection>> OpenSqlite(
    const std::string& path, const CatalogOptions& options);

}  // namespace ckpt::catalog
