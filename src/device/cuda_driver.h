// The seam between ckpt and CUDA: the CUDA driver API, loaded at run time.
//
// ckpt builds without the CUDA toolkit. The driver (libcuda.so.1, which a
// machine with an NVIDIA driver has) is dlopen'ed on first use and its entry
// points looked up by their versioned names, so one build runs on machines
// with and without GPUs: without one, a device call returns Unavailable
// naming what was missing, and nothing crashes. CKPT_CUDA_DRIVER, when set,
// names the library to load instead; the tests load a double of the driver
// that works on host memory (src/testing/fake_cuda.h, docs/gpu.md).
//
// A call that names a device makes that device's primary context current on
// the calling thread for its duration and then restores the thread's own
// context, which the caller's framework (PyTorch) relies on. The context is
// retained on the first use of its device only: a context costs hundreds of
// MiB of device memory, and a rank that uses one GPU of eight must not make
// eight.
//
// Errors name the operation passed in (`what`), the driver call and the CUDA
// error, for example "save tensor w: copy 4096 bytes from cuda:0 to host:
// cuMemcpyDtoHAsync_v2: CUDA_ERROR_INVALID_VALUE (invalid argument)".
//
//   CKPT_ASSIGN_OR_RETURN(CudaDriver* cuda, CudaDriver::Get());
//   CKPT_ASSIGN_OR_RETURN(auto stream, cuda->NewStream(0, "save"));
//   CKPT_RETURN_IF_ERROR(cuda->WaitForStream(0, stream->handle(),
//                                            torch_stream, "save"));
//   CKPT_RETURN_IF_ERROR(cuda->CopyToHostAsync(*stream, staging, ptr, n,
//                                              "save tensor w"));
//   CKPT_RETURN_IF_ERROR(cuda->Synchronize(*stream, "save"));
//
// Thread-safe: any thread may call any method. A CudaStream or CudaEvent
// must not outlive the driver that made it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/device.h"
#include "ckpt/status.h"
#include "device/cuda_api.h"
#include "util/mutex.h"

namespace ckpt {

class CudaDriver;

// A stream that ckpt owns on one device. It does not wait for the legacy
// default stream: it is ordered after the caller's work only where
// WaitForStream says so.
class CudaStream {
 public:
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  int device() const { return device_; }
  CUstream handle() const { return stream_; }

 private:
  friend class CudaDriver;
  CudaStream(const CudaDriver* driver, int device, CUstream stream)
      : driver_(driver), device_(device), stream_(stream) {}

  const CudaDriver* const driver_;
  const int device_;
  const CUstream stream_;
};

// A point in a stream's work: recorded on a stream, waited for on the host
// (a copy into a buffer done, so the buffer can be reused).
class CudaEvent {
 public:
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  int device() const { return device_; }
  CUevent handle() const { return event_; }

 private:
  friend class CudaDriver;
  CudaEvent(const CudaDriver* driver, int device, CUevent event)
      : driver_(driver), device_(device), event_(event) {}

  const CudaDriver* const driver_;
  const int device_;
  const CUevent event_;
};

class CudaDriver {
 public:
  // The process's driver: the library CKPT_CUDA_DRIVER names, or
  // libcuda.so.1. Loaded and initialized on the first call; every later call
  // returns the same driver, or the same error. Never unloaded: the driver's
  // own threads and other libraries' handles outlive any owner ckpt could
  // name.
  static Result<CudaDriver*> Get();

  // Loads the driver library at `path` (found as dlopen finds it) and
  // initializes it (cuInit). Unavailable when the library or one of its entry
  // points is missing, or when cuInit fails (no device, driver too old), with
  // the path or the entry in the message. Tests open the double this way.
  static Result<std::unique_ptr<CudaDriver>> Open(const std::string& path);

  // Releases the primary contexts this driver retained.
  ~CudaDriver();
  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  const std::string& path() const { return path_; }
  // Devices this process sees; at least 0.
  int device_count() const { return device_count_; }

  // Where `p` points: a device's memory, or host memory (page-locked or not;
  // memory the driver does not know is host memory).
  Result<MemoryLocation> Locate(const void* p, std::string_view what) const;

  // Copies `n` bytes between host memory and the memory of `device`, after
  // the work already queued on `caller_stream` (the caller's stream on
  // `device`; null: the legacy default stream), and returns when the copy is
  // done.
  Status CopyToHost(int device, void* dst, CUdeviceptr src, size_t n,
                    CUstream caller_stream, std::string_view what) const;
  Status CopyToDevice(int device, CUdeviceptr dst, const void* src, size_t n,
                      CUstream caller_stream, std::string_view what) const;

  // A new stream on `device`, for the asynchronous copies below.
  Result<std::unique_ptr<CudaStream>> NewStream(int device,
                                                std::string_view what) const;
  // Queue a copy of `n` bytes on `stream` and return. The host memory must
  // stay until Synchronize; the copy overlaps the host's work only when it is
  // registered (Register), the driver copies pageable memory through a
  // bounce buffer. An error of the copy itself may surface only at
  // Synchronize.
  Status CopyToHostAsync(const CudaStream& stream, void* dst, CUdeviceptr src,
                         size_t n, std::string_view what) const;
  Status CopyToDeviceAsync(const CudaStream& stream, CUdeviceptr dst,
                           const void* src, size_t n,
                           std::string_view what) const;
  // Returns when all the work queued on `stream` is done, or its error.
  Status Synchronize(const CudaStream& stream, std::string_view what) const;

  // Returns when all the work queued on every stream of `device` (in its
  // primary context, which PyTorch and most frameworks use) is done: what
  // ckpt waits for before a copy when the caller names no stream of its own.
  Status SynchronizeDevice(int device, std::string_view what) const;

  // Work queued on `waiter` after this call runs after the work queued on
  // `waited` before it, without blocking the host. Both are streams of
  // `device` (null: the legacy default stream). A save orders ckpt's stream
  // after the caller's (the tensor is computed), a load the caller's after
  // ckpt's (the tensor is filled).
  Status WaitForStream(int device, CUstream waiter, CUstream waited,
                       std::string_view what) const;

  // A new event on `device`; Record places it after the work queued on
  // `stream` so far, and Synchronize returns when that work is done.
  Result<std::unique_ptr<CudaEvent>> NewEvent(int device,
                                              std::string_view what) const;
  Status Record(const CudaEvent& event, CUstream stream,
                std::string_view what) const;
  Status Synchronize(const CudaEvent& event, std::string_view what) const;

  // Page-locks (pins) `n` bytes of host memory at `p`, for every device, so
  // that copies from and to it run asynchronously at full speed; Unregister
  // undoes it. Pinning is slow (it touches every page): register long-lived
  // buffers once. `device` is the device whose context makes the call: the
  // one the caller uses, so that no other device gets a context.
  Status Register(int device, void* p, size_t n, std::string_view what) const;
  Status Unregister(int device, void* p, std::string_view what) const;

  // `n` bytes of the memory of `device` (cuMemAlloc_v2), until Free. Not for
  // ckpt's saves and loads, which only copy the caller's tensors: for a
  // program that makes device tensors of its own (ckpt bench --device).
  Result<CUdeviceptr> Allocate(int device, size_t n,
                               std::string_view what) const;
  Status Free(int device, CUdeviceptr p, std::string_view what) const;

 private:
  struct Api;
  class ScopedContext;
  friend class CudaStream;
  friend class CudaEvent;

  CudaDriver(std::string path, void* library);

  // Status of a driver call: OK, or "<what>: <call>: <NAME> (<text>)".
  Status Check(CUresult result, const char* call, std::string_view what) const;
  // The primary context of `device`, retained on first use.
  Result<CUcontext> PrimaryContext(int device, std::string_view what) const
      EXCLUDES(mu_);

  const std::string path_;
  void* const library_;  // the dlopen handle
  std::unique_ptr<Api> api_;
  int device_count_ = 0;

  mutable Mutex mu_;
  // Per device ordinal: the retained primary context, or null.
  mutable std::vector<CUcontext> contexts_ GUARDED_BY(mu_);
};

}  // namespace ckpt
