// The little of a SQL database the catalog needs, so that one SqlCatalog
// (sql_catalog.h) serves SQLite and PostgreSQL alike: statements with
// numbered parameters ($1, $2, ...), rows of typed values, transactions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ckpt/status.h"

namespace ckpt::catalog {

enum class Dialect { kSqlite, kPostgres };

// NULL, an integer, a real or text. A driver may return a number as text
// (PostgreSQL's text protocol); the accessors below read either.
using SqlValue = std::variant<std::monostate, int64_t, double, std::string>;
using SqlRow = std::vector<SqlValue>;

// The accessors fail with DataLoss when a value has another type or does not
// parse; `what` names the column in the message.
Result<int64_t> SqlInt(const SqlValue& v, std::string_view what);
Result<double> SqlDouble(const SqlValue& v, std::string_view what);
Result<std::string> SqlText(const SqlValue& v, std::string_view what);
bool SqlIsNull(const SqlValue& v);

// One connection. Not thread-safe: the SqlCatalog serializes its calls.
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  SqlConnection(const SqlConnection&) = delete;
  SqlConnection& operator=(const SqlConnection&) = delete;

  virtual Dialect dialect() const = 0;
  // The database, for messages (no password).
  virtual const std::string& name() const = 0;

  // Runs one statement; values go only through `params` ($1 is params[0]).
  // Busy, locked, serialization failures and deadlocks are Unavailable: the
  // whole transaction may be retried.
  virtual Result<std::vector<SqlRow>> Query(
      std::string_view sql, const std::vector<SqlValue>& params = {}) = 0;
  // Runs a script of statements without parameters (schema migrations).
  virtual Status Exec(std::string_view script) = 0;

  // Begins a transaction that will write: SQLite takes the write lock at
  // once (BEGIN IMMEDIATE), so two writers never deadlock upgrading.
  virtual Status Begin() = 0;
  virtual Status Commit() = 0;
  // Never fails in a way the caller can act on.
  virtual void Rollback() = 0;

  // Statements from now on wait for another connection's lock no later than
  // `deadline`, then fail with Unavailable. SQLite's busy handler honours
  // it; PostgreSQL bounds each statement by its session's statement_timeout
  // instead, set at connect.
  virtual void SetDeadline(std::chrono::steady_clock::time_point deadline) = 0;

 protected:
  SqlConnection() = default;
};

}  // namespace ckpt::catalog
