// `ckpt gc`: apply a retention policy and remove dead attempts' objects.

#include <fmt/core.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <set>

#include "checkpoint/manifests.h"
#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"
#include "format/constants.h"
#include "format/layout.h"
#include "format/manifest.h"
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
                          std::move(progress)));
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
    PrintJson({{"dry_run", args.dry_run},
               {"deleted_steps", report.deleted_steps},
               {"deleted_objects", report.deleted_objects},
               {"bytes_freed", report.bytes_freed}});
    return Status();
  }
  const char* verb = args.dry_run ? "would delete" : "deleted";
  for (int64_t step : report.deleted_steps) {
    fmt::print("{} step {}\n", verb, step);
  }
  // A deleted step's own objects are implied by its line above; list only
  // the rest (dead attempts, leftovers of crashed writes).
  const std::set<int64_t> deleted_steps(report.deleted_steps.begin(),
                                        report.deleted_steps.end());
  for (const std::string& key : report.deleted_objects) {
    if (!deleted_steps.contains(format::StepOfKey(key))) {
      fmt::print("{} {}\n", verb, key);
    }
  }
  fmt::print("{} {} objects ({})\n", verb, report.deleted_objects.size(),
             FormatBytes(report.bytes_freed));
  return Status();
}

struct DeleteArgs {
  std::string root;
  int64_t step = -1;
  bool force = false;
  std::string catalog;
  LeaseArgs lease;
  bool json = false;
};

// The objects under `prefix` before that are gone after.
std::vector<ObjectInfo> Gone(const std::vector<ObjectInfo>& before,
                             const std::vector<ObjectInfo>& after) {
  std::set<std::string_view> left;
  for (const ObjectInfo& o : after) left.insert(o.key);
  std::vector<ObjectInfo> gone;
  for (const ObjectInfo& o : before) {
    if (!left.contains(o.key)) gone.push_back(o);
  }
  return gone;
}

// The bytes `delete --force` of `step` copies: the chunks its dependants
// read from its objects.
Result<uint64_t> BytesToCopy(CheckpointManager& manager, int64_t step,
                             std::vector<std::string>* dependants) {
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, manager.List());
  uint64_t bytes = 0;
  // Every piece of each dependant, in any manifest version.
  ManifestStore store(manager.storage());
  for (const CheckpointInfo& info : infos) {
    if (!std::ranges::count(info.depends_on, step)) continue;
    dependants->push_back(std::to_string(info.step));
    CKPT_ASSIGN_OR_RETURN(std::shared_ptr<const format::Manifest> full,
                          store.Read(info.step));
    const format::Manifest& m = *full;
    for (const format::EntryRecord& e : m.entries) {
      for (const format::PieceRecord& p : e.pieces) {
        for (const format::ChunkRecord& c : p.chunks) {
          if (format::StepOfKey(m.objects[c.object].key) == step) {
            bytes += c.length;
          }
        }
      }
    }
  }
  return bytes;
}

Status RunDelete(const DeleteArgs& args) {
  // On a terminal a bar follows the bytes --force copies (it reads each
  // once).
  const bool draw = args.force && !args.json && ProgressBar::Enabled();
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
                          std::move(progress)));
  if (draw) {
    // Only for the bar: should it fail, Delete says why.
    std::vector<std::string> dependants;
    Result<uint64_t> bytes = BytesToCopy(*manager, args.step, &dependants);
    if (bytes.ok() && *bytes > 0) {
      bar = std::make_unique<ProgressBar>(
          fmt::format("delete step {}: copy into {}", args.step,
                      Join(dependants, ", ")),
          *bytes);
    }
  }
  // Delete reports no objects, so --json lists the step's directory before
  // and after: what went is what it deleted (objects other checkpoints
  // still name stay, and --force writes only into the dependants' own
  // directories).
  Storage& storage = manager->storage();
  const std::string prefix = format::StepDirName(args.step) + "/";
  std::vector<ObjectInfo> before;
  if (args.json) {
    CKPT_ASSIGN_OR_RETURN(before, storage.List(prefix));
  }
  CKPT_RETURN_IF_ERROR(
      manager->Delete(args.step, {.rewrite_dependants = args.force}));
  if (bar) bar->Finish();
  if (!args.json) {
    fmt::print("deleted step {}\n", args.step);
    return Status();
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> after, storage.List(prefix));
  std::vector<std::string> deleted;
  uint64_t bytes = 0;
  for (const ObjectInfo& o : Gone(before, after)) {
    deleted.push_back(o.key);
    bytes += o.size;
  }
  PrintJson({{"deleted_steps", {args.step}},
             {"deleted_objects", deleted},
             {"bytes_freed", bytes}});
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
      "manifests rewritten, so they stop depending on it.",
      "  ckpt delete /data/run42 --step 1200\n"
      "  ckpt delete /data/run42 --step 1000 --force\n"
      "  ckpt delete s3://bucket/run42 --step 1200 --json\n");
  AddRootArg(*sub, args->root);
  sub->add_option("--step", args->step, "the step to delete")
      ->required()
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_flag("--force", args->force,
                "rewrite the checkpoints that depend on it first");
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
      ->check(NonNegativeInteger(INT_MAX));
  sub->add_option("--keep-every-steps", r.keep_every_n_steps,
                  "keep every checkpoint whose step is a multiple of K")
      ->check(NonNegativeInteger(INT64_MAX));
  sub->add_option("--keep-every-seconds", r.keep_every_seconds,
                  "keep the first checkpoint of every window of S seconds")
      ->check(NonNegativeInteger(INT64_MAX));
  CLI::Option* best = sub->add_option("--keep-best", r.keep_best,
                                      "keep the M best checkpoints by --metric")
                          ->check(NonNegativeInteger(INT_MAX));
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
