// A file in the host's shared memory (POSIX shm_open, /dev/shm on Linux)
// that several processes of one host map together: a read-once load keeps
// the chunks the ranks of a node need there once for all of them
// (docs/design.md, "Every byte read once").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt {

class SharedMemoryFile {
 public:
  // A new file of `size` bytes under a name no other file has, readable
  // only by this user, its memory taken at once: where the shared memory
  // has no room, this fails with an error, not a later write with SIGBUS.
  // A random token, written past the `size` bytes, tells it from any other
  // file that another host could give the same name.
  static Result<SharedMemoryFile> Create(uint64_t size);
  // The file that Invitation() of the creator names, on this host, checked
  // to be that file (its size and token).
  static Result<SharedMemoryFile> Open(std::string_view invitation,
                                       uint64_t size);

  SharedMemoryFile(SharedMemoryFile&& other) noexcept;
  SharedMemoryFile& operator=(SharedMemoryFile&& other) noexcept;
  SharedMemoryFile(const SharedMemoryFile&) = delete;
  SharedMemoryFile& operator=(const SharedMemoryFile&) = delete;
  // Closes it; the creator also removes its name, if not yet done.
  ~SharedMemoryFile();

  // The name and token, for the processes that open it.
  std::string Invitation() const;
  int fd() const { return fd_; }
  // Removes the name: nothing is left behind once every process has
  // closed it and unmapped its memory. Those that mapped it keep it.
  void Unlink();

  // Waiting for another process without spinning: an advisory lock on
  // byte `which` (0 or 1) past the file's memory, held by this open file
  // (an open file description lock: each process, or thread, that opened
  // the file holds its own; closing it lets go). A process that waits for
  // another takes, with `wait`, the lock the other holds, and sleeps until
  // the other lets go or ends. False where it cannot be had (or waiting
  // failed): the caller goes on without waiting.
  bool Lock(int which, bool exclusive, bool wait);
  void Unlock(int which);

 private:
  SharedMemoryFile(int fd, std::string name, std::string token, bool owner,
                   uint64_t size)
      : fd_(fd),
        name_(std::move(name)),
        token_(std::move(token)),
        owner_(owner),
        size_(size) {}

  int fd_ = -1;
  std::string name_;   // "/ckpt-..."
  std::string token_;  // 32 hex digits
  bool owner_ = false;
  uint64_t size_ = 0;  // of the memory, before the token
};

}  // namespace ckpt
