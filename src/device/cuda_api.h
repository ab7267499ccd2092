// The part of the CUDA driver API (cuda.h) that ckpt calls, declared by hand:
// ckpt builds without the CUDA toolkit and loads the driver at run time
// (cuda_driver.h). The types, values and signatures are cuda.h's on 64-bit
// Linux, which the driver's ABI fixes; a function is named by the symbol the
// driver exports (cuMemcpyDtoH_v2, not the cuda.h macro cuMemcpyDtoH).
//
// Nothing calls these functions by name: cuda_driver.cc takes their types
// for the pointers it looks up with dlsym, and the test double
// (src/testing/fake_cuda.cc) defines them, so the loader and the double
// cannot disagree on a signature. A direct call would fail to link.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

typedef int CUresult;
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;

// The CUresult values ckpt tells apart, and those the double returns.
enum : CUresult {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
  CUDA_ERROR_NOT_PERMITTED = 800,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_UNKNOWN = 999,
};

// cuMemHostRegister: pinned for every context, not only the current one.
constexpr unsigned int CU_MEMHOSTREGISTER_PORTABLE = 1;
// cuStreamCreate: the stream does not wait for the legacy default stream.
constexpr unsigned int CU_STREAM_NON_BLOCKING = 1;
// cuEventCreate: an event only for ordering, which records faster.
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 2;
// cuPointerGetAttribute: the attributes (CUpointer_attribute) and the memory
// types (CUmemorytype) ckpt asks about.
constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
constexpr unsigned int CU_MEMORYTYPE_HOST = 1;
constexpr unsigned int CU_MEMORYTYPE_DEVICE = 2;
constexpr unsigned int CU_MEMORYTYPE_UNIFIED = 4;

CUresult cuInit(unsigned int flags);
CUresult cuGetErrorString(CUresult error, const char** str);
CUresult cuGetErrorName(CUresult error, const char** str);
CUresult cuDeviceGetCount(int* count);
CUresult cuDeviceGet(CUdevice* device, int ordinal);
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device);
CUresult cuCtxGetCurrent(CUcontext* ctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t bytes);
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t bytes,
                              CUstream stream);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t bytes,
                              CUstream stream);
CUresult cuStreamCreate(CUstream* stream, unsigned int flags);
CUresult cuStreamDestroy_v2(CUstream stream);
CUresult cuStreamSynchronize(CUstream stream);
CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags);
CUresult cuEventCreate(CUevent* event, unsigned int flags);
CUresult cuEventRecord(CUevent event, CUstream stream);
CUresult cuEventSynchronize(CUevent event);
CUresult cuEventDestroy_v2(CUevent event);
CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags);
CUresult cuMemHostUnregister(void* p);
CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr ptr);

// Device memory: ckpt's saves and loads never allocate it; ckpt bench
// --device does (CudaDriver::Allocate), and the tests, through the double.
CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr ptr);

}  // extern "C"
