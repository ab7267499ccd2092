// Runs one function per rank on threads, as the many-rank tests need.
#pragma once

#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "ckpt/communicator.h"

namespace ckpt::testing {

// Runs fn(rank, communicator) on `ranks` threads joined by thread
// communicators, and waits for all. One rank runs on the calling thread with
// a null communicator: a single process, as a job without MPI is.
inline void RunRanks(int ranks,
                     const std::function<void(int, Communicator*)>& fn) {
  if (ranks == 1) {
    fn(0, nullptr);
    return;
  }
  std::vector<std::unique_ptr<Communicator>> comms =
      NewThreadCommunicators(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] { fn(r, comms[r].get()); });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace ckpt::testing
