// A SqlConnection to a PostgreSQL server (Debian's libpq).
//
// Statements go through PQexecParams with text parameters, so no value is
// ever part of the SQL text. Serialization failures and deadlocks are
// Unavailable, so the SqlCatalog retries the transaction; a dropped
// connection is re-established once before the next statement.
#pragma once

#include <memory>
#include <string>

#include "catalog/sql.h"
#include "ckpt/catalog.h"

namespace ckpt::catalog {

// `url` is a libpq connection URI (postgresql://...). An unreachable server
// is Unavailable and a refused password InvalidArgument; both messages quote
// libpq's reason and the URL without its password.
Result<std::unique_ptr<SqlConnection>> OpenPostgres(
    const std::string& url, const CatalogOptions& options);

// `url` with the password (user:PASSWORD@ or password=...) replaced by ***.
std::string RedactPassword(std::string_view url);

}  // namespace ckpt::catalog
