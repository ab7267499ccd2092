// `ckpt ls` and `ckpt show`: what a root holds, and what one checkpoint holds.

#include <fmt/core.h>

#include <algorithm>
#include <memory>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/tiered.h"
#include "commands.h"
#include "common.h"
#include "format/layout.h"
#include "util/names.h"
#include "util/progress.h"

namespace ckpt::cli {
namespace {

std::string EpochText(int64_t epoch) {
  return epoch < 0 ? "-" : std::to_string(epoch);
}

std::string StepsText(const std::vector<int64_t>& steps) {
  if (steps.empty()) return "-";
  std::vector<std::string> parts;
  for (int64_t s : steps) parts.push_back(std::to_string(s));
  return Join(parts, ",");
}

struct LsArgs {
  std::string root;
  bool json = false;
};

// A node's local tier (docs/tiers.md): every rank's share it holds, by
// rank then step, and whether the tier committed that step.
Status PrintLocalTier(const LsArgs& args,
                      const std::vector<LocalShareInfo>& shares) {
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const LocalShareInfo& s : shares) {
      out.push_back({{"tier", "local"},
                     {"rank", s.rank},
                     {"step", s.step},
                     {"marked", s.marked},
                     {"world_size", s.world_size},
                     {"bytes", s.bytes}});
    }
    PrintJson(out);
    return Status();
  }
  fmt::print("local tier: the shares of {} on this node\n", args.root);
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "STEP", "SIZE", "STATUS"}};
  for (const LocalShareInfo& s : shares) {
    rows.push_back({std::to_string(s.rank), std::to_string(s.step),
                    FormatBytes(s.bytes),
                    s.marked ? "committed by " + Count(s.world_size, "rank")
                             : "NOT COMMITTED (never restored)"});
  }
  PrintTable(rows);
  return Status();
}

Status RunLs(const LsArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto manager, OpenRoot(args.root, /*create=*/false));
  CKPT_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> infos, manager->List());
  if (infos.empty()) {
    // No checkpoint at the top: it may be a node's local tier.
    Result<std::vector<LocalShareInfo>> shares = ListLocalTier(args.root);
    if (shares.ok() && !shares->empty()) return PrintLocalTier(args, *shares);
  }
  if (args.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const CheckpointInfo& info : infos) out.push_back(InfoToJson(info));
    PrintJson(out);
    return Status();
  }
  if (infos.empty()) {
    fmt::print("no committed checkpoints\n");
    return Status();
  }
  std::vector<std::vector<std::string>> rows = {
      {"STEP", "EPOCH", "CREATED (UTC)", "SIZE", "WORLD", "DEPENDS_ON",
       "STATUS"}};
  std::vector<const CheckpointInfo*> incomplete;
  for (const CheckpointInfo& info : infos) {
    rows.push_back({std::to_string(info.step), EpochText(info.epoch),
                    FormatTime(info.created_unix_ms), FormatBytes(info.bytes),
                    std::to_string(info.world_size), StepsText(info.depends_on),
                    info.incomplete.empty() ? "complete" : "INCOMPLETE"});
    if (!info.incomplete.empty()) incomplete.push_back(&info);
  }
  PrintTable(rows);
  // Why a step is marked, and what a resume does about it, so an operator
  // does not have to guess from a log.
  for (const CheckpointInfo* info : incomplete) {
    fmt::print(
        "step {0} is incomplete: {1}; loads and resumes skip it (`ckpt verify "
        "{2} --step {0}` checks it, `ckpt delete {2} --step {0}` removes it)\n",
        info->step, info->incomplete, args.root);
  }
  return Status();
}

struct ShowArgs {
  std::string root;
  std::optional<int64_t> step;
  bool json = false;
  bool all = false;
};

// A metadata entry's value: its JSON, or the raw text if it does not parse.
nlohmann::json MetadataValue(const std::string& text) {
  nlohmann::json value = nlohmann::json::parse(text, nullptr,
                                               /*allow_exceptions=*/false);
  return value.is_discarded() ? nlohmann::json(text) : value;
}

nlohmann::json DescriptionToJson(const CheckpointDescription& d) {
  nlohmann::json entries = nlohmann::json::array();
  for (const EntryInfo& e : d.entries) {
    nlohmann::json j = {{"name", e.name},
                        {"kind", EntryKindName(e.kind)},
                        {"pieces", e.num_pieces},
                        {"bytes", e.bytes},
                        {"digest", e.digest}};
    if (e.owner >= 0) j["rank_local_owner"] = e.owner;
    if (e.kind == EntryKind::kMetadata) {
      j["value"] = MetadataValue(e.json);
    } else {
      j["dtype"] = DTypeName(e.dtype);
      j["shape"] = e.shape;
    }
    entries.push_back(std::move(j));
  }
  nlohmann::json objects = nlohmann::json::array();
  for (const ObjectInfo& o : d.objects) {
    objects.push_back({{"key", o.key}, {"size", o.size}});
  }
  nlohmann::json metadata_objects = nlohmann::json::array();
  for (const ObjectInfo& o : d.metadata_objects) {
    metadata_objects.push_back({{"key", o.key}, {"size", o.size}});
  }
  return {{"info", InfoToJson(d.info)},
          {"entries", std::move(entries)},
          {"objects", std::move(objects)},
          {"metadata_objects", std::move(metadata_objects)}};
}

// The ranks' hosts: each rank's for a few ranks; for many, how many hosts
// and the first of them (`--json` lists every rank's).
std::string HostsText(const std::vector<std::string>& hosts) {
  constexpr size_t kListed = 8;
  if (hosts.size() <= kListed) return Join(hosts, ", ");
  std::vector<std::string> distinct;
  std::set<std::string_view> seen;
  for (const std::string& h : hosts) {
    if (seen.insert(h).second) distinct.push_back(h);
  }
  std::vector<std::string> first(
      distinct.begin(),
      distinct.begin() + std::min(distinct.size(), kListed / 2));
  return std::to_string(distinct.size()) + " hosts: " + Join(first, ", ") +
         (distinct.size() > first.size() ? ", ..." : "");
}

// The save's durations and each rank's write and wait, naming the slowest
// writer (for many ranks only the slowest few are listed; --json has all
// that the commit record holds).
void PrintTiming(const SaveTiming& t) {
  if (!t.recorded) {
    fmt::print("save time   not recorded\n");
    return;
  }
  fmt::print("save time   {} ms (commit {} ms), caller stalled {} ms{}\n",
             t.save_ms, t.commit_ms, t.stall_ms,
             t.async ? " (asynchronous)" : "");
  if (t.ranks.empty()) return;
  std::vector<RankSaveTiming> ranks = t.ranks;
  std::stable_sort(
      ranks.begin(), ranks.end(),
      [](const auto& a, const auto& b) { return a.write_ms > b.write_ms; });
  const RankSaveTiming& slowest = ranks.front();
  fmt::print("slowest     rank {}: write {} ms, wait {} ms\n", slowest.rank,
             slowest.write_ms, slowest.wait_ms);
  constexpr size_t kListed = 8;
  for (size_t i = 0; i < ranks.size() && i < kListed; ++i) {
    fmt::print("rank {:<6} write {} ms, wait {} ms\n", ranks[i].rank,
               ranks[i].write_ms, ranks[i].wait_ms);
  }
  if (ranks.size() > kListed) {
    fmt::print("            ... {} more ranks (--json lists them)\n",
               ranks.size() - kListed);
  }
}

void PrintDescription(const CheckpointDescription& d, size_t hidden) {
  const CheckpointInfo& info = d.info;
  fmt::print("step        {}\n", info.step);
  fmt::print("epoch       {}\n", EpochText(info.epoch));
  fmt::print("created     {}\n", FormatTime(info.created_unix_ms));
  // What the manifest says, which anyone who can write the root wrote:
  // never a terminal's control sequence.
  fmt::print("job         {}\n", Printable(info.job_id));
  fmt::print("world size  {} ({})\n", info.world_size,
             Printable(HostsText(info.hosts)));
  // info.bytes are what this step wrote: count its own objects, not those
  // of the earlier steps it references (the next line's).
  const size_t own = std::count_if(
      d.objects.begin(), d.objects.end(), [&](const ObjectInfo& o) {
        int64_t step = -1;
        return format::SplitStepKey(o.key, &step, nullptr) && step == info.step;
      });
  fmt::print("bytes       {} in {}\n", FormatBytes(info.bytes),
             Count(own, "object"));
  fmt::print("depends on  {}\n", StepsText(info.depends_on));
  if (!info.depends_on.empty()) {
    fmt::print(
        "references  {} of earlier checkpoints (incremental, {} in a "
        "row after step {})\n",
        FormatBytes(info.referenced_bytes), info.chain, info.parent);
  }
  PrintTiming(info.timing);
  for (const auto& [name, value] : info.metrics) {
    fmt::print("metric      {} = {}\n", Printable(name), value);
  }
  for (const auto& [key, value] : info.metadata) {
    fmt::print("metadata    {} = {}\n", Printable(key), Printable(value));
  }
  fmt::print("\n");
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "KIND", "DTYPE", "SHAPE", "PIECES", "BYTES"}};
  for (const EntryInfo& e : d.entries) {
    const bool data = e.kind != EntryKind::kMetadata;
    // A rank-local entry appears once per rank, named with its rank.
    rows.push_back({e.owner >= 0 ? RankLocalName(e.name, e.owner) : e.name,
                    std::string(EntryKindName(e.kind)),
                    data ? std::string(DTypeName(e.dtype)) : "-",
                    data ? FormatShape(e.shape) : "-",
                    std::to_string(e.num_pieces), FormatBytes(e.bytes)});
  }
  PrintTable(rows);
  if (hidden > 0) {
    fmt::print(
        "({} internal {} of the Python package hidden: --all shows {})\n",
        hidden, hidden == 1 ? "entry" : "entries", hidden == 1 ? "it" : "them");
  }
  for (const EntryInfo& e : d.entries) {
    if (e.kind == EntryKind::kMetadata) {
      fmt::print("\n{} = {}\n", e.name, e.json);
    }
  }
}

Status RunShow(const ShowArgs& args) {
  CKPT_ASSIGN_OR_RETURN(auto manager, OpenRoot(args.root, /*create=*/false));
  CKPT_ASSIGN_OR_RETURN(CheckpointDescription d, manager->Describe(args.step));
  const size_t hidden = args.all ? 0 : HideInternalEntries(d);
  if (args.json) {
    // What the text's "(N internal entries hidden)" line says.
    nlohmann::json j = DescriptionToJson(d);
    j["hidden_internal_entries"] = hidden;
    PrintJson(j);
  } else {
    PrintDescription(d, hidden);
  }
  return Status();
}

}  // namespace

void AddLsCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<LsArgs>();
  CLI::App* sub = AddSubcommand(
      app, "ls", "List the committed checkpoints.",
      "List the committed checkpoints under ROOT, oldest first: step, epoch, "
      "creation time (UTC), bytes written, world size and the earlier steps "
      "an incremental checkpoint depends on, and whether it is complete: "
      "a step whose manifest names a data object that is missing or has "
      "another size (seen in one listing, no data read) is marked "
      "INCOMPLETE, and loads and resumes skip it. A step directory without "
      "a valid manifest is not a checkpoint and is not listed (`ckpt verify "
      "--all` reports damaged ones). A node's local tier (docs/tiers.md) "
      "lists the shares it holds: rank, step, size and whether the tier "
      "committed the step.",
      "  ckpt ls /data/run42\n"
      "  ckpt ls file:///data/run42 --json\n"
      "  ckpt ls /dev/shm/run42            (a node's local tier)\n");
  AddRootArg(*sub, args->root);
  AddJsonFlag(*sub, args->json);
  sub->callback([args, &selected] {
    selected = {"ls", [args] { return RunLs(*args); }};
  });
}

void AddShowCommand(CLI::App& app, Command& selected) {
  auto args = std::make_shared<ShowArgs>();
  CLI::App* sub = AddSubcommand(
      app, "show", "Show one checkpoint's entries and metadata.",
      "Show one checkpoint: its step, epoch, time, job, ranks, metrics and "
      "user metadata, then every entry with its kind (tensor, blob or "
      "metadata), dtype, global shape, number of pieces and bytes, and the "
      "values of its metadata entries. Entries a binding keeps for itself "
      "(named __NAME__, such as the Python package's __python_tree__) are "
      "left out, text and --json alike, unless --all is given.",
      "  ckpt show /data/run42\n"
      "  ckpt show /data/run42 --step 1200 --json\n"
      "  ckpt show /data/run42 --all\n");
  AddRootArg(*sub, args->root);
  AddStepOption(*sub, args->step);
  AddJsonFlag(*sub, args->json);
  sub->add_flag("--all", args->all,
                "Also show the entries a binding keeps for itself (__NAME__)");
  sub->callback([args, &selected] {
    selected = {"show", [args] { return RunShow(*args); }};
  });
}

}  // namespace ckpt::cli
