// `ckpt gc`: apply a retention policy and remove dead attempts' objects.

#include <fmt/core.h>

#include <climits>
#include <memory>
#include <set>

#include "capi/records.h"
#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"
#include "util/progress.h"

namespace ckpt::cli {
namespace {

struct GcArgs {
  std::string root;
  RetentionPolicy retention;
  bool dry_run = false;
  std::string catalog;
  LeaseArgs lease;
  bool json = false;
};

std::string Steps(const std::vector<int64_t>& steps) {
  std::vector<std::string> parts;
  for (int64_t s : steps) parts.push_back(std::to_string(s));
  return Join(parts, ", ");
}

// What a step's delete kept in its directory, and why, and what it meant to
// delete but found gone.
void PrintLeftBehind(const DeleteReport& r) {
  for (const DeleteReport::Object& o : r.kept) {
    std::string why = "not written by ckpt";
    if (o.reason == kDeleteNamedByCheckpoint) {
      why = o.named_by.empty() ? "named by a checkpoint that stays"
                               : (o.named_by.size() == 1 ? "named by step "
                                                         : "named by steps ") +
                                     Steps(o.named_by);
    }
    fmt::print("kept {} ({}): {}\n", o.key, FormatBytes(o.bytes), why);
  }
  for (const DeleteReport::Object& o : r.skipped) {
    fmt::print("skipped {}: already gone\n", o.key);
  }
}

Status RunGc(const GcArgs& args) {
  // On a terminal a bar follows the bytes freed; a dry run first says how
  // many that will be.
  const bool draw = !args.json && !args.dry_run && ProgressBar::Enabled();
  std::unique_ptr<ProgressBar> bar;
  ByteProgressFn progress;
  if (draw) {
    progress = [&bar](const ByteCounts& counts) {
      if (bar) bar->Update(counts.deleted);
    };
  }
  CKPT_ASSIGN_OR_RETURN(
      auto manager,
      OpenRootWithCatalog(args.root, /*create=*/false, args.catalog, args.lease,
                          std::move(progress), args.dry_run));
  // Always pass the policy: with no retention flag it is all-off, and GC
  // removes only dead attempts, whatever the manager's default would be.
  if (draw) {
    CKPT_ASSIGN_OR_RETURN(GcReport planned,
                          manager->GarbageCollect(
                              {.dry_run = true, .retention = args.retention}));
    bar = std::make_unique<ProgressBar>("gc " + args.root, planned.bytes_freed);
  }
  CKPT_ASSIGN_OR_RETURN(GcReport report,
                        manager->GarbageCollect({.dry_run = args.dry_run,
                                                 .retention = args.retention}));
  if (bar) bar->Finish();
  if (args.json) {
    // The C API's report (Python's mgr.gc() returns the same), and
    // whether it was a dry run.
    nlohmann::json j = records::GcJson(report);
    j["dry_run"] = args.dry_run;
    PrintJson(j);
    return Status();
  }
  const char* verb = args.dry_run ? "would delete" : "deleted";
  // A deleted step's own objects are implied by its line; list only the
  // rest (dead attempts, leftovers of crashed writes), and what a step's
  // delete left behind.
  std::set<std::string> of_steps;
  // Oldest first, as deleted_steps (the deletes went newest first).
  for (auto it = report.step_reports.rbegin(); it != report.step_reports.rend();
       ++it) {
    const DeleteReport& r = *it;
    fmt::print("{} step {}\n", verb, r.step);
    PrintLeftBehind(r);
    for (const DeleteReport::Object& o : r.removed) of_steps.insert(o.key);
  }
  for (const std::string& key : report.deleted_objects) {
    if (!of_steps.contains(key)) fmt::print("{} {}\n", verb, key);
  }
  fmt::print("{} {} ({})\n", verb,
             Count(report.deleted_objects.size(), "object"),
             FormatBytes(report.bytes_freed));
  return Status();
}

struct DeleteArgs {
  std::string root;
  int64_t step = -1;
  bool force = false;
  bool dry_run = false;
  std::string catalog;
  LeaseArgs lease;
  bool json = false;
};

void PrintDeleteReport(const DeleteReport& r) {
  const bool dry = r.dry_run;
  for (const DeleteReport::Rewritten& w : r.rewritten) {
    fmt::print("{} step {}: {} {} of step {} into it\n",
               dry ? "would rewrite" : "rewrote", w.step,
               dry ? "copy" : "copied", FormatBytes(w.bytes_copied), r.step);
  }
  PrintLeftBehind(r);
  fmt::print("{} step {}: {} ({})\n", dry ? "would delete" : "deleted", r.step,
             Count(r.removed.size(), "object"), FormatBytes(r.bytes_freed));
}

Status RunDelete(const DeleteArgs& args) {
  // On a terminal a bar follows the bytes --force copies (it reads each
  // once).
  const bool draw =
      args.force && !args.json && !args.dry_run && ProgressBar::Enabled();
  std::unique_ptr<ProgressBar> bar;
  ByteProgressFn progress;
  if (draw) {
    progress = [&bar](const ByteCounts& counts) {
      if (bar) bar->Update(counts.read);
    };
  }
  CKPT_ASSIGN_OR_RETURN(
      auto manager,
      OpenRootWithCatalog(args.root, /*create=*/false, args.catalog, args.lease,
                          std::move(progress), args.dry_run));
  if (draw) {
    // Only for the bar: should it fail, the delete says why.
    Result<DeleteReport> planned = manager->Delete(
        args.step, {.rewrite_dependants = true, .dry_run = true});
    uint64_t bytes = 0;
    std::vector<int64_t> dependants;
    if (planned.ok()) {
      for (const DeleteReport::Rewritten& w : planned->rewritten) {
        bytes += w.bytes_copied;
        dependants.push_back(w.step);
      }
    }
    if (bytes > 0) {
      bar = std::make_unique<ProgressBar>(
          fmt::format("delete step {}: copy into {}", args.step,
                      Steps(dependants)),
          bytes);
    }
  }
  Result<DeleteReport> deleted = manager->Delete(
      args.step, {.rewrite_dependants = args.force, .dry_run = args.dry_run});
  if (!deleted.ok() && !args.force &&
      deleted.status().code() == ErrorCode::kFailedPrecondition) {
    // Refused for the checkpoints that depend on it (the library names
    // them): the tool names its way out.
    Result<DeleteReport> forced = manager->Delete(
        args.step, {.rewrite_dependants = true, .dry_run = true});
    if (forced.ok() && !forced->rewritten.empty()) {
      const bool one = forced->rewritten.size() == 1;
      return Status(ErrorCode::kFailedPrecondition,
                    deleted.status().message() +
                        (one ? ", or give --force to copy what it references "
                               "into it"
                             : ", or give --force to copy what they "
                               "reference into them"));
    }
  }
  CKPT_ASSIGN_OR_RETURN(DeleteReport report, std::move(deleted));
  if (bar) bar->Finish();
  if (args.json) {
    PrintJson(records::DeleteJson(report));
  } else {
    PrintDeleteReport(report);
  }
  return Status();
}

}  // namespace

void AddDeleteCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<DeleteArgs>();
  CLI::App* sub = AddSubcommand(
      app, "delete", "Delete one checkpoint.",
      "Delete the checkpoint --step N: its manifest first, then its data "
      "objects. A checkpoint that other (incremental) checkpoints depend on "
      "is not deleted: the error names them. With --force their referenced "
      "bytes are first copied into their own step directories and their "
      "manifests rewritten, so they stop depending on it. Prints what it "
      "rewrote, what it deleted, and what it kept in the step's directory "
      "and why; --dry-run prints the same and changes nothing.",
      "  ckpt delete /data/run42 --step 1200\n"
      "  ckpt delete /data/run42 --step 1000 --force --dry-run\n"
      "  ckpt delete /data/run42 --step 1000 --force\n"
      "  ckpt delete s3://bucket/run42 --step 1200 --json\n");
  AddRootArg(*sub, args->root);
  sub->add_option("--step", args->step, "the step to delete")
      ->required()
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_flag("--force", args->force,
                "rewrite the checkpoints that depend on it first");
  sub->add_flag("--dry-run", args->dry_run,
                "print what would be deleted and rewritten, change nothing");
  AddCatalogOption(*sub, args->catalog);
  AddLeaseOptions(*sub, args->lease);
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {"delete", [args] { return RunDelete(*args); }};
  });
}

void AddGcCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<GcArgs>();
  RetentionPolicy& r = args->retention;
  CLI::App* sub = AddSubcommand(
      app, "gc", "Apply retention and delete garbage.",
      "Delete the checkpoints that no retention rule keeps, and the objects "
      "of save attempts that died. A checkpoint is kept if any given rule "
      "keeps it, if a kept incremental checkpoint depends on it, or if it is "
      "the newest. Without a retention flag only dead attempts are removed. "
      "Nothing ckpt did not write is ever deleted. --dry-run prints what "
      "would be deleted and deletes nothing.",
      "  ckpt gc /data/run42 --dry-run\n"
      "  ckpt gc /data/run42 --keep-last 3 --keep-every-steps 10000\n"
      "  ckpt gc /data/run42 --keep-last 2 --keep-best 1 --metric loss\n"
      "  ckpt gc /data/run42 --keep-best 3 --metric accuracy --max --json\n");
  AddRootArg(*sub, args->root);
  sub->add_option("--keep-last", r.keep_last, "keep the newest N checkpoints")
      ->check(PositiveInteger(INT_MAX));
  sub->add_option("--keep-every-steps", r.keep_every_n_steps,
                  "keep every checkpoint whose step is a multiple of K")
      ->check(PositiveInteger(INT64_MAX));
  sub->add_option("--keep-every-seconds", r.keep_every_seconds,
                  "keep the first checkpoint of every window of S seconds")
      ->check(PositiveInteger(INT64_MAX));
  CLI::Option* best = sub->add_option("--keep-best", r.keep_best,
                                      "keep the M best checkpoints by --metric")
                          ->check(PositiveInteger(INT_MAX));
  CLI::Option* metric =
      sub->add_option("--metric", r.best_metric,
                      "the metric --keep-best ranks by (lower is better)");
  best->needs(metric);
  metric->needs(best);
  sub->add_flag("--max", r.best_higher_is_better,
                "higher --metric values are better (an accuracy)")
      ->needs(metric);
  sub->add_flag("--dry-run", args->dry_run, "print, delete nothing");
  AddCatalogOption(*sub, args->catalog);
  AddLeaseOptions(*sub, args->lease);
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {"gc", [args] { return RunGc(*args); }};
  });
}

}  // namespace ckpt::cli
