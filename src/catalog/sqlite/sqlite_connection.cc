#include "catalog/sqlite/sqlite_connection.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "util/names.h"

namespace ckpt::catalog {
namespace {

// Busy and locked mean another connection holds the lock past the deadline: the
// transaction may be retried. A file that is not a database, or a damaged one,
// is DataLoss; the rest IOError.
Status SqliteError(int rc, std::string_view what, std::string_view detail) {
  std::string message = std::string(what) + ": " + std::string(detail);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return UnavailableError(std::move(message));
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return DataLossError(std::move(message));
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_RANGE:
      return InvalidArgumentError(std::move(message));
    default:
      return IOError(std::move(message));
  }
}

// Creates the missing folders of `dir`, each 0700 (a user's state).
Status MakeDirs(const std::filesystem::path& dir, std::string_view what) {
  std::filesystem::path partial;
  for (const auto& part : dir) {
    partial /= part;
    if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return ErrnoError(errno, std::string(what) + ": create folder " +
                                   Quote(partial.string()));
    }
  }
  return Status();
}

class SqliteConnection : public SqlConnection {
 public:
  SqliteConnection(sqlite3* db, std::string name)
      : db_(db), name_(std::move(name)) {
    sqlite3_busy_handler(db_, &SqliteConnection::OnBusy, this);
  }
  ~SqliteConnection() override {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }

  Dialect dialect() const override { return Dialect::kSqlite; }
  const std::string& name() const override { return name_; }

  Result<std::vector<SqlRow>> Query(
      std::string_view sql, const std::vector<SqlValue>& params) override {
    CKPT_ASSIGN_OR_RETURN(sqlite3_stmt * stmt, Prepare(sql));
    // Leaves the cached statement ready for its next use, whatever happens.
    struct Reset {
      sqlite3_stmt* stmt;
      ~Reset() {
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
      }
    } reset{stmt};
    // Parameters are named $1, $2, ... in the SQL (PostgreSQL's syntax);
    // SQLite numbers distinct names by first appearance, so bind by name.
    const int count = sqlite3_bind_parameter_count(stmt);
    for (int i = 1; i <= count; ++i) {
      const char* name = sqlite3_bind_parameter_name(stmt, i);
      int n = 0;
      if (name == nullptr || name[0] != '$' || (n = std::atoi(name + 1)) < 1 ||
          static_cast<size_t>(n) > params.size()) {
        return InvalidArgumentError("sqlite: statement parameter " +
                                    Quote(name ? name : "?") + " has no value");
      }
      const SqlValue& v = params[n - 1];
      int rc = SQLITE_OK;
      if (std::holds_alternative<std::monostate>(v)) {
        rc = sqlite3_bind_null(stmt, i);
      } else if (const auto* x = std::get_if<int64_t>(&v)) {
        rc = sqlite3_bind_int64(stmt, i, *x);
      } else if (const auto* d = std::get_if<double>(&v)) {
        rc = sqlite3_bind_double(stmt, i, *d);
      } else {
        const std::string& s = std::get<std::string>(v);
        rc = sqlite3_bind_text64(stmt, i, s.data(), s.size(), SQLITE_TRANSIENT,
                                 SQLITE_UTF8);
      }
      if (rc != SQLITE_OK) {
        return SqliteError(rc, std::string("sqlite: bind parameter ") + name,
                           sqlite3_errmsg(db_));
      }
    }
    std::vector<SqlRow> rows;
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW)
        return SqliteError(rc, "sqlite", sqlite3_errmsg(db_));
      const int columns = sqlite3_column_count(stmt);
      SqlRow row(columns);
      for (int c = 0; c < columns; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_INTEGER:
            row[c] = static_cast<int64_t>(sqlite3_column_int64(stmt, c));
            break;
          case SQLITE_FLOAT:
            row[c] = sqlite3_column_double(stmt, c);
            break;
          case SQLITE_NULL:
            break;
          default: {
            const auto* text =
                reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
            row[c] =
                std::string(text ? text : "",
                            static_cast<size_t>(sqlite3_column_bytes(stmt, c)));
          }
        }
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  Status Exec(std::string_view script) override {
    char* error = nullptr;
    const int rc = sqlite3_exec(db_, std::string(script).c_str(), nullptr,
                                nullptr, &error);
    if (rc == SQLITE_OK) return Status();
    Status s = SqliteError(rc, "sqlite", error ? error : sqlite3_errstr(rc));
    sqlite3_free(error);
    return s;
  }

  Status Begin() override { return Query("BEGIN IMMEDIATE", {}).status(); }
  Status Commit() override { return Query("COMMIT", {}).status(); }
  void Rollback() override {
    if (!sqlite3_get_autocommit(db_)) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

  void SetDeadline(std::chrono::steady_clock::time_point deadline) override {
    deadline_ = deadline;
  }

 private:
  // SQLite calls this while another connection holds the lock a statement
  // needs: wait a little (1 ms, doubling, at most 50 ms) and try again,
  // until the deadline. Returning 0 makes the statement fail with
  // SQLITE_BUSY.
  static int OnBusy(void* self, int count) {
    auto* conn = static_cast<SqliteConnection*>(self);
    const auto left = conn->deadline_ - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero()) return 0;
    const std::chrono::steady_clock::duration pause =
        std::chrono::milliseconds(std::min(50, 1 << std::min(count, 6)));
    std::this_thread::sleep_for(std::min(left, pause));
    return 1;
  }

  Result<sqlite3_stmt*> Prepare(std::string_view sql) {
    auto it = statements_.find(sql);
    if (it != statements_.end()) return it->second;
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(
        db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
    if (rc != SQLITE_OK) {
      return SqliteError(rc, "sqlite: prepare statement", sqlite3_errmsg(db_));
    }
    statements_.emplace(std::string(sql), stmt);
    return stmt;
  }

  sqlite3* db_;
  const std::string name_;
  std::chrono::steady_clock::time_point deadline_;
  std::map<std::string, sqlite3_stmt*, std::less<>> statements_;
};

// Whether this process may write `path` and make files in `parent` (a
// read-only mount says no even to root).
bool Writable(const std::string& path, const std::filesystem::path& parent) {
  const std::string dir = parent.empty() ? "." : parent.string();
  return ::access(path.c_str(), W_OK) == 0 && ::access(dir.c_str(), W_OK) == 0;
}

// `path` as the path of a file: URI (RFC 3986 reserved characters that a
// path may hold, percent-encoded).
std::string UriPath(const std::string& path) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c == 0x7f) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<SqlConnection>> OpenSqlite(
    const std::string& path, const CatalogOptions& options) {
  const std::string name = "sqlite://" + path;
  const std::string what = "open catalog " + name;
  const std::filesystem::path parent =
      std::filesystem::path(path).parent_path();
  if (options.must_exist) {
    std::error_code error;
    if (!std::filesystem::exists(path, error)) {
      return NotFoundError(what + ": no such catalog (" + path +
                           " is not there; saves that record in it, or "
                           "`ckpt catalog sync ROOT`, create it)");
    }
  } else if (!parent.empty()) {
    CKPT_RETURN_IF_ERROR(MakeDirs(parent, what));
  }
  // A query's catalog on a file system this process cannot write (a
  // read-only mount, a snapshot): SQLite in WAL mode makes its side files
  // beside the catalog even to read, and fails with "unable to open
  // database file". Opened immutable instead, which reads the file alone:
  // right only while no write-ahead log holds records not yet in it.
  const bool read_only = options.must_exist && !Writable(path, parent);
  if (read_only) {
    std::error_code error;
    const std::string wal = path + "-wal";
    if (std::filesystem::exists(wal, error) &&
        std::filesystem::file_size(wal, error) > 0 && !error) {
      return FailedPreconditionError(
          what + ": the catalog's write-ahead log " + wal +
          " holds records not yet in " + path +
          ", and this file system is read-only, so SQLite cannot read them: "
          "copy the catalog with its -wal file somewhere writable");
    }
  }
  sqlite3* db = nullptr;
  const int rc =
      read_only
          ? sqlite3_open_v2(
                ("file:" + UriPath(path) + "?immutable=1").c_str(), &db,
                SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX,
                nullptr)
          : sqlite3_open_v2(path.c_str(), &db,
                            SQLITE_OPEN_READWRITE |
                                (options.must_exist ? 0 : SQLITE_OPEN_CREATE) |
                                SQLITE_OPEN_NOMUTEX,
                            nullptr);
  if (rc != SQLITE_OK) {
    Status s =
        SqliteError(rc, what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close_v2(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  auto conn = std::make_unique<SqliteConnection>(db, name);
  // A query's catalog (must_exist) that holds no ckpt catalog (an empty
  // file made by `touch`, another program's database) is refused before
  // anything is written to it: switching it to WAL, or writing ckpt's
  // schema, would change a file that is not ckpt's and turn a mistyped
  // path into an empty catalog.
  if (options.must_exist) {
    conn->SetDeadline(std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(options.timeout_ms));
    Result<std::vector<SqlRow>> tables = conn->Query(
        "SELECT count(*) FROM sqlite_master WHERE type = "
        "'table' AND name = 'ckpt_schema'",
        {});
    if (!tables.ok()) return tables.status().WithContext(what);
    CKPT_ASSIGN_OR_RETURN(
        const int64_t found,
        SqlInt(tables->at(0).at(0), "the count of sqlite_master"));
    if (found == 0) {
      return NotFoundError(
          what +
          ": no such catalog (the file holds none: it is empty, or another "
          "program's database; saves that record in a catalog, or `ckpt "
          "catalog sync ROOT`, create one)");
    }
  }
  // Read only: nothing to switch, and no writer to run beside.
  if (read_only) return std::unique_ptr<SqlConnection>(std::move(conn));
  // WAL lets readers run beside the one writer. Switching needs a moment
  // alone with the file, which another process opening it may hold: retry
  // until the timeout.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(options.timeout_ms);
  conn->SetDeadline(deadline);
  for (;;) {
    Result<std::vector<SqlRow>> mode =
        conn->Query("PRAGMA journal_mode=WAL", {});
    if (mode.ok()) break;
    if (mode.status().code() != ErrorCode::kUnavailable ||
        std::chrono::steady_clock::now() > deadline) {
      return mode.status().WithContext(what);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CKPT_RETURN_IF_ERROR_CTX(conn->Exec("PRAGMA foreign_keys=ON"), what);
  return std::unique_ptr<SqlConnection>(std::move(conn));
}

}  // namespace ckpt::catalog
