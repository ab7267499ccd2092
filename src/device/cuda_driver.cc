#include "device/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>

namespace ckpt {

// Every entry point ckpt calls, by the name the driver exports.
#define CKPT_CUDA_ENTRY_POINTS(X) \
  X(cuInit)                       \
  X(cuGetErrorString)             \
  X(cuGetErrorName)               \
  X(cuDeviceGetCount)             \
  X(cuDeviceGet)                  \
  X(cuDevicePrimaryCtxRetain)     \
  X(cuDevicePrimaryCtxRelease_v2) \
  X(cuCtxGetCurrent)              \
  X(cuCtxSetCurrent)              \
  X(cuCtxSynchronize)             \
  X(cuMemcpyDtoH_v2)              \
  X(cuMemcpyHtoD_v2)              \
  X(cuMemcpyDtoHAsync_v2)         \
  X(cuMemcpyHtoDAsync_v2)         \
  X(cuStreamCreate)               \
  X(cuStreamDestroy_v2)           \
  X(cuStreamSynchronize)          \
  X(cuStreamWaitEvent)            \
  X(cuEventCreate)                \
  X(cuEventRecord)                \
  X(cuEventSynchronize)           \
  X(cuEventDestroy_v2)            \
  X(cuMemHostRegister_v2)         \
  X(cuMemHostUnregister)          \
  X(cuPointerGetAttribute)

// Entry points that only Allocate and Free call, which a save or a load never
// does: a library without them (every real driver has them) still loads, and
// only the call that needs one fails, naming it.
#define CKPT_CUDA_OPTIONAL_ENTRY_POINTS(X) \
  X(cuMemAlloc_v2)                         \
  X(cuMemFree_v2)

// The loaded entry points, typed by their declarations in cuda_api.h.
struct CudaDriver::Api {
#define CKPT_CUDA_POINTER(name) decltype(&::name) name = nullptr;
  CKPT_CUDA_ENTRY_POINTS(CKPT_CUDA_POINTER)
  CKPT_CUDA_OPTIONAL_ENTRY_POINTS(CKPT_CUDA_POINTER)
#undef CKPT_CUDA_POINTER
};

namespace {

constexpr char kDefaultLibrary[] = "libcuda.so.1";

ErrorCode CodeOf(CUresult result) {
  switch (result) {
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_INVALID_HANDLE:
      return ErrorCode::kInvalidArgument;
    case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
      return ErrorCode::kAlreadyExists;
    case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
      return ErrorCode::kNotFound;
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_NOT_SUPPORTED:
      return ErrorCode::kFailedPrecondition;
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_INSUFFICIENT_DRIVER:
    case CUDA_ERROR_NO_DEVICE:
      return ErrorCode::kUnavailable;
    default:
      return ErrorCode::kIOError;
  }
}

std::string DlError() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown error";
}

std::string LacksEntryPoint(const std::string& path, const char* name) {
  return "CUDA driver " + path + " lacks the entry point " + name +
         " (a driver older than ckpt needs?)";
}

template <typename F>
Status Resolve(void* library, const std::string& path, const char* name,
               F* out) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    return UnavailableError(LacksEntryPoint(path, name) + ": " + DlError());
  }
  *out = reinterpret_cast<F>(symbol);
  return Status::Ok();
}

// "<what>: copy <n> bytes from <from> to <to>"
std::string Copying(std::string_view what, size_t n, MemoryLocation from,
                    MemoryLocation to) {
  std::string s(what);
  s += ": copy " + std::to_string(n) + " bytes from " + from.ToString() +
       " to " + to.ToString();
  return s;
}

std::string OnDevice(std::string_view what, int device) {
  return std::string(what) + " on " + MemoryLocation::Cuda(device).ToString();
}

}  // namespace

// Makes a device's primary context current on this thread, and gives the
// thread back its own context on destruction.
class CudaDriver::ScopedContext {
 public:
  explicit ScopedContext(const CudaDriver& driver) : driver_(driver) {}
  ~ScopedContext() {
    // Setting back a context the thread had fails only if its owner
    // destroyed it meanwhile, and a destructor has no one to tell.
    if (entered_ && previous_ != current_) {
      driver_.api_->cuCtxSetCurrent(previous_);
    }
  }
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  Status Enter(int device, std::string_view what) {
    CKPT_ASSIGN_OR_RETURN(current_, driver_.PrimaryContext(device, what));
    const Api& api = *driver_.api_;
    CKPT_RETURN_IF_ERROR(driver_.Check(api.cuCtxGetCurrent(&previous_),
                                       "cuCtxGetCurrent", what));
    if (previous_ != current_) {
      CKPT_RETURN_IF_ERROR(driver_.Check(api.cuCtxSetCurrent(current_),
                                         "cuCtxSetCurrent", what));
    }
    entered_ = true;
    return Status::Ok();
  }

 private:
  const CudaDriver& driver_;
  CUcontext previous_ = nullptr;
  CUcontext current_ = nullptr;
  bool entered_ = false;
};

CudaStream::~CudaStream() {
  // The driver frees a stream with work pending once that work is done; the
  // call fails only for a handle it does not know, and a destructor has no
  // one to tell.
  driver_->api_->cuStreamDestroy_v2(stream_);
}

CudaEvent::~CudaEvent() {
  // As for streams: a pending event is freed once it completes.
  driver_->api_->cuEventDestroy_v2(event_);
}

Result<CudaDriver*> CudaDriver::Get() {
  static const Result<CudaDriver*> driver = []() -> Result<CudaDriver*> {
    const char* chosen = std::getenv("CKPT_CUDA_DRIVER");
    if (chosen != nullptr && *chosen != '\0') {
      Result<std::unique_ptr<CudaDriver>> opened = Open(chosen);
      if (!opened.ok()) return opened.status().WithContext("CKPT_CUDA_DRIVER");
      return opened->release();
    }
    Result<std::unique_ptr<CudaDriver>> opened = Open(kDefaultLibrary);
    if (!opened.ok()) return opened.status();
    return opened->release();
  }();
  return driver;
}

CudaDriver::CudaDriver(std::string path, void* library)
    : path_(std::move(path)),
      library_(library),
      api_(std::make_unique<Api>()) {}

Result<std::unique_ptr<CudaDriver>> CudaDriver::Open(const std::string& path) {
  // RTLD_NODELETE: the driver runs threads of its own, which must not find
  // their code unmapped when the last handle is closed.
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (library == nullptr) {
    return UnavailableError("CUDA driver not found: dlopen " + path + ": " +
                            DlError());
  }
  std::unique_ptr<CudaDriver> driver(new CudaDriver(path, library));
  Api& api = *driver->api_;
#define CKPT_CUDA_RESOLVE(name) \
  CKPT_RETURN_IF_ERROR(Resolve(library, path, #name, &api.name));
  CKPT_CUDA_ENTRY_POINTS(CKPT_CUDA_RESOLVE)
#undef CKPT_CUDA_RESOLVE
#define CKPT_CUDA_RESOLVE_OPTIONAL(name) \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(library, #name));
  CKPT_CUDA_OPTIONAL_ENTRY_POINTS(CKPT_CUDA_RESOLVE_OPTIONAL)
#undef CKPT_CUDA_RESOLVE_OPTIONAL

  // Whatever stops the driver from starting (no device, a driver older than
  // the kernel module, a broken installation), ckpt cannot use it.
  const std::string what = "CUDA driver " + path;
  if (Status s = driver->Check(api.cuInit(0), "cuInit", what); !s.ok()) {
    return UnavailableError(s.message());
  }
  int count = 0;
  CKPT_RETURN_IF_ERROR(
      driver->Check(api.cuDeviceGetCount(&count), "cuDeviceGetCount", what));
  driver->device_count_ = count;
  {
    MutexLock lock(&driver->mu_);
    driver->contexts_.assign(count, nullptr);
  }
  return driver;
}

CudaDriver::~CudaDriver() {
  {
    MutexLock lock(&mu_);
    for (size_t ordinal = 0; ordinal < contexts_.size(); ++ordinal) {
      CUdevice device = 0;
      // A release that fails leaves the context to the process's exit.
      if (contexts_[ordinal] != nullptr &&
          api_->cuDeviceGet(&device, static_cast<int>(ordinal)) ==
              CUDA_SUCCESS) {
        api_->cuDevicePrimaryCtxRelease_v2(device);
      }
    }
  }
  dlclose(library_);
}

Status CudaDriver::Check(CUresult result, const char* call,
                         std::string_view what) const {
  if (result == CUDA_SUCCESS) return Status::Ok();
  const char* name = nullptr;
  const char* text = nullptr;
  std::string m(what);
  m += ": ";
  m += call;
  m += ": ";
  if (api_->cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) {
    m += name;
  } else {
    m += "CUDA error " + std::to_string(result);
  }
  if (api_->cuGetErrorString(result, &text) == CUDA_SUCCESS &&
      text != nullptr) {
    m += " (";
    m += text;
    m += ")";
  }
  return Status(CodeOf(result), std::move(m));
}

Result<CUcontext> CudaDriver::PrimaryContext(int device,
                                             std::string_view what) const {
  if (device < 0 || device >= device_count_) {
    return InvalidArgumentError(
        std::string(what) + ": no CUDA device " + std::to_string(device) +
        " (this process sees " + std::to_string(device_count_) + ")");
  }
  MutexLock lock(&mu_);
  CUcontext& context = contexts_[device];
  if (context == nullptr) {
    CUdevice handle = 0;
    CKPT_RETURN_IF_ERROR(
        Check(api_->cuDeviceGet(&handle, device), "cuDeviceGet", what));
    CKPT_RETURN_IF_ERROR(Check(api_->cuDevicePrimaryCtxRetain(&context, handle),
                               "cuDevicePrimaryCtxRetain", what));
  }
  return context;
}

Result<MemoryLocation> CudaDriver::Locate(const void* p,
                                          std::string_view what) const {
  const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(p);
  unsigned int type = 0;
  const CUresult r = api_->cuPointerGetAttribute(
      &type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address);
  // The driver does not know the pointer: plain host memory.
  if (r == CUDA_ERROR_INVALID_VALUE) return MemoryLocation::Host();
  CKPT_RETURN_IF_ERROR(Check(r, "cuPointerGetAttribute", what));
  if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED) {
    return MemoryLocation::Host();
  }
  int ordinal = 0;
  CKPT_RETURN_IF_ERROR(
      Check(api_->cuPointerGetAttribute(
                &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address),
            "cuPointerGetAttribute", what));
  return MemoryLocation::Cuda(ordinal);
}

Status CudaDriver::CopyToHost(int device, void* dst, CUdeviceptr src, size_t n,
                              CUstream caller_stream,
                              std::string_view what) const {
  if (n == 0) return Status::Ok();
  const std::string op =
      Copying(what, n, MemoryLocation::Cuda(device), MemoryLocation::Host());
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  if (caller_stream == nullptr) {
    return Check(api_->cuMemcpyDtoH_v2(dst, src, n), "cuMemcpyDtoH_v2", op);
  }
  CKPT_RETURN_IF_ERROR(
      Check(api_->cuMemcpyDtoHAsync_v2(dst, src, n, caller_stream),
            "cuMemcpyDtoHAsync_v2", op));
  return Check(api_->cuStreamSynchronize(caller_stream), "cuStreamSynchronize",
               op);
}

Status CudaDriver::CopyToDevice(int device, CUdeviceptr dst, const void* src,
                                size_t n, CUstream caller_stream,
                                std::string_view what) const {
  if (n == 0) return Status::Ok();
  const std::string op =
      Copying(what, n, MemoryLocation::Host(), MemoryLocation::Cuda(device));
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  if (caller_stream == nullptr) {
    return Check(api_->cuMemcpyHtoD_v2(dst, src, n), "cuMemcpyHtoD_v2", op);
  }
  CKPT_RETURN_IF_ERROR(
      Check(api_->cuMemcpyHtoDAsync_v2(dst, src, n, caller_stream),
            "cuMemcpyHtoDAsync_v2", op));
  return Check(api_->cuStreamSynchronize(caller_stream), "cuStreamSynchronize",
               op);
}

Result<std::unique_ptr<CudaStream>> CudaDriver::NewStream(
    int device, std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": create a stream", device);
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  CUstream stream = nullptr;
  CKPT_RETURN_IF_ERROR(
      Check(api_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING),
            "cuStreamCreate", op));
  return std::unique_ptr<CudaStream>(new CudaStream(this, device, stream));
}

Status CudaDriver::CopyToHostAsync(const CudaStream& stream, void* dst,
                                   CUdeviceptr src, size_t n,
                                   std::string_view what) const {
  if (n == 0) return Status::Ok();
  const std::string op = Copying(what, n, MemoryLocation::Cuda(stream.device()),
                                 MemoryLocation::Host());
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(stream.device(), op));
  return Check(api_->cuMemcpyDtoHAsync_v2(dst, src, n, stream.handle()),
               "cuMemcpyDtoHAsync_v2", op);
}

Status CudaDriver::CopyToDeviceAsync(const CudaStream& stream, CUdeviceptr dst,
                                     const void* src, size_t n,
                                     std::string_view what) const {
  if (n == 0) return Status::Ok();
  const std::string op = Copying(what, n, MemoryLocation::Host(),
                                 MemoryLocation::Cuda(stream.device()));
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(stream.device(), op));
  return Check(api_->cuMemcpyHtoDAsync_v2(dst, src, n, stream.handle()),
               "cuMemcpyHtoDAsync_v2", op);
}

Status CudaDriver::SynchronizeDevice(int device, std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": wait for the device", device);
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  return Check(api_->cuCtxSynchronize(), "cuCtxSynchronize", op);
}

Status CudaDriver::Synchronize(const CudaStream& stream,
                               std::string_view what) const {
  return Check(
      api_->cuStreamSynchronize(stream.handle()), "cuStreamSynchronize",
      OnDevice(std::string(what) + ": wait for a stream", stream.device()));
}

Status CudaDriver::WaitForStream(int device, CUstream waiter, CUstream waited,
                                 std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": order one stream after another", device);
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CudaEvent> event,
                        NewEvent(device, what));
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  CKPT_RETURN_IF_ERROR(
      Check(api_->cuEventRecord(event->handle(), waited), "cuEventRecord", op));
  // The event may go before the wait is over: the driver keeps what the wait
  // needs.
  return Check(api_->cuStreamWaitEvent(waiter, event->handle(), 0),
               "cuStreamWaitEvent", op);
}

Result<std::unique_ptr<CudaEvent>> CudaDriver::NewEvent(
    int device, std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": create an event", device);
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  CUevent event = nullptr;
  CKPT_RETURN_IF_ERROR(
      Check(api_->cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
            "cuEventCreate", op));
  return std::unique_ptr<CudaEvent>(new CudaEvent(this, device, event));
}

Status CudaDriver::Record(const CudaEvent& event, CUstream stream,
                          std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": record an event", event.device());
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(event.device(), op));
  return Check(api_->cuEventRecord(event.handle(), stream), "cuEventRecord",
               op);
}

Status CudaDriver::Synchronize(const CudaEvent& event,
                               std::string_view what) const {
  return Check(
      api_->cuEventSynchronize(event.handle()), "cuEventSynchronize",
      OnDevice(std::string(what) + ": wait for an event", event.device()));
}

Status CudaDriver::Register(int device, void* p, size_t n,
                            std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": page-lock " + std::to_string(n) +
                   " bytes of host memory",
               device);
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  return Check(api_->cuMemHostRegister_v2(p, n, CU_MEMHOSTREGISTER_PORTABLE),
               "cuMemHostRegister_v2", op);
}

Result<CUdeviceptr> CudaDriver::Allocate(int device, size_t n,
                                         std::string_view what) const {
  const std::string op = OnDevice(
      std::string(what) + ": allocate " + std::to_string(n) + " bytes", device);
  if (api_->cuMemAlloc_v2 == nullptr) {
    return UnavailableError(op + ": " +
                            LacksEntryPoint(path_, "cuMemAlloc_v2"));
  }
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  CUdeviceptr p = 0;
  CKPT_RETURN_IF_ERROR(Check(api_->cuMemAlloc_v2(&p, n), "cuMemAlloc_v2", op));
  return p;
}

Status CudaDriver::Free(int device, CUdeviceptr p,
                        std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": free device memory", device);
  if (api_->cuMemFree_v2 == nullptr) {
    return UnavailableError(op + ": " + LacksEntryPoint(path_, "cuMemFree_v2"));
  }
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  return Check(api_->cuMemFree_v2(p), "cuMemFree_v2", op);
}

Status CudaDriver::Unregister(int device, void* p,
                              std::string_view what) const {
  const std::string op =
      OnDevice(std::string(what) + ": unlock host memory", device);
  ScopedContext context(*this);
  CKPT_RETURN_IF_ERROR(context.Enter(device, op));
  return Check(api_->cuMemHostUnregister(p), "cuMemHostUnregister", op);
}

}  // namespace ckpt
