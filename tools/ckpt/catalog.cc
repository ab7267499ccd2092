// `ckpt catalog`: the database of committed checkpoints across jobs
// (ckpt/catalog.h), for schedulers and people: which jobs there are, their
// checkpoints, the one to resume from, the best by a metric, and repairing
// the catalog from storage.

#include "ckpt/catalog.h"

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <optional>

#include "capi/records.h"
#include "ckpt/catalog_sync.h"
#include "commands.h"
#include "common.h"
#include "util/names.h"
#include "util/progress.h"

namespace ckpt::cli {
namespace {

// Opens the catalog the user named (or the default); "none" is an error
// here, since every catalog command needs one. A query (`query`) creates
// none: a mistyped path is NotFound, not an empty answer.
Result<std::unique_ptr<Catalog>> OpenNamedCatalog(const std::string& url,
                                                  bool query = true) {
  const std::string chosen = url.empty() ? DefaultCatalogUrl() : url;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog,
                        OpenCatalog(chosen, {.must_exist = query}));
  if (catalog == nullptr) {
    return FailedPreconditionError(
        std::string("the catalog is turned off (") +
        (url.empty() ? "CKPT_CATALOG=none" : "--catalog none") +
        "); name one with --catalog URL");
  }
  return catalog;
}

std::string EpochText(int64_t epoch) {
  return epoch < 0 ? "-" : std::to_string(epoch);
}

std::string MetricsText(const std::map<std::string, double>& metrics) {
  std::vector<std::string> parts;
  for (const auto& [name, value] : metrics) {
    parts.push_back(name + "=" + fmt::format("{}", value));
  }
  return parts.empty() ? "-" : Join(parts, " ");
}

nlohmann::json RowToJson(const CatalogCheckpoint& c) {
  nlohmann::json j = records::CatalogRowJson(c);
  j["created"] = FormatTime(c.created_unix_ms);
  j["updated_unix_ms"] = c.updated_unix_ms;
  return j;
}

// A row whose storage cannot be reached (an outage, a wrong endpoint): its
// check says nothing of the row, so latest and best stop with the error
// rather than skip it as stale, and a scheduler can tell an outage from a
// job with no checkpoint; list marks it "unchecked".
bool Unreachable(const Status& s) {
  return s.code() == ErrorCode::kUnavailable;
}

Status CannotCheck(const Status& s, const CatalogCheckpoint& row) {
  return s.WithContext(
      "check step " + std::to_string(row.step) + " of job " +
      Quote(row.job_id) +
      " against its storage (nothing is known to be stale; --no-check "
      "answers from the catalog alone)");
}

// A row that did not check out against storage: "stale", or "unchecked"
// where its storage could not be reached; and why.
struct RowCheck {
  const char* state;
  std::string why;
};

// The committed durable row `c` checked against storage
// (CheckAgainstStorage); nullopt when it checks out, or when it is not such
// a row (a local tier's row names node memory no other machine can open).
std::optional<RowCheck> CheckRow(const CatalogCheckpoint& c) {
  if (c.state != CheckpointState::kCommitted ||
      c.tier != CatalogTier::kDurable) {
    return std::nullopt;
  }
  Status s = CheckAgainstStorage(c);
  if (s.ok()) return std::nullopt;
  return RowCheck{Unreachable(s) ? "unchecked" : "stale", s.ToString()};
}

// Asked by its root (ResolveCatalogJob), a command answers from that root
// alone.
using JobRef = CatalogJobRef;

// What a NotFound names: the job, and the root where JOB was one.
std::string JobName(const JobRef& ref) {
  if (ref.root.empty()) return "job " + Quote(ref.job_id);
  if (ref.root == ref.job_id)
    return "job " + Quote(ref.job_id) + " under that root";
  return "job " + Quote(ref.job_id) + " under root " + ref.root;
}

// --- jobs
// ---------------------------------------------------------------------

struct JobsArgs {
  std::string catalog;
  bool json = false;
};

Status RunJobs(const JobsArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto catalog, OpenNamedCatalog(args.catalog));
  CKPT_ASSIGN_OR_RETURN(std::vector<CatalogJob> jobs, catalog->Jobs());
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const CatalogJob& j : jobs) {
      nlohmann::json row = records::CatalogJobJson(j);
      row["first_seen"] = FormatTime(j.first_seen_unix_ms);
      row["last_seen"] = FormatTime(j.last_seen_unix_ms);
      out.push_back(std::move(row));
    }
    PrintJson(out);
    return Status();
  }
  if (jobs.empty()) {
    fmt::print("no jobs in catalog {}\n", catalog->url());
    return Status();
  }
  std::vector<std::vector<std::string>> rows = {{"JOB", "CHECKPOINTS", "LATEST",
                                                 "FIRST SEEN (UTC)",
                                                 "LAST SEEN (UTC)", "ROOT"}};
  for (const CatalogJob& j : jobs) {
    rows.push_back({j.job_id, std::to_string(j.committed),
                    j.latest_step ? std::to_string(*j.latest_step) : "-",
                    FormatTime(j.first_seen_unix_ms),
                    FormatTime(j.last_seen_unix_ms), j.root});
  }
  PrintTable(rows);
  return Status();
}

// --- list
// ---------------------------------------------------------------------

struct ListArgs {
  std::string job;
  std::string root;
  bool no_check = false;
  bool all = false;
  bool deleted = false;
  std::optional<int64_t> min_step;
  std::optional<int64_t> max_step;
  int64_t limit = 0;
  std::string tier;
  std::string catalog;
  bool json = false;
};

Status RunList(const ListArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto catalog, OpenNamedCatalog(args.catalog));
  CatalogFilter filter;
  if (!args.job.empty()) {
    CKPT_ASSIGN_OR_RETURN(const JobRef ref,
                          ResolveCatalogJob(*catalog, args.job));
    filter.job_id = ref.job_id;
    filter.root = ref.root;
    // A job the catalog has no row of (a typo) is an error, as for latest;
    // a known job whose rows the options leave out is an empty answer.
    CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> any,
                          catalog->List({.job_id = filter.job_id,
                                         .root = filter.root,
                                         .state = std::nullopt,
                                         .limit = 1}));
    if (any.empty()) {
      return NotFoundError("no " + JobName(ref) + " in catalog " +
                           catalog->url() +
                           " (`ckpt catalog jobs` lists the jobs it knows)");
    }
  }
  if (!args.root.empty()) filter.root = CatalogRootUrl(args.root);
  if (args.all) filter.state = std::nullopt;
  if (args.deleted) filter.state = CheckpointState::kDeleted;
  filter.min_step = args.min_step;
  filter.max_step = args.max_step;
  filter.limit = args.limit;
  if (!args.tier.empty()) {
    CKPT_ASSIGN_OR_RETURN(filter.tier, ParseCatalogTier(args.tier));
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> list,
                        catalog->List(filter));
  // Each committed durable row is checked against storage, as latest does;
  // one that does not check out is marked stale and reported on stderr.
  std::map<size_t, RowCheck> stale;
  if (!args.no_check) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (std::optional<RowCheck> check = CheckRow(list[i])) {
        fmt::print(stderr, "ckpt catalog list: step {} of job {} is {}: {}\n",
                   list[i].step, list[i].job_id, check->state, check->why);
        stale[i] = std::move(*check);
      }
    }
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t i = 0; i < list.size(); ++i) {
      nlohmann::json row = RowToJson(list[i]);
      if (auto it = stale.find(i); it != stale.end()) {
        const RowCheck& check = it->second;
        row["stale"] = std::string_view(check.state) == "unchecked"
                           ? "unchecked: " + check.why
                           : check.why;
      }
      out.push_back(std::move(row));
    }
    PrintJson(out);
    return Status();
  }
  if (list.empty()) {
    fmt::print("no checkpoints in catalog {}\n", catalog->url());
    return Status();
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"STEP", "EPOCH", "STATE", "TIER", "CREATED (UTC)", "SIZE",
                  "WORLD", "METRICS", "ROOT"});
  if (args.job.empty()) rows[0].insert(rows[0].begin(), "JOB");
  for (size_t i = 0; i < list.size(); ++i) {
    const CatalogCheckpoint& c = list[i];
    std::vector<std::string> row = {
        std::to_string(c.step),
        EpochText(c.epoch),
        stale.contains(i) ? std::string(stale[i].state)
                          : std::string(CheckpointStateName(c.state)),
        std::string(CatalogTierName(c.tier)),
        FormatTime(c.created_unix_ms),
        FormatBytes(c.bytes),
        std::to_string(c.world_size),
        MetricsText(c.metrics),
        c.root};
    if (args.job.empty()) row.insert(row.begin(), c.job_id);
    rows.push_back(std::move(row));
  }
  PrintTable(rows);
  return Status();
}

// --- latest
// -------------------------------------------------------------------

struct LatestArgs {
  std::string job;
  bool no_check = false;
  std::string catalog;
  bool json = false;
};

Status RunLatest(const LatestArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto catalog, OpenNamedCatalog(args.catalog));
  CKPT_ASSIGN_OR_RETURN(const JobRef job,
                        ResolveCatalogJob(*catalog, args.job));
  // Newest first. Each row is checked against storage (the truth); one
  // that does not check out is skipped for the next older. A local tier's
  // steps are in node memory: only the job's tiered manager resumes them.
  CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> list,
                        catalog->List({.job_id = job.job_id,
                                       .root = job.root,
                                       .tier = CatalogTier::kDurable}));
  size_t stale = 0;
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    if (!args.no_check) {
      if (Status s = CheckAgainstStorage(*it); !s.ok()) {
        if (Unreachable(s)) return CannotCheck(s, *it);
        fmt::print(stderr, "ckpt catalog latest: skipping step {}: {}\n",
                   it->step, s.ToString());
        ++stale;
        continue;
      }
    }
    if (args.json) {
      PrintJson(RowToJson(*it));
    } else {
      fmt::print("{}\t{}\n", it->root, it->step);
    }
    return Status();
  }
  return NotFoundError("no committed durable checkpoint of " + JobName(job) +
                       " in catalog " + catalog->url() +
                       (stale ? " (" + Count(stale, "row") +
                                    " did not check out against storage)"
                              : ""));
}

// --- best
// ---------------------------------------------------------------------

struct BestArgs {
  std::string job;
  std::string metric;
  bool min = false;
  bool max = false;
  bool no_check = false;
  std::string catalog;
  bool json = false;
};

Status RunBest(const BestArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto catalog, OpenNamedCatalog(args.catalog));
  const MetricGoal goal = args.max ? MetricGoal::kMax : MetricGoal::kMin;
  CKPT_ASSIGN_OR_RETURN(const JobRef job,
                        ResolveCatalogJob(*catalog, args.job));
  std::optional<CatalogCheckpoint> best;
  size_t stale = 0;
  if (args.no_check && job.root.empty()) {
    CKPT_ASSIGN_OR_RETURN(best, catalog->Best(job.job_id, args.metric, goal));
  } else {
    // Best first (of the root alone where the job was named by it); a
    // row that does not check out against storage is skipped for the next
    // best, as latest skips it for the next older.
    CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> rows,
                          RankedRows(*catalog, job, args.metric, goal));
    for (CatalogCheckpoint& c : rows) {
      if (args.no_check) {
        best = std::move(c);
        break;
      }
      if (Status s = CheckAgainstStorage(c); !s.ok()) {
        if (Unreachable(s)) return CannotCheck(s, c);
        fmt::print(stderr, "ckpt catalog best: skipping step {}: {}\n", c.step,
                   s.ToString());
        ++stale;
        continue;
      }
      best = std::move(c);
      break;
    }
  }
  if (!best) {
    return NotFoundError("no committed checkpoint of " + JobName(job) +
                         " with metric " + Quote(args.metric) + " in catalog " +
                         catalog->url() +
                         (stale ? " (" + Count(stale, "row") +
                                      " did not check out against storage)"
                                : ""));
  }
  if (args.json) {
    PrintJson(RowToJson(*best));
  } else {
    fmt::print("{}\t{}\t{}\n", best->root, best->step,
               fmt::format("{}", best->metrics.at(args.metric)));
  }
  return Status();
}

// --- sync
// ---------------------------------------------------------------------

struct SyncArgs {
  std::string root;
  std::string catalog;
  bool json = false;
};

// The sync of a root that is gone from storage: every committed row of it
// is marked deleted. A root the catalog has no row of is still an error (a
// mistyped path should not pass for a sync).
Result<CatalogSyncReport> SyncGoneRoot(const std::string& root,
                                       Catalog& catalog, const Status& gone) {
  CatalogSyncReport report;
  report.root = CatalogRootUrl(root);
  const std::string op =
      "sync catalog " + catalog.url() + " with " + report.root;
  CKPT_ASSIGN_OR_RETURN(
      std::vector<CatalogCheckpoint> rows,
      catalog.List({.root = report.root, .state = std::nullopt}));
  if (rows.empty()) {
    return gone.WithContext(op + ": the catalog has no row of it either");
  }
  for (const CatalogCheckpoint& row : rows) {
    if (row.tier == CatalogTier::kLocal) {
      return FailedPreconditionError(
          op +
          ": it is a local tier (node memory): its rows are the job's "
          "tiered manager's; sync the job's durable root instead");
    }
  }
  for (const CatalogCheckpoint& row : rows) {
    if (row.state != CheckpointState::kCommitted) continue;
    Result<bool> marked = catalog.MarkDeleted(report.root, row.step);
    if (!marked.ok()) return marked.status().WithContext(op);
    if (*marked) report.marked_deleted.push_back(row.step);
  }
  return report;
}

Status RunSync(const SyncArgs& args) {
  Result<std::unique_ptr<CheckpointManager>> manager =
      OpenRoot(args.root, /*create=*/false);
  const bool gone =
      !manager.ok() && manager.status().code() == ErrorCode::kNotFound;
  if (!manager.ok() && !gone) return manager.status();
  // A root that is not there has nothing to record: only the rows of a
  // catalog that exists may be marked, and a mistyped ROOT creates none.
  Result<std::unique_ptr<Catalog>> opened =
      OpenNamedCatalog(args.catalog, /*query=*/gone);
  if (gone && !opened.ok() && opened.status().code() == ErrorCode::kNotFound) {
    return manager.status().WithContext(
        "sync the catalog with " + CatalogRootUrl(args.root) +
        ": the root is not there, and neither is the catalog (none created)");
  }
  CKPT_ASSIGN_OR_RETURN(auto catalog, std::move(opened));
  Result<CatalogSyncReport> synced =
      gone ? SyncGoneRoot(args.root, *catalog, manager.status())
           : SyncCatalog(**manager, *catalog);
  CKPT_ASSIGN_OR_RETURN(CatalogSyncReport report, std::move(synced));
  if (args.json) {
    PrintJson({{"catalog", catalog->url()},
               {"root", report.root},
               {"added", report.added},
               {"updated", report.updated},
               {"marked_deleted", report.marked_deleted},
               {"unchanged", report.unchanged}});
    return Status();
  }
  for (int64_t step : report.added) fmt::print("added step {}\n", step);
  for (int64_t step : report.updated) fmt::print("updated step {}\n", step);
  for (int64_t step : report.marked_deleted) {
    fmt::print(
        "marked step {} deleted (gone from storage, or its manifest does not "
        "load)\n",
        step);
  }
  fmt::print("{}: {} added, {} updated, {} marked deleted, {} unchanged\n",
             report.root, report.added.size(), report.updated.size(),
             report.marked_deleted.size(), report.unchanged);
  return Status();
}

}  // namespace

void AddCatalogCommand(CLI::App& app, Command& selected) {
  CLI::App* catalog = AddSubcommand(
      app, "catalog", "Query and repair the catalog of checkpoints.",
      "The catalog records every committed checkpoint of every job that "
      "saves with one: SQLite by default, PostgreSQL when shared. Storage "
      "stays the truth: latest and best check the catalog's answer against "
      "the checkpoint's manifest, and sync repairs the catalog from a root. "
      "A tiered job's local-tier steps (node memory) are listed with tier "
      "local; latest and best offer durable checkpoints only.",
      "  ckpt catalog jobs\n"
      "  ckpt catalog list run42\n"
      "  ckpt catalog latest run42\n"
      "  ckpt catalog best run42 --metric loss --min\n"
      "  ckpt catalog sync /data/run42\n");
  catalog->require_subcommand(1);

  auto jobs = std::make_shared<JobsArgs>();
  CLI::App* sub = AddSubcommand(
      *catalog, "jobs", "List the jobs the catalog knows.",
      "One line per job: its committed durable checkpoints, the newest step, "
      "when it "
      "was first and last seen (the creation times of its oldest and newest "
      "checkpoints) and its root.",
      "  ckpt catalog jobs\n"
      "  ckpt catalog jobs --catalog postgresql://ckpt@db/ckpt --json\n");
  AddCatalogOption(*sub, jobs->catalog);
  AddJsonFlag(*sub, jobs->json);
  sub->callback([jobs, &selected] {
    selected = {"catalog jobs", [jobs] { return RunJobs(*jobs); }};
  });

  auto list = std::make_shared<ListArgs>();
  sub = AddSubcommand(
      *catalog, "list", "List a job's checkpoints.",
      "The committed checkpoints of JOB (of every job without one), oldest "
      "first: step, epoch, state, tier, creation time, size, world size, "
      "metrics and root. --all adds deleted ones, --deleted shows only those; "
      "--tier durable|local keeps one tier (local: a tiered job's steps in "
      "node memory, rooted at its local tier's URL); --limit N keeps the "
      "newest N. Each committed durable row is checked against its "
      "manifest, as by latest: one that does not check out is shown as "
      "stale (with --json, a \"stale\" field says why) and reported on "
      "stderr (--no-check trusts the catalog). A JOB given as a path (/..., "
      "./..., file://...) is the job that saved under that root, whatever "
      "its id, and that root's checkpoints alone. A JOB the catalog has no "
      "row of is an error (exit 1).",
      "  ckpt catalog list run42\n"
      "  ckpt catalog list run42 --all --min-step 1000\n"
      "  ckpt catalog list run42 --tier local\n"
      "  ckpt catalog list --root /data/run42 --json\n");
  sub->add_option("JOB", list->job, "the job's id (default: every job)");
  sub->add_option("--root", list->root, "only checkpoints under this root");
  sub->add_flag("--no-check", list->no_check,
                "do not read the manifests: trust the catalog");
  CLI::Option* all =
      sub->add_flag("--all", list->all, "deleted checkpoints too");
  sub->add_flag("--deleted", list->deleted, "only deleted checkpoints")
      ->excludes(all);
  sub->add_option("--min-step", list->min_step, "only steps from N")
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_option("--max-step", list->max_step, "only steps up to N")
      ->check(NonNegativeInteger(INT64_MAX));
  // At least 1: a limit of 0 would be no limit, and list everything.
  sub->add_option("--limit", list->limit, "only the newest N")
      ->check(PositiveInteger(INT64_MAX));
  sub->add_option("--tier", list->tier, "only this tier")
      ->check(CLI::IsMember({"durable", "local"}));
  AddCatalogOption(*sub, list->catalog);
  AddJsonFlag(*sub, list->json);
  sub->callback([list, &selected] {
    selected = {"catalog list", [list] { return RunList(*list); }};
  });

  auto latest = std::make_shared<LatestArgs>();
  sub = AddSubcommand(
      *catalog, "latest", "Print where to resume a job: its root and step.",
      "Prints ROOT, a tab and STEP of JOB's newest committed durable "
      "checkpoint (with "
      "--json, its whole row). The checkpoint's manifest is read and checked "
      "first; a row that does not check out is reported on stderr and the "
      "next older one is tried (--no-check trusts the catalog). Exit status "
      "1 when the job has no committed checkpoint.",
      "  ckpt catalog latest run42\n"
      "  IFS=$'\\t' read -r root step < <(ckpt catalog latest run42)\n"
      "  ckpt catalog latest run42 --json\n");
  sub->add_option(
         "JOB", latest->job,
         "the job's id, or a root (its checkpoints under that root alone)")
      ->required();
  sub->add_flag("--no-check", latest->no_check,
                "do not read the manifest: trust the catalog");
  AddCatalogOption(*sub, latest->catalog);
  AddJsonFlag(*sub, latest->json);
  sub->callback([latest, &selected] {
    selected = {"catalog latest", [latest] { return RunLatest(*latest); }};
  });

  auto best = std::make_shared<BestArgs>();
  sub = AddSubcommand(
      *catalog, "best", "Print a job's best checkpoint by a metric.",
      "Prints ROOT, STEP and the metric's value (tab-separated) of JOB's "
      "committed checkpoint with the lowest (--min, the default) or highest "
      "(--max) value of the metric given at save (SaveOptions::metrics), "
      "among its durable ones. "
      "Ties go to the newest step. The manifest is checked as by latest: a "
      "row that does not check out is reported on stderr and the next best "
      "is tried. Exit status 1 when no checkpoint has the metric.",
      "  ckpt catalog best run42 --metric loss --min\n"
      "  ckpt catalog best run42 --metric accuracy --max --json\n");
  sub->add_option(
         "JOB", best->job,
         "the job's id, or a root (its checkpoints under that root alone)")
      ->required();
  sub->add_option("--metric", best->metric, "the metric to rank by")
      ->required();
  CLI::Option* min = sub->add_flag("--min", best->min, "lower is better");
  sub->add_flag("--max", best->max, "higher is better")->excludes(min);
  sub->add_flag("--no-check", best->no_check,
                "do not read the manifest: trust the catalog");
  AddCatalogOption(*sub, best->catalog);
  AddJsonFlag(*sub, best->json);
  sub->callback([best, &selected] {
    selected = {"catalog best", [best] { return RunBest(*best); }};
  });

  auto sync = std::make_shared<SyncArgs>();
  sub = AddSubcommand(
      *catalog, "sync", "Repair the catalog from a root.",
      "Records every committed checkpoint under ROOT that the catalog lacks "
      "(or holds as another commit), and marks deleted the catalog's "
      "checkpoints of ROOT that are gone from storage or whose manifest no "
      "longer validates; a ROOT that is gone altogether has every row marked "
      "deleted. Storage is only read. A tiered job's local tier is "
      "refused: its rows are kept by the job itself.",
      "  ckpt catalog sync /data/run42\n"
      "  ckpt catalog sync s3://bucket/run42 --catalog "
      "postgresql://ckpt@db/ckpt\n");
  AddRootArg(*sub, sync->root);
  AddCatalogOption(*sub, sync->catalog);
  AddJsonFlag(*sub, sync->json);
  sub->callback([sync, &selected] {
    selected = {"catalog sync", [sync] { return RunSync(*sync); }};
  });
}

}  // namespace ckpt::cli
