#include "storage/file/direct_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "util/env.h"
#include "util/mutex.h"

namespace ckpt {
namespace {

// Blocks kept for reuse beyond the ones in use (4 objects' worth).
constexpr size_t kMaxPooled = 4 * DirectWriter::kBuffers;

// A block of kBlock bytes on huge-page boundaries, backed by huge pages
// where the kernel grants them, or null. The device reads O_DIRECT writes
// from pinned memory, and pinning 2 MiB pages is far cheaper than 4 KiB
// ones: a raw O_DIRECT loop writes faster from huge pages (docs/
// benchmarks.md, `ckpt bench`, "Reading the figures").
std::byte* MapBlock() {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t span = DirectWriter::kBlock + kHuge;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // Keep the aligned middle; give back the ends.
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) ::munmap(p, aligned - start);
  const uintptr_t end = aligned + DirectWriter::kBlock;
  if (start + span > end)
    ::munmap(reinterpret_cast<void*>(end), start + span - end);
  auto* block = reinterpret_cast<std::byte*>(aligned);
  ::madvise(block, DirectWriter::kBlock, MADV_HUGEPAGE);
  return block;
}

class BlockPool {
 public:
  std::byte* Get() {
    {
      MutexLock lock(&mu_);
      if (!free_.empty()) {
        std::byte* b = free_.back();
        free_.pop_back();
        return b;
      }
    }
    return MapBlock();
  }
  void Put(std::byte* b) {
    if (b == nullptr) return;
    MutexLock lock(&mu_);
    if (free_.size() < kMaxPooled) {
      free_.push_back(b);
    } else {
      ::munmap(b, DirectWriter::kBlock);
    }
  }

 private:
  Mutex mu_;
  std::vector<std::byte*> free_ GUARDED_BY(mu_);
};

BlockPool& Pool() {
  static BlockPool* pool = new BlockPool();  // lives until exit
  return *pool;
}

}  // namespace

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

bool DirectIoAllowed() {
  static const bool allowed = !EnvSwitchOff("CKPT_FILE_DIRECT_IO");
  return allowed;
}

std::byte* AcquireDirectBlock() { return Pool().Get(); }
void ReleaseDirectBlock(std::byte* block) { Pool().Put(block); }

// STATX_DIOALIGN (Linux 6.1); glibc 2.36's headers do not name it yet.
constexpr unsigned kStatxDioAlign = 0x2000;

DirectWriter::DirectWriter(int fd) : fd_(fd) {
  struct statx st = {};
  if (::statx(fd, "", AT_EMPTY_PATH, kStatxDioAlign, &st) == 0 &&
      (st.stx_mask & kStatxDioAlign) && st.stx_dio_mem_align > 0 &&
      st.stx_dio_offset_align > 0 && kAlign % st.stx_dio_offset_align == 0) {
    mem_align_ = st.stx_dio_mem_align;
  }
}

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
  Copy(data);
  return error_;
}

void DirectWriter::Copy(std::span<const std::byte> data) {
  while (!data.empty() && error_ == 0) {
    if (blocks_[current_] == nullptr) {
      blocks_[current_] = Pool().Get();
      if (blocks_[current_] == nullptr) {
        error_ = ENOMEM;
        return;
      }
    }
    const size_t n = std::min(kBlock - filled_, data.size());
    std::memcpy(blocks_[current_] + filled_, data.data(), n);
    filled_ += n;
    data = data.subspan(n);
    if (filled_ == kBlock) Submit(kBlock);
  }
}

int DirectWriter::AppendRetained(std::span<const std::byte> data) {
  // Copy up to the file's next aligned position; from there, if the memory
  // is aligned too, the whole aligned stretch goes out in place.
  const size_t misaligned = (offset_ + filled_) % kAlign;
  if (misaligned != 0) {
    const size_t n = std::min(kAlign - misaligned, data.size());
    Copy(data.first(n));
    data = data.subspan(n);
  }
  const size_t whole = data.size() / kAlign * kAlign;
  if (whole == 0 || reinterpret_cast<uintptr_t>(data.data()) % mem_align_) {
    Copy(data);
    return error_;
  }
  // The bytes before it go first, as a short block: file order does not
  // matter to pwrite, but offset_ must reach the aligned position.
  if (filled_ > 0 && error_ == 0) Submit(filled_);
  for (size_t pos = 0; pos < whole && error_ == 0; pos += kBlock) {
    SubmitInPlace(data.data() + pos, std::min(kBlock, whole - pos));
  }
  Copy(data.subspan(whole));
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
  Advance();
  return error_;
}

void DirectWriter::SubmitInPlace(const std::byte* data, size_t length) {
  // The slot's block (if any) stays unused until the slot comes round
  // again; its write has ended (Advance waited for it).
  writes_[current_] = std::async(std::launch::async,
                                 [fd = fd_, data, length, offset = offset_] {
                                   return WriteAt(fd, data, length, offset);
                                 });
  offset_ += length;
  bytes_in_place_ += length;
  Advance();
}

void DirectWriter::Advance() {
  current_ = (current_ + 1) % kBuffers;
  // The next slot's block may still be on its way to the disk.
  Await(current_);
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
