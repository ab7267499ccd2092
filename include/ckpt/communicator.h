// How the ranks of a job talk to each other during a save or a load.
//
// ckpt needs little: rank and size, each rank's host name, a barrier, an
// all-gather and a broadcast of bytes. `NewLocalCommunicator()` is the
// one-process implementation; many-rank implementations (threads for tests,
// MPI for real jobs) implement the same interface.
//
// Every rank must make the same sequence of collective calls. A call that
// fails on one rank fails (or aborts) on every rank.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/status.h"

namespace ckpt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's host name (recorded in the manifest).
  virtual std::string host_name() const;

  virtual Status Barrier() = 0;
  // Every rank contributes `mine`; every rank receives all of them, by rank.
  virtual Result<std::vector<std::string>> AllGather(std::string_view mine) = 0;
  // Every rank receives `root`'s `data` (other ranks' `data` is ignored).
  virtual Result<std::string> Broadcast(std::string_view data, int root) = 0;

 protected:
  Communicator() = default;
};

// A single process: rank 0 of 1.
std::unique_ptr<Communicator> NewLocalCommunicator();

}  // namespace ckpt
