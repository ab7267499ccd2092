// A file in the host's shared memory (POSIX shm_open, /dev/shm on Linux)
// that several processes of one host map together: a read-once load keeps
// the chunks the ranks of a node need there once for all of them
// (docs/design.md, "Every byte read once").
#pragma once

#include <cstdint>
#include <future>
#include <string>
#include <string_view>

#include "ckpt/status.h"

namespace ckpt {

class SharedMemoryFile {
 public:
  // A new file of `size` bytes under a name no other file has, readable
  // only by this user. Where the shared memory has no room for it now,
  // this fails. Its pages are taken by Reserve, which each process calls
  // for the bytes it writes before it writes them: a write to a page the
  // file system then has no room for ends the process (SIGBUS), where
  // Reserve returns an error. A random token, written past the `size`
  // bytes, tells it from any other file that another host could give the
  // same name.
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

  // Takes the pages of bytes [offset, offset + length) (idempotent), or
  // says that there is no room for them.
  Status Reserve(uint64_t offset, uint64_t length) const;
  // Reserve of every byte, on a thread of its own (the pages cost ~1 ms a
  // 4 MiB to take, a quarter of a second for the 1 GiB of four nodes on one
  // host of two cores), while the processes go on; WaitReserved waits for it
  // and says whether there was room.
  void ReserveAllInBackground();
  Status WaitReserved();

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

  // Waits for the background reservation, removes the name (the creator)
  // and closes the descriptor.
  void Close();

  int fd_ = -1;
  std::string name_;   // "/ckpt-..."
  std::string token_;  // 32 hex digits
  bool owner_ = false;
  uint64_t size_ = 0;              // of the memory, before the token
  std::future<Status> reserving_;  // ReserveAllInBackground
};

}  // namespace ckpt
