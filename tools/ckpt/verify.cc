// `ckpt verify`: re-read every byte of one checkpoint, or of all of them, and
// check every checksum.

#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"
#include "format/constants.h"
#include "format/layout.h"
#include "util/names.h"
#include "util/progress.h"

namespace ckpt::cli {
namespace {

struct VerifyArgs {
  std::string root;
  std::optional<int64_t> step;
  bool all = false;
  bool json = false;
};

// The steps whose directory holds a manifest object, whether or not it loads:
// List() skips damaged manifests, and `verify --all` must not.
Result<std::set<int64_t>> StepsWithManifest(Storage& storage) {
  CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> objects,
                        storage.List(format::kStepPrefix));
  std::set<int64_t> steps;
  for (const ObjectInfo& o : objects) {
    // Anything else under "step-" is not a step directory ckpt wrote.
    int64_t step = -1;
    std::string_view file;
    if (format::SplitStepKey(o.key, &step, &file) &&
        file == format::kManifestName) {
      steps.insert(step);
    }
  }
  return steps;
}

// Whether `step` has lost its manifest since verify listed it: deleted
// meanwhile (the retention of a job saving beside verify, gc, `ckpt
// delete`), so no longer part of the root, and what verify met reading it
// is no damage.
bool DeletedSince(CheckpointManager& manager, int64_t step) {
  Result<ObjectInfo> info = manager.storage().Stat(format::ManifestKey(step));
  return !info.ok() && info.status().code() == ErrorCode::kNotFound;
}

// Runs Verify with a progress bar. The bar is made on the first report,
// when the total is known; the lock keeps the bar whole should the manager
// report from several threads.
Result<VerifyReport> VerifyWithProgress(CheckpointManager& manager,
                                        int64_t step) {
  std::mutex mu;
  std::unique_ptr<ProgressBar> bar;
  Result<VerifyReport> report =
      manager.Verify(step, [&](uint64_t done, uint64_t total) {
        std::lock_guard<std::mutex> lock(mu);
        if (!bar) {
          bar = std::make_unique<ProgressBar>(
              "verify step " + std::to_string(step), total);
        }
        bar->Update(done);
      });
  if (bar && report.ok()) bar->Finish();
  return report;
}

// What a resume would meet: every step newer than the one it would load
// (a resume tries them first and skips them, so each is a problem, named
// with why it is skipped), then the one it would load, verified whole.
// `deleted`: a step it found a problem in was deleted meanwhile, and the
// steps must be listed again (the reports are then of no use).
Result<std::vector<VerifyReport>> VerifyResumePointOnce(
    CheckpointManager& manager, const std::string& root, bool& deleted) {
  CKPT_ASSIGN_OR_RETURN(std::set<int64_t> steps,
                        StepsWithManifest(manager.storage()));
  CKPT_ASSIGN_OR_RETURN(std::optional<int64_t> latest, manager.Latest());
  if (steps.empty() && !latest) {
    return NotFoundError("no committed checkpoint under " + Quote(root));
  }
  // Why List() judges a step incomplete (a missing or resized object).
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, manager.List());
  std::map<int64_t, std::string> incomplete;
  for (const CheckpointInfo& info : infos) {
    if (!info.incomplete.empty()) incomplete[info.step] = info.incomplete;
  }
  const std::string resumed =
      latest ? "a resume skips it and loads step " + std::to_string(*latest)
             : "a resume finds no checkpoint to load";
  // Newest first: each step newer than the one Latest() names is a problem
  // unless it verifies (committed after Latest() looked); that step passed
  // the listing's checks only (its manifest, its objects' sizes), so a
  // damaged chunk or index makes a resume skip it too, for the next older
  // one, and so on until one verifies.
  std::vector<VerifyReport> reports;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const int64_t step = *it;
    const bool newer = !latest || step > *latest;
    std::string why;
    bool stops = false;  // a resume stops at this step with its error
    if (newer) {
      if (Result<CheckpointDescription> d = manager.Describe(step); !d.ok()) {
        why = "manifest does not load: " + d.status().ToString();
      } else if (auto found = incomplete.find(step);
                 found != incomplete.end()) {
        why = "incomplete: " + found->second;
      }
    }
    if (why.empty()) {
      Result<VerifyReport> report = VerifyWithProgress(manager, step);
      if (report.ok() && report->ok()) {
        reports.push_back(std::move(*report));
        if (newer) continue;
        break;
      }
      why = report.ok() ? Join(report->problems, "; ")
                        : report.status().ToString();
      if (report.ok() && report->header_only) {
        // A load reads no header: a resume loads this step all the same,
        // and the older steps are not what it meets.
        report->problems = {why +
                            " (a resume loads this step all the same: a load "
                            "reads the chunks at the manifest's offsets and "
                            "their checksums hold; other safetensors readers "
                            "may not open the object)"};
        reports.push_back(std::move(*report));
        break;
      }
      stops = !newer && (report.ok() ? report->unreadable
                                     : !ResumeSkips(report.status()));
    }
    if (DeletedSince(manager, step)) {
      deleted = true;
      return reports;
    }
    reports.push_back(
        {.step = step,
         .problems = {why + (newer ? " (newer than the step a resume loads; " +
                                         resumed + ")"
                             : stops
                                 ? " (a resume fails at it with this error "
                                   "rather than skip it: not damage)"
                                 : " (a resume skips it for an older step)")},
         .unreadable = stops});
    if (stops) break;
  }
  // Oldest first, as --all prints them.
  std::reverse(reports.begin(), reports.end());
  return reports;
}

Result<std::vector<VerifyReport>> VerifyResumePoint(CheckpointManager& manager,
                                                    const std::string& root) {
  for (int listed = 0;; ++listed) {
    bool deleted = false;
    CKPT_ASSIGN_OR_RETURN(std::vector<VerifyReport> reports,
                          VerifyResumePointOnce(manager, root, deleted));
    if (!deleted) return reports;
    if (listed == kResumeMostRelistings) {
      return AbortedError(
          "verify " + Quote(root) + ": steps were deleted while verify read " +
          "them, " + std::to_string(listed + 1) +
          " times (a job saving with retention beside it?); run it again, " +
          "or verify one step with --step");
    }
  }
}

Status RunVerify(const VerifyArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto manager, OpenRoot(args.root, /*create=*/false));
  std::vector<VerifyReport> reports;
  if (args.all) {
    CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, manager->List());
    CKPT_ASSIGN_OR_RETURN(std::set<int64_t> steps,
                          StepsWithManifest(manager->storage()));
    std::set<int64_t> listed;
    for (const CheckpointInfo& info : infos) listed.insert(info.step);
    steps.insert(listed.begin(), listed.end());
    for (int64_t step : steps) {
      if (!listed.contains(step)) {
        // List() skipped this manifest; Describe says what is wrong with it
        // (or it was committed after List() ran, and is verified below).
        Result<CheckpointDescription> d = manager->Describe(step);
        if (!d.ok() && DeletedSince(*manager, step)) continue;
        if (!d.ok()) {
          reports.push_back({.step = step,
                             .problems = {"manifest does not load: " +
                                          d.status().ToString()}});
          continue;
        }
      }
      Result<VerifyReport> report = VerifyWithProgress(*manager, step);
      // Gone since the listing: no longer a step of the root.
      if (!(report.ok() && report->ok()) && DeletedSince(*manager, step)) {
        continue;
      }
      if (report.ok()) {
        reports.push_back(std::move(*report));
      } else {
        reports.push_back({.step = step,
                           .problems = {report.status().ToString()},
                           .unreadable = !ResumeSkips(report.status())});
      }
    }
  } else if (args.step) {
    CKPT_ASSIGN_OR_RETURN(VerifyReport report,
                          VerifyWithProgress(*manager, *args.step));
    if (!report.ok() && DeletedSince(*manager, *args.step)) {
      return NotFoundError("verify step " + std::to_string(*args.step) +
                           " of " + Quote(args.root) +
                           ": the step was deleted while verify read it");
    }
    reports.push_back(std::move(report));
  } else {
    CKPT_ASSIGN_OR_RETURN(reports, VerifyResumePoint(*manager, args.root));
  }

  size_t problems = 0;
  size_t damaged = 0;
  bool unreadable = false;
  nlohmann::json out = nlohmann::json::array();
  for (const VerifyReport& r : reports) {
    problems += r.problems.size();
    if (!r.ok()) ++damaged;
    unreadable |= r.unreadable;
    if (args.json) {
      out.push_back({{"step", r.step},
                     {"ok", r.ok()},
                     {"chunks_checked", r.chunks_checked},
                     {"bytes_checked", r.bytes_checked},
                     {"problems", r.problems},
                     {"unreadable", r.unreadable},
                     {"header_only", r.header_only}});
    } else if (r.ok()) {
      fmt::print("ok: step {}, {}, {}\n", r.step,
                 Count(static_cast<int64_t>(r.chunks_checked), "chunk"),
                 Count(static_cast<int64_t>(r.bytes_checked), "byte"));
    } else {
      for (const std::string& p : r.problems) {
        fmt::print(stderr, "ckpt verify: step {}: {}\n", r.step, p);
      }
      // Without --step or --all the problem says so already.
      if (r.header_only && (args.all || args.step)) {
        fmt::print(stderr,
                   "ckpt verify: step {}: every problem lies in data files' "
                   "safetensors headers, which a load does not read: the "
                   "step still loads bit for bit\n",
                   r.step);
      }
    }
  }
  if (args.json) PrintJson(out);
  if (args.all && reports.empty() && !args.json) {
    fmt::print("no checkpoints under {}\n", args.root);
  }
  if (problems > 0) {
    // Damage, unless some step could not be read at all (no permission,
    // an I/O error): that is no damage, and its error is what a load gets.
    const std::string what = std::to_string(problems) + " problem(s) in " +
                             std::to_string(damaged) + " of " +
                             std::to_string(reports.size()) + " checkpoint(s)";
    return unreadable ? IOError(what +
                                ", not all of them damage: some "
                                "could not be read")
                      : DataLossError(what);
  }
  return Status();
}

}  // namespace

void AddVerifyCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* sub = AddSubcommand(
      app, "verify", "Re-read a checkpoint and check every checksum.",
      "Re-read every byte of a checkpoint (the one a resume would load, the "
      "one given by --step, or with --all every step that has a manifest) "
      "and check each chunk's xxh3-128 checksum and each data file's "
      "safetensors header. Without --step or --all, every step newer than "
      "the one a resume would load is a problem too (a manifest that does "
      "not load, a missing object): a resume skips it; so is a damaged "
      "step a resume would load, and then the older one it falls back to "
      "is verified. Damage in data files' safetensors headers alone is a "
      "problem too, but a resume loads that step all the same (a load reads "
      "no header), and verify says so. A step that cannot be read (no "
      "permission, an I/O "
      "error) is no damage: a resume stops there with that error, and "
      "verify says so (status IOError). Prints one \"ok\" "
      "line per sound checkpoint; prints every problem, naming the step, the "
      "object and the entry, and exits with status 1 if there is any. With "
      "--all a manifest that does not load is a problem too.",
      "  ckpt verify /data/run42\n"
      "  ckpt verify /data/run42 --step 1200\n"
      "  ckpt verify s3://bucket/run42 --all --json\n");
  AddRootArg(*sub, args->root);
  CLI::Option* step = AddStepOption(*sub, args->step);
  sub->add_flag("--all", args->all,
                "every step with a manifest, including damaged ones")
      ->excludes(step);
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {"verify", [args] { return RunVerify(*args); }};
  });
}

}  // namespace ckpt::cli
