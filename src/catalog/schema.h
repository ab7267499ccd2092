// The catalog's schema and its migrations, one per version. docs/catalog.md
// describes the tables in prose; a change here is a schema change: add a
// migration (never edit an old one) and bump kSchemaVersion.
#pragma once

#include <string_view>
#include <vector>

#include "catalog/sql.h"

namespace ckpt::catalog {

// The schema version this build writes and understands. A catalog with a
// higher version was written by a newer ckpt and is refused at open.
inline constexpr int kSchemaVersion = 2;

// Holds the version: one row, created by whichever process opens an empty
// database first.
inline constexpr std::string_view kCreateSchemaTable =
    "CREATE TABLE IF NOT EXISTS ckpt_schema (version INTEGER NOT NULL)";

// Migrations(d)[i] brings a catalog from version i to version i + 1.
const std::vector<std::string_view>& Migrations(Dialect dialect);

}  // namespace ckpt::catalog
