#include "catalog/sql_catalog.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "catalog/schema.h"
#include "util/mutex.h"
#include "util/names.h"

namespace ckpt::catalog {
namespace {

// A transaction that meets a busy database, a serialization failure or a
// deadlock is retried, backing off, at most this many times in all and
// never past the call's deadline (CatalogOptions::timeout_ms).
constexpr int kMaxAttempts = 8;

// Serializes schema migrations across PostgreSQL sessions ("ckpt" in hex).
constexpr std::string_view kLockMigrations =
    "SELECT pg_advisory_xact_lock(1667985524)";

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Every checkpoint query selects rows of ckpt_checkpoints in `inner` (as c)
// and returns them with their metrics, one row per metric (NULLs for a
// checkpoint without one), grouped by checkpoint, oldest step first.
std::string CheckpointQuery(std::string_view inner) {
  return "SELECT c.id, c.job_id, c.root, c.step, c.epoch, c.scheme, "
         "c.world_size, c.hosts, c.bytes, c.manifest_checksum, "
         "c.created_unix_ms, c.updated_unix_ms, c.state, c.tier, m.name, "
         "m.value "
         "FROM (" +
         std::string(inner) +
         ") c LEFT JOIN ckpt_metrics m ON m.checkpoint_id = c.id "
         "ORDER BY c.step, c.created_unix_ms, c.id, m.name";
}
constexpr size_t kCheckpointColumns = 16;

Result<CheckpointState> ParseState(const std::string& text) {
  if (text == CheckpointStateName(CheckpointState::kCommitted)) {
    return CheckpointState::kCommitted;
  }
  if (text == CheckpointStateName(CheckpointState::kDeleted)) {
    return CheckpointState::kDeleted;
  }
  return DataLossError("column state holds " + Quote(text));
}

Result<std::vector<CatalogCheckpoint>> ParseCheckpoints(
    const std::vector<SqlRow>& rows) {
  std::vector<CatalogCheckpoint> out;
  int64_t current = 0;
  for (const SqlRow& row : rows) {
    if (row.size() != kCheckpointColumns) {
      return DataLossError("a checkpoint query returned " +
                           std::to_string(row.size()) + " columns");
    }
    CKPT_ASSIGN_OR_RETURN(int64_t id, SqlInt(row[0], "id"));
    if (out.empty() || id != current) {
      current = id;
      CatalogCheckpoint c;
      CKPT_ASSIGN_OR_RETURN(c.job_id, SqlText(row[1], "job_id"));
      CKPT_ASSIGN_OR_RETURN(c.root, SqlText(row[2], "root"));
      CKPT_ASSIGN_OR_RETURN(c.step, SqlInt(row[3], "step"));
      if (!SqlIsNull(row[4])) {
        CKPT_ASSIGN_OR_RETURN(c.epoch, SqlInt(row[4], "epoch"));
      }
      CKPT_ASSIGN_OR_RETURN(c.scheme, SqlText(row[5], "scheme"));
      CKPT_ASSIGN_OR_RETURN(int64_t world, SqlInt(row[6], "world_size"));
      if (world < 0 || world > INT_MAX) {
        return DataLossError("column world_size holds " +
                             std::to_string(world));
      }
      c.world_size = static_cast<int>(world);
      CKPT_ASSIGN_OR_RETURN(std::string hosts, SqlText(row[7], "hosts"));
      nlohmann::json h = nlohmann::json::parse(hosts, nullptr, false);
      if (!h.is_array()) return DataLossError("column hosts is not a list");
      for (const auto& name : h) {
        if (!name.is_string()) {
          return DataLossError("column hosts holds a non-string");
        }
        c.hosts.push_back(name.get<std::string>());
      }
      CKPT_ASSIGN_OR_RETURN(int64_t bytes, SqlInt(row[8], "bytes"));
      if (bytes < 0) return DataLossError("column bytes is negative");
      c.bytes = static_cast<uint64_t>(bytes);
      CKPT_ASSIGN_OR_RETURN(c.manifest_checksum,
                            SqlText(row[9], "manifest_checksum"));
      CKPT_ASSIGN_OR_RETURN(c.created_unix_ms,
                            SqlInt(row[10], "created_unix_ms"));
      CKPT_ASSIGN_OR_RETURN(c.updated_unix_ms,
                            SqlInt(row[11], "updated_unix_ms"));
      CKPT_ASSIGN_OR_RETURN(std::string state, SqlText(row[12], "state"));
      CKPT_ASSIGN_OR_RETURN(c.state, ParseState(state));
      CKPT_ASSIGN_OR_RETURN(std::string tier, SqlText(row[13], "tier"));
      Result<CatalogTier> parsed = ParseCatalogTier(tier);
      if (!parsed.ok())
        return DataLossError("column tier holds " + Quote(tier));
      c.tier = *parsed;
      out.push_back(std::move(c));
    }
    if (!SqlIsNull(row[14])) {
      CKPT_ASSIGN_OR_RETURN(std::string name, SqlText(row[14], "metric name"));
      CKPT_ASSIGN_OR_RETURN(double value, SqlDouble(row[15], "metric value"));
      out.back().metrics[name] = value;
    }
  }
  return out;
}

Status CheckText(std::string_view what, std::string_view text) {
  if (text.find('\0') != std::string_view::npos) {
    return InvalidArgumentError(std::string(what) + " " + Quote(text) +
                                " holds a NUL byte");
  }
  return Status();
}

Status ValidateRecord(const CatalogCheckpoint& c) {
  if (c.job_id.empty()) return InvalidArgumentError("the job id is empty");
  if (c.root.empty()) return InvalidArgumentError("the root is empty");
  if (c.step < 0) return InvalidArgumentError("the step is negative");
  if (c.world_size < 1) return InvalidArgumentError("the world size is < 1");
  if (c.bytes > static_cast<uint64_t>(INT64_MAX)) {
    return InvalidArgumentError("the byte count does not fit in 63 bits");
  }
  CKPT_RETURN_IF_ERROR(CheckText("job id", c.job_id));
  CKPT_RETURN_IF_ERROR(CheckText("root", c.root));
  CKPT_RETURN_IF_ERROR(CheckText("scheme", c.scheme));
  CKPT_RETURN_IF_ERROR(CheckText("manifest checksum", c.manifest_checksum));
  for (const auto& [name, value] : c.metrics) {
    CKPT_RETURN_IF_ERROR(CheckText("metric", name));
    if (!std::isfinite(value)) {
      return InvalidArgumentError("metric " + Quote(name) + " is not finite");
    }
  }
  return Status();
}

// Thread-safe: its calls take turns on the one connection.
class SqlCatalog : public Catalog {
 public:
  SqlCatalog(std::unique_ptr<SqlConnection> conn,
             std::chrono::milliseconds timeout)
      : conn_(std::move(conn)), url_(conn_->name()), timeout_(timeout) {}

  const std::string& url() const override { return url_; }

  // Brings the schema to kSchemaVersion (called once, before any sharing).
  Status Migrate() EXCLUDES(mu_);

  Status Record(const CatalogCheckpoint& c) override {
    const std::string op = "record step " + std::to_string(c.step) +
                           " of job " + Quote(c.job_id) + " (root " + c.root +
                           ")";
    CKPT_RETURN_IF_ERROR_CTX(ValidateRecord(c), Where() + ": " + op);
    // Bad UTF-8 in a host name must not throw out of the JSON encoder.
    const std::string hosts = nlohmann::json(c.hosts).dump(
        -1, ' ', false, nlohmann::json::error_handler_t::replace);
    const int64_t now = NowUnixMs();
    MutexLock lock(&mu_);
    return Run(op, /*write=*/true, [&]() REQUIRES(mu_) -> Status {
      // The job first: the checkpoint's row refers to it, and every writer
      // locks the job's row before its checkpoint's, so none deadlock.
      // A local step never moves the job's root: the root says where
      // another machine finds the job's checkpoints. A durable one moves
      // it when it is the newest, and when the root is no durable row's
      // (the job was first seen through its local tier), however old.
      const bool durable = c.tier == CatalogTier::kDurable;
      CKPT_RETURN_IF_ERROR(
          conn_
              ->Query(
                  std::string(
                      "INSERT INTO ckpt_jobs (job_id, root, "
                      "first_seen_unix_ms, last_seen_unix_ms) VALUES ($1, $2, "
                      "$3, $3) ON CONFLICT (job_id) DO UPDATE SET ") +
                      (durable
                           ? "root = CASE WHEN excluded.last_seen_unix_ms >= "
                             "ckpt_jobs.last_seen_unix_ms OR NOT EXISTS "
                             "(SELECT 1 FROM ckpt_checkpoints d WHERE d.root "
                             "= ckpt_jobs.root AND d.job_id = "
                             "ckpt_jobs.job_id AND d.tier = 'durable') THEN "
                             "excluded.root ELSE ckpt_jobs.root END, "
                           : "") +
                      "first_seen_unix_ms = CASE WHEN "
                      "excluded.first_seen_unix_ms "
                      "< ckpt_jobs.first_seen_unix_ms THEN "
                      "excluded.first_seen_unix_ms "
                      "ELSE ckpt_jobs.first_seen_unix_ms END, "
                      "last_seen_unix_ms = CASE WHEN "
                      "excluded.last_seen_unix_ms > "
                      "ckpt_jobs.last_seen_unix_ms THEN "
                      "excluded.last_seen_unix_ms "
                      "ELSE ckpt_jobs.last_seen_unix_ms END",
                  {c.job_id, c.root, c.created_unix_ms})
              .status());
      CKPT_ASSIGN_OR_RETURN(
          std::vector<SqlRow> ids,
          conn_->Query(
              "INSERT INTO ckpt_checkpoints (root, step, job_id, epoch, "
              "scheme, world_size, hosts, bytes, manifest_checksum, "
              "created_unix_ms, updated_unix_ms, state, tier) VALUES ($1, $2, "
              "$3, $4, $5, $6, $7, $8, $9, $10, $11, 'committed', $12) "
              "ON CONFLICT (root, step) DO UPDATE SET "
              "job_id = excluded.job_id, epoch = excluded.epoch, "
              "scheme = excluded.scheme, world_size = excluded.world_size, "
              "hosts = excluded.hosts, bytes = excluded.bytes, "
              "manifest_checksum = excluded.manifest_checksum, "
              "created_unix_ms = excluded.created_unix_ms, "
              "updated_unix_ms = excluded.updated_unix_ms, "
              "state = 'committed', tier = excluded.tier RETURNING id",
              {c.root, c.step, c.job_id,
               c.epoch >= 0 ? SqlValue(c.epoch) : SqlValue(), c.scheme,
               int64_t{c.world_size}, hosts, static_cast<int64_t>(c.bytes),
               c.manifest_checksum, c.created_unix_ms, now,
               std::string(CatalogTierName(c.tier))}));
      if (ids.size() != 1) {
        return DataLossError("the insert returned " +
                             std::to_string(ids.size()) + " ids");
      }
      CKPT_ASSIGN_OR_RETURN(int64_t id, SqlInt(ids[0][0], "id"));
      CKPT_RETURN_IF_ERROR(
          conn_
              ->Query("DELETE FROM ckpt_metrics WHERE checkpoint_id = $1", {id})
              .status());
      for (const auto& [name, value] : c.metrics) {
        CKPT_RETURN_IF_ERROR(
            conn_
                ->Query("INSERT INTO ckpt_metrics (checkpoint_id, "
                        "name, value) VALUES ($1, $2, $3)",
                        {id, name, value})
                .status());
      }
      return Status();
    });
  }

  Result<bool> MarkDeleted(std::string_view root, int64_t step) override {
    const std::string op = "mark step " + std::to_string(step) + " of root " +
                           std::string(root) + " deleted";
    CKPT_RETURN_IF_ERROR_CTX(CheckText("root", root), Where() + ": " + op);
    const int64_t now = NowUnixMs();
    bool marked = false;
    MutexLock lock(&mu_);
    CKPT_RETURN_IF_ERROR(Run(op, /*write=*/true, [&]() REQUIRES(mu_) -> Status {
      CKPT_ASSIGN_OR_RETURN(
          std::vector<SqlRow> rows,
          conn_->Query("UPDATE ckpt_checkpoints SET state = 'deleted', "
                       "updated_unix_ms = $3 WHERE root = $1 AND step = $2 "
                       "AND state = 'committed' RETURNING id",
                       {std::string(root), step, now}));
      marked = !rows.empty();
      return Status();
    }));
    return marked;
  }

  Result<std::optional<CatalogCheckpoint>> Latest(
      std::string_view job_id) override {
    CKPT_ASSIGN_OR_RETURN(
        std::vector<CatalogCheckpoint> found,
        Select("find the latest checkpoint of job " + Quote(job_id),
               CheckpointQuery(
                   "SELECT * FROM ckpt_checkpoints WHERE job_id = "
                   "$1 AND tier = 'durable' AND state = "
                   "'committed' ORDER BY step DESC, created_unix_ms DESC "
                   "LIMIT 1"),
               {std::string(job_id)}));
    if (found.empty()) return std::optional<CatalogCheckpoint>();
    return std::optional<CatalogCheckpoint>(std::move(found.front()));
  }

  Result<std::vector<CatalogCheckpoint>> List(
      const CatalogFilter& filter) override {
    // Only column names and placeholders are written into the SQL; every
    // value is a parameter.
    std::string where;
    std::vector<SqlValue> params;
    auto add = [&](std::string_view condition, SqlValue value) {
      params.push_back(std::move(value));
      where += where.empty() ? " WHERE " : " AND ";
      where += std::string(condition) + " $" + std::to_string(params.size());
    };
    if (!filter.job_id.empty()) add("job_id =", filter.job_id);
    if (!filter.root.empty()) add("root =", filter.root);
    if (filter.state) {
      add("state =", std::string(CheckpointStateName(*filter.state)));
    }
    if (filter.tier) add("tier =", std::string(CatalogTierName(*filter.tier)));
    if (filter.min_step) add("step >=", *filter.min_step);
    if (filter.max_step) add("step <=", *filter.max_step);
    std::string inner = "SELECT * FROM ckpt_checkpoints" + where +
                        " ORDER BY step DESC, created_unix_ms DESC";
    if (filter.limit > 0) {
      params.push_back(filter.limit);
      inner += " LIMIT $" + std::to_string(params.size());
    }
    return Select("list checkpoints", CheckpointQuery(inner), params);
  }

  Result<std::optional<CatalogCheckpoint>> Best(std::string_view job_id,
                                                std::string_view metric,
                                                MetricGoal goal) override {
    CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> found,
                          ByMetric(job_id, metric, goal, /*limit=*/1));
    if (found.empty()) return std::optional<CatalogCheckpoint>();
    return std::optional<CatalogCheckpoint>(std::move(found.front()));
  }

  Result<std::vector<CatalogCheckpoint>> Ranked(std::string_view job_id,
                                                std::string_view metric,
                                                MetricGoal goal) override {
    return ByMetric(job_id, metric, goal, /*limit=*/0);
  }

  Result<std::vector<CatalogJob>> Jobs() override {
    std::vector<SqlRow> rows;
    {
      MutexLock lock(&mu_);
      CKPT_RETURN_IF_ERROR(
          Run("list jobs", /*write=*/false, [&]() REQUIRES(mu_) -> Status {
            CKPT_ASSIGN_OR_RETURN(
                rows,
                conn_->Query(
                    "SELECT j.job_id, j.root, j.first_seen_unix_ms, "
                    "j.last_seen_unix_ms, "
                    "(SELECT COUNT(*) FROM ckpt_checkpoints c WHERE c.job_id = "
                    "j.job_id AND c.tier = 'durable' AND c.state = "
                    "'committed'), "
                    "(SELECT MAX(c.step) FROM ckpt_checkpoints c WHERE "
                    "c.job_id = j.job_id AND c.tier = 'durable' AND "
                    "c.state = 'committed') "
                    "FROM ckpt_jobs j",
                    {}));
            return Status();
          }));
    }
    std::vector<CatalogJob> jobs;
    Status parsed = [&]() -> Status {
      for (const SqlRow& row : rows) {
        if (row.size() != 6) return DataLossError("bad column count");
        CatalogJob j;
        CKPT_ASSIGN_OR_RETURN(j.job_id, SqlText(row[0], "job_id"));
        CKPT_ASSIGN_OR_RETURN(j.root, SqlText(row[1], "root"));
        CKPT_ASSIGN_OR_RETURN(j.first_seen_unix_ms,
                              SqlInt(row[2], "first_seen_unix_ms"));
        CKPT_ASSIGN_OR_RETURN(j.last_seen_unix_ms,
                              SqlInt(row[3], "last_seen_unix_ms"));
        CKPT_ASSIGN_OR_RETURN(j.committed, SqlInt(row[4], "count"));
        if (!SqlIsNull(row[5])) {
          CKPT_ASSIGN_OR_RETURN(int64_t latest, SqlInt(row[5], "max(step)"));
          j.latest_step = latest;
        }
        jobs.push_back(std::move(j));
      }
      return Status();
    }();
    CKPT_RETURN_IF_ERROR_CTX(parsed, Where() + ": list jobs");
    // By id, byte by byte: the databases' collations differ.
    std::sort(jobs.begin(), jobs.end(),
              [](const CatalogJob& a, const CatalogJob& b) {
                return a.job_id < b.job_id;
              });
    return jobs;
  }

 private:
  std::string Where() const { return "catalog " + url_; }

  // Runs `body` (in a transaction if it writes), retrying it whole while
  // the database says Unavailable, until the timeout.
  Status Run(const std::string& op, bool write,
             const std::function<Status()>& body) REQUIRES(mu_) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    conn_->SetDeadline(deadline);
    Status s;
    for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
      if (attempt > 0) {
        const std::chrono::milliseconds pause(std::min(1000, 10 << attempt));
        if (std::chrono::steady_clock::now() + pause >= deadline) break;
        std::this_thread::sleep_for(pause);
      }
      s = write ? conn_->Begin() : Status();
      if (s.ok()) s = body();
      if (s.ok() && write) s = conn_->Commit();
      if (s.ok()) return s;
      if (write) conn_->Rollback();
      if (s.code() != ErrorCode::kUnavailable) break;
    }
    if (s.code() == ErrorCode::kUnavailable) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      s = UnavailableError(s.message() + " (gave up after " +
                           std::to_string(waited.count()) +
                           " ms, the catalog's timeout: another process "
                           "may hold the database)");
    }
    return s.WithContext(Where() + ": " + op);
  }

  // The job's committed durable rows with `metric`, best first (ties: the
  // newest step), at most `limit` (0: all): Best and Ranked, one order.
  Result<std::vector<CatalogCheckpoint>> ByMetric(std::string_view job_id,
                                                  std::string_view metric,
                                                  MetricGoal goal,
                                                  int64_t limit) {
    const bool lowest = goal == MetricGoal::kMin;
    std::vector<SqlValue> params = {std::string(job_id), std::string(metric)};
    std::string sql =
        "SELECT c.* FROM ckpt_checkpoints c JOIN ckpt_metrics b "
        "ON b.checkpoint_id = c.id AND b.name = $2 "
        "WHERE c.job_id = $1 AND c.tier = 'durable' AND "
        "c.state = 'committed' "
        "ORDER BY b.value " +
        std::string(lowest ? "ASC" : "DESC") +
        ", c.step DESC, c.created_unix_ms DESC, c.id DESC";
    if (limit > 0) {
      params.push_back(limit);
      sql += " LIMIT $3";
    }
    CKPT_ASSIGN_OR_RETURN(
        std::vector<CatalogCheckpoint> rows,
        Select(std::string(limit == 1 ? "find the best" : "rank the") +
                   " checkpoint" + (limit == 1 ? "" : "s") + " of job " +
                   Quote(job_id) + " by " + (lowest ? "lowest " : "highest ") +
                   Quote(metric),
               CheckpointQuery(sql), params));
    // CheckpointQuery hands them back oldest first (by step, time, id):
    // put in the query's order again, reversed first so that rows alike
    // in all but their id keep it descending, as the query does.
    std::reverse(rows.begin(), rows.end());
    const std::string name(metric);
    std::stable_sort(
        rows.begin(), rows.end(),
        [&](const CatalogCheckpoint& a, const CatalogCheckpoint& b) {
          const double x = a.metrics.at(name);
          const double y = b.metrics.at(name);
          if (x != y) return lowest ? x < y : x > y;
          return std::pair(a.step, a.created_unix_ms) >
                 std::pair(b.step, b.created_unix_ms);
        });
    return rows;
  }

  Result<std::vector<CatalogCheckpoint>> Select(
      const std::string& op, const std::string& sql,
      const std::vector<SqlValue>& params) EXCLUDES(mu_) {
    std::vector<SqlRow> rows;
    {
      MutexLock lock(&mu_);
      CKPT_RETURN_IF_ERROR(
          Run(op, /*write=*/false, [&]() REQUIRES(mu_) -> Status {
            CKPT_ASSIGN_OR_RETURN(rows, conn_->Query(sql, params));
            return Status();
          }));
    }
    Result<std::vector<CatalogCheckpoint>> parsed = ParseCheckpoints(rows);
    if (!parsed.ok()) return parsed.status().WithContext(Where() + ": " + op);
    return parsed;
  }

  Mutex mu_;  // one statement (or transaction) at a time
  const std::unique_ptr<SqlConnection> conn_ PT_GUARDED_BY(mu_);
  const std::string url_;
  const std::chrono::milliseconds timeout_;  // of each call
};

Status NewerSchema(int64_t version) {
  return FailedPreconditionError(
      "the catalog has schema version " + std::to_string(version) +
      ", newer than this ckpt understands (" + std::to_string(kSchemaVersion) +
      "): it was written by a newer ckpt; upgrade ckpt to use it");
}

Status SqlCatalog::Migrate() {
  MutexLock lock(&mu_);
  const std::vector<std::string_view>& migrations =
      Migrations(conn_->dialect());
  if (migrations.size() != static_cast<size_t>(kSchemaVersion)) {
    return FailedPreconditionError(
        Where() + ": this build has " + std::to_string(migrations.size()) +
        " migrations for schema version " + std::to_string(kSchemaVersion));
  }
  // The usual case, without taking a write lock: the schema is current.
  conn_->SetDeadline(std::chrono::steady_clock::now() + timeout_);
  Result<std::vector<SqlRow>> rows =
      conn_->Query("SELECT version FROM ckpt_schema", {});
  if (rows.ok() && rows->size() == 1) {
    Result<int64_t> version = SqlInt((*rows)[0][0], "ckpt_schema.version");
    if (version.ok() && *version == kSchemaVersion) return Status();
    if (version.ok() && *version > kSchemaVersion) {
      return NewerSchema(*version).WithContext("open " + Where());
    }
  }
  return Run(
      "open (migrate the schema)", /*write=*/true,
      [&]() REQUIRES(mu_) -> Status {
        if (conn_->dialect() == Dialect::kPostgres) {
          CKPT_RETURN_IF_ERROR(conn_->Query(kLockMigrations, {}).status());
        }
        CKPT_RETURN_IF_ERROR(conn_->Exec(kCreateSchemaTable));
        CKPT_ASSIGN_OR_RETURN(
            std::vector<SqlRow> found,
            conn_->Query("SELECT version FROM ckpt_schema", {}));
        if (found.size() > 1) {
          return DataLossError("table ckpt_schema has " +
                               std::to_string(found.size()) +
                               " rows instead of one");
        }
        int64_t version = 0;
        if (found.size() == 1) {
          CKPT_ASSIGN_OR_RETURN(version,
                                SqlInt(found[0][0], "ckpt_schema.version"));
        }
        if (version > kSchemaVersion) return NewerSchema(version);
        if (version < 0) {
          return DataLossError("the schema version " + std::to_string(version) +
                               " is negative");
        }
        for (int64_t v = version; v < kSchemaVersion; ++v) {
          CKPT_RETURN_IF_ERROR_CTX(
              conn_->Exec(migrations[v]),
              "migrate to schema version " + std::to_string(v + 1));
        }
        if (found.empty()) {
          return conn_
              ->Query("INSERT INTO ckpt_schema (version) VALUES ($1)",
                      {int64_t{kSchemaVersion}})
              .status();
        }
        return conn_
            ->Query("UPDATE ckpt_schema SET version = $1",
                    {int64_t{kSchemaVersion}})
            .status();
      });
}

}  // namespace

Result<std::unique_ptr<Catalog>> OpenSqlCatalog(
    std::unique_ptr<SqlConnection> conn, const CatalogOptions& options) {
  auto catalog = std::make_unique<SqlCatalog>(
      std::move(conn), std::chrono::milliseconds(options.timeout_ms));
  CKPT_RETURN_IF_ERROR(catalog->Migrate());
  return std::unique_ptr<Catalog>(std::move(catalog));
}

}  // namespace ckpt::catalog
