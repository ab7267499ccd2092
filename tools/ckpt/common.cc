#include "common.h"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "capi/records.h"
#include "format/constants.h"
#include "format/layout.h"
#include "util/names.h"

namespace ckpt::cli {
namespace {

constexpr size_t kHelpWidth = 78;

// Lists subcommands by the first line of their description (the summary);
// the rest of the description is for the subcommand's own --help.
class SummaryFormatter : public CLI::Formatter {
 public:
  std::string make_subcommand(const CLI::App* sub) const override {
    const std::string& description = sub->get_description();
    std::stringstream out;
    CLI::detail::format_help(out, sub->get_name(),
                             description.substr(0, description.find('\n')),
                             get_column_width());
    return out.str();
  }
};

std::string Wrap(std::string_view text, size_t width) {
  std::string out;
  size_t line = 0;
  std::istringstream words{std::string(text)};
  std::string word;
  while (words >> word) {
    if (line > 0 && line + 1 + word.size() > width) {
      out += '\n';
      line = 0;
    } else if (line > 0) {
      out += ' ';
      ++line;
    }
    out += word;
    line += word.size();
  }
  return out;
}

}  // namespace

void UseSummaryFormatter(CLI::App& app) {
  app.formatter(std::make_shared<SummaryFormatter>());
}

CLI::App* AddSubcommand(CLI::App& app, std::string name,
                        std::string_view summary, std::string_view paragraph,
                        std::string_view examples) {
  CLI::App* sub = app.add_subcommand(std::move(name));
  sub->description(std::string(summary) + "\n\n" + Wrap(paragraph, kHelpWidth) +
                   "\n");
  sub->footer("Examples:\n" + std::string(examples));
  return sub;
}

namespace {

Result<std::unique_ptr<Storage>> OpenStorageFor(const std::string& root,
                                                bool create,
                                                ByteProgressFn progress) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                        OpenStorage(root, {.create = create}));
  if (!progress) return storage;
  return NewCountingStorage(std::move(storage), std::move(progress));
}

// A command that changes a root (gc, delete) on a folder that holds no
// checkpoint root (no step folder, lease or LATEST: a mistyped path, a
// home folder) refuses before the manager takes the root's lease, which
// would leave a LEASE file behind in it.
Status RefuseFolderWithoutRoot(Storage& storage, const std::string& root) {
  // By prefix: a large folder is not walked whole.
  for (const std::string_view prefix :
       {format::LeasePrefix(), format::kStepPrefix, format::kLatestName}) {
    CKPT_ASSIGN_OR_RETURN(std::vector<ObjectInfo> listed, storage.List(prefix));
    for (const ObjectInfo& o : listed) {
      if (format::StepOfKey(o.key) >= 0 || format::ParseLeaseKey(o.key) >= 0 ||
          o.key == format::kLatestName) {
        return Status();
      }
    }
  }
  return NotFoundError(Quote(root) +
                       " holds no checkpoint root (no step folder, lease or "
                       "LATEST): nothing changed; is it the root's path?");
}

}  // namespace

Result<std::unique_ptr<CheckpointManager>> OpenRoot(const std::string& root,
                                                    bool create,
                                                    ByteProgressFn progress) {
  Options options;
  options.create = create;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                        OpenStorageFor(root, create, std::move(progress)));
  return CheckpointManager::Open(std::move(storage), std::move(options));
}

Result<std::unique_ptr<CheckpointManager>> OpenRootWithCatalog(
    const std::string& root, bool create, const std::string& catalog_url,
    const LeaseArgs& lease, ByteProgressFn progress, bool dry_run) {
  Options options;
  options.create = create;
  options.lease_wait_seconds = lease.wait_seconds;
  options.break_lease = lease.break_lease;
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Storage> storage,
                        OpenStorageFor(root, create, std::move(progress)));
  if (!create) CKPT_RETURN_IF_ERROR(RefuseFolderWithoutRoot(*storage, root));
  if (dry_run) {
    return CheckpointManager::Open(std::move(storage), std::move(options));
  }
  // A command that only deletes makes no catalog, default or named: one made
  // now would hold no row to mark deleted, and a named one that is not
  // there is a typo, said before anything is deleted.
  Result<std::unique_ptr<Catalog>> catalog =
      OpenCatalog(catalog_url.empty() ? DefaultCatalogUrl() : catalog_url,
                  {.must_exist = !create});
  if (catalog.ok()) {
    options.catalog = std::move(catalog).value();
  } else if (catalog_url.empty() && !create &&
             catalog.status().code() == ErrorCode::kNotFound) {
    // No default catalog yet: no row of this root to mark deleted.
  } else if (catalog_url.empty()) {
    fmt::print(stderr, "ckpt: warning: not recording in the catalog: {}\n",
               catalog.status().ToString());
  } else {
    return catalog.status();
  }
  return CheckpointManager::Open(std::move(storage), std::move(options));
}

void AddLeaseOptions(CLI::App& app, LeaseArgs& lease) {
  app.add_option("--lease-wait", lease.wait_seconds,
                 "seconds to wait for another process's lease on the root "
                 "(a running job's, another command's) to be given back or "
                 "expire; default 0: refuse at once, naming the holder")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_flag("--break-lease", lease.break_lease,
               "take the root's lease even though another process holds "
               "it: only for a holder known dead (its next commit fails)");
}

CLI::Option* AddCatalogOption(CLI::App& app, std::string& url) {
  return app.add_option(
      "--catalog", url,
      "the catalog: a SQLite file (sqlite:///path or a plain path), a "
      "postgresql:// URL, or none (default: $CKPT_CATALOG, else "
      "${XDG_STATE_HOME:-~/.local/state}/ckpt/catalog.sqlite)");
}

namespace {

CLI::Validator IntegerFrom(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || ec != std::errc() || ptr != end || value < min ||
            value > max) {
          return Quote(text) + " is not an integer from " +
                 std::to_string(min) + " to " + std::to_string(max);
        }
        return "";
      },
      // No extra text in the help: it would print as "INT:<text>".
      "");
}

}  // namespace

CLI::Validator NonNegativeInteger(int64_t max) { return IntegerFrom(0, max); }

CLI::Validator PositiveInteger(int64_t max) { return IntegerFrom(1, max); }

CLI::Option* AddRootArg(CLI::App& app, std::string& root) {
  // An empty root (a script's unset variable) is a usage error of every
  // command, as a missing one is, rather than each command's failure to
  // open the URL "". Thrown as a ParseError of its own: CLI11 prefixes a
  // validator's message with the argument's name ("ROOT: the root is
  // empty"), which says nothing more.
  const CLI::Validator not_empty(
      [](std::string& text) -> std::string {
        if (text.empty()) {
          throw CLI::ParseError("the root is empty",
                                CLI::ExitCodes::ValidationError);
        }
        return "";
      },
      "");
  return app
      .add_option("ROOT", root,
                  "where the checkpoints live: a URL (file:///data/run42) or "
                  "a plain path")
      ->required()
      ->check(not_empty);
}

CLI::Option* AddStepOption(CLI::App& app, std::optional<int64_t>& step) {
  return app
      .add_option("--step", step,
                  "the checkpoint's step (default: the newest committed)")
      ->check(NonNegativeInteger(INT64_MAX));
}

CLI::Option* AddJsonFlag(CLI::App& app, bool& json) {
  return app.add_flag("--json", json, "print JSON for scripts");
}

std::string StepLabel(std::optional<int64_t> step) {
  return step ? "step " + std::to_string(*step) : "the newest step";
}

std::string FormatTime(int64_t unix_ms) {
  // Floor division, so times before 1970 still print the right second.
  const std::time_t seconds =
      static_cast<std::time_t>(unix_ms / 1000 - (unix_ms % 1000 < 0 ? 1 : 0));
  std::tm tm{};
  if (gmtime_r(&seconds, &tm) == nullptr) return std::to_string(unix_ms);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  std::vector<std::string> dims;
  for (int64_t d : shape) dims.push_back(std::to_string(d));
  return "[" + Join(dims, ", ") + "]";
}

std::string Count(int64_t n, std::string_view noun) {
  std::string word(noun);
  if (n != 1 && word.ends_with('y')) {
    word.replace(word.size() - 1, 1, "ies");
  } else if (n != 1) {
    word += 's';
  }
  return std::to_string(n) + " " + word;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

namespace {

// Writes `data` in slices of at most kWriteSlice bytes, adding each to
// `done` and telling `progress`, so a progress bar moves during a large
// tensor.
Status WriteAll(int fd, std::string_view data, const std::string& what,
                uint64_t& done, const std::function<void(uint64_t)>& progress) {
  constexpr size_t kWriteSlice = size_t{64} << 20;
  while (!data.empty()) {
    const ssize_t n =
        write(fd, data.data(), std::min(data.size(), kWriteSlice));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "write " + what);
    }
    data.remove_prefix(static_cast<size_t>(n));
    done += static_cast<uint64_t>(n);
    if (progress) progress(done);
  }
  return Status();
}

Status SyncDirectoryOf(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open directory " + Quote(dir.string()));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return ErrnoError(err, "fsync directory " + Quote(dir.string()));
  return Status();
}

}  // namespace

Status WriteFileAtomically(const std::string& path,
                           const std::vector<std::string_view>& parts,
                           bool force,
                           const std::function<void(uint64_t)>& progress) {
  // The named temporary is this process's own, made afresh (O_EXCL): a file
  // of the user's that happens to be named like it is never truncated, and
  // two commands writing one file do not write into one temporary.
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  int fd = open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  const bool unnamed = fd >= 0;
  const std::string what =
      unnamed
          ? "an unnamed file in " + Quote(dir.string()) + " for " + Quote(path)
          : Quote(tmp);
  if (!unnamed) {
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      return ErrnoError(errno, "create the temporary " + Quote(tmp));
    }
  }
  Status status;
  uint64_t done = 0;
  for (std::string_view part : parts) {
    status = WriteAll(fd, part, what, done, progress);
    if (!status.ok()) break;
  }
  if (status.ok() && fsync(fd) != 0) {
    status = ErrnoError(errno, "fsync " + what);
  }
  // The unnamed file gets its name (the temporary's, with force) while
  // still open: through /proc, which needs no privilege (AT_EMPTY_PATH
  // would).
  bool named = !unnamed;
  if (status.ok() && unnamed) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const std::string& name = force ? tmp : path;
    if (linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(),
               AT_SYMLINK_FOLLOW) == 0) {
      named = true;
    } else {
      status = errno == EEXIST && !force
                   ? AlreadyExistsError(Quote(path) +
                                        " exists (use --force to overwrite)")
                   : ErrnoError(errno, "link " + what + " to " + Quote(name));
    }
  }
  if (close(fd) != 0 && status.ok()) {
    status = ErrnoError(errno, "close " + what);
  }
  if (status.ok() && (force || !unnamed)) {
    if (force) {
      if (rename(tmp.c_str(), path.c_str()) != 0) {
        status =
            ErrnoError(errno, "rename " + Quote(tmp) + " to " + Quote(path));
      }
    } else if (link(tmp.c_str(), path.c_str()) != 0) {
      status = errno == EEXIST
                   ? AlreadyExistsError(Quote(path) +
                                        " exists (use --force to overwrite)")
                   : ErrnoError(errno, "link " + what + " to " + Quote(path));
    }
  }
  // What is left of the temporary name (after a link, or a failure) goes;
  // after a rename there is none. An unnamed file never had one.
  if (named && (force || !unnamed) && !(status.ok() && force)) {
    unlink(tmp.c_str());
  }
  CKPT_RETURN_IF_ERROR(status);
  return SyncDirectoryOf(path);
}

nlohmann::json InfoToJson(const CheckpointInfo& info) {
  nlohmann::json j = records::InfoJson(info);
  j["created"] = FormatTime(info.created_unix_ms);
  j["complete"] = info.incomplete.empty();
  return j;
}

void PrintJson(const nlohmann::json& j) {
  fmt::print("{}\n",
             j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

namespace {

// The columns `cell` takes on a terminal: one per character of its UTF-8
// (a continuation byte adds none), so that a name such as "ü" or a root
// with "é" in it does not shift the columns after it.
size_t Columns(std::string_view cell) {
  return std::count_if(cell.begin(), cell.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  });
}

}  // namespace

void PrintTable(const std::vector<std::vector<std::string>>& given) {
  // Cells hold what files and catalogs say (job ids, metric names): never
  // a terminal's control sequence.
  std::vector<std::vector<std::string>> rows = given;
  for (auto& row : rows) {
    for (std::string& cell : row) cell = Printable(cell);
  }
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], Columns(row[i]));
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      // No padding after the last column: no trailing blanks.
      if (i + 1 < row.size()) {
        line.append(widths[i] - Columns(row[i]) + 2, ' ');
      }
    }
    fmt::print("{}\n", line);
  }
}

bool IsInternalEntry(const std::string& name) {
  return IsInternalEntryName(name);
}

size_t HideInternalEntries(CheckpointDescription& d) {
  const size_t before = d.entries.size();
  std::erase_if(d.entries,
                [](const EntryInfo& e) { return IsInternalEntry(e.name); });
  return before - d.entries.size();
}

}  // namespace ckpt::cli
