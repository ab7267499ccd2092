// Runs the built `ckpt` binary as a user would, on roots made with the C++
// API, and checks its exit codes, its output and what it leaves on disk.

#include <fcntl.h>
#include <pty.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/tiered.h"
#include "format/layout.h"
#include "format/safetensors.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"
#include "util/bytes.h"
#include "util/progress.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::ReadFile;
using testing::RunResult;
using testing::WriteFile;

// The 8-byte little-endian header length, the header, the data: a
// safetensors file built by hand, with no help from the code under test.
std::string RawSafetensors(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  EncodeU64LE(header.size(), out.data());
  out += header;
  out += data;
  return out;
}

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A valid file holding `tensors` back to back in the given order.
std::string BuildSafetensors(const std::vector<RawTensor>& tensors,
                             const std::map<std::string, std::string>& meta) {
  nlohmann::json header = nlohmann::json::object();
  if (!meta.empty()) header["__metadata__"] = meta;
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {
        {"dtype", t.dtype},
        {"shape", t.shape},
        {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  return RawSafetensors(header.dump(), data);
}

std::string Bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(seed * 31 + i * 7);
  return s;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // import and gc record in the default catalog; these tests leave the
    // user's alone (catalog_cli_test covers the catalog).
    setenv("CKPT_CATALOG", "none", 1);
  }

  RunResult RunProgram(const std::string& program,
                       const std::vector<std::string>& args) {
    return testing::RunProgram(program, args, dir_);
  }

  RunResult Ckpt(const std::vector<std::string>& args) {
    return RunProgram(CKPT_CLI_PATH, args);
  }

  // The independent reader's JSON for `file`, or its stderr on failure.
  RunResult PyRead(const fs::path& file) {
    return RunProgram("/usr/bin/python3", {std::string(CKPT_SOURCE_DIR) +
                                               "/tests/safetensors_read.py",
                                           file.string()});
  }

  std::string Path(std::string_view name) const {
    return (dir_ / name).string();
  }

  std::unique_ptr<CheckpointManager> OpenManager(const std::string& root,
                                                 uint64_t chunk_size = 0) {
    Options options;
    if (chunk_size > 0) options.chunk_size = chunk_size;
    auto manager = CheckpointManager::Open(root, std::move(options));
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    return manager.ok() ? std::move(*manager) : nullptr;
  }

  // Saves `steps` under root_, each with a tensor, a 0-d tensor, a blob and
  // a metadata entry whose contents depend on the step.
  void SaveSteps(const std::vector<int64_t>& steps) {
    auto manager = OpenManager(root_);
    ASSERT_NE(manager, nullptr);
    for (int64_t step : steps) {
      std::vector<float> weights(6);
      for (size_t i = 0; i < weights.size(); ++i) weights[i] = step + i * 0.5f;
      int64_t count = step * 100;
      State state;
      state.AddTensor("weights", View(std::span<float>(weights), {2, 3}))
          .AddTensor("step_count", View(std::span<int64_t>(&count, 1), {}))
          .AddBlob("rng", "rng-" + std::to_string(step))
          .AddMetadata("config", {{"lr", "0.1"}});
      SaveOptions options;
      options.epoch = step / 10;
      options.metrics["loss"] = 1.0 / static_cast<double>(step + 1);
      options.metadata["note"] = "step " + std::to_string(step);
      auto saved = manager->Save(step, state, options);
      ASSERT_TRUE(saved.ok()) << saved.status().ToString();
    }
  }

  std::vector<int64_t> CommittedSteps(const std::string& root) {
    if (!fs::exists(root)) return {};
    Options options;
    options.create = false;
    auto manager = CheckpointManager::Open(root, std::move(options));
    EXPECT_TRUE(manager.ok()) << manager.status().ToString();
    if (!manager.ok()) return {};
    auto infos = (*manager)->List();
    EXPECT_TRUE(infos.ok()) << infos.status().ToString();
    std::vector<int64_t> steps;
    if (infos.ok()) {
      for (const CheckpointInfo& info : *infos) steps.push_back(info.step);
    }
    return steps;
  }

  // Steps 1 to 3 of an incremental chain under `root`: a 16 KiB table in
  // 4 KiB chunks, of which step N rewrites chunk N. Step 2 depends on step
  // 1, step 3 on steps 1 and 2.
  void SaveChain(const std::string& root) {
    auto manager = OpenManager(root, 4096);
    ASSERT_NE(manager, nullptr);
    std::vector<float> table(4096);
    for (int64_t step = 1; step <= 3; ++step) {
      table[step * 1024] = static_cast<float>(step);  // chunk `step` changes
      State state;
      state.AddTensor("table", View(table));
      SaveOptions options;
      options.incremental = true;
      ASSERT_TRUE(manager->Save(step, state, options).ok());
    }
  }

  // `ckpt args` with stdout and stderr on a pseudo-terminal, as a person
  // runs it: what it printed there (both streams, in order) in `out`.
  RunResult CkptOnTerminal(const std::vector<std::string>& args) {
    std::vector<std::string> words = {CKPT_CLI_PATH};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    RunResult r;
    int terminal = -1;
    const pid_t pid = forkpty(&terminal, nullptr, nullptr, nullptr);
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    if (pid < 0) {
      ADD_FAILURE() << "forkpty: " << std::strerror(errno);
      return r;
    }
    char buf[4096];
    for (;;) {
      const ssize_t n = read(terminal, buf, sizeof(buf));
      if (n > 0) {
        r.out.append(buf, n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        break;  // EIO: the program ended, and the terminal with it
      }
    }
    close(terminal);
    int status = 0;
    waitpid(pid, &status, 0);
    r.exit_code =
        WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return r;
  }

  // Flips a bit in the middle of step `step`'s manifest under root_.
  void DamageManifest(int64_t step) {
    const fs::path manifest = fs::path(root_) / format::ManifestKey(step);
    std::string bytes = ReadFile(manifest);
    ASSERT_FALSE(bytes.empty()) << manifest;
    bytes[bytes.size() / 2] ^= 0x01;
    ASSERT_TRUE(WriteFile(manifest, bytes));
  }

  std::vector<fs::path> DataFiles(const std::string& root) {
    std::vector<fs::path> files;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") {
        files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    return files;
  }

  const testing::TempDir temp_{"cli"};
  const fs::path dir_ = temp_.path();
  const std::string root_ = (dir_ / "root").string();
};

nlohmann::json ParseJson(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << text;
  return j;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// --- Usage ------------------------------------------------------------------

TEST_F(CliTest, HelpExitsZeroEverywhere) {
  RunResult top = Ckpt({"--help"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  EXPECT_TRUE(Contains(top.out, "Examples:"));
  for (const char* command : {"ls", "show", "verify", "import", "export",
                              "diff", "gc", "bench", "delete"}) {
    EXPECT_TRUE(Contains(top.out, command));
    RunResult r = Ckpt({command, "--help"});
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_TRUE(Contains(r.out, "Usage:")) << command;
    EXPECT_TRUE(Contains(r.out, "Examples:")) << command;
    EXPECT_TRUE(Contains(r.out, std::string("ckpt ") + command)) << command;
  }
  // "Every command prints JSON with --json" holds, but for the one named.
  for (const char* command :
       {"ls", "show", "verify", "import", "export", "import-dcp", "diff", "gc",
        "delete", "bench", "report"}) {
    RunResult r = Ckpt({command, "--help"});
    const bool json = Contains(r.out, "  --json ");
    EXPECT_EQ(json,
              !Contains(top.out, std::string("(") + command + ", whose output"))
        << command << ": " << top.out;
  }
}

TEST_F(CliTest, VersionPrintsTheProjectVersion) {
  for (const char* flag : {"--version", "-V"}) {
    RunResult r = Ckpt({flag});
    EXPECT_EQ(r.exit_code, 0) << flag << ": " << r.err;
    EXPECT_EQ(r.out, "ckpt " CKPT_VERSION_STRING "\n") << flag;
  }
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"ls"},
      {"ls", root_, "extra"},
      {"ls", root_, "--bogus"},
      {"show", root_, "--step", "abc"},
      {"show", root_, "--step", "-1"},
      {"show", root_, "--step", "99999999999999999999"},
      {"verify", root_, "--step", "1", "--all"},
      {"import", Path("f.safetensors"), root_},
      {"export", root_},
      {"diff", root_, "--step", "1"},
      {"diff", root_, "--step", "1", "2", "3"},
      {"gc", root_, "--keep-best", "2"},
      {"gc", root_, "--max"},
      {"report", "-o", Path("r.html")},  // neither a root nor a catalog
  };
  for (const auto& args : cases) {
    RunResult r = Ckpt(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.exit_code, 2) << joined << "\n" << r.err;
    EXPECT_TRUE(Contains(r.err, "--help")) << joined;
  }
  EXPECT_TRUE(Contains(Ckpt({"frobnicate"}).err, "\"frobnicate\""));
  // A mistyped option is named, even where a required argument is missing
  // too (CLI11 alone reports only the missing argument).
  const std::vector<std::pair<std::vector<std::string>, std::string>> typos = {
      {{"ls", "--bogus"}, "--bogus"},
      {{"ls", root_, "--bogus=1"}, "--bogus"},
      {{"catalog", "latest", "--jobb", "x"}, "--jobb"},
      {{"gc", "--keep-lastt", "3", root_}, "--keep-lastt"},
  };
  for (const auto& [args, option] : typos) {
    const RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 2) << option;
    EXPECT_TRUE(Contains(r.err, "unknown option \"" + option + "\"")) << r.err;
  }
  // A usage error of a command in a group names the command and its own
  // --help; a group given no command, or one it lacks, names its commands.
  const std::vector<std::pair<std::vector<std::string>, std::string>> named = {
      {{"catalog", "best", "run42"},
       "ckpt catalog best: --metric is required\n"
       "Run 'ckpt catalog best --help' for usage."},
      {{"catalog", "latest"}, "Run 'ckpt catalog latest --help'"},
      {{"catalog", "list", "--bogus"},
       "ckpt catalog list: unknown option \"--bogus\""},
      {{"catalog"},
       "ckpt catalog: which command? (its commands: jobs, list, latest, "
       "best, sync)"},
      {{"catalog", "lastest", "run42"},
       "ckpt catalog: unknown command \"lastest\" (its commands: jobs,"},
      // diff's steps are said as diff takes them, not as a missing --step.
      {{"diff", root_},
       "ckpt diff: two steps are required: ckpt diff ROOT --step A --step B\n"
       "Run 'ckpt diff --help' for usage."},
      {{"diff", root_, "--step", "1"},
       "ckpt diff: two steps are required, one was given: ckpt diff ROOT "
       "--step A --step B\n"},
      {{"diff", root_, "--step", "1", "--step", "2", "--step", "3"},
       "ckpt diff: two steps are required, 3 were given: ckpt diff ROOT "
       "--step A --step B\n"},
  };
  for (const auto& [args, said] : named) {
    const RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 2) << said;
    EXPECT_TRUE(Contains(r.err, said)) << r.err;
  }
  // A negative value is the value's error, not an unknown option.
  const RunResult negative = Ckpt({"show", root_, "--step", "-1"});
  EXPECT_FALSE(Contains(negative.err, "unknown option")) << negative.err;
  // None of them may have created the root.
  EXPECT_FALSE(fs::exists(root_));
}

// An empty ROOT ("" from a script's unset variable) is a usage error of
// every command that takes one, said as such, and nothing is made.
TEST_F(CliTest, AnEmptyRootIsAUsageErrorOfEveryCommand) {
  const std::string file = Path("in.safetensors");
  const std::vector<std::vector<std::string>> cases = {
      {"ls", ""},
      {"show", ""},
      {"verify", ""},
      {"diff", "", "--step", "1", "--step", "2"},
      {"gc", "", "--keep-last", "1"},
      {"delete", "", "--step", "1"},
      {"export", "", Path("out.safetensors")},
      {"import", file, "", "--step", "1"},
      {"import-dcp", Path("dcp"), ""},
      {"catalog", "sync", "", "--catalog", Path("c.sqlite")},
      {"report", "", "-o", Path("r.html"), "--catalog", Path("c.sqlite")},
  };
  for (const auto& args : cases) {
    const std::string name =
        args[0] == "catalog" ? "catalog " + args[1] : args[0];
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.err;
    EXPECT_EQ(r.err, "ckpt " + name +
                         ": the root is empty\n"
                         "Run 'ckpt " +
                         name + " --help' for usage.\n");
  }
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{".stderr", ".stdout"}));
}

// Every command names its root ROOT in its usage, report's (which it may
// go without) too.
TEST_F(CliTest, EveryCommandNamesItsRootRoot) {
  for (const char* command : {"ls", "show", "verify", "diff", "gc", "delete",
                              "export", "import", "import-dcp", "report"}) {
    RunResult r = Ckpt({command, "--help"});
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_TRUE(Contains(r.out, "\n  ROOT TEXT")) << command << ": " << r.out;
    EXPECT_FALSE(Contains(r.out, "root TEXT")) << command << ": " << r.out;
  }
  RunResult r = Ckpt({"report", "--help"});
  EXPECT_TRUE(Contains(r.out, "Usage: ckpt report [OPTIONS] [ROOT]\n"))
      << r.out;
}

// --- ls, show, verify on a good root ---------------------------------------

// Output that does not fit (standard output a full disk) is a failure
// saying so, whether it shows while printing (a long listing) or at the
// end (a short one): never "internal error".
TEST_F(CliTest, AFullStandardOutputIsAnIOError) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  std::vector<int64_t> steps;
  for (int64_t s = 1; s <= 24; ++s) steps.push_back(s);
  SaveSteps(steps);
  for (const char* args : {"ls ROOT --json", "ls ROOT", "show ROOT"}) {
    std::string command = std::string(CKPT_CLI_PATH) + " " + args;
    command.replace(command.find("ROOT"), 4, "'" + root_ + "'");
    command += " > /dev/full 2> '" + Path("err") + "'";
    const int status = std::system(command.c_str());
    EXPECT_EQ(WEXITSTATUS(status), 1) << args;
    const std::string err = ReadFile(Path("err"));
    EXPECT_TRUE(Contains(err, "IOError: write standard output failed"))
        << args << ": " << err;
    EXPECT_FALSE(Contains(err, "internal error")) << args << ": " << err;
  }
}

// report writes its page through a temporary of its own: a file of the
// user's named like the old fixed temporary (OUT.tmp) is left as it was,
// and no temporary is left behind.
TEST_F(CliTest, ReportLeavesAUsersTmpFileAlone) {
  SaveSteps({1});
  ASSERT_TRUE(WriteFile(Path("r.html.tmp"), "mine"));
  RunResult r = Ckpt({"report", root_, "-o", Path("r.html")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(Path("r.html.tmp")), "mine");
  EXPECT_TRUE(Contains(ReadFile(Path("r.html")), "<html")) << r.out;
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names, (std::set<std::string>{".stderr", ".stdout", "r.html",
                                          "r.html.tmp", "root"}));
}

// A report killed while it writes its page (here the file-size limit's
// SIGXFSZ, as a full disk would) leaves nothing beside it, as an export
// does: the page is written unnamed and named only once whole. A page
// that cannot be written at all (its folder is not there) is an error
// naming the page, and leaves nothing either; the same report then writes
// it whole.
TEST_F(CliTest, AReportThatFailsOrIsKilledLeavesNoTemporary) {
  SaveSteps({1, 2});
  const fs::path out = dir_ / "out";
  fs::create_directories(out);
  const std::string page = (out / "r.html").string();
  // 64 blocks of 512 bytes: less than Chart.js alone.
  RunResult r = RunProgram(
      "/bin/sh", {"-c", "ulimit -f 64 && exec \"$0\" report \"$1\" -o \"$2\"",
                  CKPT_CLI_PATH, root_, page});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  const std::string missing = (out / "no-such" / "r.html").string();
  r = Ckpt({"report", root_, "-o", missing});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.err, "write the page \"" + missing + "\"")) << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>()) << r.err;
  r = Ckpt({"report", root_, "-o", page});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(ReadFile(page), "</html>"));
  left.clear();
  for (const auto& e : fs::directory_iterator(out)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"r.html"});
}

TEST_F(CliTest, LsListsCommittedSteps) {
  SaveSteps({10, 20});
  RunResult r = Ckpt({"ls", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;  // heading + two steps
  EXPECT_TRUE(Contains(lines[0], "STEP"));
  EXPECT_EQ(lines[1].rfind("10 ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("20 ", 0), 0u) << lines[2];
  EXPECT_TRUE(Contains(lines[1], "Z"));  // an ISO-8601 UTC time

  r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["step"], 10);
  EXPECT_EQ(j[0]["epoch"], 1);
  EXPECT_EQ(j[1]["step"], 20);
  EXPECT_EQ(j[1]["epoch"], 2);
  EXPECT_EQ(j[1]["world_size"], 1);
  EXPECT_EQ(j[1]["num_entries"], 4);
  EXPECT_EQ(j[1]["metadata"]["note"], "step 20");
  EXPECT_TRUE(j[1]["metrics"].contains("loss"));
  for (const char* field : {"created_unix_ms", "created", "job_id", "hosts",
                            "bytes", "depends_on"}) {
    EXPECT_TRUE(j[1].contains(field)) << field;
  }
}

TEST_F(CliTest, LsOfAnEmptyRoot) {
  fs::create_directory(root_);
  RunResult r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out), nlohmann::json::array());
}

// A node's local tier (ckpt/tiered.h): ls lists the shares it holds, which
// steps the tier committed, and a share whose marker is gone as not
// committed; the durable tier's root lists as any root.
TEST_F(CliTest, LsOfALocalTierListsItsShares) {
  const std::string local = root_ + "-local";
  auto durable = CheckpointManager::Open(root_).value();
  {
    auto tiers = TieredManager::Open(*durable, {.local_url = local,
                                                .durable_every_steps = 2,
                                                .replicas = 0})
                     .value();
    std::vector<float> w(100, 1.0f);
    State state;
    state.AddTensor("w", View(w));
    for (int64_t step : {1, 2}) {
      Result<TierSaveResult> r = tiers->Save(step, state);
      ASSERT_TRUE(r.ok() && r->local) << r.status().ToString();
    }
  }
  fs::remove(fs::path(local) / "r00000" / "tier-committed-000000000002-w1");
  RunResult r = Ckpt({"ls", local});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;  // title, heading, two shares
  EXPECT_TRUE(Contains(lines[0], "local tier")) << r.out;
  EXPECT_TRUE(lines[2].ends_with("committed by 1 rank")) << r.out;
  EXPECT_TRUE(Contains(lines[3], "NOT COMMITTED")) << r.out;
  r = Ckpt({"ls", local, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 2u) << r.out;
  EXPECT_EQ(j[0]["tier"], "local");
  EXPECT_EQ(j[0]["rank"], 0);
  EXPECT_EQ(j[0]["step"], 1);
  EXPECT_EQ(j[0]["marked"], true);
  EXPECT_EQ(j[1]["marked"], false);
  r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["step"], 2);
}

// A committed step whose data object went missing (an operator's rm, a
// lifecycle rule) is still listed, marked, with the object it lacks; a step
// whose object is truncated likewise. The complete ones are not marked.
TEST_F(CliTest, LsMarksAStepWhoseDataIsMissing) {
  SaveSteps({10, 20, 30});
  std::vector<fs::path> step20, step30;
  for (const auto& e : fs::recursive_directory_iterator(root_)) {
    // Data objects (the indexed layout also keeps a directory and indexes).
    if (!e.is_regular_file() || e.path().extension() != ".safetensors") {
      continue;
    }
    const std::string dir = e.path().parent_path().filename().string();
    if (dir == format::StepDirName(20)) step20.push_back(e.path());
    if (dir == format::StepDirName(30)) step30.push_back(e.path());
  }
  ASSERT_FALSE(step20.empty());
  ASSERT_FALSE(step30.empty());
  fs::remove(step20[0]);
  fs::resize_file(step30[0], fs::file_size(step30[0]) - 1);

  RunResult r = Ckpt({"ls", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;  // heading, 3 steps, 2 reasons
  EXPECT_TRUE(Contains(lines[0], "STATUS"));
  EXPECT_TRUE(Contains(lines[1], "complete")) << lines[1];
  EXPECT_FALSE(Contains(lines[1], "INCOMPLETE")) << lines[1];
  EXPECT_TRUE(Contains(lines[2], "INCOMPLETE")) << lines[2];
  EXPECT_TRUE(Contains(lines[3], "INCOMPLETE")) << lines[3];
  EXPECT_TRUE(Contains(lines[4], "step 20 is incomplete")) << lines[4];
  EXPECT_TRUE(Contains(lines[4], step20[0].filename().string())) << lines[4];
  EXPECT_TRUE(Contains(lines[4], "missing")) << lines[4];
  // The commands it suggests are ones that run.
  EXPECT_TRUE(Contains(lines[4], "ckpt delete " + root_ + " --step 20"));
  EXPECT_TRUE(Contains(lines[4], "ckpt verify " + root_ + " --step 20"));
  EXPECT_TRUE(Contains(lines[5], "step 30 is incomplete")) << lines[5];
  EXPECT_TRUE(Contains(lines[5], "bytes but the manifest records")) << lines[5];

  r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["complete"], true);
  EXPECT_EQ(j[0]["incomplete"], "");
  EXPECT_EQ(j[1]["complete"], false);
  EXPECT_TRUE(Contains(j[1]["incomplete"].get<std::string>(), "missing"));
  EXPECT_EQ(j[2]["complete"], false);
}

// What a manifest says is text anyone who can write the root chose: `ckpt
// show` never hands a terminal its control sequences (here, clear the
// screen and print a line that looks like another step's).
TEST_F(CliTest, ShowEscapesControlBytesOfTheManifestsText) {
  const std::string hostile = "evil\x1b[2J\x1b[31mRED\nstep        999";
  Options options;
  options.job_id = hostile;
  auto manager = CheckpointManager::Open(root_, std::move(options));
  ASSERT_TRUE(manager.ok()) << manager.status().ToString();
  std::vector<float> w(4, 1.0f);
  State state;
  state.AddTensor("w", View(w));
  SaveOptions save;
  save.metrics["lo\x1bss"] = 0.5;
  save.metadata["note"] = "a\x07b";
  ASSERT_TRUE((*manager)->Save(1, state, save).ok());
  RunResult r = Ckpt({"show", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nstep        999"), std::string::npos) << r.out;
  EXPECT_TRUE(Contains(r.out, "evil\\x1b[2J"));
  // --json carries the text as it is, in JSON's own escapes.
  r = Ckpt({"show", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out)["info"]["job_id"], hostile);
}

TEST_F(CliTest, ShowDescribesEntries) {
  SaveSteps({1, 2});
  RunResult r = Ckpt({"show", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "weights"));
  EXPECT_TRUE(Contains(r.out, "F32"));
  EXPECT_TRUE(Contains(r.out, "[2, 3]"));
  EXPECT_TRUE(Contains(r.out, "\"lr\""));
  EXPECT_TRUE(Contains(r.out, "step 2"));  // the user metadata

  r = Ckpt({"show", root_, "--step", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["info"]["step"], 1);
  EXPECT_EQ(j["info"]["epoch"], 0);
  std::map<std::string, nlohmann::json> entries;
  for (const auto& e : j["entries"]) entries[e["name"]] = e;
  ASSERT_EQ(entries.size(), 4u) << j.dump();
  EXPECT_EQ(entries["weights"]["kind"], "tensor");
  EXPECT_EQ(entries["weights"]["dtype"], "F32");
  EXPECT_EQ(entries["weights"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(entries["weights"]["bytes"], 24);
  EXPECT_EQ(entries["step_count"]["dtype"], "I64");
  EXPECT_EQ(entries["step_count"]["shape"], nlohmann::json::array());
  EXPECT_EQ(entries["rng"]["kind"], "blob");
  EXPECT_EQ(entries["config"]["kind"], "metadata");
  EXPECT_EQ(entries["config"]["value"]["lr"], "0.1");
}

// A table's columns line up on a terminal where a cell holds characters of
// more than one byte (an entry named in German): padding counts characters.
TEST_F(CliTest, TablesAlignNamesOfManyByteCharacters) {
  auto manager = OpenManager(root_);
  ASSERT_NE(manager, nullptr);
  std::vector<float> w(2, 1.0f);
  State state;
  state
      .AddTensor(
          "gr\xc3\xb6\xc3\x9f"
          "e",
          View(w))
      .AddTensor("weights", View(w));
  ASSERT_TRUE(manager->Save(1, state).ok());
  RunResult r = Ckpt({"show", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The column where KIND (and each row's kind) starts, in characters.
  auto column_of = [](const std::string& line, std::string_view word) {
    const size_t at = line.find(word);
    if (at == std::string::npos) return std::string::npos;
    return static_cast<size_t>(std::count_if(
        line.begin(), line.begin() + at,
        [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
  };
  std::vector<size_t> columns;
  for (const std::string& l : Lines(r.out)) {
    if (l.starts_with("NAME")) columns.push_back(column_of(l, "KIND"));
    if (l.starts_with("gr") || l.starts_with("weights")) {
      columns.push_back(column_of(l, "tensor"));
    }
  }
  ASSERT_EQ(columns.size(), 3u) << r.out;
  EXPECT_EQ(columns[0], columns[1]) << r.out;
  EXPECT_EQ(columns[0], columns[2]) << r.out;
}

// show --json says what the text's "(N internal entries hidden)" says.
TEST_F(CliTest, ShowJsonCountsTheInternalEntriesItHides) {
  auto manager = OpenManager(root_);
  ASSERT_NE(manager, nullptr);
  std::vector<float> w(2, 1.0f);
  State state;
  state.AddTensor("w", View(w)).AddMetadata("__binding_tree__", {{"a", "b"}});
  ASSERT_TRUE(manager->Save(1, state).ok());
  RunResult r = Ckpt({"show", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "1 internal entry")) << r.out;
  r = Ckpt({"show", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["entries"].size(), 1u) << r.out;
  EXPECT_EQ(j["hidden_internal_entries"], 1) << r.out;
  r = Ckpt({"show", root_, "--json", "--all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = ParseJson(r.out);
  EXPECT_EQ(j["entries"].size(), 2u) << r.out;
  EXPECT_EQ(j["hidden_internal_entries"], 0) << r.out;
}

TEST_F(CliTest, VerifyGoodRoot) {
  SaveSteps({1, 2});
  RunResult r = Ckpt({"verify", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok: step 2,"));
  // Not a terminal: no progress bar.
  EXPECT_EQ(r.err, "");

  r = Ckpt({"verify", root_, "--all", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["step"], 1);
  EXPECT_EQ(j[1]["step"], 2);
  EXPECT_EQ(j[1]["ok"], true);
  EXPECT_GT(j[1]["chunks_checked"].get<int>(), 0);
}

// --- Bad roots and steps -----------------------------------------------------

TEST_F(CliTest, MissingRootIsAnErrorAndIsNotCreated) {
  const std::string missing = Path("no-such-root");
  const std::vector<std::vector<std::string>> cases = {
      {"ls", missing},
      {"show", missing},
      {"verify", missing},
      {"verify", missing, "--all"},
      {"export", missing, Path("out.safetensors")},
      {"diff", missing, "--step", "1", "--step", "2"},
      {"gc", missing, "--keep-last", "1"},
  };
  for (const auto& args : cases) {
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, "ckpt " + args[0] + ": "));
    EXPECT_TRUE(Contains(r.err, missing)) << args[0];
    EXPECT_FALSE(fs::exists(missing)) << args[0];
  }
  EXPECT_FALSE(fs::exists(Path("out.safetensors")));
}

TEST_F(CliTest, RootThatIsAFileIsAnError) {
  ASSERT_TRUE(WriteFile(root_, "not a directory"));
  for (const char* command : {"ls", "show", "verify"}) {
    RunResult r = Ckpt({command, root_});
    EXPECT_EQ(r.exit_code, 1) << command << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, root_)) << command;
  }
  EXPECT_EQ(ReadFile(root_), "not a directory");
}

TEST_F(CliTest, UnknownSchemeIsQuoted) {
  RunResult r = Ckpt({"ls", "bogus://bucket/run"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "\"bogus://bucket/run\""));
}

TEST_F(CliTest, MissingStepIsAnError) {
  SaveSteps({1});
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"show", root_, "--step", "99"},
           {"verify", root_, "--step", "99"},
           {"export", root_, "--step", "99", Path("out.safetensors")},
           {"diff", root_, "--step", "1", "--step", "99"}}) {
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, "99")) << args[0];
  }
  EXPECT_FALSE(fs::exists(Path("out.safetensors")));
}

// --- Damage ------------------------------------------------------------------

TEST_F(CliTest, VerifyNamesAFlippedBit) {
  {
    auto manager = OpenManager(root_);
    ASSERT_NE(manager, nullptr);
    std::vector<float> weights(4096, 1.5f);
    State state;
    state.AddTensor("weights", View(weights));
    ASSERT_TRUE(manager->Save(5, state).ok());
  }
  std::vector<fs::path> files = DataFiles(root_);
  ASSERT_EQ(files.size(), 1u);
  std::string bytes = ReadFile(files[0]);
  auto header = format::ParseSafetensorsFile(bytes, files[0].string());
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  ASSERT_GT(header->data_size, 16u);
  bytes[bytes.size() - 9] ^= 0x10;  // in the data, near the end
  ASSERT_TRUE(WriteFile(files[0], bytes));

  RunResult r = Ckpt({"verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.err, files[0].filename().string()));
  EXPECT_TRUE(Contains(r.err, "weights"));
  EXPECT_TRUE(Contains(r.err, "ckpt verify: step 5: ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "a resume skips it")) << r.err;
  EXPECT_FALSE(Contains(r.out, "ok:"));

  r = Ckpt({"verify", root_, "--all", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["ok"], false);
  EXPECT_FALSE(j[0]["problems"].empty());
}

TEST_F(CliTest, VerifyFailsOnATruncatedFile) {
  SaveSteps({1});
  std::vector<fs::path> files = DataFiles(root_);
  ASSERT_FALSE(files.empty());
  fs::resize_file(files[0], fs::file_size(files[0]) - 10);
  RunResult r = Ckpt({"verify", root_, "--step", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.err, "ckpt verify: "));
}

TEST_F(CliTest, VerifyAllCountsADamagedManifest) {
  SaveSteps({1, 2});
  DamageManifest(1);

  EXPECT_EQ(CommittedSteps(root_), std::vector<int64_t>{2});
  RunResult r = Ckpt({"verify", root_, "--all"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.out, "ok: step 2,"));
  EXPECT_TRUE(Contains(r.err, "step 1: manifest does not load"));
}

// A resume skips a newest step whose manifest does not load, or whose data
// object is gone, and loads the one before: verify without --step checks
// the step a resume loads and fails naming each newer step it would skip.
TEST_F(CliTest, VerifyFailsWhenTheNewestStepIsDamaged) {
  SaveSteps({6, 7, 8});
  DamageManifest(8);

  RunResult r = Ckpt({"verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "ok: step 7,")) << r.out;
  EXPECT_TRUE(Contains(r.err, "step 8: manifest does not load")) << r.err;
  EXPECT_TRUE(Contains(r.err, "loads step 7")) << r.err;
  // The step given is verified alone, as before.
  EXPECT_EQ(Ckpt({"verify", root_, "--step", "7"}).exit_code, 0);

  // Step 7 loses a data object: a resume skips 8 and 7 and loads 6.
  for (const fs::path& file : DataFiles(root_)) {
    if (file.parent_path().filename().string().ends_with("7")) {
      fs::remove(file);
    }
  }
  r = Ckpt({"verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "ok: step 6,")) << r.out;
  EXPECT_TRUE(Contains(r.err, "step 7: incomplete: data object")) << r.err;
  EXPECT_TRUE(Contains(r.err, "step 8: manifest does not load")) << r.err;
  r = Ckpt({"verify", root_, "--json"});
  EXPECT_EQ(r.exit_code, 1);
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[0]["step"], 6);
  EXPECT_EQ(j[0]["ok"], true);
  EXPECT_EQ(j[1]["ok"], false);
  EXPECT_EQ(j[2]["step"], 8);
  // A damaged chunk of step 6, which the listing cannot see: a resume
  // skips it too, and verify says so, with the step, for want of an older
  // one that loads.
  SaveSteps({5});
  for (const fs::path& file : DataFiles(root_)) {
    if (file.parent_path().filename().string().ends_with("6")) {
      std::string bytes = ReadFile(file);
      bytes[bytes.size() - 9] ^= 0x10;
      ASSERT_TRUE(WriteFile(file, bytes));
    }
  }
  r = Ckpt({"verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "ok: step 5,")) << r.out;
  EXPECT_TRUE(Contains(r.err, "ckpt verify: step 6: ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "a resume skips it for an older step")) << r.err;
  // --all lists every damaged step.
  r = Ckpt({"verify", root_, "--all"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "ckpt verify: step 7: ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt verify: step 8: ")) << r.err;
}

// A load reads chunks at the manifest's offsets and checks their checksums;
// it reads no safetensors header. Damage there alone is a problem verify
// reports (other safetensors readers may not open the file), but a resume
// loads that step all the same, and verify must say so, not name an older
// step as the one a resume falls back to.
TEST_F(CliTest, VerifySaysAResumeLoadsAStepWhoseHeaderAloneIsDamaged) {
  SaveSteps({3, 4});
  fs::path damaged;
  for (const fs::path& file : DataFiles(root_)) {
    if (file.parent_path().filename().string().ends_with("4")) damaged = file;
  }
  ASSERT_FALSE(damaged.empty());
  std::string bytes = ReadFile(damaged);
  ASSERT_EQ(bytes[8], '{');
  bytes[8] = 'z';  // the header's JSON no longer parses
  ASSERT_TRUE(WriteFile(damaged, bytes));

  RunResult r = Ckpt({"verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt verify: step 4: ")) << r.err;
  EXPECT_TRUE(Contains(r.err, damaged.filename().string())) << r.err;
  EXPECT_TRUE(Contains(r.err, "safetensors header")) << r.err;
  EXPECT_TRUE(Contains(r.err, "a resume loads this step all the same"))
      << r.err;
  EXPECT_FALSE(Contains(r.err, "skips")) << r.err;
  EXPECT_FALSE(Contains(r.out, "ok: step 3")) << r.out;
  r = Ckpt({"verify", root_, "--json"});
  EXPECT_EQ(r.exit_code, 1);
  nlohmann::json j = ParseJson(r.out);
  ASSERT_EQ(j.size(), 1u) << r.out;
  EXPECT_EQ(j[0]["step"], 4);
  EXPECT_EQ(j[0]["header_only"], true);
  EXPECT_EQ(j[0]["unreadable"], false);
  for (const char* which : {"--all", "--step"}) {
    std::vector<std::string> args = {"verify", root_, which};
    if (std::string(which) == "--step") args.push_back("4");
    r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 1) << which;
    EXPECT_TRUE(Contains(r.err,
                         "step 4: every problem lies in data files' "
                         "safetensors headers"))
        << which << ": " << r.err;
  }

  // What verify says holds: a resume loads step 4, bit for bit.
  auto loaded = OpenManager(root_)->LoadAll(std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->info.step, 4);
  const Entry* weights = loaded->state.Find("weights");
  ASSERT_NE(weights, nullptr);
  const float* w = reinterpret_cast<const float*>(weights->tensor.data);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w[i], 4 + i * 0.5f) << i;
}

// A step a resume loads whose data object this user may not read is not
// damage: a resume fails there with the read's error rather than skip it,
// and verify says so instead of naming an older step it would load.
TEST_F(CliTest, VerifySaysAResumeStopsAtAStepItCannotRead) {
  if (::geteuid() != 0 || !fs::exists("/usr/bin/setpriv")) {
    GTEST_SKIP() << "needs root and setpriv to run ckpt as another user "
                    "(root reads every file): run the tests as root, as CI "
                    "does";
  }
  SaveSteps({1, 2});
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read |
                            fs::perms::group_exec | fs::perms::others_read |
                            fs::perms::others_exec);
  for (const fs::path& file : DataFiles(root_)) {
    if (file.parent_path().filename().string().ends_with("2")) {
      fs::permissions(file, fs::perms::none);
    }
  }
  RunResult r = RunProgram("/usr/bin/setpriv",
                           {"--reuid=65534", "--regid=65534", "--clear-groups",
                            CKPT_CLI_PATH, "verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt verify: step 2: ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "Permission denied")) << r.err;
  EXPECT_TRUE(Contains(r.err, "a resume fails at it")) << r.err;
  EXPECT_FALSE(Contains(r.err, "skips it")) << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt verify: IOError: ")) << r.err;
  // Step 1 is not what a resume would load: not verified.
  EXPECT_FALSE(Contains(r.out, "ok: step 1")) << r.out;
}

// --- import and export
// ---------------------------------------------------------

TEST_F(CliTest, ImportThenExportRoundTrips) {
  const std::vector<RawTensor> tensors = {
      {"layer/weight", "F32", {2, 3}, Bytes(24, 1)},
      {"layer/bias", "F64", {3}, Bytes(24, 2)},
      {"ids", "I64", {2}, Bytes(16, 3)},
      {"half", "BF16", {5}, Bytes(10, 4)},
      {"mask", "BOOL", {3}, std::string("\x01\x00\x01", 3)},
      {"small", "I8", {7}, Bytes(7, 5)},
      {"scalar", "F64", {}, Bytes(8, 6)},
      {"empty", "F32", {0, 4}, ""},
  };
  const std::string original = Path("original.safetensors");
  ASSERT_TRUE(
      WriteFile(original, BuildSafetensors(tensors, {{"source", "hand"}})));

  RunResult r =
      Ckpt({"import", original, root_, "--step", "7", "--epoch", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json listed = ParseJson(r.out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["step"], 7);
  EXPECT_EQ(listed[0]["epoch"], 2);
  EXPECT_EQ(listed[0]["metadata"]["source"], "hand");
  EXPECT_EQ(Ckpt({"verify", root_}).exit_code, 0);
  // --json says what the human line says: the file and its data's bytes.
  r = Ckpt({"import", original, root_, "--step", "8", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json imported = ParseJson(r.out);
  EXPECT_EQ(imported["step"], 8);
  EXPECT_EQ(imported["file"], original);
  uint64_t data_bytes = 0;
  for (const RawTensor& t : tensors) data_bytes += t.bytes.size();
  EXPECT_EQ(imported["data_bytes"].get<uint64_t>(), data_bytes);
  ASSERT_EQ(Ckpt({"delete", root_, "--step", "8"}).exit_code, 0);

  const std::string exported = Path("exported.safetensors");
  r = Ckpt({"export", root_, exported});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // ckpt's own parser sees the same tensors...
  const std::string bytes = ReadFile(exported);
  auto header = format::ParseSafetensorsFile(bytes, exported);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->metadata.at("source"), "hand");
  ASSERT_EQ(header->tensors.size(), tensors.size());
  std::map<std::string, const format::TensorLayout*> by_name;
  for (const auto& t : header->tensors) by_name[t.name] = &t;
  for (const RawTensor& t : tensors) {
    ASSERT_TRUE(by_name.contains(t.name)) << t.name;
    const format::TensorLayout& got = *by_name[t.name];
    EXPECT_EQ(DTypeName(got.dtype), t.dtype) << t.name;
    EXPECT_EQ(got.shape, t.shape) << t.name;
    EXPECT_EQ(bytes.substr(header->data_start + got.begin, got.end - got.begin),
              t.bytes)
        << t.name;
  }

  // ...and so does a reader that shares no code with ckpt.
  RunResult py_original = PyRead(original);
  RunResult py_exported = PyRead(exported);
  ASSERT_EQ(py_original.exit_code, 0) << py_original.err;
  ASSERT_EQ(py_exported.exit_code, 0) << py_exported.err;
  EXPECT_EQ(ParseJson(py_original.out), ParseJson(py_exported.out));
  EXPECT_EQ(ParseJson(py_exported.out).size(), tensors.size());
  for (const fs::path& file : DataFiles(root_)) {
    RunResult py = PyRead(file);
    EXPECT_EQ(py.exit_code, 0) << file << ": " << py.err;
  }

  // An existing file is kept unless --force.
  ASSERT_TRUE(WriteFile(exported, "precious"));
  r = Ckpt({"export", root_, exported});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "--force"));
  EXPECT_EQ(ReadFile(exported), "precious");
  r = Ckpt({"export", root_, exported, "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadFile(exported), bytes);
  // No temporary file is left behind.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{".stderr", ".stdout", "exported.safetensors",
                                   "original.safetensors", "root"}));
}

// An export killed while it writes (Ctrl-C in the middle of a large one,
// here the file-size limit's SIGXFSZ) leaves nothing in the folder: it
// writes an unnamed file and names it only once whole.
TEST_F(CliTest, AnExportKilledWhileItWritesLeavesNothingBehind) {
  {
    auto manager = OpenManager(root_);
    ASSERT_NE(manager, nullptr);
    std::vector<float> big(1 << 20, 0.5f);  // 4 MiB
    State state;
    state.AddTensor(
        "big", View(std::span<float>(big), {static_cast<int64_t>(big.size())}));
    ASSERT_TRUE(manager->Save(1, state).ok());
  }
  const fs::path out = dir_ / "out";
  fs::create_directories(out);
  // 256 blocks of 512 bytes (sh's unit): the first MiB at most.
  RunResult r = RunProgram(
      "/bin/sh", {"-c", "ulimit -f 256 && exec \"$0\" export \"$1\" \"$2\"",
                  CKPT_CLI_PATH, root_, (out / "model.safetensors").string()});
  EXPECT_NE(r.exit_code, 0) << r.out << r.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(out)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>()) << r.err;
  // Unlimited, the same export is whole.
  r = Ckpt({"export", root_, (out / "model.safetensors").string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(fs::file_size(out / "model.safetensors"), uint64_t{4} << 20);
}

// OUT a folder: refused before anything is loaded or written, and without
// the advice of --force, which cannot replace a folder by a file.
TEST_F(CliTest, ExportToAFolderIsRefusedAtOnce) {
  SaveSteps({1});
  const std::string folder = Path("out");
  fs::create_directories(fs::path(folder) / "kept");
  for (bool force : {false, true}) {
    std::vector<std::string> args = {"export", root_, folder};
    if (force) args.push_back("--force");
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_TRUE(Contains(r.err, "is a directory")) << r.err;
    EXPECT_FALSE(Contains(r.err, "use --force")) << r.err;
    EXPECT_TRUE(Contains(r.err, "out/model.safetensors")) << r.err;
  }
  EXPECT_TRUE(fs::is_directory(fs::path(folder) / "kept"));
  // A file in a folder that is not there: refused as early, naming it.
  RunResult r = Ckpt({"export", root_, Path("no-such/model.safetensors")});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.err, "NotFound: export to ")) << r.err;
  EXPECT_TRUE(Contains(r.err, "no-such\" does not exist")) << r.err;
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) {
    names.insert(e.path().filename().string());
  }
  EXPECT_EQ(names,
            (std::set<std::string>{".stderr", ".stdout", "out", "root"}));
}

TEST_F(CliTest, ExportThenImportKeepsBlobsAndMetadata) {
  SaveSteps({23});  // epoch 2, loss 1/24 (no short decimal)
  const std::string file = Path("out.safetensors");
  // A URL is no OUT: said so, rather than taken for a folder "s3:".
  RunResult r = Ckpt({"export", root_, "s3://bucket/out.safetensors"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "OUT is a local path")) << r.err;
  r = Ckpt({"export", root_, file, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out)["step"], 23);
  EXPECT_EQ(PyRead(file).exit_code, 0);

  const std::string copy = Path("copy");
  r = Ckpt({"import", file, copy, "--step", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // --epoch gives the import another epoch; the metrics stay the file's.
  r = Ckpt({"import", file, copy, "--step", "4", "--epoch", "7"});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  auto a = OpenManager(root_)->LoadAll(23);
  auto b = OpenManager(copy)->LoadAll(3);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->info.metadata, a->info.metadata);
  // The step's epoch and metrics came through the file, the metric to the
  // bit (`ckpt catalog best` ranks by it).
  EXPECT_EQ(b->info.epoch, 2);
  EXPECT_EQ(b->info.metrics, a->info.metrics);
  EXPECT_EQ(b->info.metrics.at("loss"), 1.0 / 24);
  auto c = OpenManager(copy)->LoadAll(4);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->info.epoch, 7);
  EXPECT_EQ(c->info.metrics, a->info.metrics);
  ASSERT_EQ(b->state.size(), a->state.size());
  for (const Entry& ea : a->state.entries()) {
    const Entry* eb = b->state.Find(ea.name);
    ASSERT_NE(eb, nullptr) << ea.name;
    EXPECT_EQ(eb->kind, ea.kind) << ea.name;
    if (ea.kind == EntryKind::kMetadata) {
      EXPECT_EQ(nlohmann::json::parse(eb->json),
                nlohmann::json::parse(ea.json));
      continue;
    }
    EXPECT_EQ(eb->tensor.dtype, ea.tensor.dtype) << ea.name;
    EXPECT_EQ(eb->tensor.shape, ea.tensor.shape) << ea.name;
    const uint64_t size = *ea.tensor.ByteSize();
    EXPECT_EQ(
        std::string_view(reinterpret_cast<const char*>(eb->tensor.data), size),
        std::string_view(reinterpret_cast<const char*>(ea.tensor.data), size))
        << ea.name;
  }
}

TEST_F(CliTest, BadImportFilesAreRefused) {
  const std::string u8x4 = R"({"dtype":"U8","shape":[4],"data_offsets":)";
  std::string huge_length(8, '\0');
  EncodeU64LE(1000, huge_length.data());
  huge_length += "{}";
  const std::map<std::string, std::string> cases = {
      {"header_too_long", huge_length},
      {"overlap",
       RawSafetensors(R"({"a":)" + u8x4 + R"([0,4]},"b":)" + u8x4 + "[2,6]}}",
                      Bytes(6, 1))},
      {"hole",
       RawSafetensors(R"({"a":)" + u8x4 + R"([0,4]},"b":)" + u8x4 + "[6,10]}}",
                      Bytes(10, 1))},
      {"past_end", RawSafetensors(R"({"a":)" + u8x4 + "[0,4]}}", Bytes(2, 1))},
      {"duplicate",
       RawSafetensors(R"({"a":)" + u8x4 + R"([0,4]},"a":)" + u8x4 + "[4,8]}}",
                      Bytes(8, 1))},
      {"unknown_dtype",
       RawSafetensors(
           R"({"a":{"dtype":"F7","shape":[4],"data_offsets":[0,4]}})",
           Bytes(4, 1))},
      {"dotdot",
       RawSafetensors(R"({"a/../b":)" + u8x4 + "[0,4]}}", Bytes(4, 1))},
      {"absolute",
       RawSafetensors(R"({"/etc/passwd":)" + u8x4 + "[0,4]}}", Bytes(4, 1))},
      {"overflow",
       RawSafetensors(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],)"
                      R"("data_offsets":[0,0]}})",
                      "")},
      {"not_json", RawSafetensors("{not json", "")},
      {"empty", ""},
      {"bad_blobs", BuildSafetensors({{"a", "F32", {1}, Bytes(4, 1)}},
                                     {{"ckpt.blobs", R"(["a"])"}})},
      {"bad_epoch", BuildSafetensors({{"a", "F32", {1}, Bytes(4, 1)}},
                                     {{"ckpt.epoch", "-3"}})},
      {"bad_metrics",
       BuildSafetensors({{"a", "F32", {1}, Bytes(4, 1)}},
                        {{"ckpt.metrics", R"({"loss":"low"})"}})},
  };
  for (const auto& [name, bytes] : cases) {
    const std::string file = Path(name + ".safetensors");
    ASSERT_TRUE(WriteFile(file, bytes));
    RunResult r = Ckpt({"import", file, root_, "--step", "1"});
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, "ckpt import: ")) << name;
    EXPECT_TRUE(Contains(r.err, file)) << name;
    EXPECT_TRUE(CommittedSteps(root_).empty()) << name;
    // The independent reader agrees these files are bad (except the ones
    // whose problem is a name ckpt refuses or ckpt's own metadata).
    if (name != "dotdot" && name != "absolute" && !name.starts_with("bad_")) {
      EXPECT_EQ(PyRead(file).exit_code, 1) << name;
    }
  }
  // Not a safetensors file at all: said so.
  const std::string script = Path("train.py");
  ASSERT_TRUE(WriteFile(script, "import torch\nprint('a training script')\n"));
  RunResult r = Ckpt({"import", script, root_, "--step", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "not a safetensors file")) << r.err;
  for (const std::string& file : {Path("no-such.safetensors"), dir_.string()}) {
    RunResult r = Ckpt({"import", file, root_, "--step", "1"});
    EXPECT_EQ(r.exit_code, 1) << file << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, file));
  }
  EXPECT_TRUE(CommittedSteps(root_).empty());
}

TEST_F(CliTest, ImportRefusesACommittedStep) {
  SaveSteps({1});
  const std::string file = Path("a.safetensors");
  ASSERT_TRUE(WriteFile(file, BuildSafetensors({{"a", "U8", {2}, "xy"}}, {})));
  RunResult r = Ckpt({"import", file, root_, "--step", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(Ckpt({"import", file, root_, "--step", "2"}).exit_code, 0);
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2}));
}

// A FIFO with no writer, a folder: refused as no regular file, at once (a
// FIFO's open used to wait for a writer forever), creating no root.
TEST_F(CliTest, ImportRefusesWhatIsNoRegularFileAtOnce) {
  const std::string fifo = Path("pipe.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string dir = Path("dir.safetensors");
  fs::create_directories(dir);
  for (const std::string& file : {fifo, dir}) {
    const RunResult r = Ckpt({"import", file, root_, "--step", "1"});
    EXPECT_EQ(r.exit_code, 1) << file;
    EXPECT_TRUE(Contains(r.err, "is not a regular file") ||
                Contains(r.err, "directory"))
        << r.err;
  }
  EXPECT_FALSE(fs::exists(root_));
}

// --- diff
// ----------------------------------------------------------------------

TEST_F(CliTest, DiffReportsAddedRemovedChanged) {
  std::vector<float> a1 = {1, 2, 3, 4}, a2 = {1, 2, 3, 5};
  std::vector<int32_t> b = {7, 8};
  std::vector<uint8_t> c = {1, 2, 3};
  std::vector<double> d = {0.5};
  std::vector<int16_t> e1 = {1, 2, 3, 4}, e2 = {1, 2, 3, 4};
  {
    auto manager = OpenManager(root_);
    ASSERT_NE(manager, nullptr);
    State s1;
    s1.AddTensor("a", View(a1)).AddTensor("b", View(b)).AddTensor("c", View(c));
    s1.AddTensor("e", View(e1));
    ASSERT_TRUE(manager->Save(1, s1).ok());
    State s2;
    s2.AddTensor("a", View(a2)).AddTensor("b", View(b)).AddTensor("d", View(d));
    s2.AddTensor("e", View(std::span<int16_t>(e2), {2, 2}));
    ASSERT_TRUE(manager->Save(2, s2).ok());
  }
  RunResult r = Ckpt({"diff", root_, "--step", "1", "--step", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Lines(r.out),
            (std::vector<std::string>{"+ d", "- c", "~ a (contents)",
                                      "~ e (shape [4] -> [2, 2])"}));

  r = Ckpt({"diff", root_, "--step", "2", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["added"], nlohmann::json({"c"}));
  EXPECT_EQ(j["removed"], nlohmann::json({"d"}));
  ASSERT_EQ(j["changed"].size(), 2u);
  EXPECT_EQ(j["changed"][0]["name"], "a");
  EXPECT_EQ(j["changed"][0]["why"], "contents");
  // One shape whatever differs: the count of internal entries too.
  EXPECT_EQ(j["internal_entries_differing"], 0) << r.out;

  r = Ckpt({"diff", root_, "--step", "2", "--step", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no differences: steps 2 and 2 hold the same 4 entries\n");
}

TEST_F(CliTest, DiffIgnoresAChunkSizeChange) {
  std::vector<float> weights(5000);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = i * 0.25f;
  for (auto [step, chunk] :
       {std::pair<int64_t, uint64_t>{1, 4096}, {2, 8192}}) {
    auto manager = OpenManager(root_, chunk);
    ASSERT_NE(manager, nullptr);
    State state;
    state.AddTensor("weights", View(weights));
    ASSERT_TRUE(manager->Save(step, state).ok());
  }
  RunResult r = Ckpt({"diff", root_, "--step", "1", "--step", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "no differences: steps 1 and 2 hold the same 1 entry\n");
  r = Ckpt({"diff", root_, "--step", "1", "--step", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out),
            nlohmann::json({{"added", nlohmann::json::array()},
                            {"removed", nlohmann::json::array()},
                            {"changed", nlohmann::json::array()},
                            {"internal_entries_differing", 0}}));
}

// The objects of `root`'s step directory `dir`: key relative to the root
// -> bytes.
std::map<std::string, uint64_t> StepObjectSizes(const std::string& root,
                                                const std::string& dir) {
  std::map<std::string, uint64_t> sizes;
  for (const auto& e : fs::directory_iterator(fs::path(root) / dir)) {
    sizes[dir + "/" + e.path().filename().string()] = fs::file_size(e.path());
  }
  return sizes;
}

// --- gc
// --------------------------------------------------------------------------

TEST_F(CliTest, GcKeepLast) {
  SaveSteps({1, 2, 3});
  RunResult r = Ckpt({"gc", root_, "--keep-last", "1", "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "would delete step 1"));
  EXPECT_TRUE(Contains(r.out, "would delete step 2"));
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));

  r = Ckpt({"gc", root_, "--keep-last", "1", "--dry-run", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out)["deleted_steps"], nlohmann::json({1, 2}));
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));

  // Without a retention flag only dead attempts go.
  r = Ckpt({"gc", root_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));

  r = Ckpt({"gc", root_, "--keep-last", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["deleted_steps"], nlohmann::json({1, 2}));
  EXPECT_GT(j["bytes_freed"].get<uint64_t>(), 0u);
  EXPECT_EQ(CommittedSteps(root_), std::vector<int64_t>{3});
  EXPECT_EQ(Ckpt({"verify", root_, "--all"}).exit_code, 0);

  // A rule that keeps 0 would turn itself off and delete nothing, which a
  // user who asked to keep none did not mean: a usage error.
  SaveSteps({4});
  for (const std::vector<std::string>& rule :
       {std::vector<std::string>{"--keep-last", "0"},
        {"--keep-every-steps", "0"},
        {"--keep-every-seconds", "0"},
        {"--keep-best", "0", "--metric", "loss"}}) {
    std::vector<std::string> args = {"gc", root_};
    args.insert(args.end(), rule.begin(), rule.end());
    r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 2) << rule[0] << ": " << r.out;
    EXPECT_TRUE(Contains(r.err, "is not an integer from 1 to"))
        << rule[0] << ": " << r.err;
  }
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{3, 4}));
}

// gc and delete only mark rows of a catalog: where the default catalog
// does not exist yet they make none, and neither does a dry run, nor a
// command that fails before it deletes (a folder that holds no root, a
// step that is not there).
TEST_F(CliTest, GcAndDeleteMakeNoDefaultCatalog) {
  SaveSteps({1, 2, 3});
  const std::string catalog = Path("state/ckpt/catalog.sqlite");
  fs::create_directories(Path("notes"));
  setenv("CKPT_CATALOG", catalog.c_str(), 1);
  const RunResult dry = Ckpt({"gc", root_, "--keep-last", "1", "--dry-run"});
  const RunResult no_root = Ckpt({"gc", Path("notes")});
  const RunResult no_step = Ckpt({"delete", root_, "--step", "99"});
  const RunResult real = Ckpt({"gc", root_, "--keep-last", "2"});
  setenv("CKPT_CATALOG", "none", 1);
  EXPECT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_TRUE(Contains(dry.out, "would delete step 1")) << dry.out;
  EXPECT_EQ(no_root.exit_code, 1);
  EXPECT_EQ(no_step.exit_code, 1);
  EXPECT_EQ(real.exit_code, 0) << real.err;
  EXPECT_FALSE(Contains(real.err, "warning")) << real.err;
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(fs::exists(Path("state"))) << "a catalog was made";
}

// gc and delete given a --catalog that is not there (a typo, or a new
// name) refuse, naming it, before they change anything: they only mark
// rows deleted, and a catalog made now would hold none. Nothing is made.
TEST_F(CliTest, GcAndDeleteRefuseANamedCatalogThatIsNotThere) {
  SaveSteps({1, 2, 3});
  const std::string catalog = Path("state/new.sqlite");
  for (const std::string& url : {catalog, "sqlite://" + catalog}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"gc", root_, "--keep-last", "1"},
          {"delete", root_, "--step", "1"}}) {
      std::vector<std::string> with = args;
      with.insert(with.end(), {"--catalog", url});
      RunResult r = Ckpt(with);
      EXPECT_EQ(r.exit_code, 1) << args[0] << " " << url << ": " << r.out;
      EXPECT_TRUE(Contains(r.err, "ckpt " + args[0] + ": NotFound: ")) << r.err;
      EXPECT_TRUE(Contains(r.err, catalog + " is not there")) << r.err;
    }
  }
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_FALSE(fs::exists(Path("state"))) << "a catalog was made";
}

// gc and delete on a folder that holds no checkpoint root (a mistyped
// path) refuse, naming it, and write nothing there (no lease file); a
// root whose steps are all gone is still one.
TEST_F(CliTest, GcAndDeleteOfAFolderWithoutARootChangeNothing) {
  const std::filesystem::path folder = root_ + "-not-a-root";
  std::filesystem::create_directories(folder / "notes");
  ASSERT_TRUE(WriteFile((folder / "notes" / "a.txt").string(), "keep"));
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"gc", folder.string()},
        {"gc", folder.string(), "--keep-last", "1"},
        {"delete", folder.string(), "--step", "3"}}) {
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_TRUE(
        Contains(r.err, folder.string() + "\" holds no checkpoint root"))
        << r.err;
  }
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::recursive_directory_iterator(folder)) {
    left.push_back(std::filesystem::relative(e.path(), folder).string());
  }
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"notes", "notes/a.txt"}));

  SaveSteps({1});
  ASSERT_EQ(Ckpt({"delete", root_, "--step", "1"}).exit_code, 0);
  RunResult r = Ckpt({"gc", root_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// gc reports each deleted step as delete does: under its line what the
// step's delete kept and why; --json adds one report per step.
TEST_F(CliTest, GcPrintsWhatEachStepsDeleteKept) {
  SaveSteps({1, 2, 3});
  const std::string dir = "step-000000000001";
  ASSERT_TRUE(
      WriteFile((fs::path(root_) / dir / "notes.txt").string(), "a note\n"));
  const auto one = StepObjectSizes(root_, dir);
  const auto two = StepObjectSizes(root_, "step-000000000002");

  RunResult r = Ckpt({"gc", root_, "--keep-last", "1", "--dry-run", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["deleted_steps"], nlohmann::json({1, 2}));
  ASSERT_EQ(j["step_reports"].size(), 2u) << r.out;
  EXPECT_EQ(j["step_reports"][0]["step"], 2);
  EXPECT_EQ(j["step_reports"][0]["kept"], nlohmann::json::array());
  EXPECT_EQ(j["step_reports"][1]["step"], 1);
  EXPECT_EQ(j["step_reports"][1]["dry_run"], true);
  EXPECT_EQ(j["step_reports"][1]["kept"],
            nlohmann::json::parse(R"([{"key": ")" + dir +
                                  R"(/notes.txt", "bytes": 7,
                "reason": "not_ckpt_object", "named_by": []}])"));
  EXPECT_EQ(j["step_reports"][1]["removed"].size(), one.size() - 1);
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));

  r = Ckpt({"gc", root_, "--keep-last", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t bytes = 0;
  for (const auto* step : {&one, &two}) {
    for (const auto& [key, size] : *step) {
      if (!key.ends_with("notes.txt")) bytes += size;
    }
  }
  EXPECT_EQ(r.out,
            "deleted step 1\n"
            "kept " +
                dir +
                "/notes.txt (7 B): not written by ckpt\n"
                "deleted step 2\n"
                "deleted " +
                std::to_string(one.size() - 1 + two.size()) + " objects (" +
                FormatBytes(bytes) + ")\n");
  EXPECT_EQ(CommittedSteps(root_), std::vector<int64_t>{3});
  EXPECT_TRUE(fs::exists(fs::path(root_) / dir / "notes.txt"));
}

// A running job owns its root: `ckpt gc` and `ckpt delete` beside it are
// refused at once, naming the holder and how to proceed, and change
// nothing; with --lease-wait they wait for the job to end and then run.
TEST_F(CliTest, CommandsBesideARunningJobAreRefusedOrWait) {
  SaveSteps({10, 20});
  auto job = OpenManager(root_);
  ASSERT_NE(job, nullptr);
  State state;
  state.AddBlob("position", "30");
  ASSERT_TRUE(job->Save(30, state).ok());

  RunResult r = Ckpt({"gc", root_, "--keep-last", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "another party owns the root"));
  EXPECT_TRUE(Contains(r.err, "pid " + std::to_string(::getpid())));
  EXPECT_TRUE(Contains(r.err, "--break-lease"));
  r = Ckpt({"delete", root_, "--step", "10"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "another party owns the root"));
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{10, 20, 30}));

  // The job ends a moment after the command started waiting.
  std::thread end([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    job.reset();
  });
  r = Ckpt({"delete", root_, "--step", "10", "--lease-wait", "30"});
  end.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{20, 30}));
}

TEST_F(CliTest, GcKeepBestByMetric) {
  SaveSteps({1, 2, 3});  // loss 1/2, 1/3, 1/4
  RunResult r =
      Ckpt({"gc", root_, "--keep-best", "1", "--metric", "loss", "--max"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // With --max the highest value (step 1) is the best; the newest is always
  // kept.
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 3}));
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// A checkpoint saved by 3 ranks (a row-sharded tensor, a replicated one and
// a rank-local blob): show lists every piece, export consolidates.
TEST_F(CliTest, ShowAndExportAMultiRankCheckpoint) {
  constexpr int64_t kRows = 6, kCols = 5;
  auto comms = NewThreadCommunicators(3);
  std::vector<std::thread> ranks;
  std::vector<Status> results(3);
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      Options o;
      o.communicator = comms[r].get();
      auto mgr = CheckpointManager::Open(root_, o);
      if (!mgr.ok()) {
        results[r] = mgr.status();
        return;
      }
      std::vector<int32_t> rows(2 * kCols);
      for (int64_t k = 0; k < 2 * kCols; ++k) {
        rows[k] = static_cast<int32_t>(r * 2 * kCols + k);
      }
      std::vector<double> bias = {1.5, 2.5};
      State s;
      s.AddTensorPiece("w", {kRows, kCols}, {2 * r, 0},
                       View(std::span<int32_t>(rows), {2, kCols}))
          .AddTensor("bias", View(bias))
          .AddRankLocalBlob("loader", "rank" + std::to_string(r));
      results[r] = (*mgr)->Save(1, s).status();
    });
  }
  for (auto& t : ranks) t.join();
  for (const Status& s : results) ASSERT_TRUE(s.ok()) << s.ToString();

  RunResult r = Ckpt({"show", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json shown = ParseJson(r.out);
  int loaders = 0;
  for (const auto& e : shown["entries"]) {
    if (e["name"] == "w") {
      EXPECT_EQ(e["pieces"], 3);
    }
    if (e["name"] == "bias") {
      EXPECT_EQ(e["pieces"], 1);
    }
    if (e["name"] == "loader") ++loaders;
  }
  EXPECT_EQ(loaders, 3);
  // The save's durations and every rank's write and wait; the people's
  // output names the slowest writer.
  const nlohmann::json& timing = shown["info"]["timing"];
  ASSERT_EQ(timing["ranks"].size(), 3u) << shown["info"].dump();
  int64_t slowest = -1, most = -1;
  for (const auto& t : timing["ranks"]) {
    if (t["write_ms"].get<int64_t>() > most) {
      most = t["write_ms"].get<int64_t>();
      slowest = t["rank"].get<int64_t>();
    }
  }
  RunResult human = Ckpt({"show", root_});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_TRUE(Contains(human.out, "slowest     rank " +
                                      std::to_string(slowest) + ": write " +
                                      std::to_string(most) + " ms"))
      << human.out;

  const std::string file = Path("all.safetensors");
  r = Ckpt({"export", root_, file});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(PyRead(file).exit_code, 0);
  const std::string bytes = ReadFile(file);
  auto header = format::ParseSafetensorsFile(bytes, file);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  std::set<std::string> names;
  for (const auto& t : header->tensors) {
    names.insert(t.name);
    if (t.name != "w") continue;
    EXPECT_EQ(t.shape, (std::vector<int64_t>{kRows, kCols}));
    std::vector<int32_t> w(kRows * kCols);
    std::memcpy(w.data(), bytes.data() + header->data_start + t.begin,
                t.end - t.begin);
    for (int k = 0; k < kRows * kCols; ++k) EXPECT_EQ(w[k], k);
  }
  EXPECT_EQ(names,
            (std::set<std::string>{"w", "bias", "loader@rank00000",
                                   "loader@rank00001", "loader@rank00002"}));
}

// --- bench -------------------------------------------------------------------

// Stopped with SIGINT or SIGTERM (Ctrl-C, a job's time limit) while it
// writes, the bench removes what it wrote (up to a state's size and more)
// and ends as the signal says.
TEST_F(CliTest, BenchStoppedBySignalLeavesNothingBehind) {
  for (const int sig : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string dir = Path("bench-stopped-" + std::to_string(sig));
    std::string program = CKPT_CLI_PATH;
    std::vector<std::string> words = {program,  "bench", "--size", "64MiB",
                                      "--runs", "50",    "--dir",  dir};
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // Once its root holds a checkpoint, it is in the middle of its runs.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!fs::exists(fs::path(dir) / "root" / "LATEST") &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(fs::exists(fs::path(dir) / "root" / "LATEST"));
    kill(pid, sig);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    // --dir was given: the folder stays, empty.
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(dir)) {
      left.push_back(e.path().filename().string());
    }
    EXPECT_EQ(left, std::vector<std::string>{});
  }
}

// A tiny state: the command runs every phase and reports every figure, ratio
// and target (their values are measurements, not checked here).
TEST_F(CliTest, BenchJsonReportsEveryFigureRatioAndTarget) {
  const std::string dir = Path("bench");
  RunResult r = Ckpt({"bench", "--size", "256KiB", "--tensors", "4", "--runs",
                      "2", "--dir", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["config"]["state_bytes"], 256 * 1024);
  EXPECT_EQ(j["config"]["tensors"], 4);
  EXPECT_EQ(j["config"]["runs"], 2);
  const bool direct = j["config"]["o_direct"].get<bool>();
  const std::vector<std::string> direct_only = {
      "raw_write_direct_gbps", "raw_read_direct_gbps",
      "save_vs_raw_write_direct", "load_cold_vs_raw_read_direct"};
  auto expect_numbers = [&](const nlohmann::json& group,
                            const std::vector<std::string>& keys) {
    for (const std::string& k : keys) {
      ASSERT_TRUE(group.contains(k)) << k;
      const bool may_be_null =
          !direct && std::find(direct_only.begin(), direct_only.end(), k) !=
                         direct_only.end();
      if (!may_be_null) {
        EXPECT_TRUE(group[k].is_number()) << k;
      }
    }
  };
  expect_numbers(j["figures"], {"raw_write_buffered_gbps",
                                "raw_write_direct_gbps",
                                "raw_write_best_gbps",
                                "raw_read_cold_gbps",
                                "raw_read_warm_gbps",
                                "raw_read_direct_gbps",
                                "memcpy_gbps",
                                "memcpy_seconds",
                                "parallel_memcpy_gbps",
                                "parallel_memcpy_seconds",
                                "parallel_memcpy_threads",
                                "first_touch_gbps",
                                "save_gbps",
                                "save_seconds",
                                "load_cold_gbps",
                                "load_cold_seconds",
                                "load_warm_gbps",
                                "load_warm_seconds",
                                "load_streaming_cold_gbps",
                                "load_streaming_cold_seconds",
                                "load_floor_seconds",
                                "async_first_stall_seconds",
                                "async_stall_seconds",
                                "async_total_seconds",
                                "peak_rss_sync_mib",
                                "peak_rss_async_mib",
                                "sync_peak_above_state_mib",
                                "load_kept_mib",
                                "load_peak_above_state_and_kept_mib",
                                "async_peak_above_state_and_staging_mib"});
  expect_numbers(j["ratios"],
                 {"save_vs_raw_write_best", "save_vs_raw_write_buffered",
                  "save_vs_raw_write_direct", "load_cold_vs_raw_read_cold",
                  "load_streaming_cold_vs_raw_read_cold", "load_cold_vs_floor",
                  "load_cold_vs_raw_read_direct", "load_warm_vs_raw_read_warm",
                  "async_stall_vs_memcpy", "async_first_stall_vs_memcpy",
                  "async_stall_vs_parallel_memcpy"});
  for (const char* k :
       {"save_vs_raw_write_best >= 0.90",
        "load_streaming_cold_vs_raw_read_cold >= 0.90",
        "load_cold_vs_floor <= 1.10", "async_stall_vs_memcpy <= 1.5",
        "async_stall_vs_parallel_memcpy <= 1.5",
        "sync_peak_above_state_mib <= 64",
        "load_peak_above_state_and_kept_mib <= 64",
        "async_peak_above_state_and_staging_mib <= 64"}) {
    ASSERT_TRUE(j["targets"].contains(k)) << k;
    EXPECT_TRUE(j["targets"][k].is_boolean()) << k;
  }
  // What it wrote is gone; the directory it was given stays.
  EXPECT_TRUE(fs::exists(dir));
  EXPECT_TRUE(fs::is_empty(dir));

  RunResult table = Ckpt({"bench", "--size", "64KiB", "--tensors", "2",
                          "--runs", "1", "--dir", dir});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(Contains(table.out, "in 2 F32 tensors, 1 round (medians)"))
      << table.out;
  EXPECT_TRUE(Contains(table.out, "save_gbps"));
  EXPECT_TRUE(Contains(table.out, "target async_stall_vs_memcpy <= 1.5"));
}

TEST_F(CliTest, BenchRefusesBadSizesAndCounts) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"bench", "--size", "lots"},
                                             {"bench", "--size", "0"},
                                             {"bench", "--tensors", "0"},
                                             {"bench", "--runs", "0"},
                                             {"bench", "--dtype", "F33"},
                                             {"bench", "--device", "bogus"},
                                             {"bench", "--device", "cuda:"}}) {
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << " " << args[2] << ": " << r.err;
  }
}

// CKPT_CUDA_DRIVER set to `path` for the programs a test runs.
class DriverEnv {
 public:
  explicit DriverEnv(const char* path) { setenv("CKPT_CUDA_DRIVER", path, 1); }
  ~DriverEnv() { unsetenv("CKPT_CUDA_DRIVER"); }
};

// A state on the double's device 0 (its "device memory" is host memory): the
// run measures every device figure and checks the bytes it loaded back.
TEST_F(CliTest, BenchOnADeviceReportsItsFiguresAndVerifiesTheLoad) {
  DriverEnv driver(CKPT_FAKE_CUDA);
  const std::string dir = Path("bench");
  RunResult r = Ckpt({"bench", "--device", "cuda:0", "--size", "8MiB",
                      "--tensors", "4", "--runs", "1", "--dir", dir, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["config"]["device"], "cuda:0");
  EXPECT_EQ(j["config"]["cuda_driver"], CKPT_FAKE_CUDA);
  EXPECT_EQ(j["config"]["state_bytes"], 8 << 20);
  EXPECT_EQ(j["load_verified"], true);
  for (const char* k :
       {"pinned_d2h_gbps", "pinned_h2d_gbps", "save_gbps",
        "load_device_cold_gbps", "raw_write_best_gbps", "raw_read_cold_gbps",
        "async_first_stall_seconds", "async_stall_seconds",
        "async_total_seconds", "async_background_return_seconds",
        "async_background_staged_seconds", "async_background_total_seconds",
        "peak_rss_sync_mib", "peak_rss_async_mib"}) {
    ASSERT_TRUE(j["figures"][k].is_number()) << k;
    const double v = j["figures"][k].get<double>();
    EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " " << v;
  }
  for (const char* k : {"async_stall_vs_pinned_d2h", "save_vs_raw_write_best",
                        "load_device_vs_raw_read_cold"}) {
    ASSERT_TRUE(j["ratios"][k].is_number()) << k;
    const double v = j["ratios"][k].get<double>();
    EXPECT_TRUE(std::isfinite(v) && v > 0) << k << " " << v;
  }
  for (const char* k :
       {"async_stall_vs_pinned_d2h <= 1.3", "save_vs_raw_write_best >= 0.90",
        "load_device_vs_raw_read_cold >= 0.85"}) {
    EXPECT_TRUE(j["targets"][k].is_boolean()) << k;
  }
  // The host run's own figures are not reported for a device.
  EXPECT_FALSE(j["figures"].contains("memcpy_gbps"));
  EXPECT_TRUE(fs::is_empty(dir));

  RunResult table = Ckpt({"bench", "--device", "cuda", "--size", "64KiB",
                          "--tensors", "2", "--runs", "1", "--dir", dir});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(Contains(table.out, "on cuda:0"));
  EXPECT_TRUE(Contains(table.out, "pinned_d2h_gbps"));
  EXPECT_TRUE(Contains(table.out, "load verified"));
  EXPECT_TRUE(Contains(table.out, "target async_stall_vs_pinned_d2h <= 1.3"));
}

TEST_F(CliTest, BenchOnADeviceWithoutADriverSaysSo) {
  DriverEnv driver("/nonexistent/libcuda.so.1");
  const std::string dir = Path("bench");
  RunResult r = Ckpt({"bench", "--device", "cuda:0", "--size", "64KiB",
                      "--runs", "1", "--dir", dir});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "ckpt bench: Unavailable: "));
  EXPECT_TRUE(Contains(r.err,
                       "CUDA driver not found: dlopen "
                       "/nonexistent/libcuda.so.1"));
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(CliTest, BenchOnADeviceThatIsNotThereIsAnError) {
  DriverEnv driver(CKPT_FAKE_CUDA);
  RunResult r = Ckpt({"bench", "--device", "cuda:7", "--size", "64KiB",
                      "--runs", "1", "--dir", Path("bench")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_TRUE(Contains(r.err, "--device cuda:7: no such device"));
}

// --- incremental checkpoints and delete

TEST_F(CliTest, IncrementalChainLsVerifyAndDelete) {
  ASSERT_NO_FATAL_FAILURE(SaveChain(root_));
  RunResult r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json ls = nlohmann::json::parse(r.out);
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(ls[0]["depends_on"], nlohmann::json::array());
  EXPECT_EQ(ls[2]["depends_on"], nlohmann::json({1, 2}));
  EXPECT_EQ(ls[2]["chain"], 2);
  // Step 3 wrote one 4 KiB chunk itself and references three.
  EXPECT_LT(ls[2]["bytes"].get<uint64_t>(), 4096u + 512u);
  EXPECT_EQ(ls[2]["referenced_bytes"].get<uint64_t>(),
            ls[0]["bytes"].get<uint64_t>() + ls[1]["bytes"].get<uint64_t>());
  r = Ckpt({"ls", root_});
  EXPECT_TRUE(Contains(r.out, "1,2")) << r.out;

  r = Ckpt({"verify", root_, "--all"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;

  // Step 1 is depended on: refused, naming the dependants.
  r = Ckpt({"delete", root_, "--step", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "2, 3")) << r.err;
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));
  r = Ckpt({"delete", root_, "--step", "1", "--force"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{2, 3}));
  r = Ckpt({"verify", root_, "--all"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  r = Ckpt({"delete", root_, "--step", "7"});
  EXPECT_EQ(r.exit_code, 1);
  r = Ckpt({"delete", root_});
  EXPECT_EQ(r.exit_code, 2) << "--step is required";
}

// show's "bytes" line counts the objects that hold those bytes: the step's
// own, not the earlier steps' an incremental step references (the
// "references" line has those).
TEST_F(CliTest, ShowOfAnIncrementalStepCountsItsOwnObjects) {
  ASSERT_NO_FATAL_FAILURE(SaveChain(root_));
  RunResult r = Ckpt({"show", root_, "--step", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = Lines(r.out);
  std::string bytes;
  for (const std::string& l : lines) {
    if (l.rfind("bytes ", 0) == 0) bytes = l;
  }
  EXPECT_TRUE(bytes.ends_with(" in 1 object")) << r.out;
  EXPECT_TRUE(Contains(r.out, "references ")) << r.out;
  // --json lists every object the step reads, its own and the referenced.
  r = Ckpt({"show", root_, "--step", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ParseJson(r.out)["objects"].size(), 3u) << r.out;
}

// A refused delete names the way out (--force) as well as the dependants,
// in the number they come in; it changes nothing.
TEST_F(CliTest, DeleteRefusedForDependantsNamesForce) {
  ASSERT_NO_FATAL_FAILURE(SaveChain(root_));
  RunResult r = Ckpt({"delete", root_, "--step", "1"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err,
                       "steps 2, 3 depend on it; delete them first, or give "
                       "--force to copy what they reference into them"))
      << r.err;
  r = Ckpt({"delete", root_, "--step", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err,
                       "step 3 depends on it; delete it first, or give "
                       "--force to copy what it references into it"))
      << r.err;
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));
  // Not depended on: refused for another reason, with no word of --force.
  r = Ckpt({"delete", root_, "--step", "7"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(Contains(r.err, "--force")) << r.err;
}

// --- delete --json

// The objects of `root`'s step directory `step`: keys relative to the root,
// and their bytes.
std::pair<std::set<std::string>, uint64_t> StepObjects(const std::string& root,
                                                       const std::string& dir) {
  std::set<std::string> keys;
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(fs::path(root) / dir)) {
    keys.insert(dir + "/" + e.path().filename().string());
    bytes += fs::file_size(e.path());
  }
  return {keys, bytes};
}

TEST_F(CliTest, DeleteJsonListsWhatItDeleted) {
  SaveSteps({1, 2, 3});
  const auto [keys, bytes] = StepObjects(root_, "step-000000000002");
  ASSERT_TRUE(keys.contains("step-000000000002/MANIFEST.json"));
  ASSERT_GE(keys.size(), 2u) << "the manifest and a data object";

  RunResult r = Ckpt({"delete", root_, "--step", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["deleted_steps"], nlohmann::json({2}));
  EXPECT_EQ(j["deleted_objects"].get<std::set<std::string>>(), keys);
  EXPECT_EQ(j["deleted_objects"].size(), keys.size()) << "each once";
  EXPECT_EQ(j["bytes_freed"].get<uint64_t>(), bytes);
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(Ckpt({"verify", root_, "--all"}).exit_code, 0);

  // Without --json one line for people: the step, its objects and bytes.
  const auto [keys1, bytes1] = StepObjects(root_, "step-000000000001");
  r = Ckpt({"delete", root_, "--step", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "deleted step 1: " + std::to_string(keys1.size()) +
                       " objects (" + FormatBytes(bytes1) + ")\n");

  // A delete that fails prints no JSON.
  r = Ckpt({"delete", root_, "--step", "2", "--json"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(Contains(r.err, "ckpt delete: ")) << r.err;
}

// --force copies the bytes dependants reference into their own directories:
// those new objects are not in the report, and none of their data objects
// went (an indexed dependant's manifest is rewritten, and its old directory
// and indexes with it).
TEST_F(CliTest, DeleteForceJsonListsOnlyTheDeletedStep) {
  ASSERT_NO_FATAL_FAILURE(SaveChain(root_));
  const auto [keys, bytes] = StepObjects(root_, "step-000000000001");
  const auto sizes = StepObjectSizes(root_, "step-000000000001");
  const auto [kept2, kept2_bytes] = StepObjects(root_, "step-000000000002");

  RunResult r = Ckpt({"delete", root_, "--step", "1", "--force", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["deleted_steps"], nlohmann::json({1}));
  EXPECT_EQ(j["deleted_objects"].get<std::set<std::string>>(), keys);
  EXPECT_EQ(j["bytes_freed"].get<uint64_t>(), bytes);
  // The report: each dependant with the bytes of step 1 copied into it
  // (step 2 read chunks 0, 1 and 3 of it, step 3 chunks 0 and 1), each
  // object removed with its bytes, nothing kept or skipped.
  EXPECT_EQ(j["step"], 1);
  EXPECT_EQ(j["dry_run"], false);
  EXPECT_EQ(j["manifest_deleted"], true);
  EXPECT_EQ(j["rewritten"], nlohmann::json::parse(R"([
      {"step": 2, "bytes_copied": 12288}, {"step": 3, "bytes_copied": 8192}])"));
  std::map<std::string, uint64_t> removed;
  for (const nlohmann::json& o : j["removed"]) {
    removed[o["key"].get<std::string>()] = o["bytes"].get<uint64_t>();
  }
  EXPECT_EQ(removed, sizes);
  EXPECT_EQ(j["kept"], nlohmann::json::array());
  EXPECT_EQ(j["skipped"], nlohmann::json::array());
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{2, 3}));
  for (const std::string& key : kept2) {
    if (!key.ends_with(".safetensors")) continue;
    EXPECT_TRUE(fs::exists(fs::path(root_) / key)) << key;
  }
  EXPECT_EQ(Ckpt({"verify", root_, "--all"}).exit_code, 0);
}

// `delete --force` prints what it rewrote, what it kept in the step's
// directory and why, and what it deleted; --dry-run prints the same and
// changes nothing.
TEST_F(CliTest, DeletePrintsItsReport) {
  ASSERT_NO_FATAL_FAILURE(SaveChain(root_));
  const std::string dir = "step-000000000001";
  ASSERT_TRUE(
      WriteFile((fs::path(root_) / dir / "notes.txt").string(), "the user's"));
  auto sizes = StepObjectSizes(root_, dir);
  sizes.erase(dir + "/notes.txt");
  uint64_t bytes = 0;
  for (const auto& [key, size] : sizes) bytes += size;
  const std::string count = std::to_string(sizes.size());

  RunResult r = Ckpt({"delete", root_, "--step", "1", "--force", "--dry-run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "would rewrite step 2: copy 12.0 KiB of step 1 into it\n"
            "would rewrite step 3: copy 8.0 KiB of step 1 into it\n"
            "kept " +
                dir +
                "/notes.txt (10 B): not written by ckpt\n"
                "would delete step 1: " +
                count + " objects (" + FormatBytes(bytes) + ")\n");
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(StepObjectSizes(root_, dir).size(), sizes.size() + 1);

  r = Ckpt({"delete", root_, "--step", "1", "--force", "--dry-run", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = ParseJson(r.out);
  EXPECT_EQ(j["dry_run"], true);
  EXPECT_EQ(j["kept"], nlohmann::json::parse(R"([{"key": ")" + dir +
                                             R"(/notes.txt", "bytes": 10,
      "reason": "not_ckpt_object", "named_by": []}])"));
  EXPECT_EQ(j["bytes_freed"].get<uint64_t>(), bytes);
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));

  r = Ckpt({"delete", root_, "--step", "1", "--force"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "rewrote step 2: copied 12.0 KiB of step 1 into it\n"
            "rewrote step 3: copied 8.0 KiB of step 1 into it\n"
            "kept " +
                dir +
                "/notes.txt (10 B): not written by ckpt\n"
                "deleted step 1: " +
                count + " objects (" + FormatBytes(bytes) + ")\n");
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(StepObjectSizes(root_, dir),
            (std::map<std::string, uint64_t>{{dir + "/notes.txt", 10}}));
  EXPECT_EQ(Ckpt({"verify", root_, "--all"}).exit_code, 0);
}

// A dry run of delete --force checks that the data it would copy into the
// dependants is there: where the real run would fail (an object of the
// step gone), the dry run fails as well, naming the object, and neither
// changes anything.
TEST_F(CliTest, DeleteForceDryRunFailsWhereTheDeleteWould) {
  ASSERT_NO_FATAL_FAILURE(SaveChain(root_));
  const std::string dir = "step-000000000001";
  std::string gone;
  for (const auto& [key, size] : StepObjectSizes(root_, dir)) {
    if (key.ends_with(".safetensors")) gone = key;
  }
  ASSERT_FALSE(gone.empty());
  ASSERT_TRUE(fs::remove(fs::path(root_) / gone));
  const RunResult dry =
      Ckpt({"delete", root_, "--step", "1", "--force", "--dry-run"});
  const RunResult dry_json =
      Ckpt({"delete", root_, "--step", "1", "--force", "--dry-run", "--json"});
  const RunResult real = Ckpt({"delete", root_, "--step", "1", "--force"});
  for (const RunResult* r : {&dry, &dry_json, &real}) {
    EXPECT_EQ(r->exit_code, 1) << r->out;
    EXPECT_TRUE(Contains(r->err, "rewrite step 2 without step 1")) << r->err;
    EXPECT_TRUE(Contains(r->err, gone)) << r->err;
    EXPECT_TRUE(r->out.empty()) << r->out;
  }
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{1, 2, 3}));
}

// The progress bars of import and export are for terminals: into a pipe
// (and with --json) nothing is drawn.
TEST_F(CliTest, ImportAndExportDrawNoBarIntoAPipe) {
  const std::string file = Path("in.safetensors");
  ASSERT_TRUE(
      WriteFile(file, BuildSafetensors({{"w", "F32", {4}, Bytes(16, 1)}}, {})));
  for (bool json : {false, true}) {
    const std::string step = json ? "2" : "1";
    std::vector<std::string> args = {"import", file, root_, "--step", step};
    if (json) args.push_back("--json");
    RunResult r = Ckpt(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    const std::string out = Path("out" + step + ".safetensors");
    args = {"export", root_, "--step", step, out};
    if (json) args.push_back("--json");
    r = Ckpt(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    RunResult py_in = PyRead(file);
    RunResult py_out = PyRead(out);
    ASSERT_EQ(py_out.exit_code, 0) << py_out.err;
    EXPECT_EQ(ParseJson(py_out.out), ParseJson(py_in.out));
  }
}

// On a terminal `delete --force` draws a bar over the bytes it copies into
// the dependants, and `gc` one over the bytes it frees; into a pipe, and
// with --json, they draw none.
TEST_F(CliTest, DeleteForceAndGcDrawABarOnATerminalOnly) {
  // Step 2 reads chunks 0, 1 and 3 of step 1, step 3 chunks 0 and 1.
  const std::string copied = "20.0 KiB / 20.0 KiB";
  const std::vector<std::string> hows = {"pipe", "terminal --json", "terminal"};
  for (size_t i = 0; i < hows.size(); ++i) {
    const std::string& how = hows[i];
    SCOPED_TRACE(how);
    const std::string root = Path("chain" + std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(SaveChain(root));
    std::vector<std::string> args = {"delete", root, "--step", "1", "--force"};
    RunResult r;
    if (how == "pipe") {
      r = Ckpt(args);
      EXPECT_EQ(r.err, "");
    } else if (how == "terminal --json") {
      args.push_back("--json");
      r = CkptOnTerminal(args);
      EXPECT_FALSE(Contains(r.out, "copy into")) << r.out;
    } else {
      r = CkptOnTerminal(args);
      EXPECT_TRUE(Contains(r.out, "delete step 1: copy into 2, 3 ["));
      EXPECT_TRUE(Contains(r.out, "] 100%  " + copied));
      EXPECT_TRUE(Contains(r.out, "deleted step 1"));
    }
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(CommittedSteps(root), (std::vector<int64_t>{2, 3}));
  }

  SaveSteps({1, 2, 3, 4});
  RunResult r = Ckpt({"gc", root_, "--keep-last", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  r = CkptOnTerminal({"gc", root_, "--keep-last", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(Contains(r.out, "gc " + root_ + " [")) << r.out;
  const auto [doomed, bytes] = StepObjects(root_, "step-000000000003");
  r = CkptOnTerminal({"gc", root_, "--keep-last", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(Contains(r.out, "gc " + root_ + " ["));
  EXPECT_TRUE(Contains(
      r.out, "] 100%  " + FormatBytes(bytes) + " / " + FormatBytes(bytes)));
  EXPECT_TRUE(Contains(r.out, "deleted step 3"));
  EXPECT_EQ(CommittedSteps(root_), (std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace ckpt
