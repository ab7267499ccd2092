// Real kills: a saver process (src/testing/kill_saver.cc) saves step after
// step into a file:// root and is SIGKILLed at a random moment; then the
// root is reopened and must hold, bit-identical, the last step the saver
// reported as committed or the one it was saving, with every reported step
// that retention keeps, every listed checkpoint verifying. The next saver
// resumes from the newest step, in the same root, so damage would pile up.
// CKPT_KILLS=N sets the number of kills (default 200); CKPT_KILL_SEED the
// random seed (printed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "ckpt/checkpoint_manager.h"
#include "gtest/gtest.h"
#include "testing/step_model.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

using testing::CheckStep;

constexpr int kKeepLast = 3;  // the saver's retention

// Starts the saver on `root` from step `first`; returns its pid and the
// read end of its stdout.
std::pair<pid_t, int> StartSaver(const std::string& root, int64_t first) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, -1};
  const std::string first_arg = std::to_string(first);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    ::close(fds[1]);
    ::execl(CKPT_KILL_SAVER, CKPT_KILL_SAVER, root.c_str(), first_arg.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Every "committed N" line the saver wrote before it died.
std::vector<int64_t> ReadCommitted(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, n);
  ::close(fd);
  std::vector<int64_t> out;
  size_t pos = 0;
  while ((pos = text.find("committed ", pos)) != std::string::npos) {
    pos += 10;
    const size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // a torn last line: not reported
    out.push_back(std::stoll(text.substr(pos, end - pos)));
  }
  return out;
}

TEST(KillTest, SaverKilledAtRandomMoments) {
  const int kills =
      std::getenv("CKPT_KILLS") ? std::atoi(std::getenv("CKPT_KILLS")) : 200;
  const uint64_t seed =
      std::getenv("CKPT_KILL_SEED")
          ? std::strtoull(std::getenv("CKPT_KILL_SEED"), nullptr, 10)
          : std::random_device()();
  std::printf("[ kill ] %d kills, CKPT_KILL_SEED=%llu\n", kills,
              static_cast<unsigned long long>(seed));
  std::mt19937_64 gen(seed);
  const testing::TempDir dir("kill");
  const std::string root = dir.url();

  int64_t reported_max = 0;  // the newest step any saver reported
  std::set<int64_t> reported;
  int mid_save = 0;       // kills after which the newest was the unreported one
  int64_t committed = 0;  // steps committed by all savers
  for (int k = 0; k < kills; ++k) {
    const int64_t first = reported_max + 1;
    // Starting the saver and its first save take tens of milliseconds, each
    // later save a few to tens (fsync): kills land before the first save,
    // inside saves, and between them.
    const auto delay = std::chrono::microseconds(gen() % 200000);
    auto [pid, fd] = StartSaver(root, first);
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(delay);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::vector<int64_t> now = ReadCommitted(fd);
    ASSERT_TRUE(WIFSIGNALED(status) ||
                (WIFEXITED(status) && WEXITSTATUS(status) == 0))
        << "the saver failed on its own, exit " << WEXITSTATUS(status);
    for (int64_t s : now) {
      reported.insert(s);
      reported_max = std::max(reported_max, s);
    }
    SCOPED_TRACE("kill " + std::to_string(k) + " after " +
                 std::to_string(delay.count()) + " us; newest reported " +
                 std::to_string(reported_max));

    auto mgr = CheckpointManager::Open(root);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    auto latest = (*mgr)->Latest();
    ASSERT_TRUE(latest.ok()) << latest.status().ToString();
    if (reported_max == 0 && !latest->has_value()) continue;
    ASSERT_TRUE(latest->has_value()) << "reported saves were lost";
    const int64_t newest = **latest;
    ASSERT_TRUE(newest == reported_max || newest == reported_max + 1)
        << "newest loadable is step " << newest;
    if (newest != reported_max) ++mid_save;
    ASSERT_EQ(CheckStep(**mgr, newest, 1), "") << "step " << newest;
    committed += newest - (first - 1);
    reported_max = newest;  // the next saver goes on from there
    auto list = (*mgr)->List();
    ASSERT_TRUE(list.ok());
    std::set<int64_t> listed;
    for (const CheckpointInfo& c : *list) {
      listed.insert(c.step);
      auto report = (*mgr)->Verify(c.step);
      ASSERT_TRUE(report.ok());
      ASSERT_TRUE(report->ok()) << report->problems.front();
    }
    for (int64_t s : reported) {
      const auto newer = std::count_if(listed.begin(), listed.end(),
                                       [&](int64_t l) { return l > s; });
      if (newer < kKeepLast) {
        ASSERT_TRUE(listed.count(s)) << "reported step " << s << " was lost";
      }
    }
  }
  std::printf(
      "[ kill ] %d kills; %lld steps committed (%zu reported), %d "
      "kills left the newest an unreported save\n",
      kills, static_cast<long long>(committed), reported.size(), mid_save);
}

}  // namespace
}  // namespace ckpt
