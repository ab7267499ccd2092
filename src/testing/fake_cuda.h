// A double of the CUDA driver, for tests on machines without a GPU.
//
// libckpt_fake_cuda.so defines the driver's entry points that ckpt calls
// (device/cuda_api.h) on host memory, plus cuMemAlloc_v2 and cuMemFree_v2 for
// the tests' "device memory". Load it as the driver, with
// CudaDriver::Open(path) or CKPT_CUDA_DRIVER=path, and reach the functions
// below with dlsym. What it models of the driver:
//
//   - Two devices (`ckpt_fake_cuda_inject("devices", n)` sets another
//     number), nothing before cuInit (CUDA_ERROR_NOT_INITIALIZED), and the
//     calls that need a context fail with CUDA_ERROR_INVALID_CONTEXT on a
//     thread that has none current.
//   - Device memory is host memory: a device pointer is the host address, so
//     a test may read it directly once its copies are synchronized. A copy
//     that reaches outside a live allocation fails with
//     CUDA_ERROR_INVALID_VALUE, as on the driver.
//   - A stream runs its work in order on a thread of its own, so
//     asynchronous copies do overlap their caller, and work on two streams
//     that nothing orders races (ThreadSanitizer sees it). The error of an
//     asynchronous copy surfaces at cuStreamSynchronize. The legacy default
//     stream (null) runs its work at once. cuCtxSynchronize waits for every
//     stream of the current context's device.
//   - Host registration: registering memory that overlaps a registered range
//     fails with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, unregistering an
//     address that does not start one with ..._NOT_REGISTERED.
//
// The functions are thread-safe.
#pragma once

#include <cstdint>

extern "C" {

// Counters since the last reset (bytes, calls) and objects alive now.
struct CkptFakeCudaStats {
  int64_t bytes_to_host;
  int64_t bytes_to_device;
  int64_t copies;                 // copy calls that ran, failed ones too
  int64_t pageable_async_copies;  // of them, asynchronous from or to memory
                                  // not registered
  int64_t registrations;          // host ranges registered now
  int64_t registered_bytes;       // bytes of them
  int64_t allocations;            // device allocations alive now
  int64_t streams;                // streams alive now
  int64_t events;                 // events alive now
  int64_t contexts_retained;      // primary context retains not released
};

// Injects a fault, which lasts until ckpt_fake_cuda_reset; `what` is one of
//   "init_fails"              cuInit fails with CUDA_ERROR_NO_DEVICE
//   "copy_fails_after_bytes"  once `after` bytes were copied (both ways),
//                             a copy copies up to that count and fails with
//                             CUDA_ERROR_ILLEGAL_ADDRESS, as does every
//                             later one
//   "copy_fails_on_call"      every copy after the first `after` fails with
//                             CUDA_ERROR_ILLEGAL_ADDRESS, copying nothing
//   "register_fails"          every cuMemHostRegister_v2 after the first
//                             `after` fails with CUDA_ERROR_NOT_PERMITTED
//   "alloc_fails"             every cuMemAlloc_v2 after the first `after`
//                             fails with CUDA_ERROR_OUT_OF_MEMORY
//   "stream_fails"            every cuStreamCreate after the first `after`
//                             fails with CUDA_ERROR_OUT_OF_MEMORY
// or sets a parameter:
//   "devices"                 the number of devices, `after` (0 to 8)
//   "stream_delay_us"         each piece of work on a stream waits `after`
//                             microseconds before it runs
// Returns 0, or -1 for an unknown `what` or a value out of range.
int ckpt_fake_cuda_inject(const char* what, int64_t after);
typedef int (*CkptFakeCudaInjectFn)(const char*, int64_t);

void ckpt_fake_cuda_stats(CkptFakeCudaStats* out);
typedef void (*CkptFakeCudaStatsFn)(CkptFakeCudaStats*);

// Clears the faults, the parameters and the counters, and undoes cuInit.
// Objects alive stay alive (and counted).
void ckpt_fake_cuda_reset(void);
typedef void (*CkptFakeCudaResetFn)(void);

}  // extern "C"
