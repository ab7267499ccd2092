#include "storage/file/direct_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

namespace ckpt {
namespace {

// Blocks kept for reuse beyond the ones in use (4 objects' worth).
constexpr size_t kMaxPooled = 4 * DirectWriter::kBuffers;

class BlockPool {
 public:
  std::byte* Get() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        std::byte* b = free_.back();
        free_.pop_back();
        return b;
      }
    }
    return static_cast<std::byte*>(
        std::aligned_alloc(DirectWriter::kAlign, DirectWriter::kBlock));
  }
  void Put(std::byte* b) {
    if (b == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() < kMaxPooled) {
      free_.push_back(b);
    } else {
      std::free(b);
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::byte*> free_;
};

BlockPool& Pool() {
  static BlockPool* pool = new BlockPool();  // lives until exit
  return *pool;
}

// pwrite of all of `data` at `offset`. A file system that refuses O_DIRECT
// writes (EINVAL) gets buffered ones instead: the flag is cleared and the
// write retried; fsync makes both durable.
int WriteAt(int fd, const std::byte* data, size_t length, uint64_t offset) {
  while (length > 0) {
    const ssize_t n = ::pwrite(fd, data, length, static_cast<off_t>(offset));
    if (n < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      const int flags = ::fcntl(fd, F_GETFL);
      if (err == EINVAL && flags >= 0 && (flags & O_DIRECT) &&
          ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) == 0) {
        continue;
      }
      return err;
    }
    if (n == 0) return EIO;
    data += n;
    length -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace

DirectWriter::DirectWriter(int fd) : fd_(fd) {}

DirectWriter::~DirectWriter() {
  for (size_t i = 0; i < kBuffers; ++i) {
    Await(i);
    Pool().Put(blocks_[i]);
  }
}

int DirectWriter::Await(size_t i) {
  if (!writes_[i].valid()) return 0;
  const int err = writes_[i].get();
  if (err != 0 && error_ == 0) error_ = err;
  return err;
}

int DirectWriter::Append(std::span<const std::byte> data) {
  while (!data.empty() && error_ == 0) {
    if (blocks_[current_] == nullptr) {
      blocks_[current_] = Pool().Get();
      if (blocks_[current_] == nullptr) return error_ = ENOMEM;
    }
    const size_t n = std::min(kBlock - filled_, data.size());
    std::memcpy(blocks_[current_] + filled_, data.data(), n);
    filled_ += n;
    data = data.subspan(n);
    if (filled_ == kBlock) Submit(kBlock);
  }
  return error_;
}

int DirectWriter::Submit(size_t length) {
  const size_t i = current_;
  writes_[i] = std::async(std::launch::async, [fd = fd_, block = blocks_[i],
                                               length, offset = offset_] {
    return WriteAt(fd, block, length, offset);
  });
  offset_ += length;
  filled_ = 0;
  current_ = (current_ + 1) % kBuffers;
  // The next block to fill may still be on its way to the disk.
  Await(current_);
  return error_;
}

int DirectWriter::Finish() {
  if (error_ == 0 && filled_ > 0) {
    const size_t padded = (filled_ + kAlign - 1) / kAlign * kAlign;
    std::memset(blocks_[current_] + filled_, 0, padded - filled_);
    const uint64_t size = offset_ + filled_;
    const int err = WriteAt(fd_, blocks_[current_], padded, offset_);
    if (err != 0 && error_ == 0) error_ = err;
    offset_ = size;
    filled_ = 0;
  }
  for (size_t i = 0; i < kBuffers; ++i) Await(i);
  if (error_ == 0 && ::ftruncate(fd_, static_cast<off_t>(offset_)) != 0) {
    error_ = errno;
  }
  return error_;
}

}  // namespace ckpt
