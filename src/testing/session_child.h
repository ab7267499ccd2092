// A program started in a session of its own, so that it and everything it
// starts (mpirun's daemons and ranks) can be found and killed together:
//
//   testing::SessionChild job({"/usr/bin/mpirun", ...}, dir + "/log");
//   ...
//   job.KillSession();  // or job.Wait()
//
// Its stdout and stderr go to `log`. A child still running when the object
// goes away is killed with its whole session.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace ckpt::testing {

class SessionChild {
 public:
  SessionChild(const std::vector<std::string>& cmd, const std::string& log);
  ~SessionChild();
  SessionChild(const SessionChild&) = delete;
  SessionChild& operator=(const SessionChild&) = delete;

  // Exited already? Then its status is kept.
  bool Exited();

  // SIGKILLs every process of the session (the child is its leader), and
  // waits until none is left (a test failure if some outlive it).
  void KillSession();

  void Signal(int sig);

  // Waits for the exit; the exit code, or 128 + the signal.
  int Wait();

 private:
  // Live (not zombie) processes whose session is the child's.
  std::vector<pid_t> SessionMembers() const;

  pid_t pid_ = -1;
  std::optional<int> status_;
};

}  // namespace ckpt::testing
