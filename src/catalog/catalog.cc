// Opening a catalog by URL, and the default one.

#include "ckpt/catalog.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <filesystem>

#include "catalog/postgres/postgres_connection.h"
#include "catalog/sql_catalog.h"
#include "catalog/sqlite/sqlite_connection.h"
#include "util/log.h"
#include "util/names.h"

namespace ckpt {
namespace {

constexpr std::string_view kNone = "none";
constexpr std::string_view kSqliteScheme = "sqlite://";

bool IsPostgresUrl(std::string_view url) {
  return url.starts_with("postgresql://") || url.starts_with("postgres://");
}

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// A SQLite URL's or plain path's file, absolute.
Result<std::string> SqlitePath(std::string_view url) {
  std::string_view path = url;
  if (path.starts_with(kSqliteScheme)) path.remove_prefix(kSqliteScheme.size());
  if (path.empty()) {
    return InvalidArgumentError("catalog URL " + Quote(url) + " names no file");
  }
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(std::string(path), ec);
  if (ec) {
    return InvalidArgumentError("catalog URL " + Quote(url) +
                                ": cannot be made absolute: " + ec.message());
  }
  return p.lexically_normal().string();
}

}  // namespace

std::string_view CheckpointStateName(CheckpointState state) {
  switch (state) {
    case CheckpointState::kCommitted:
      return "committed";
    case CheckpointState::kDeleted:
      return "deleted";
  }
  return "unknown";
}

std::string_view CatalogTierName(CatalogTier tier) {
  switch (tier) {
    case CatalogTier::kDurable:
      return "durable";
    case CatalogTier::kLocal:
      return "local";
  }
  return "unknown";
}

Result<CatalogTier> ParseCatalogTier(std::string_view name) {
  for (CatalogTier t : {CatalogTier::kDurable, CatalogTier::kLocal}) {
    if (name == CatalogTierName(t)) return t;
  }
  return InvalidArgumentError("no tier " + Quote(name) +
                              ": a tier is durable or local");
}

std::string DefaultCatalogUrl() {
  if (std::string env = Getenv("CKPT_CATALOG"); !env.empty()) return env;
  // XDG: a relative XDG_STATE_HOME is to be ignored.
  std::string state = Getenv("XDG_STATE_HOME");
  if (state.empty() || state[0] != '/') {
    std::string home = Getenv("HOME");
    if (home.empty()) {
      if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) {
        home = pw->pw_dir;
      }
    }
    state = home + "/.local/state";
  }
  return state + "/ckpt/catalog.sqlite";
}

namespace catalog {

Result<std::unique_ptr<SqlConnection>> ConnectSql(
    std::string_view url, const CatalogOptions& options) {
  if (url.empty()) return InvalidArgumentError("the catalog URL is empty");
  if (IsPostgresUrl(url)) return OpenPostgres(std::string(url), options);
  if (url.find("://") != std::string_view::npos &&
      !url.starts_with(kSqliteScheme)) {
    return InvalidArgumentError(
        "catalog URL " + Quote(RedactPassword(url)) +
        ": unknown scheme (known: sqlite://, postgresql://, a plain path, or "
        "none)");
  }
  CKPT_ASSIGN_OR_RETURN(std::string path, SqlitePath(url));
  return OpenSqlite(path, options);
}

}  // namespace catalog

std::string RedactCatalogUrl(std::string_view url) {
  return catalog::RedactPassword(url);
}

Result<std::unique_ptr<Catalog>> OpenCatalog(std::string_view url,
                                             const CatalogOptions& options) {
  if (url == kNone) return std::unique_ptr<Catalog>();
  try {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<catalog::SqlConnection> conn,
                          catalog::ConnectSql(url, options));
    return catalog::OpenSqlCatalog(std::move(conn), options);
  } catch (const std::exception& e) {
    return IOError("open catalog " + catalog::RedactPassword(url) + ": " +
                   e.what());
  }
}

Result<std::unique_ptr<Catalog>> OpenCatalogForJob(
    std::string_view url, bool required, const CatalogOptions& options) {
  Result<std::unique_ptr<Catalog>> opened = OpenCatalog(url, options);
  if (opened.ok()) return opened;
  if (required) {
    return opened.status().WithContext("the catalog is required");
  }
  if (opened.status().code() == ErrorCode::kInvalidArgument) return opened;
  LogWarning("not recording in the catalog: " + opened.status().ToString() +
             " (the job saves and resumes from storage alone; once the "
             "catalog opens, ckpt catalog sync ROOT records its checkpoints)");
  return std::unique_ptr<Catalog>();
}

}  // namespace ckpt
