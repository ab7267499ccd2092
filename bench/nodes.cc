// bench_nodes: every byte read once, measured on nodes of their own
// (docs/benchmarks.md). Brings up the node bed (scripts/node-bed.sh: four
// nodes on this machine, each with its own network, host name and
// /dev/shm), saves a state under mpirun, 8 ranks on the 4 nodes, into a
// file:// folder every node sees, in two layouts (fully replicated, as a
// data-parallel job holds it, and sharded along dimension 0, one piece a
// rank), and loads it back four ways, each with LoadOptions::read_once on
// (kOn), off (kOff) and as the default decides (kAuto):
//
//   replicated     8 ranks, every rank the whole state
//   sharded        8 ranks, each its own piece
//   reshard_8_6    6 ranks, each its even split (boxes across the pieces)
//   reshard_8_12  12 ranks (3 a node), likewise
//
// For each it reports the read amplification (bytes every rank read from
// storage, manifests included, over the bytes of the union of the ranks'
// boxes: the state once) and the slowest rank's Load; and two ratios:
// read_once_speedup_replicated (the replicated load's time off over its
// time on: above 1, reading once is faster) and default_vs_best_worst (for
// each case the default's time over the better of on and off; the worst
// case's). Every loaded byte is compared with what was saved; a wrong one
// fails the run. Each measured load follows an uncounted twin of itself
// (--no-twins: one uncounted load before all); twin_spread_worst is the
// most the two differed (the machine's spread between identical jobs,
// beside which the ratios are read). Beside them, the bed's own
// network without ckpt: every rank sends its eighth of the state to every other
// in rounds of MPI_Sendrecv (bed_exchange_s), and replicated_on_vs_bed_floor,
// the replicated load read once over what it could take here at best (a node's
// quarter through its link, then that exchange). The bed goes down at the end,
// after a failure, and on SIGINT, SIGTERM or SIGHUP.
//
//   bench_nodes [--mib 512] [--tensors 32] [--dir /var/tmp] [--runs 1]
//               [--storage-mbps 0] [--json] [--timeout 600] [--no-twins]
//
// --runs N loads each case N times in each mode (the modes taking turns)
// and reports the median load time (and every run's) and the most bytes
// read; --timeout ends a job (one mpirun) that runs longer.
// --storage-mbps R gives each node a link to the storage of R MB/s (10^6
// bytes), as a network store's: every rank reaches the root through
// NewRateLimitedStorage pacing reads and writes (the save's too), one
// budget for the ranks of a node, kept in a file in the node's /dev/shm.
// 0, the default: no limit (the nodes' one page cache, read at memory
// speed).
//
// Needs root (network namespaces) and ip, unshare and nsenter; otherwise it
// says "no node bed: " and why, and exits with 77.
#include "nodes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nlohmann/json.hpp"

extern char** environ;

namespace ckpt_bench_nodes {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr int kNodes = 4;
constexpr int kSaveRanks = 8;  // two a node
constexpr int kUnavailable = 77;

struct Args {
  int64_t mib = 512;
  int tensors = 32;
  std::string dir = "/var/tmp";
  bool json = false;
  int timeout = 600;        // seconds, per mpirun job
  int runs = 1;             // loads of each case and mode
  bool twins = true;        // an uncounted twin before each measured load
  double storage_mbps = 0;  // each node's link to storage; 0: no limit
};

// The modes of LoadOptions::read_once, as the ranks take them.
const char* const kModes[] = {"on", "off", "auto"};

// One load of the benchmark: a layout on a number of ranks.
struct Case {
  const char* name;
  const char* layout;
  int ranks;
  std::vector<std::string> mpirun_options;
};

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"replicated", kReplicated, 8, {}},
      {"sharded", kSharded, 8, {}},
      {"reshard_8_6", kSharded, 6, {}},
      // The hostfile gives each node 2 slots; 3 a node is one more.
      {"reshard_8_12",
       kSharded,
       12,
       {"--map-by", "ppr:3:node", "--oversubscribe"}},
  };
  return cases;
}

// The process group of the job running now (0: none), for the signal
// watcher to end.
std::atomic<pid_t> running_group{0};

// Runs `cmd` in a process group of its own, its output to `log`; waits at
// most `timeout` seconds (then kills the group). The exit code, 128 + a
// signal, or -1 if it had to be killed.
int Run(const std::vector<std::string>& cmd, const std::string& log,
        int timeout) {
  std::vector<char*> argv;
  for (const std::string& a : cmd) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  pid_t pid = -1;
  const int err =
      posix_spawnp(&pid, argv[0], &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    std::ofstream(log, std::ios::app)
        << "cannot start " << cmd[0] << ": " << std::strerror(err) << "\n";
    return 127;
  }
  running_group = pid;
  const auto deadline = Clock::now() + std::chrono::seconds(timeout);
  int status = 0;
  int code = -1;
  for (;;) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (Clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      std::ofstream(log, std::ios::app)
          << "bench_nodes: ended after " << timeout << " s\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  running_group = 0;
  return code;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The node bed, named after this process so that it meets no other.
class Bed {
 public:
  Bed(std::string script, std::string scratch)
      : script_(std::move(script)),
        scratch_(std::move(scratch)),
        name_("bn" + std::to_string(getpid())) {}

  const std::string& name() const { return name_; }

  // The script with `args`; its exit code, its output appended to `log`.
  int Script(const std::vector<std::string>& args, const std::string& log,
             int timeout = 120) {
    std::vector<std::string> cmd = {script_, name_};
    cmd.insert(cmd.end(), args.begin(), args.end());
    return Run(cmd, log, timeout);
  }

  // Brings it up; "" or why not. `unavailable` says the machine cannot
  // have one (no capabilities), not that making it failed.
  std::string Up(bool& unavailable) {
    const std::string log = scratch_ + "/bed-up.log";
    // Down from here on, even if `up` is stopped half-way (it leaves
    // namespaces behind); `down` of a bed that is not there does nothing.
    up_ = true;
    // Each node's /dev/shm as a machine's own is by default, up to half
    // its memory (the bed's default, 64 MiB, is a container's: too small
    // for the memory a node's ranks share in a read-once load, which they
    // then hold each for itself).
    if (Script({"up", std::to_string(kNodes), "--shm-size", "50%", "--owner",
                std::to_string(getpid())},
               log) == 0) {
      return "";
    }
    const std::string err = ReadText(log);
    unavailable = err.find("not permitted") != std::string::npos ||
                  err.find("Permission denied") != std::string::npos;
    return "cannot make the node bed: " + err;
  }

  // Takes it down (idempotent); false if the script failed.
  bool Down() {
    if (!up_) return true;
    up_ = false;
    return Script({"down"}, scratch_ + "/bed-down.log") == 0;
  }

 private:
  std::string script_, scratch_, name_;
  bool up_ = false;
};

// The folder of this run: the roots, the jobs' logs and what they wrote.
std::string work_dir;

// The signal that asked the run to stop (0: none).
std::atomic<int> interrupted{0};

// Waits for SIGINT, SIGTERM or SIGHUP (blocked in every thread but this
// one's sigwait) and ends the job running now; the main thread then skips
// the rest, takes the bed down and removes the work folder.
void WatchSignals(sigset_t set) {
  int sig = 0;
  sigwait(&set, &sig);
  interrupted = sig;
  std::fprintf(stderr, "bench_nodes: signal %d: stopping\n", sig);
  const pid_t group = running_group.load();
  if (group > 0) kill(-group, SIGKILL);
}

std::string Why(const std::string& tool) {
  return std::system(("command -v " + tool + " >/dev/null 2>&1").c_str()) == 0
             ? ""
             : "needs " + tool + " on the PATH";
}

// What a job's ranks wrote, one object a line.
std::vector<json> Lines(const std::string& file) {
  std::vector<json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

std::string SelfPath() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("bench_nodes") : p.string();
}

int Usage(const char* msg) {
  std::fprintf(stderr,
               "%s%susage: bench_nodes [--mib 512] [--tensors 32] "
               "[--dir /var/tmp] [--runs 1] [--storage-mbps 0] [--json] "
               "[--timeout 600] [--no-twins]\n",
               msg, *msg ? "\n" : "");
  return 2;
}

struct Measured {
  json save;      // the save job's line
  json exchange;  // the bed's exchange without ckpt (the rank side's)
  // "<case>/<on|off|auto>": each run's line.
  std::map<std::string, std::vector<json>> load;
  // "<case>/<on|off|auto>": each uncounted twin's load time (--no-twins:
  // none).
  std::map<std::string, std::vector<double>> twin;
};

// The jobs, on a bed that is up; 0, or 1 after saying what failed.
int Jobs(const Args& a, Bed& bed, Measured& m) {
  const std::string self = SelfPath();
  const std::string roots = work_dir + "/roots";
  fs::create_directories(roots);
  const auto common = [&](const std::string& what) {
    return std::vector<std::string>{self,
                                    "--rank",
                                    what,
                                    "--dir",
                                    roots,
                                    "--mib",
                                    std::to_string(a.mib),
                                    "--tensors",
                                    std::to_string(a.tensors),
                                    "--storage-mbps",
                                    std::to_string(a.storage_mbps)};
  };
  const auto job = [&](const std::string& label, int ranks,
                       const std::vector<std::string>& options,
                       std::vector<std::string> rank_args) {
    if (interrupted != 0) return std::vector<json>();
    const std::string log = work_dir + "/" + label + ".log";
    const std::string out = work_dir + "/" + label + ".json";
    std::vector<std::string> args = {"mpirun", "-np", std::to_string(ranks)};
    // The ranks' log (CKPT_LOG=info: what read-once measured and chose),
    // which mpirun passes on only when asked.
    if (std::getenv("CKPT_LOG") != nullptr) {
      args.insert(args.end(), {"-x", "CKPT_LOG"});
    }
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), rank_args.begin(), rank_args.end());
    args.push_back("--out");
    args.push_back(out);
    std::fprintf(stderr, "bench_nodes: %s on %d ranks\n", label.c_str(), ranks);
    const auto t0 = Clock::now();
    const int rc = bed.Script(args, log, a.timeout);
    std::fprintf(stderr, "bench_nodes: %s: exit %d after %.1f s\n",
                 label.c_str(), rc,
                 std::chrono::duration<double>(Clock::now() - t0).count());
    if (interrupted != 0) return std::vector<json>();
    if (rc == 0 && std::getenv("CKPT_LOG") != nullptr) {
      std::fprintf(stderr, "%s", ReadText(log).c_str());
    }
    if (rc != 0) {
      std::fprintf(stderr,
                   "bench_nodes: %s failed (exit %d); its output:\n%s\n",
                   label.c_str(), rc, ReadText(log).c_str());
      // Whatever of the job is left in the nodes.
      bed.Script({"reap"}, log);
      return std::vector<json>();
    }
    return Lines(out);
  };

  std::vector<json> saved = job("save", kSaveRanks, {}, common("save"));
  if (saved.size() != 1) return 1;
  m.save = saved[0];
  std::vector<json> exchanged =
      job("exchange", kSaveRanks, {}, common("exchange"));
  if (exchanged.size() != 1) return 1;
  m.exchange = exchanged[0];
  const uint64_t needed = ShapeFor(a.mib, a.tensors).Bytes();
  // A load job's rank arguments: case `c` in read-once `mode`.
  const auto load_args = [&](const Case& c, const std::string& mode) {
    std::vector<std::string> args = common("load");
    args.insert(args.end(), {"--layout", c.layout, "--read-once", mode});
    return args;
  };
  // A load that is not counted: its line, or none after saying it loaded
  // a byte wrong or failed.
  const auto uncounted = [&](const std::string& label, const Case& c,
                             const std::string& mode) -> std::optional<json> {
    const std::vector<json> lines =
        job(label, c.ranks, c.mpirun_options, load_args(c, mode));
    if (lines.size() != 1 || lines[0].at("wrong_bytes") != 0) {
      std::fprintf(stderr, "bench_nodes: the uncounted load %s failed\n",
                   label.c_str());
      return std::nullopt;
    }
    return lines[0];
  };
  // Each measured load follows an uncounted twin (the same case and mode),
  // so every mode meets the machine as a job like its own left it: on this
  // VM a job's time depends on the one before (the first load after the
  // save took 1.5-1.7 times as long as later; the host takes back memory
  // a job frees, in passes that the next job pays for; docs/benchmarks.md),
  // and in a fixed order the default always followed `off`, which frees
  // the most. --no-twins: one uncounted load before all.
  if (!a.twins && !uncounted("warm-up", Cases().front(), "on")) return 1;
  for (const Case& c : Cases()) {
    // The modes take turns, so that whatever else the machine does
    // weighs on both alike.
    for (int run = 0; run < a.runs; ++run) {
      for (const std::string mode : kModes) {
        const std::string label = std::string(c.name) + "-" + mode +
                                  (a.runs > 1 ? "-" + std::to_string(run) : "");
        if (a.twins) {
          // Its time says how far two identical jobs land apart here.
          const std::optional<json> twin = uncounted(label + "-twin", c, mode);
          if (!twin) return 1;
          m.twin[std::string(c.name) + "/" + mode].push_back(
              twin->at("load_s").get<double>());
        }
        const std::vector<json> lines =
            job(label, c.ranks, c.mpirun_options, load_args(c, mode));
        if (lines.size() != 1) return 1;
        const json& l = lines[0];
        // Each rank checks its own box; together they cover the state once
        // (sharded), or once a rank (replicated).
        const uint64_t want =
            std::string(c.layout) == kReplicated ? needed * c.ranks : needed;
        if (l.at("read_once") != mode || l.at("wrong_bytes") != 0 ||
            l.at("verified_bytes") != want) {
          std::fprintf(stderr,
                       "bench_nodes: %s: %llu bytes loaded wrong, %llu checked "
                       "of %llu; the ranks' messages:\n%s\n",
                       label.c_str(),
                       static_cast<unsigned long long>(l.at("wrong_bytes")),
                       static_cast<unsigned long long>(l.at("verified_bytes")),
                       static_cast<unsigned long long>(want),
                       ReadText(work_dir + "/" + label + ".log").c_str());
          return 1;
        }
        m.load[std::string(c.name) + "/" + mode].push_back(l);
      }
    }
  }
  return 0;
}

// The runs of one case and mode as one: the median load time (and every
// run's), the most bytes read.
json Merged(const std::vector<json>& runs) {
  std::vector<double> secs;
  json out = runs.at(0);
  for (const json& r : runs) {
    secs.push_back(r.at("load_s"));
    for (const char* k : {"read_bytes", "max_rank_read_bytes"}) {
      out[k] = std::max(out[k].get<uint64_t>(), r.at(k).get<uint64_t>());
    }
  }
  out["load_s_runs"] = secs;
  std::sort(secs.begin(), secs.end());
  const size_t n = secs.size();
  out["load_s"] = n % 2 ? secs[n / 2] : (secs[n / 2 - 1] + secs[n / 2]) / 2;
  return out;
}

// What the replicated load read once could take on this bed at best: each
// node reads its ranks' shares (a quarter of the state) through its link,
// then the ranks exchange them at the bed's own speed (Measured::exchange).
double BedFloor(const Args& a, const Measured& m) {
  const double node_share =
      static_cast<double>(ShapeFor(a.mib, a.tensors).Bytes()) / kNodes;
  const double read_s =
      a.storage_mbps > 0 ? node_share / (a.storage_mbps * 1e6) : 0.0;
  return read_s + m.exchange.at("exchange_s").get<double>();
}

void Report(const Args& a, const std::string& bed_name, const Measured& m) {
  const Shape s = ShapeFor(a.mib, a.tensors);
  const double bed_floor = BedFloor(a, m);
  const double needed = static_cast<double>(s.Bytes());
  json ratios = json::object(), load_s = json::object(), cases = json::object();
  double worst = 0;
  // The most a measured load and its twin (the same job, run just before)
  // differed, as a fraction of the twin's time: the machine's spread
  // between identical jobs, beside which the ratios are read.
  double twin_spread = 0;
  for (const Case& c : Cases()) {
    std::map<std::string, json> by_mode;
    for (const char* mode : kModes) {
      by_mode[mode] = Merged(m.load.at(std::string(c.name) + "/" + mode));
    }
    const json& on = by_mode["on"];
    const std::string key = std::string("read_amplification_") + c.name;
    // No suffix: read once (kOn), as before the default could decide.
    for (const char* mode : kModes) {
      const std::string suffix =
          std::string(mode) == "on" ? "" : std::string("_") + mode;
      ratios[key + suffix] =
          by_mode[mode].at("read_bytes").get<double>() / needed;
      load_s[c.name + suffix] = by_mode[mode].at("load_s");
    }
    const double t_on = on.at("load_s"), t_off = by_mode["off"].at("load_s");
    const double t_auto = by_mode["auto"].at("load_s");
    const double vs_best = t_auto / std::min(t_on, t_off);
    ratios[std::string("default_vs_best_") + c.name] = vs_best;
    worst = std::max(worst, vs_best);
    if (std::string(c.name) == "replicated") {
      ratios["read_once_speedup_replicated"] = t_off / t_on;
      ratios["replicated_on_vs_bed_floor"] = t_on / bed_floor;
    }
    json entry = {{"layout", c.layout},
                  {"ranks", c.ranks},
                  {"nodes_used", on.at("nodes_used")},
                  {"needed_bytes", s.Bytes()}};
    for (const auto& [mode, l] : by_mode) {
      entry[mode] = {{"read_bytes", l.at("read_bytes")},
                     {"max_rank_read_bytes", l.at("max_rank_read_bytes")},
                     {"load_s", l.at("load_s")},
                     {"load_s_runs", l.at("load_s_runs")},
                     {"verified_bytes", l.at("verified_bytes")},
                     {"wrong_bytes", l.at("wrong_bytes")}};
      const auto twins = m.twin.find(std::string(c.name) + "/" + mode);
      if (twins == m.twin.end()) continue;
      entry[mode]["twin_load_s"] = twins->second;
      const std::vector<double> runs = l.at("load_s_runs");
      for (size_t i = 0; i < runs.size() && i < twins->second.size(); ++i) {
        twin_spread =
            std::max(twin_spread, std::abs(runs[i] / twins->second[i] - 1.0));
      }
    }
    cases[c.name] = entry;
  }
  ratios["default_vs_best_worst"] = worst;
  if (a.json) {
    const json out = {
        {"state_bytes", s.Bytes()},
        {"tensors", s.tensors},
        {"runs", a.runs},
        {"twins", a.twins},
        {"tensor_shape", {s.rows, s.cols}},
        {"dtype", "U32"},
        {"nodes", kNodes},
        {"save_ranks", kSaveRanks},
        {"bed", bed_name},
        {"storage_mbps", a.storage_mbps},
        {"bed_exchange_s", m.exchange.at("exchange_s")},
        {"bed_exchange_bytes_per_rank", m.exchange.at("bytes_per_rank")},
        {"replicated_read_once_floor_s", bed_floor},
        {"save_s",
         {{"replicated", m.save.at("replicated_save_s")},
          {"sharded", m.save.at("sharded_save_s")}}},
        {"ratios", ratios},
        {"twin_spread_worst", a.twins ? json(twin_spread) : json()},
        {"load_s", load_s},
        {"cases", cases},
        {"every_byte_right", true}};
    std::printf("%s\n", out.dump(1).c_str());
    return;
  }
  std::printf(
      "bench_nodes: %.1f MiB in %d U32 tensors of %lld x %lld, saved by %d "
      "ranks on %d nodes (replicated %.2f s, sharded %.2f s); storage %s\n",
      needed / (1 << 20), s.tensors, static_cast<long long>(s.rows),
      static_cast<long long>(s.cols), kSaveRanks, kNodes,
      m.save.at("replicated_save_s").get<double>(),
      m.save.at("sharded_save_s").get<double>(),
      a.storage_mbps > 0
          ? (std::to_string(static_cast<long long>(a.storage_mbps)) +
             " MB/s a node")
                .c_str()
          : "unlimited");
  std::printf("%-14s %5s %5s  %19s  %20s  %9s\n", "case", "ranks", "nodes",
              "ratio on/off/auto", "load s on/off/auto", "auto/best");
  for (const Case& c : Cases()) {
    const std::string key = std::string("read_amplification_") + c.name;
    const std::string n = c.name;
    std::printf("%-14s %5d %5d  %6.3f %6.3f %6.3f  %6.3f %6.3f %6.3f  %9.3f\n",
                c.name, c.ranks, cases[c.name]["nodes_used"].get<int>(),
                ratios[key].get<double>(), ratios[key + "_off"].get<double>(),
                ratios[key + "_auto"].get<double>(), load_s[n].get<double>(),
                load_s[n + "_off"].get<double>(),
                load_s[n + "_auto"].get<double>(),
                ratios["default_vs_best_" + n].get<double>());
  }
  std::printf(
      "ratio: bytes all ranks read from storage (manifests included) / "
      "bytes of the state; load s: the slowest rank's Load, median of %d "
      "run%s; every loaded byte checked\n"
      "read-once speedup, replicated (off / on): %.3f; default over the "
      "better mode, worst case: %.3f\n",
      a.runs, a.runs == 1 ? "" : "s",
      ratios["read_once_speedup_replicated"].get<double>(),
      ratios["default_vs_best_worst"].get<double>());
  if (a.twins) {
    std::printf(
        "identical jobs: a measured load and its uncounted twin before it "
        "differed by up to %.1f%%\n",
        100 * twin_spread);
  }
  std::printf(
      "the bed's network without ckpt: %.1f MiB to each rank (its share "
      "from each other, MPI_Sendrecv) in %.3f s; replicated read once at "
      "best %.3f s (that and a node's share through its link), took %.3f "
      "times that\n",
      m.exchange.at("bytes_per_rank").get<double>() / (1 << 20),
      m.exchange.at("exchange_s").get<double>(), bed_floor,
      ratios["replicated_on_vs_bed_floor"].get<double>());
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        Usage((f + " needs a value").c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (f == "--mib") {
      a.mib = std::atoll(value().c_str());
    } else if (f == "--tensors") {
      a.tensors = std::atoi(value().c_str());
    } else if (f == "--dir") {
      a.dir = value();
    } else if (f == "--runs") {
      a.runs = std::atoi(value().c_str());
    } else if (f == "--no-twins") {
      a.twins = false;
    } else if (f == "--timeout") {
      a.timeout = std::atoi(value().c_str());
    } else if (f == "--storage-mbps") {
      a.storage_mbps = std::atof(value().c_str());
    } else if (f == "--json") {
      a.json = true;
    } else if (f == "--help") {
      Usage("");
      return 0;
    } else {
      return Usage(("unknown option " + f).c_str());
    }
  }
  if (a.mib < 1 || a.tensors < 1 || a.timeout < 1 || a.runs < 1) {
    return Usage("--mib, --tensors, --runs and --timeout must be at least 1");
  }
  if (!(a.storage_mbps >= 0)) return Usage("--storage-mbps must be 0 or more");
  std::string why =
      geteuid() == 0 ? "" : "needs root to make network namespaces";
  for (const char* tool : {"ip", "unshare", "nsenter", CKPT_MPIRUN}) {
    if (why.empty()) why = Why(tool);
  }
  if (!why.empty()) {
    std::fprintf(stderr, "bench_nodes: no node bed: %s\n", why.c_str());
    return kUnavailable;
  }
  // The loads say themselves whether they read once.
  unsetenv("CKPT_READ_ONCE");
  setenv("CKPT_MPIRUN", CKPT_MPIRUN, 1);

  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(WatchSignals, set).detach();

  work_dir = a.dir + "/ckpt-bench-nodes-" + std::to_string(getpid());
  std::error_code ec;
  fs::create_directories(work_dir, ec);
  if (ec) {
    std::fprintf(stderr, "bench_nodes: cannot make %s: %s\n", work_dir.c_str(),
                 ec.message().c_str());
    return 1;
  }
  Bed bed(CKPT_NODE_BED, work_dir);
  bool unavailable = false;
  const std::string up = bed.Up(unavailable);
  int rc = 1;
  Measured m;
  if (!up.empty() && interrupted == 0) {
    std::fprintf(stderr, "bench_nodes: %s%s\n",
                 unavailable ? "no node bed: " : "", up.c_str());
    rc = unavailable ? kUnavailable : 1;
  } else if (up.empty()) {
    std::fprintf(stderr, "bench_nodes: bed %s up, %d nodes, work folder %s\n",
                 bed.name().c_str(), kNodes, work_dir.c_str());
    try {
      rc = Jobs(a, bed, m);
    } catch (const std::exception& e) {
      // What a job wrote is not what its ranks write (json's exceptions):
      // the bed still goes down.
      std::fprintf(stderr, "bench_nodes: reading a job's results: %s\n",
                   e.what());
      rc = 1;
    }
  }
  if (!bed.Down()) {
    std::fprintf(stderr, "bench_nodes: taking bed %s down failed:\n%s\n",
                 bed.name().c_str(),
                 ReadText(work_dir + "/bed-down.log").c_str());
    rc = 1;
  }
  fs::remove_all(work_dir, ec);
  if (interrupted != 0) return 128 + interrupted;
  if (rc == 0) Report(a, bed.name(), m);
  return rc;
}

}  // namespace
}  // namespace ckpt_bench_nodes

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--rank") {
    return ckpt_bench_nodes::RankMain(argc, argv);
  }
  return ckpt_bench_nodes::Main(argc, argv);
}
