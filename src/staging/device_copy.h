// Copies between CUDA devices and host memory, for the Save and Load of a
// state whose tensors live on a device (docs/gpu.md).
//
// ckpt copies on streams of its own, one per device, so that its copies
// queue behind nothing but what they must wait for: the caller's stream
// (State::SetCudaStream), or, when the caller names none, all the device's
// work (cuCtxSynchronize). Each function returns once its copies are done,
// so the host memory is free again and the device memory holds the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "ckpt/state.h"
#include "ckpt/status.h"
#include "device/cuda_driver.h"

namespace ckpt {

// One device tensor and the host memory its bytes go to or come from.
struct DeviceCopy {
  const Entry* entry;  // the tensor, on a device
  std::byte* host;     // ByteSize() bytes, page-locked for full speed
};

// The first tensor of `state` that lives on a device, or null.
const Entry* FirstDeviceTensor(const State& state);

// The process's CUDA driver (CudaDriver::Get), for `op` on `entry`, a
// tensor on a device: Unavailable naming the operation, the entry and the
// device when there is no driver.
Result<CudaDriver*> DriverFor(const Entry& entry, std::string_view op);

// A new stream of ckpt's on `device`, its work ordered after what
// `caller` (a CUstream of `device`) has queued so far; null: after all the
// device's work (the device is synchronized now).
Result<std::unique_ptr<CudaStream>> OrderedStream(const CudaDriver& cuda,
                                                  int device, CUstream caller,
                                                  std::string_view what);

// Copies each device tensor into its host memory, after `caller_stream`'s
// work (a CUstream of the tensors' device; null: after all the work of
// each device).
Status CopyFromDevices(const CudaDriver& cuda,
                       std::span<const DeviceCopy> copies, void* caller_stream,
                       std::string_view op);

// Copies each host memory into its device tensor, after `caller_stream`'s
// work (which may still read the old values; null: after all the work of
// each device).
Status CopyToDevices(const CudaDriver& cuda, std::span<const DeviceCopy> copies,
                     void* caller_stream, std::string_view op);

}  // namespace ckpt
