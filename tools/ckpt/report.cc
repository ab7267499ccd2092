// `ckpt report`: one self-contained HTML page of a root's checkpoints (the
// timeline, the incremental lineage, retention, each save's durations and
// ranks, the metrics) or of a catalog's jobs (newest and best checkpoints,
// metric curves across jobs). docs/report.md says how to read it.

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>

#include "ckpt/catalog.h"
#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"
#include "html_page.h"
#include "util/names.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

struct ReportArgs {
  std::string root;
  std::string catalog;
  std::string bench;  // a `ckpt bench --json` output: the disk's own speed
  std::string output;
  std::string goal = "min";
};

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The step of a key "step-000000000042/...", or -1.
int64_t StepOfObject(const std::string& key) {
  constexpr std::string_view kPrefix = "step-";
  if (key.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  const size_t slash = key.find('/');
  if (slash == std::string::npos) return -1;
  try {
    return std::stoll(key.substr(kPrefix.size(), slash - kPrefix.size()));
  } catch (const std::exception&) {
    return -1;
  }
}

// One row of the page's columnar `steps`.
struct Row {
  int64_t step = 0;
  int64_t time = 0;
  uint64_t bytes = 0;
  uint64_t referenced = 0;
  bool full = true;
  int64_t chain = 0;
  int world = 1;
  std::string tier = "durable";
  std::string state = "kept";
  bool incomplete = false;
  const SaveTiming* timing = nullptr;
};

json Columns(const std::vector<Row>& rows) {
  json c = json::object();
  for (const char* k :
       {"step", "time", "bytes", "referenced", "full", "chain", "world", "tier",
        "state", "incomplete", "save_ms", "commit_ms", "stall_ms", "async",
        "gbps", "write_max", "write_min", "wait_max", "slowest_rank"}) {
    c[k] = json::array();
  }
  for (const Row& r : rows) {
    c["step"].push_back(r.step);
    c["time"].push_back(r.time);
    c["bytes"].push_back(r.bytes);
    c["referenced"].push_back(r.referenced);
    c["full"].push_back(r.full);
    c["chain"].push_back(r.chain);
    c["world"].push_back(r.world);
    c["tier"].push_back(r.tier);
    c["state"].push_back(r.state);
    c["incomplete"].push_back(r.incomplete);
    const SaveTiming* t = r.timing;
    const bool timed = t != nullptr && t->recorded;
    c["save_ms"].push_back(timed ? json(t->save_ms) : json(nullptr));
    c["commit_ms"].push_back(timed ? json(t->commit_ms) : json(nullptr));
    c["stall_ms"].push_back(timed ? json(t->stall_ms) : json(nullptr));
    c["async"].push_back(timed ? json(t->async) : json(nullptr));
    // What the save wrote over how long it took (its own bytes: an
    // incremental save's, not those it references).
    c["gbps"].push_back(timed && t->save_ms > 0
                            ? json(static_cast<double>(r.bytes) /
                                   (static_cast<double>(t->save_ms) * 1e6))
                            : json(nullptr));
    if (timed && !t->ranks.empty()) {
      auto [lo, hi] = std::minmax_element(
          t->ranks.begin(), t->ranks.end(),
          [](const auto& a, const auto& b) { return a.write_ms < b.write_ms; });
      int64_t wait = 0;
      for (const RankSaveTiming& rt : t->ranks)
        wait = std::max(wait, rt.wait_ms);
      c["write_max"].push_back(hi->write_ms);
      c["write_min"].push_back(lo->write_ms);
      c["wait_max"].push_back(wait);
      c["slowest_rank"].push_back(hi->rank);
    } else {
      for (const char* k :
           {"write_max", "write_min", "wait_max", "slowest_rank"})
        c[k].push_back(nullptr);
    }
  }
  return c;
}

Result<std::unique_ptr<Catalog>> OpenReportCatalog(const std::string& url) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog,
                        OpenCatalog(url, {.must_exist = true}));
  if (catalog == nullptr) {
    return InvalidArgumentError("--catalog none names no catalog");
  }
  return catalog;
}

// The disk's figures from a `ckpt bench --json` output, or null.
Result<json> BenchFigures(const std::string& path) {
  if (path.empty()) return json(nullptr);
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return NotFoundError("read --bench " + Quote(path) + ": cannot open it");
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const json bench = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto gbps = [&](const char* key) -> json {
    if (!bench.is_object() || !bench.contains("figures") ||
        !bench["figures"].is_object()) {
      return nullptr;
    }
    const json& f = bench["figures"];
    return f.contains(key) && f[key].is_number() ? f[key] : json(nullptr);
  };
  const json raw = gbps("raw_write_best_gbps");
  if (raw.is_null()) {
    return InvalidArgumentError("read --bench " + Quote(path) +
                                ": not the output of `ckpt bench --json` (no "
                                "figures.raw_write_best_gbps)");
  }
  return json{{"file", path},
              {"raw_write_gbps", raw},
              {"save_gbps", gbps("save_gbps")}};
}

Status RunRootReport(const ReportArgs& args) {
  CKPT_ASSIGN_OR_RETURN(json disk, BenchFigures(args.bench));
  CKPT_ASSIGN_OR_RETURN(auto manager, OpenRoot(args.root, /*create=*/false));
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, manager->List());
  std::vector<Row> rows;
  json edges = json::array();
  json metrics = json::object();
  std::set<int64_t> listed;
  for (const CheckpointInfo& info : infos) {
    Row& r = rows.emplace_back();
    r.step = info.step;
    r.time = info.created_unix_ms;
    r.bytes = info.bytes;
    r.referenced = info.referenced_bytes;
    r.full = info.depends_on.empty();
    r.chain = info.chain;
    r.world = info.world_size;
    r.incomplete = !info.incomplete.empty();
    r.timing = &info.timing;
    listed.insert(info.step);
    for (const auto& [name, value] : info.metrics) {
      metrics[name].push_back({info.step, value});
    }
    if (info.depends_on.size() == 1) {
      edges.push_back({info.step, info.depends_on[0], info.referenced_bytes});
    } else if (info.depends_on.size() > 1) {
      // Bytes per referenced step: only the description's objects say.
      CKPT_ASSIGN_OR_RETURN(CheckpointDescription d,
                            manager->Describe(info.step));
      std::map<int64_t, uint64_t> shared;
      for (const ObjectInfo& o : d.objects)
        shared[StepOfObject(o.key)] += o.size;
      for (int64_t dep : info.depends_on) {
        edges.push_back({info.step, dep, shared[dep]});
      }
    }
  }
  std::string job_id = infos.empty() ? "" : infos.back().job_id;
  // The catalog knows what the root no longer holds, and the job's local
  // tier.
  std::vector<CatalogCheckpoint> known;
  if (!args.catalog.empty() && !job_id.empty()) {
    CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog,
                          OpenReportCatalog(args.catalog));
    CatalogFilter filter;
    filter.job_id = job_id;
    filter.state = std::nullopt;
    CKPT_ASSIGN_OR_RETURN(known, catalog->List(filter));
  }
  for (const CatalogCheckpoint& c : known) {
    const bool local = c.tier == CatalogTier::kLocal;
    if (!local &&
        (listed.count(c.step) || c.state != CheckpointState::kDeleted)) {
      continue;
    }
    Row& r = rows.emplace_back();
    r.step = c.step;
    r.time = c.created_unix_ms;
    r.bytes = c.bytes;
    r.world = c.world_size;
    r.tier = std::string(CatalogTierName(c.tier));
    r.state = c.state == CheckpointState::kDeleted ? "deleted" : "kept";
    if (local && c.state != CheckpointState::kDeleted) r.state = "kept";
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.step < b.step; });
  // The per-rank bars: the newest save that recorded its ranks.
  json ranks = nullptr;
  for (auto it = infos.rbegin(); it != infos.rend(); ++it) {
    const SaveTiming& t = it->timing;
    if (!t.recorded || t.ranks.empty()) continue;
    ranks = {{"step", it->step},
             {"world", it->world_size},
             {"rank", json::array()},
             {"write_ms", json::array()},
             {"wait_ms", json::array()}};
    const RankSaveTiming* slowest = &t.ranks.front();
    for (const RankSaveTiming& r : t.ranks) {
      ranks["rank"].push_back(r.rank);
      ranks["write_ms"].push_back(r.write_ms);
      ranks["wait_ms"].push_back(r.wait_ms);
      if (r.write_ms > slowest->write_ms) slowest = &r;
    }
    ranks["slowest"] = slowest->rank;
    break;
  }
  const json data = {{"kind", "root"},
                     {"root", args.root},
                     {"job_id", job_id},
                     // A page made to be shared: no password.
                     {"catalog", RedactCatalogUrl(args.catalog)},
                     {"generated_unix_ms", NowUnixMs()},
                     {"steps", Columns(rows)},
                     {"edges", std::move(edges)},
                     {"metrics", std::move(metrics)},
                     {"ranks", std::move(ranks)},
                     {"disk", std::move(disk)}};
  CKPT_RETURN_IF_ERROR(WriteHtmlPage(args.output, "ckpt report: " + args.root,
                                     data, RootReportScript()));
  fmt::print("wrote {} ({} checkpoints, {} lineage edges)\n", args.output,
             rows.size(), data["edges"].size());
  return Status();
}

Status RunCatalogReport(const ReportArgs& args) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Catalog> catalog,
                        OpenReportCatalog(args.catalog));
  CKPT_ASSIGN_OR_RETURN(std::vector<CatalogJob> jobs, catalog->Jobs());
  const MetricGoal goal =
      args.goal == "max" ? MetricGoal::kMax : MetricGoal::kMin;
  json out_jobs = json::array();
  json curves = json::object();
  for (const CatalogJob& job : jobs) {
    CatalogFilter filter;
    filter.job_id = job.job_id;
    filter.state = std::nullopt;
    CKPT_ASSIGN_OR_RETURN(std::vector<CatalogCheckpoint> rows,
                          catalog->List(filter));
    int64_t deleted = 0;
    std::string first_metric;
    for (const CatalogCheckpoint& c : rows) {
      if (c.state == CheckpointState::kDeleted) {
        ++deleted;
        continue;
      }
      for (const auto& [name, value] : c.metrics) {
        curves[name][job.job_id].push_back({c.step, value});
        if (first_metric.empty()) first_metric = name;
      }
    }
    json j = {{"job_id", job.job_id},       {"root", job.root},
              {"committed", job.committed}, {"deleted", deleted},
              {"newest", nullptr},          {"best", nullptr}};
    CKPT_ASSIGN_OR_RETURN(std::optional<CatalogCheckpoint> latest,
                          catalog->Latest(job.job_id));
    if (latest) {
      j["newest"] = {{"step", latest->step},
                     {"root", latest->root},
                     {"created_unix_ms", latest->created_unix_ms}};
    }
    if (!first_metric.empty()) {
      CKPT_ASSIGN_OR_RETURN(std::optional<CatalogCheckpoint> best,
                            catalog->Best(job.job_id, first_metric, goal));
      if (best) {
        j["best"] = {{"metric", first_metric},
                     {"step", best->step},
                     {"value", best->metrics.at(first_metric)}};
      }
    }
    out_jobs.push_back(std::move(j));
  }
  const json data = {
      {"kind", "catalog"},           {"catalog", catalog->url()},
      {"goal", args.goal},           {"generated_unix_ms", NowUnixMs()},
      {"jobs", std::move(out_jobs)}, {"curves", std::move(curves)}};
  CKPT_RETURN_IF_ERROR(WriteHtmlPage(args.output,
                                     "ckpt report: catalog " + catalog->url(),
                                     data, CatalogReportScript()));
  fmt::print("wrote {} ({} jobs)\n", args.output, data["jobs"].size());
  return Status();
}

Status RunReport(const ReportArgs& args) {
  return args.root.empty() ? RunCatalogReport(args) : RunRootReport(args);
}

}  // namespace

void AddReportCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* sub = AddSubcommand(
      app, "report", "Write an HTML report of a root or a catalog.",
      "Write one self-contained HTML page (Chart.js and the data inline, "
      "nothing fetched when it is opened). Of a ROOT: the timeline of its "
      "saves, the bytes each wrote, its incremental lineage (which step "
      "references which step's data), retention, each save's durations and "
      "its ranks' write and wait times (stragglers), and the metrics; with "
      "--catalog, also the steps the catalog knows were deleted and the "
      "job's local tier. Of a catalog alone (--catalog URL, no ROOT): every "
      "job with its newest and best checkpoints, and metric curves across "
      "jobs. docs/report.md explains each chart.",
      "  ckpt report /data/run42 -o run42.html\n"
      "  ckpt report /data/run42 --catalog ~/.ckpt/catalog.db -o run42.html\n"
      "  ckpt bench --dir /data --json > disk.json\n"
      "  ckpt report /data/run42 --bench disk.json -o run42.html\n"
      "  ckpt report --catalog ~/.ckpt/catalog.db -o jobs.html\n");
  // ROOT, as every command names it, but one report can go without.
  AddRootArg(*sub, args->root)
      ->required(false)
      ->description(
          "where the checkpoints live: a URL (file:///data/run42) or a plain "
          "path; omit it with --catalog for a catalog report");
  sub->add_option("--catalog", args->catalog, "the catalog's URL or path");
  sub->add_option("--bench", args->bench,
                  "a root report: the output of `ckpt bench --json` on the "
                  "same disk, whose raw write speed is drawn beside each "
                  "save's throughput");
  sub->add_option("-o,--output", args->output, "the HTML file to write")
      ->required();
  sub->add_option("--goal", args->goal,
                  "catalog report: the best checkpoint has the lowest "
                  "(min, default) or highest (max) value of its first metric")
      ->check(CLI::IsMember({"min", "max"}));
  sub->callback([args, &selected] {
    // What to report on is a usage error (exit 2), as a missing argument is.
    if (args->root.empty() && args->catalog.empty()) {
      throw CLI::ValidationError("name a ROOT or a --catalog URL");
    }
    selected = {"report", [args] { return RunReport(*args); }};
  });
}

}  // namespace ckpt::cli
