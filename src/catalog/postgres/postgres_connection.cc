#include "catalog/postgres/postgres_connection.h"

#include <libpq-fe.h>

#include <charconv>
#include <chrono>
#include <memory>

namespace ckpt::catalog {
namespace {

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// libpq's messages end with a newline and sometimes span lines; one line
// reads better inside ours.
std::string OneLine(const char* message) {
  std::string out = message ? message : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) {
    out.pop_back();
  }
  std::string line;
  for (char c : out) {
    if (c == '\n' || c == '\t') c = ' ';
    if (c == ' ' && !line.empty() && line.back() == ' ') continue;
    line += c;
  }
  return line;
}

// Serialization failures, deadlocks, lock and statement timeouts, lost
// connections and exhausted resources pass: the transaction may be retried. Bad
// SQL or data is the caller's; the rest IOError.
Status PostgresError(std::string_view sqlstate, std::string message) {
  if (sqlstate == "40001" || sqlstate == "40P01" || sqlstate == "55P03" ||
      sqlstate == "57014" || sqlstate.starts_with("08") ||
      sqlstate.starts_with("53") || sqlstate.starts_with("57P")) {
    return UnavailableError(std::move(message));
  }
  if (sqlstate.starts_with("22") || sqlstate.starts_with("23") ||
      sqlstate.starts_with("42")) {
    return InvalidArgumentError(std::move(message));
  }
  return IOError(std::move(message));
}

class PostgresConnection : public SqlConnection {
 public:
  PostgresConnection(PGconn* conn, std::string name)
      : conn_(conn), name_(std::move(name)) {}
  ~PostgresConnection() override { PQfinish(conn_); }

  Dialect dialect() const override { return Dialect::kPostgres; }
  const std::string& name() const override { return name_; }

  Result<std::vector<SqlRow>> Query(
      std::string_view sql, const std::vector<SqlValue>& params) override {
    CKPT_RETURN_IF_ERROR(Reconnect());
    // Text parameters: PostgreSQL infers each one's type from where it is
    // used, and parses it; the SQL text never holds a value.
    std::vector<std::string> text(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      const SqlValue& v = params[i];
      if (std::holds_alternative<std::monostate>(v)) continue;
      if (const auto* x = std::get_if<int64_t>(&v)) {
        text[i] = std::to_string(*x);
      } else if (const auto* d = std::get_if<double>(&v)) {
        char buf[64];
        // Shortest form that reads back as the same double.
        auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), *d);
        text[i].assign(buf, end);
      } else {
        text[i] = std::get<std::string>(v);
        if (text[i].find('\0') != std::string::npos) {
          return InvalidArgumentError("postgresql: parameter $" +
                                      std::to_string(i + 1) +
                                      " holds a NUL byte");
        }
      }
      values[i] = text[i].c_str();
    }
    PgResult res(PQexecParams(conn_, std::string(sql).c_str(),
                              static_cast<int>(params.size()), nullptr,
                              values.data(), nullptr, nullptr, 0));
    CKPT_RETURN_IF_ERROR(Check(res.get()));
    std::vector<SqlRow> rows;
    if (PQresultStatus(res.get()) != PGRES_TUPLES_OK) return rows;
    const int n = PQntuples(res.get());
    const int columns = PQnfields(res.get());
    rows.reserve(n);
    for (int r = 0; r < n; ++r) {
      SqlRow row(columns);
      for (int c = 0; c < columns; ++c) {
        if (PQgetisnull(res.get(), r, c)) continue;
        row[c] = std::string(PQgetvalue(res.get(), r, c),
                             static_cast<size_t>(PQgetlength(res.get(), r, c)));
      }
      rows.push_back(std::move(row));
    }
    return rows;
  }

  Status Exec(std::string_view script) override {
    CKPT_RETURN_IF_ERROR(Reconnect());
    PgResult res(PQexec(conn_, std::string(script).c_str()));
    return Check(res.get());
  }

  Status Begin() override {
    CKPT_RETURN_IF_ERROR(Exec("BEGIN"));
    in_transaction_ = true;
    return Status();
  }
  Status Commit() override {
    CKPT_RETURN_IF_ERROR(Reconnect());
    in_transaction_ = false;
    PgResult res(PQexec(conn_, "COMMIT"));
    CKPT_RETURN_IF_ERROR(Check(res.get()));
    // COMMIT of a failed transaction "succeeds" as a rollback.
    if (std::string_view(PQcmdStatus(res.get())) == "ROLLBACK") {
      return AbortedError("postgresql: the transaction was rolled back");
    }
    return Status();
  }
  void Rollback() override {
    in_transaction_ = false;
    if (PQstatus(conn_) != CONNECTION_OK) return;
    PgResult res(PQexec(conn_, "ROLLBACK"));
  }
  // Each statement is bounded by the session's statement_timeout instead.
  void SetDeadline(std::chrono::steady_clock::time_point) override {}

 private:
  // A connection the server dropped is re-established before a statement,
  // but never inside a transaction: the statements before the drop are gone
  // and the caller must retry the transaction whole.
  Status Reconnect() {
    if (PQstatus(conn_) == CONNECTION_OK) return Status();
    if (in_transaction_) {
      return UnavailableError(std::string("postgresql") +
                              ": lost the connection during a transaction: " +
                              OneLine(PQerrorMessage(conn_)));
    }
    PQreset(conn_);
    if (PQstatus(conn_) == CONNECTION_OK) return Status();
    return UnavailableError("postgresql: lost the connection: " +
                            OneLine(PQerrorMessage(conn_)));
  }

  Status Check(PGresult* res) {
    if (res == nullptr) {
      const std::string message =
          "postgresql: " + OneLine(PQerrorMessage(conn_));
      return PQstatus(conn_) == CONNECTION_OK ? IOError(message)
                                              : UnavailableError(message);
    }
    switch (PQresultStatus(res)) {
      case PGRES_COMMAND_OK:
      case PGRES_TUPLES_OK:
      case PGRES_EMPTY_QUERY:
        return Status();
      default: {
        const char* state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        return PostgresError(
            state ? state : "",
            "postgresql: " + OneLine(PQresultErrorMessage(res)));
      }
    }
  }

  PGconn* conn_;
  const std::string name_;
  bool in_transaction_ = false;
};

}  // namespace

std::string RedactPassword(std::string_view url) {
  std::string out(url);
  const size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const size_t start = scheme + 3;
    size_t end = out.find_first_of("/?", start);
    if (end == std::string::npos) end = out.size();
    const size_t at = out.rfind('@', end);
    if (at != std::string::npos && at >= start) {
      const size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) {
        out.replace(colon + 1, at - colon - 1, "***");
      }
    }
  }
  const size_t query = out.find('?');
  if (query != std::string::npos) {
    size_t pos = query + 1;
    while (pos < out.size()) {
      size_t amp = out.find('&', pos);
      if (amp == std::string::npos) amp = out.size();
      constexpr std::string_view kKey = "password=";
      if (std::string_view(out).substr(pos, amp - pos).starts_with(kKey)) {
        out.replace(pos + kKey.size(), amp - pos - kKey.size(), "***");
        amp = out.find('&', pos);
        if (amp == std::string::npos) amp = out.size();
      }
      pos = amp + 1;
    }
  }
  return out;
}

Result<std::unique_ptr<SqlConnection>> OpenPostgres(
    const std::string& url, const CatalogOptions& options) {
  const std::string name = RedactPassword(url);
  const std::string what = "open catalog " + name;
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(url.c_str(), &parse_error);
  if (parsed == nullptr) {
    const std::string why =
        parse_error ? OneLine(parse_error) : "out of memory";
    PQfreemem(parse_error);
    return InvalidArgumentError(what + ": " + why);
  }
  PQconninfoFree(parsed);
  // Defaults first: a keyword the URL sets itself overrides them. A
  // statement that waits for a lock longer than the timeout is cancelled,
  // so a catalog another session holds cannot stall a save.
  const std::string timeout = std::to_string(options.connect_timeout_seconds);
  const std::string session =
      "-c statement_timeout=" + std::to_string(options.timeout_ms);
  const char* keys[] = {"connect_timeout", "options",
                        "fallback_application_name", "dbname", nullptr};
  const char* values[] = {timeout.c_str(), session.c_str(), "ckpt", url.c_str(),
                          nullptr};
  PGconn* conn = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn == nullptr) return IOError(what + ": out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string why = OneLine(PQerrorMessage(conn));
    const bool auth = PQconnectionNeedsPassword(conn) ||
                      why.find("authentication") != std::string::npos ||
                      why.find("password") != std::string::npos;
    PQfinish(conn);
    if (auth) {
      return InvalidArgumentError(what +
                                  ": the server refused the login: " + why);
    }
    return UnavailableError(what + ": cannot connect: " + why);
  }
  // Notices ("relation already exists, skipping") are not for the user.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  return std::unique_ptr<SqlConnection>(
      std::make_unique<PostgresConnection>(conn, name));
}

}  // namespace ckpt::catalog
