// Streams an object's bytes to a file opened with O_DIRECT: appends are
// copied into aligned blocks, and full blocks are written by background
// threads while the next ones fill, so the disk is kept busy and the page
// cache is left alone (on a loaded machine, buffered writeback of a large
// checkpoint ran several times slower than the device).
//
// The blocks come from a process-wide pool and are reused by every later
// object, so a save touches no fresh memory once the first one is done.
// Bytes the caller keeps alive until Finish (AppendRetained) are not copied
// at all where their address and their place in the file are both aligned
// for O_DIRECT: they go to the disk straight from the caller's memory, which
// leaves the CPU to the checksums.
// Used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <span>

namespace ckpt {

// Whether streamed writes and large reads may use O_DIRECT
// ($CKPT_FILE_DIRECT_IO=0: never).
bool DirectIoAllowed();

// pwrite of all of `data` at `offset`; 0 or an errno. A file system that
// refuses O_DIRECT writes (EINVAL) gets buffered ones instead: the flag is
// cleared on `fd` and the write retried; fsync makes both durable.
int WriteAt(int fd, const std::byte* data, size_t length, uint64_t offset);

// A kBlock-byte block from the process-wide pool of O_DIRECT blocks (aligned,
// on huge pages where granted), or null when memory runs out; give it back
// with ReleaseDirectBlock. Also used for O_DIRECT reads.
std::byte* AcquireDirectBlock();
void ReleaseDirectBlock(std::byte* block);

class DirectWriter {
 public:
  // Bytes per block written; offsets and lengths of O_DIRECT writes are
  // multiples of kAlign.
  static constexpr size_t kBlock = size_t{8} << 20;
  static constexpr size_t kBuffers = 4;
  static constexpr size_t kAlign = 4096;

  // `fd` is open for writing with O_DIRECT, empty. Not owned.
  explicit DirectWriter(int fd);
  // Waits for the writes in flight; returns the blocks to the pool.
  ~DirectWriter();
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  // Returns 0 or the errno of a failed write (this one's or an earlier
  // block's).
  int Append(std::span<const std::byte> data);
  // As Append, but `data` stays valid and unchanged until Finish returns or
  // the writer is destroyed, so aligned stretches of it are written in
  // place.
  int AppendRetained(std::span<const std::byte> data);
  // Bytes written straight from retained memory so far (the rest was copied
  // through the blocks).
  uint64_t bytes_in_place() const { return bytes_in_place_; }
  // Writes the last block (padded to kAlign), waits for every write and cuts
  // the file to the bytes appended. 0 or an errno.
  int Finish();

 private:
  // Copies into the current block; submits it when full.
  void Copy(std::span<const std::byte> data);
  // Hands the filled block to a writer thread; 0 or an errno.
  int Submit(size_t length);
  // Hands `length` bytes of the caller's memory at `data` to a writer
  // thread; the current block must be empty.
  void SubmitInPlace(const std::byte* data, size_t length);
  // Makes the slot after this one current, once its write has ended.
  void Advance();
  // Waits for block `i`'s write; 0 or its errno.
  int Await(size_t i);

  const int fd_;
  // Alignment of memory O_DIRECT writes from (statx's dio_mem_align, or
  // kAlign where the kernel does not say).
  size_t mem_align_ = kAlign;
  uint64_t bytes_in_place_ = 0;
  std::byte* blocks_[kBuffers] = {};
  std::future<int> writes_[kBuffers];
  size_t current_ = 0;   // the block being filled
  size_t filled_ = 0;    // bytes in it
  uint64_t offset_ = 0;  // file offset of its first byte
  int error_ = 0;
};

}  // namespace ckpt
