// Helpers shared by the `ckpt` subcommands: opening a root, the common
// options, and formatting for people (tables, times, shapes) and for
// scripts (JSON).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "counting_storage.h"

namespace ckpt::cli {

// Opens the checkpoints under `root` (a URL or a plain path). Read-only
// commands pass create = false, so a mistyped root is an error and not a new
// empty folder. With `progress`, the manager's storage reports the bytes it
// reads and writes to it (counting_storage.h).
Result<std::unique_ptr<CheckpointManager>> OpenRoot(
    const std::string& root, bool create, ByteProgressFn progress = {});
// OpenRoot for commands that commit or delete checkpoints: the catalog at
// `catalog_url` (empty: DefaultCatalogUrl()) records what they do. A default
// catalog that cannot be opened is only a warning (storage holds the work;
// `ckpt catalog sync` catches the catalog up); one the user named is an
// error. The root is opened (and a folder without one refused) before the
// catalog, so a command that fails there creates no catalog. A command
// that only deletes (`create` false) makes no catalog (one made now would
// hold no row to mark deleted): it uses the default catalog only where it
// exists already, and a named one that does not exist is an error naming
// it; a `dry_run` opens none at all (it records nothing).
// How a command that writes takes the root's lease (docs/concurrency.md).
struct LeaseArgs {
  double wait_seconds = 0;   // --lease-wait: 0 refuses at once
  bool break_lease = false;  // --break-lease
};
Result<std::unique_ptr<CheckpointManager>> OpenRootWithCatalog(
    const std::string& root, bool create, const std::string& catalog_url,
    const LeaseArgs& lease, ByteProgressFn progress = {}, bool dry_run = false);
// Adds --catalog URL (empty: the default catalog).
CLI::Option* AddCatalogOption(CLI::App& app, std::string& url);
// Adds --lease-wait SECONDS and --break-lease.
void AddLeaseOptions(CLI::App& app, LeaseArgs& lease);

// Accepts a decimal integer in [0, max] and nothing else. CLI11's own
// integer conversion silently clamps values that overflow, and a checkpoint
// step must never be silently replaced by another one.
CLI::Validator NonNegativeInteger(int64_t max);
// From 1 to max: a count where 0 would mean nothing (a rule keeping no
// checkpoint would turn itself off, silently).
CLI::Validator PositiveInteger(int64_t max);

// Makes `app`'s help list each subcommand by its summary alone; each
// subcommand's own --help shows the summary, a paragraph and examples.
// Call before adding subcommands (they copy the parent's formatter).
void UseSummaryFormatter(CLI::App& app);

// Adds subcommand `name`. Its --help shows `summary`, then `paragraph`
// wrapped to the terminal's usual width, then `examples` (one per line).
CLI::App* AddSubcommand(CLI::App& app, std::string name,
                        std::string_view summary, std::string_view paragraph,
                        std::string_view examples);

// The options most commands share.
CLI::Option* AddRootArg(CLI::App& app, std::string& root);
CLI::Option* AddStepOption(CLI::App& app, std::optional<int64_t>& step);
CLI::Option* AddJsonFlag(CLI::App& app, bool& json);

// "step 42", or "the newest step" for nullopt.
std::string StepLabel(std::optional<int64_t> step);
// UTC ISO-8601 with seconds: "2024-05-01T12:34:56Z".
std::string FormatTime(int64_t unix_ms);
// "[2, 3]"; a 0-d tensor is "[]".
std::string FormatShape(const std::vector<int64_t>& shape);
// "1 round", "2 rounds", "2 entries": `n` and `noun`, plural unless n is
// 1.
std::string Count(int64_t n, std::string_view noun);
// "a, b, c".
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

// Writes `parts` to the local file `path` so that a reader sees either no
// file or the whole one, and a command killed on the way (Ctrl-C, a full
// disk's SIGXFSZ) leaves nothing behind: into a file with no name in
// `path`'s folder (O_TMPFILE), fsynced, then given its name. Without
// `force` the naming is linkat(2), which fails if `path` appeared in the
// meantime rather than replacing it (AlreadyExists, naming --force); with
// `force` the file is named beside it first and renamed over it. A file
// system without O_TMPFILE gets a named temporary beside `path` instead
// (removed on failure, not on a kill). `progress`, if given, is told the
// bytes written so far.
Status WriteFileAtomically(
    const std::string& path, const std::vector<std::string_view>& parts,
    bool force, const std::function<void(uint64_t done)>& progress = {});

// Every field of a CheckpointInfo, plus the creation time as text.
nlohmann::json InfoToJson(const CheckpointInfo& info);
// Indented JSON on stdout. Names and metadata come from files and may be
// invalid UTF-8; such bytes are replaced rather than failing the output.
void PrintJson(const nlohmann::json& j);

// Prints rows as left-aligned columns on stdout; the first row is the
// heading.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

// An entry a binding keeps for itself, named __NAME__ (the Python
// package's __python_tree__, which rebuilds its nested containers): not
// the user's state, so `show` and `diff` list it only with --all.
bool IsInternalEntry(const std::string& name);

// `d` without the internal entries; how many it had.
size_t HideInternalEntries(CheckpointDescription& d);

}  // namespace ckpt::cli
