#include "staging/staging.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "staging/device_copy.h"
#include "util/log.h"
#include "util/parallel_copy.h"

namespace ckpt {
namespace {

// Each entry starts on a cache line, so copies run at full speed; large
// ones on a page, so that the background save's file:// writes go to the
// disk straight from the staging memory (see WriteDataObject). The arena
// itself is mmap'ed, so page-aligned.
constexpr uint64_t kAlign = 64;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kLarge = 64 << 10;

// PrepareInBackground faults this much between looks at whether a save
// wants the memory now: a few milliseconds of faults.
constexpr uint64_t kPreparePiece = uint64_t{8} << 20;
// The most threads ReserveForReads and FaultAhead fault fresh memory on.
constexpr unsigned kFaultThreads = 4;
// FaultAhead starts from this many bytes (one piece): below, its threads
// cost more than they save.
constexpr uint64_t kFaultAheadFrom = kPreparePiece;

#ifdef MADV_COLLAPSE
constexpr int kMadvCollapse = MADV_COLLAPSE;
#else
constexpr int kMadvCollapse = 25;       // Linux 6.1
#endif
#ifdef MADV_POPULATE_WRITE
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kMadvPopulateWrite = 23;  // Linux 5.14
#endif

// The whole pages inside `s` (empty if none): what madvise may be given.
std::span<std::byte> PagesWithin(std::span<std::byte> s) {
  const auto begin = reinterpret_cast<uintptr_t>(s.data());
  const uintptr_t first = (begin + kPage - 1) / kPage * kPage;
  const uintptr_t last = (begin + s.size()) / kPage * kPage;
  if (last <= first) return {};
  return {reinterpret_cast<std::byte*>(first), last - first};
}

// Applies madvise `advice` to the page-aligned interior of every span, a
// piece of at most kPreparePiece at a time, front to back, until `stop` or
// a kernel without it (EINVAL); on `threads` threads at once, each taking
// the next piece in turn.
void AdviseInPieces(const std::vector<std::span<std::byte>>& spans, int advice,
                    const std::atomic<bool>& stop, int threads = 1) {
  std::vector<std::span<std::byte>> pieces;
  for (std::span<std::byte> s : spans) {
    const std::span<std::byte> pages = PagesWithin(s);
    for (uint64_t at = 0; at < pages.size(); at += kPreparePiece) {
      pieces.push_back(
          pages.subspan(at, std::min(kPreparePiece, pages.size() - at)));
    }
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> unsupported{false};
  auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < pieces.size();) {
      if (stop.load(std::memory_order_relaxed) ||
          unsupported.load(std::memory_order_relaxed)) {
        return;
      }
      if (::madvise(pieces[i].data(), pieces[i].size(), advice) != 0 &&
          errno == EINVAL) {
        unsupported.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> helpers;
  for (int k = 1; k < threads; ++k) helpers.emplace_back(run);
  run();
  for (std::thread& t : helpers) t.join();
}

// Threads to fault fresh memory in on: one a core, at most kFaultThreads.
int FaultThreads() {
  return static_cast<int>(
      std::clamp(std::thread::hardware_concurrency(), 1u, kFaultThreads));
}

// Where an entry of `n` bytes goes when `used` bytes are taken.
uint64_t Place(uint64_t used, uint64_t n) {
  const uint64_t align = n >= kLarge ? kPage : kAlign;
  return (used + align - 1) / align * align;
}

uint64_t EntryBytes(const Entry& e) {
  if (e.kind == EntryKind::kMetadata) return 0;
  Result<uint64_t> n = e.tensor.ByteSize();
  return n.ok() ? *n : 0;
}

}  // namespace

StagingArena::~StagingArena() {
  TakePrepared();
  Unmap();
}

Status StagingArena::Register(const CudaDriver& cuda, int device,
                              std::string_view what) {
  if (registered_by_ != nullptr || data_ == nullptr) return Status();
  CKPT_RETURN_IF_ERROR(cuda.Register(device, data_, capacity_,
                                     std::string(what) + ": staging memory"));
  registered_by_ = &cuda;
  registered_device_ = device;
  return Status();
}

void StagingArena::Unregister() {
  if (registered_by_ == nullptr) return;
  // Unregistering memory the driver registered fails only if the driver is
  // gone; the memory is unmapped next either way.
  if (Status s = registered_by_->Unregister(registered_device_, data_,
                                            "release the staging memory");
      !s.ok()) {
    LogWarning(s.ToString());
  }
  registered_by_ = nullptr;
  registered_device_ = -1;
}

void StagingArena::PrepareInBackground(uint64_t bytes) {
  if (bytes == 0 || preparing_.joinable() || data_ != nullptr) return;
  prepared_capacity_ = bytes;
  stop_preparing_.store(false, std::memory_order_relaxed);
  prepared_bytes_.store(0, std::memory_order_relaxed);
  preparing_ = std::thread([this, bytes] {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    prepared_ = static_cast<std::byte*>(p);
    // Ordinary pages, not huge ones: where the kernel compacts for
    // huge pages only in regions that ask for them (THP defrag "madvise",
    // the common default), each huge-page fault in a machine whose free
    // memory is fragmented (a full page cache) compacts first, and 512 MiB
    // took seconds instead of a third of one, so the thread was still busy
    // when the first save came (docs/benchmarks.md).
    auto* bytes_at = static_cast<volatile std::byte*>(p);
    for (uint64_t at = 0; at < bytes;) {
      // A piece at a time, so that a save that comes first stops the
      // thread at once and takes the memory as it is: the pages left are
      // faulted in by the save's copy, on every core.
      if (stop_preparing_.load(std::memory_order_relaxed)) return;
      const uint64_t end = std::min(bytes, at + kPreparePiece);
      for (; at < end; at += kPage) bytes_at[at] = std::byte{0};
      prepared_bytes_.store(end, std::memory_order_relaxed);
    }
    // Then, while no save wants the memory, its pages gathered into huge
    // ones (MADV_COLLAPSE, Linux 6.1; elsewhere the pages stay as they
    // are): the background save writes the staging memory to the disk in
    // place with O_DIRECT, and pinning 4 KiB pages for it made that write
    // 1.5 times slower. Collapsing compacts too, but off every save's path.
    AdviseInPieces({{static_cast<std::byte*>(p), bytes}}, kMadvCollapse,
                   stop_preparing_);
  });
}

uint64_t StagingArena::PreparedBytes() const {
  return prepared_bytes_.load(std::memory_order_relaxed);
}

void StagingArena::TakePrepared() {
  if (!preparing_.joinable()) return;
  stop_preparing_.store(true, std::memory_order_relaxed);
  preparing_.join();
  if (prepared_ == nullptr) return;
  if (data_ == nullptr) {
    data_ = prepared_;
    capacity_ = prepared_capacity_;
  } else {
    ::munmap(prepared_, prepared_capacity_);
  }
  prepared_ = nullptr;
  prepared_capacity_ = 0;
}

void StagingArena::Unmap() {
  Unregister();
  offer_pending_ = false;
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
}

Status StagingArena::MapAnew(uint64_t bytes, bool huge) {
  Unmap();
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return IOError("cannot map " + std::to_string(bytes) +
                   " bytes of staging memory: " + std::strerror(errno));
  }
  // Huge pages make the first touch several times cheaper where free ones
  // are at hand; where the kernel declines, ordinary pages work the same.
  if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);
  data_ = static_cast<std::byte*>(p);
  capacity_ = bytes;
  return Status();
}

Result<std::span<std::byte>> StagingArena::Reserve(uint64_t bytes) {
  TakePrepared();
  if (bytes > capacity_) {
    CKPT_RETURN_IF_ERROR_CTX(MapAnew(bytes, /*huge=*/true),
                             "asynchronous save");
  }
  return std::span<std::byte>(data_, capacity_);
}

Result<std::span<std::byte>> StagingArena::ReserveForReads(uint64_t bytes) {
  TakePrepared();
  if (bytes <= capacity_) return std::span<std::byte>(data_, capacity_);
  CKPT_RETURN_IF_ERROR_CTX(MapAnew(bytes, /*huge=*/false), "load");
  offer_pending_ = true;
  stop_preparing_.store(false, std::memory_order_relaxed);
  // On more than one thread: a fresh page costs a fault and its zeroing
  // (in a virtual machine also the host's fault), about 0.4 s a GiB on one
  // core, as slow as a fast disk, so one thread fell behind the reads,
  // which then faulted the pages themselves; two halved the first load's
  // extra time (docs/benchmarks.md).
  preparing_ = std::thread([this, p = data_, bytes] {
    AdviseInPieces({{p, bytes}}, kMadvPopulateWrite, stop_preparing_,
                   FaultThreads());
  });
  return std::span<std::byte>(data_, capacity_);
}

void StagingArena::OfferForHugePages() {
  if (!offer_pending_) return;
  offer_pending_ = false;
  // Not MADV_COLLAPSE on a thread of the arena: gathering a few GiB costs
  // a fresh huge page and a copy for every 2 MiB, holding the process's
  // memory map lock for each, and the load or the training steps that came
  // next ran four times slower beside it (bench_incremental's second full
  // load of 2 GiB: 4.7-5.3 s against 1.15-1.21 s without it), while the
  // loads into the memory gained nothing measurable from huge pages
  // (docs/benchmarks.md). khugepaged gathers a region marked so at its own
  // pace and priority. A kernel without transparent huge pages refuses
  // the advice; the pages then stay as they are.
  ::madvise(data_, capacity_, MADV_HUGEPAGE);
}

void StagingArena::KeepAtMost(uint64_t bytes) {
  if (bytes == 0 || available() <= bytes || registered()) return;
  TakePrepared();
  Unmap();
}

FaultAhead::FaultAhead(const std::vector<std::span<std::byte>>& spans) {
  uint64_t total = 0;
  for (std::span<std::byte> s : spans) total += s.size();
  if (total < kFaultAheadFrom) return;
  thread_ = std::thread([this, spans] {
    // Only where a span's first page is not there yet: memory the caller
    // has used is left alone (a look costs a system call, not a walk of
    // every page).
    std::vector<std::span<std::byte>> fresh;
    for (std::span<std::byte> s : spans) {
      const std::span<std::byte> pages = PagesWithin(s);
      unsigned char there = 0;
      if (!pages.empty() && ::mincore(pages.data(), kPage, &there) == 0 &&
          (there & 1) == 0) {
        fresh.push_back(pages);
      }
    }
    AdviseInPieces(fresh, kMadvPopulateWrite, stop_, FaultThreads());
  });
}

FaultAhead::~FaultAhead() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

uint64_t FreeMemory() {
  std::FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kib = 0;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "MemAvailable: %llu kB", &v) == 1) {
      kib = v;
      break;
    }
  }
  std::fclose(f);
  return kib > (UINT64_MAX >> 10) ? UINT64_MAX : kib << 10;
}

uint64_t StagingBytes(const State& state) {
  uint64_t total = 0;
  for (const Entry& e : state.entries()) {
    const uint64_t n = EntryBytes(e);
    total = Place(total, n) + n;
  }
  return total;
}

Status StageState(const State& state, std::span<std::byte> memory, State& out) {
  CKPT_RETURN_IF_ERROR(state.status());
  // The places first, then every copy at once on the machine's cores: the
  // copy is the caller's whole stall.
  std::vector<CopyJob> copies;
  std::vector<DeviceCopy> device_copies;
  uint64_t used = 0;
  for (const Entry& e : state.entries()) {
    if (e.kind == EntryKind::kMetadata) {
      out.AddMetadataJson(e.name, e.json);
      continue;
    }
    const uint64_t n = EntryBytes(e);
    used = std::min<uint64_t>(Place(used, n), memory.size());
    if (memory.size() - used < n) {
      return InvalidArgumentError("asynchronous save: entry " + e.name +
                                  " does not fit in the staging memory");
    }
    std::byte* dst = memory.data() + used;
    if (!e.tensor.location.is_host()) {
      device_copies.push_back(DeviceCopy{&e, dst});
    } else if (n > 0) {
      copies.push_back(CopyJob{dst, e.tensor.data, n});
    }
    used += n;
    TensorView view{e.tensor.dtype, e.tensor.shape, dst, false};
    if (e.kind == EntryKind::kBlob) {
      // Borrowed, as every staged entry: AddRankLocalBlob would copy again.
      out.AddBlob(e.name, std::span<const std::byte>(dst, n));
      if (Entry* staged = out.Find(e.name); staged && e.rank_local) {
        staged->rank_local = true;
      }
    } else if (e.rank_local) {
      out.AddRankLocalTensor(e.name, std::move(view));
    } else if (e.is_piece()) {
      out.AddTensorPiece(e.name, e.global_shape, e.offsets, std::move(view));
    } else {
      out.AddTensor(e.name, std::move(view));
    }
  }
  CKPT_RETURN_IF_ERROR(out.status());
  if (!device_copies.empty()) {
    constexpr std::string_view kOp = "copy from the device";
    CKPT_ASSIGN_OR_RETURN(CudaDriver * cuda,
                          DriverFor(*device_copies[0].entry, kOp));
    CKPT_RETURN_IF_ERROR(
        CopyFromDevices(*cuda, device_copies, state.cuda_stream(), kOp));
  }
  return ParallelCopy(copies);
}

}  // namespace ckpt
