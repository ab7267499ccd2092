// `ckpt diff`: which entries two checkpoints of one root do not share.

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "ckpt/checkpoint_manager.h"
#include "commands.h"
#include "common.h"
#include "util/names.h"

namespace ckpt::cli {
namespace {

struct DiffArgs {
  std::string root;
  std::vector<int64_t> steps;  // exactly two
  bool json = false;
  bool all = false;
};

struct Change {
  std::string name;
  std::string why;
};

Result<std::span<const std::byte>> EntryBytes(const State& state,
                                              const std::string& name) {
  const Entry* e = state.Find(name);
  if (e == nullptr)
    return NotFoundError("entry " + Quote(name) + " was not loaded");
  CKPT_ASSIGN_OR_RETURN(uint64_t size, e->tensor.ByteSize());
  return std::span<const std::byte>(e->tensor.data, size);
}

// Whether the bytes of entry `name` differ between the two steps. Digests
// cover chunk checksums, so they also differ when only the chunk size did;
// the bytes decide.
Result<bool> ContentsDiffer(CheckpointManager& manager, int64_t a, int64_t b,
                            const std::string& name) {
  CKPT_ASSIGN_OR_RETURN(LoadedCheckpoint la, manager.LoadAll(a, {name}));
  CKPT_ASSIGN_OR_RETURN(LoadedCheckpoint lb, manager.LoadAll(b, {name}));
  CKPT_ASSIGN_OR_RETURN(std::span<const std::byte> ba,
                        EntryBytes(la.state, name));
  CKPT_ASSIGN_OR_RETURN(std::span<const std::byte> bb,
                        EntryBytes(lb.state, name));
  return !std::equal(ba.begin(), ba.end(), bb.begin(), bb.end());
}

bool SameJson(const std::string& a, const std::string& b) {
  const auto ja = nlohmann::json::parse(a, nullptr, false);
  const auto jb = nlohmann::json::parse(b, nullptr, false);
  if (ja.is_discarded() || jb.is_discarded()) return a == b;
  return ja == jb;
}

// What differs between two entries of one name; empty if nothing does.
Result<std::string> WhyChanged(CheckpointManager& manager, int64_t a, int64_t b,
                               const EntryInfo& ea, const EntryInfo& eb) {
  if (ea.kind != eb.kind) {
    return fmt::format("kind {} -> {}", EntryKindName(ea.kind),
                       EntryKindName(eb.kind));
  }
  if (ea.kind == EntryKind::kMetadata) {
    return std::string(SameJson(ea.json, eb.json) ? "" : "value");
  }
  std::vector<std::string> why;
  if (ea.dtype != eb.dtype) {
    why.push_back(fmt::format("dtype {} -> {}", DTypeName(ea.dtype),
                              DTypeName(eb.dtype)));
  }
  if (ea.shape != eb.shape) {
    why.push_back(fmt::format("shape {} -> {}", FormatShape(ea.shape),
                              FormatShape(eb.shape)));
  }
  if (why.empty() && ea.bytes != eb.bytes) {
    why.push_back(fmt::format("bytes {} -> {}", ea.bytes, eb.bytes));
  }
  if (why.empty() && ea.digest != eb.digest) {
    CKPT_ASSIGN_OR_RETURN(bool differ, ContentsDiffer(manager, a, b, ea.name));
    if (differ) why.push_back("contents");
  }
  return Join(why, ", ");
}

Status RunDiff(const DiffArgs& args) {
  const int64_t a = args.steps[0];
  const int64_t b = args.steps[1];
  CKPT_ASSIGN_OR_RETURN(auto manager, OpenRoot(args.root, /*create=*/false));
  CKPT_ASSIGN_OR_RETURN(CheckpointDescription da, manager->Describe(a));
  CKPT_ASSIGN_OR_RETURN(CheckpointDescription db, manager->Describe(b));
  std::map<std::string, const EntryInfo*> in_a;
  std::map<std::string, const EntryInfo*> in_b;
  for (const EntryInfo& e : da.entries) in_a[e.name] = &e;
  for (const EntryInfo& e : db.entries) in_b[e.name] = &e;

  std::vector<std::string> added;
  std::vector<std::string> removed;
  std::vector<Change> changed;
  for (const auto& [name, eb] : in_b) {
    if (!in_a.contains(name)) added.push_back(name);
  }
  for (const auto& [name, ea] : in_a) {
    auto it = in_b.find(name);
    if (it == in_b.end()) {
      removed.push_back(name);
      continue;
    }
    CKPT_ASSIGN_OR_RETURN(std::string why,
                          WhyChanged(*manager, a, b, *ea, *it->second));
    if (!why.empty()) changed.push_back({name, std::move(why)});
  }

  // The bindings' own entries (IsInternalEntry) differ where the user's
  // containers do: listed with --all, else only said to differ.
  size_t internal = 0;
  if (!args.all) {
    const auto hide = [&](auto& list, auto name_of) {
      const size_t before = list.size();
      std::erase_if(list,
                    [&](const auto& x) { return IsInternalEntry(name_of(x)); });
      internal += before - list.size();
    };
    const auto itself = [](const std::string& n) { return n; };
    hide(added, itself);
    hide(removed, itself);
    hide(changed, [](const Change& c) { return c.name; });
  }
  if (args.json) {
    nlohmann::json out = {{"added", added},
                          {"removed", removed},
                          {"changed", nlohmann::json::array()}};
    for (const Change& c : changed) {
      out["changed"].push_back({{"name", c.name}, {"why", c.why}});
    }
    // Always there, so that a script reads one shape: 0 when none differ.
    out["internal_entries_differing"] = internal;
    PrintJson(out);
    return Status();
  }
  for (const std::string& name : added) fmt::print("+ {}\n", name);
  for (const std::string& name : removed) fmt::print("- {}\n", name);
  for (const Change& c : changed) fmt::print("~ {} ({})\n", c.name, c.why);
  // Said, not left blank: an empty answer reads as a command that did
  // nothing (a wrong root, a step it did not find).
  if (internal > 0) {
    fmt::print(
        "({} internal {} of the Python package differ{} as well: the "
        "containers' structure; --all lists {})\n",
        internal, internal == 1 ? "entry" : "entries", internal == 1 ? "s" : "",
        internal == 1 ? "it" : "them");
  } else if (added.empty() && removed.empty() && changed.empty()) {
    fmt::print("no differences: steps {} and {} hold the same {} {}\n", a, b,
               in_a.size(), in_a.size() == 1 ? "entry" : "entries");
  }
  return Status();
}

}  // namespace

void AddDiffCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* sub = AddSubcommand(
      app, "diff", "Compare the entries of two checkpoints.",
      "Compare two checkpoints of one root, entry by entry: \"+ NAME\" is an "
      "entry only the second step has, \"- NAME\" one only the first has, "
      "and \"~ NAME (why)\" one whose kind, dtype, shape, size, contents or "
      "(for metadata) value differs. Contents are compared by checksums and, "
      "where those differ, by the bytes themselves. Checkpoints that do not "
      "differ print \"no differences: ...\" (with --json, three empty "
      "lists and internal_entries_differing 0). Entries a binding keeps for "
      "itself (named __NAME__, such as "
      "the Python package's __python_tree__) are only said to differ, "
      "unless --all. Exits with status 0 whether or not the checkpoints "
      "differ.",
      "  ckpt diff /data/run42 --step 1000 --step 1200\n"
      "  ckpt diff /data/run42 --step 1000 1200 --json\n");
  AddRootArg(*sub, args->root);
  // Any number of steps is taken, and the count checked below: CLI11's own
  // words for a wrong count ("--step is required", "At least 2 required")
  // do not say that diff compares two steps, nor how to give them. The
  // help still says two are required.
  sub->add_option("--step", args->steps,
                  "the two steps: --step A --step B, or --step A B")
      ->expected(1, CLI::detail::expected_max_vector_size)
      ->option_text("INT x 2 REQUIRED")
      ->check(NonNegativeInteger(INT64_MAX));
  AddJsonFlag(*sub, args->json);
  sub->add_flag("--all", args->all,
                "list the bindings' internal entries (such as the Python "
                "package's __python_tree__) too");
  sub->callback([args, &selected] {
    // A usage error (exit 2), as a missing argument is.
    if (const size_t n = args->steps.size(); n != 2) {
      throw CLI::ValidationError(
          std::string("two steps are required") +
          (n == 0   ? ""
           : n == 1 ? ", one was given"
                    : ", " + std::to_string(n) + " were given") +
          ": ckpt diff ROOT --step A --step B");
    }
    selected = {"diff", [args] { return RunDiff(*args); }};
  });
}

}  // namespace ckpt::cli
