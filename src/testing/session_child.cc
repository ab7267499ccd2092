#include "testing/session_child.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"
#include "testing/files.h"

namespace ckpt::testing {

namespace fs = std::filesystem;

SessionChild::SessionChild(const std::vector<std::string>& cmd,
                           const std::string& log) {
  pid_ = fork();
  if (pid_ == 0) {
    setsid();
    FILE* f = std::fopen(log.c_str(), "w");
    if (f != nullptr) {
      dup2(fileno(f), 1);
      dup2(fileno(f), 2);
    }
    std::vector<char*> argv;
    for (const std::string& a : cmd)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
}

SessionChild::~SessionChild() {
  if (pid_ > 0 && !Exited()) KillSession();
}

bool SessionChild::Exited() {
  if (status_) return true;
  int st = 0;
  if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
  return status_.has_value();
}

void SessionChild::KillSession() {
  for (int round = 0; round < 500; ++round) {
    const std::vector<pid_t> left = SessionMembers();
    for (pid_t p : left) kill(p, SIGKILL);
    Exited();
    if (left.empty() && status_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ADD_FAILURE() << "processes of session " << pid_ << " outlived SIGKILL";
}

void SessionChild::Signal(int sig) { kill(pid_, sig); }

int SessionChild::Wait() {
  while (!Exited()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return WIFEXITED(*status_) ? WEXITSTATUS(*status_) : 128 + WTERMSIG(*status_);
}

std::vector<pid_t> SessionChild::SessionMembers() const {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(e.path() / "stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    std::string state;
    long ppid = 0, pgrp = 0, session = 0;
    rest >> state >> ppid >> pgrp >> session;
    if (session == pid_ && state != "Z") out.push_back(std::stoi(name));
  }
  return out;
}

}  // namespace ckpt::testing
