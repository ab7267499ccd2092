// One party of the concurrency stress test (src/checkpoint/stress_test.cc):
// saves testing::StepModel(STEP, 1) into ROOT once, as asked, and says what
// came of it. The test starts two parties (this program, or the ckpt CLI for
// delete and gc) on one root at random moments, SIGKILLs one now and then,
// and then checks the root with a reader of its own.
//
//   ckpt_stress_party ROOT STEP LEASE_WAIT_S [incremental] [async]
//                     [keep_last=N]
//
// Started, it writes "ready\n" to stdout and waits for the end of its stdin
// before it touches the root: the test starts it early and lets it go when
// it chooses, free of the tens of milliseconds a process takes to start.
// After Save (or SaveAsync and Wait) returns success it writes, unbuffered,
// "committed STEP\n" and then "deleted S1 S2 ...\n" (the steps its retention
// removed, maybe none) to stdout: what the test may hold it to. On failure
// it writes the status ("Code: message") to stderr and exits 1; the lease's
// "waiting up to" warning, if it waited, is on stderr too.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ckpt/checkpoint_manager.h"
#include "testing/step_model.h"

namespace {

bool WriteLine(const std::string& line) {
  return ::write(1, line.data(), line.size()) ==
         static_cast<ssize_t>(line.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s ROOT STEP LEASE_WAIT_S [incremental] [async] "
                 "[keep_last=N]\n",
                 argv[0]);
    return 2;
  }
  const int64_t step = std::atoll(argv[2]);
  ckpt::Options options;
  options.chunk_size = 4096;  // several chunks, so incremental saves refer
  options.lease_wait_seconds = std::atof(argv[3]);
  ckpt::SaveOptions save;
  bool async = false;
  for (int i = 4; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "incremental") {
      save.incremental = true;
    } else if (arg == "async") {
      async = true;
    } else if (arg.starts_with("keep_last=")) {
      options.retention.keep_last = std::atoi(argv[i] + 10);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  auto mgr = ckpt::CheckpointManager::Open(argv[1], options);
  if (!mgr.ok()) {
    std::fprintf(stderr, "%s\n", mgr.status().ToString().c_str());
    return 1;
  }
  ckpt::testing::StepModel model(step, 1);
  if (!WriteLine("ready\n")) return 1;
  char go[64];
  while (::read(0, go, sizeof(go)) > 0) {
  }
  ckpt::Result<ckpt::SaveResult> saved =
      async ? (*mgr)->SaveAsync(step, model.ForRank(0), save).Wait()
            : (*mgr)->Save(step, model.ForRank(0), save);
  if (!saved.ok()) {
    std::fprintf(stderr, "%s\n", saved.status().ToString().c_str());
    return 1;
  }
  std::string deleted = "deleted";
  for (int64_t s : saved->deleted_steps) deleted += " " + std::to_string(s);
  if (!WriteLine("committed " + std::to_string(step) + "\n") ||
      !WriteLine(deleted + "\n")) {
    return 1;
  }
  return 0;
}
