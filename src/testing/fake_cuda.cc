// The CUDA driver's entry points on host memory (fake_cuda.h says what is
// modelled). One process-wide state under one lock; the bytes of a copy move
// outside it, so that copies that nothing orders race as they would on a
// device.
#include "testing/fake_cuda.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <thread>
#include <utility>

#include "device/cuda_api.h"
#include "util/mutex.h"

using ckpt::CondVar;
using ckpt::Mutex;
using ckpt::MutexLock;

constexpr int kMaxDevices = 8;

struct CUctx_st {
  int device;
};

// A stream: its work runs in order on its own thread.
struct CUstream_st {
  explicit CUstream_st(int device);
  ~CUstream_st();
  // Queues `work`, which returns the CUresult of an asynchronous operation.
  void Launch(std::function<CUresult()> work);
  // Waits until the queue is empty; the first error since the last call.
  CUresult Drain();
  // Waits until the queue is empty, leaving any error to Drain.
  void WaitIdle();

  const int device;
  Mutex mu;
  CondVar changed;  // work queued, done, or stopping
  std::deque<std::function<CUresult()>> queue GUARDED_BY(mu);
  bool busy GUARDED_BY(mu) = false;
  bool stopping GUARDED_BY(mu) = false;
  CUresult error GUARDED_BY(mu) = CUDA_SUCCESS;
  std::thread worker;  // started by the constructor, once the rest is built
};

// An event's state outlives the event while work still refers to it, as the
// driver lets an event be destroyed with a wait on it pending.
struct EventState {
  Mutex mu;
  CondVar completed_changed;
  uint64_t recorded GUARDED_BY(mu) = 0;   // records made
  uint64_t completed GUARDED_BY(mu) = 0;  // the last record reached

  void WaitFor(uint64_t record) {
    MutexLock lock(&mu);
    while (completed < record) completed_changed.Wait(&mu);
  }
};

struct CUevent_st {
  int device;
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

namespace {

// A fault that, once on, lets `after` operations (or bytes) through.
struct Fault {
  bool on = false;
  int64_t after = 0;
  // Whether the next operation fails; counts it otherwise.
  bool Fails() {
    if (!on) return false;
    if (after <= 0) return true;
    --after;
    return false;
  }
};

struct Allocation {
  size_t size;
  int device;
};

struct Fake {
  Mutex mu;
  bool initialized GUARDED_BY(mu) = false;
  bool init_fails GUARDED_BY(mu) = false;
  int devices GUARDED_BY(mu) = 2;
  int64_t stream_delay_us GUARDED_BY(mu) = 0;
  // Bytes still allowed through, when copy_fails_after_bytes is on.
  bool copy_bytes_limited GUARDED_BY(mu) = false;
  int64_t copy_bytes_left GUARDED_BY(mu) = 0;
  Fault copy_call GUARDED_BY(mu);
  Fault register_call GUARDED_BY(mu);
  Fault alloc_call GUARDED_BY(mu);
  Fault stream_call GUARDED_BY(mu);
  int64_t retained[kMaxDevices] GUARDED_BY(mu) = {};
  std::map<CUdeviceptr, Allocation> allocations GUARDED_BY(mu);
  std::map<uintptr_t, size_t> registered GUARDED_BY(mu);  // start, size
  CkptFakeCudaStats stats GUARDED_BY(mu) = {};
};

Fake& State() {
  static Fake* fake = new Fake;  // never destroyed: streams may outlive exit
  return *fake;
}

// The live streams, for cuCtxSynchronize. A lock of their own, which no
// stream's worker takes, so a context synchronize can hold it while it
// waits for them.
struct Streams {
  Mutex mu;
  std::set<CUstream_st*> live GUARDED_BY(mu);
};

Streams& LiveStreams() {
  static Streams* streams = new Streams;  // as State()
  return *streams;
}

CUctx_st primary_contexts[kMaxDevices] = {{0}, {1}, {2}, {3},
                                          {4}, {5}, {6}, {7}};
thread_local CUctx_st* current_context = nullptr;

// CUDA_SUCCESS when this thread can make calls that need a context.
CUresult CheckContext(Fake& f) REQUIRES(f.mu) {
  if (!f.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (current_context == nullptr || f.retained[current_context->device] == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

// Whether [p, p + n) lies inside one live allocation.
bool InAllocation(Fake& f, CUdeviceptr p, size_t n) REQUIRES(f.mu) {
  auto it = f.allocations.upper_bound(p);
  if (it == f.allocations.begin()) return false;
  --it;
  return p - it->first <= it->second.size &&
         n <= it->second.size - (p - it->first);
}

bool InRegistered(Fake& f, const void* p, size_t n) REQUIRES(f.mu) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = f.registered.upper_bound(a);
  if (it == f.registered.begin()) return false;
  --it;
  return a - it->first <= it->second && n <= it->second - (a - it->first);
}

// Checks a copy's arguments, as the driver does when it is called.
CUresult CheckCopy(CUdeviceptr device, const void* host, size_t n,
                   CUstream stream) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
  if (host == nullptr || !InAllocation(f, device, n)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (stream != nullptr && !InRegistered(f, host, n)) {
    ++f.stats.pageable_async_copies;
  }
  return CUDA_SUCCESS;
}

// Moves the bytes of a copy, as the device does when the copy runs.
CUresult RunCopy(void* dst, const void* src, size_t n, bool to_host) {
  Fake& f = State();
  size_t allowed = n;
  bool fails = false;
  {
    MutexLock lock(&f.mu);
    ++f.stats.copies;
    if (f.copy_call.Fails()) {
      allowed = 0;
      fails = true;
    } else if (f.copy_bytes_limited) {
      allowed = static_cast<size_t>(
          std::min<int64_t>(f.copy_bytes_left, static_cast<int64_t>(n)));
      f.copy_bytes_left -= static_cast<int64_t>(allowed);
      fails = allowed < n;
    }
    (to_host ? f.stats.bytes_to_host : f.stats.bytes_to_device) +=
        static_cast<int64_t>(allowed);
  }
  std::memcpy(dst, src, allowed);
  return fails ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

// Runs `work` on `stream`, or at once on the legacy default stream.
CUresult Launch(CUstream stream, std::function<CUresult()> work) {
  if (stream == nullptr) return work();
  stream->Launch(std::move(work));
  return CUDA_SUCCESS;
}

CUresult Copy(void* dst, const void* src, size_t n, bool to_host,
              CUstream stream) {
  const CUdeviceptr device = reinterpret_cast<CUdeviceptr>(to_host ? src : dst);
  const void* host = to_host ? dst : src;
  if (CUresult r = CheckCopy(device, host, n, stream); r != CUDA_SUCCESS) {
    return r;
  }
  return Launch(stream, [=] { return RunCopy(dst, src, n, to_host); });
}

}  // namespace

CUstream_st::CUstream_st(int device) : device(device) {
  worker = std::thread([this] {
    for (;;) {
      std::function<CUresult()> work;
      {
        MutexLock lock(&mu);
        while (queue.empty() && !stopping) changed.Wait(&mu);
        if (queue.empty()) return;
        work = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      int64_t delay_us = 0;
      {
        Fake& f = State();
        MutexLock lock(&f.mu);
        delay_us = f.stream_delay_us;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      const CUresult r = work();
      MutexLock lock(&mu);
      if (error == CUDA_SUCCESS) error = r;
      busy = false;
      changed.SignalAll();
    }
  });
}

CUstream_st::~CUstream_st() {
  {
    MutexLock lock(&mu);
    stopping = true;
  }
  changed.SignalAll();
  worker.join();
}

void CUstream_st::Launch(std::function<CUresult()> work) {
  MutexLock lock(&mu);
  queue.push_back(std::move(work));
  changed.SignalAll();
}

void CUstream_st::WaitIdle() {
  MutexLock lock(&mu);
  while (!queue.empty() || busy) changed.Wait(&mu);
}

CUresult CUstream_st::Drain() {
  MutexLock lock(&mu);
  while (!queue.empty() || busy) changed.Wait(&mu);
  return std::exchange(error, CUDA_SUCCESS);
}

extern "C" {

CUresult cuInit(unsigned int flags) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (f.init_fails) return CUDA_ERROR_NO_DEVICE;
  f.initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  switch (error) {
#define CKPT_FAKE_CUDA_NAME(code) \
  case code:                      \
    *str = #code;                 \
    return CUDA_SUCCESS;
    CKPT_FAKE_CUDA_NAME(CUDA_SUCCESS)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_INVALID_VALUE)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_OUT_OF_MEMORY)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_NOT_INITIALIZED)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_NO_DEVICE)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_INVALID_DEVICE)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_INVALID_CONTEXT)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_INVALID_HANDLE)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
    CKPT_FAKE_CUDA_NAME(CUDA_ERROR_NOT_PERMITTED)
#undef CKPT_FAKE_CUDA_NAME
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  // The driver's own texts.
  switch (error) {
    case CUDA_SUCCESS:
      *str = "no error";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *str = "invalid argument";
      return CUDA_SUCCESS;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *str = "out of memory";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED:
      *str = "initialization error";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NO_DEVICE:
      *str = "no CUDA-capable device is detected";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_DEVICE:
      *str = "invalid device ordinal";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_CONTEXT:
      *str = "invalid device context";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_HANDLE:
      *str = "invalid resource handle";
      return CUDA_SUCCESS;
    case CUDA_ERROR_ILLEGAL_ADDRESS:
      *str = "an illegal memory access was encountered";
      return CUDA_SUCCESS;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
      *str = "part or all of the requested memory range is already mapped";
      return CUDA_SUCCESS;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
      *str = "pointer does not correspond to a registered memory region";
      return CUDA_SUCCESS;
    case CUDA_ERROR_NOT_PERMITTED:
      *str = "operation not permitted";
      return CUDA_SUCCESS;
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDeviceGetCount(int* count) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (!f.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *count = f.devices;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (!f.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= f.devices) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (!f.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (device < 0 || device >= f.devices) return CUDA_ERROR_INVALID_DEVICE;
  ++f.retained[device];
  ++f.stats.contexts_retained;
  *ctx = &primary_contexts[device];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (device < 0 || device >= kMaxDevices) return CUDA_ERROR_INVALID_DEVICE;
  if (f.retained[device] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --f.retained[device];
  --f.stats.contexts_retained;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = current_context;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (ctx != nullptr && f.retained[ctx->device] == 0) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  current_context = ctx;
  return CUDA_SUCCESS;
}

// Waits for every stream of the current context's device; as the driver's
// does, it leaves a stream's asynchronous error to that stream.
CUresult cuCtxSynchronize(void) {
  {
    Fake& f = State();
    MutexLock lock(&f.mu);
    if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
  }
  Streams& streams = LiveStreams();
  MutexLock lock(&streams.mu);
  for (CUstream_st* stream : streams.live) {
    if (stream->device == current_context->device) stream->WaitIdle();
  }
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes) {
  return Copy(dst, reinterpret_cast<const void*>(src), bytes, true, nullptr);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes) {
  return Copy(reinterpret_cast<void*>(dst), src, bytes, false, nullptr);
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes,
                              CUstream stream) {
  return Copy(dst, reinterpret_cast<const void*>(src), bytes, true, stream);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                              CUstream stream) {
  return Copy(reinterpret_cast<void*>(dst), src, bytes, false, stream);
}

CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  int device = 0;
  {
    Fake& f = State();
    MutexLock lock(&f.mu);
    if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
    if (f.stream_call.Fails()) return CUDA_ERROR_OUT_OF_MEMORY;
    ++f.stats.streams;
    device = current_context->device;
  }
  *stream = new CUstream_st(device);
  Streams& streams = LiveStreams();
  MutexLock lock(&streams.mu);
  streams.live.insert(*stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  if (stream == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  {
    Streams& streams = LiveStreams();
    MutexLock lock(&streams.mu);
    streams.live.erase(stream);
  }
  delete stream;  // runs the work still queued first
  Fake& f = State();
  MutexLock lock(&f.mu);
  --f.stats.streams;
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  return stream == nullptr ? CUDA_SUCCESS : stream->Drain();
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
  if (event == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t record = 0;
  {
    MutexLock lock(&event->state->mu);
    record = event->state->recorded;
  }
  return Launch(stream, [state = event->state, record] {
    state->WaitFor(record);
    return CUDA_SUCCESS;
  });
}

CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
  ++f.stats.events;
  *event = new CUevent_st{current_context->device};
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (stream != nullptr && stream->device != event->device) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  uint64_t record = 0;
  {
    MutexLock lock(&event->state->mu);
    record = ++event->state->recorded;
  }
  return Launch(stream, [state = event->state, record] {
    MutexLock lock(&state->mu);
    state->completed = std::max(state->completed, record);
    state->completed_changed.SignalAll();
    return CUDA_SUCCESS;
  });
}

CUresult cuEventSynchronize(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  uint64_t record = 0;
  {
    MutexLock lock(&event->state->mu);
    record = event->state->recorded;
  }
  event->state->WaitFor(record);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent event) {
  if (event == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  delete event;
  Fake& f = State();
  MutexLock lock(&f.mu);
  --f.stats.events;
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  const auto start = reinterpret_cast<uintptr_t>(p);
  auto next = f.registered.lower_bound(start);
  const bool overlaps_next =
      next != f.registered.end() && next->first - start < bytes;
  const bool overlaps_previous =
      next != f.registered.begin() &&
      start - std::prev(next)->first < std::prev(next)->second;
  if (overlaps_next || overlaps_previous) {
    return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (f.register_call.Fails()) return CUDA_ERROR_NOT_PERMITTED;
  f.registered[start] = bytes;
  ++f.stats.registrations;
  f.stats.registered_bytes += static_cast<int64_t>(bytes);
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
  auto it = f.registered.find(reinterpret_cast<uintptr_t>(p));
  if (it == f.registered.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  f.stats.registered_bytes -= static_cast<int64_t>(it->second);
  f.registered.erase(it);
  --f.stats.registrations;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr ptr) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (!f.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  unsigned int type = 0;
  int device = 0;
  if (InAllocation(f, ptr, 1)) {
    type = CU_MEMORYTYPE_DEVICE;
    device = std::prev(f.allocations.upper_bound(ptr))->second.device;
  } else if (InRegistered(f, reinterpret_cast<const void*>(ptr), 1)) {
    type = CU_MEMORYTYPE_HOST;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = type;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = device;
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (CUresult r = CheckContext(f); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (f.alloc_call.Fails()) return CUDA_ERROR_OUT_OF_MEMORY;
  // The driver aligns allocations to 256 bytes at least.
  void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  f.allocations[*ptr] = {bytes, current_context->device};
  ++f.stats.allocations;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  if (f.allocations.erase(ptr) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void*>(ptr));
  --f.stats.allocations;
  return CUDA_SUCCESS;
}

int ckpt_fake_cuda_inject(const char* what, int64_t after) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  const std::string_view w(what);
  if (after < 0) return -1;
  if (w == "init_fails") {
    f.init_fails = true;
  } else if (w == "copy_fails_after_bytes") {
    f.copy_bytes_limited = true;
    f.copy_bytes_left = after;
  } else if (w == "copy_fails_on_call") {
    f.copy_call = {true, after};
  } else if (w == "register_fails") {
    f.register_call = {true, after};
  } else if (w == "alloc_fails") {
    f.alloc_call = {true, after};
  } else if (w == "stream_fails") {
    f.stream_call = {true, after};
  } else if (w == "devices" && after <= kMaxDevices) {
    f.devices = static_cast<int>(after);
  } else if (w == "stream_delay_us") {
    f.stream_delay_us = after;
  } else {
    return -1;
  }
  return 0;
}

void ckpt_fake_cuda_stats(CkptFakeCudaStats* out) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  *out = f.stats;
}

void ckpt_fake_cuda_reset(void) {
  Fake& f = State();
  MutexLock lock(&f.mu);
  f.initialized = false;
  f.init_fails = false;
  f.devices = 2;
  f.stream_delay_us = 0;
  f.copy_bytes_limited = false;
  f.copy_bytes_left = 0;
  f.copy_call = {};
  f.register_call = {};
  f.alloc_call = {};
  f.stream_call = {};
  f.stats.bytes_to_host = 0;
  f.stats.bytes_to_device = 0;
  f.stats.copies = 0;
  f.stats.pageable_async_copies = 0;
}

}  // extern "C"
