#include "staging/device_copy.h"

#include <map>
#include <memory>
#include <string>

#include "util/names.h"

namespace ckpt {
namespace {

std::string Naming(std::string_view op, const Entry& e) {
  return std::string(op) + ": tensor " + Quote(e.name) + " on " +
         e.tensor.location.ToString();
}

// "<op>: tensor "w"" or "<op>: tensors "w" and 3 more": the copies' tensors
// on `device`.
std::string Tensors(std::string_view op, std::span<const DeviceCopy> copies,
                    int device) {
  const Entry* first = nullptr;
  size_t more = 0;
  for (const DeviceCopy& c : copies) {
    if (c.entry->tensor.location.device() != device) continue;
    if (first == nullptr) {
      first = c.entry;
    } else {
      ++more;
    }
  }
  std::string s = std::string(op) + (more > 0 ? ": tensors " : ": tensor ") +
                  Quote(first->name);
  if (more > 0) s += " and " + std::to_string(more) + " more";
  return s;
}

// One stream of ckpt's per device the copies touch, each ordered after the
// caller's work on that device.
Result<std::map<int, std::unique_ptr<CudaStream>>> OrderedStreams(
    const CudaDriver& cuda, std::span<const DeviceCopy> copies, CUstream caller,
    std::string_view op) {
  std::map<int, std::unique_ptr<CudaStream>> streams;
  for (const DeviceCopy& c : copies) {
    const int device = c.entry->tensor.location.device();
    if (streams.count(device)) continue;
    CKPT_ASSIGN_OR_RETURN(
        std::unique_ptr<CudaStream> stream,
        OrderedStream(cuda, device, caller, Tensors(op, copies, device)));
    streams.emplace(device, std::move(stream));
  }
  return streams;
}

Status Copy(const CudaDriver& cuda, std::span<const DeviceCopy> copies,
            void* caller_stream, std::string_view op, bool to_host) {
  CKPT_ASSIGN_OR_RETURN(
      auto streams,
      OrderedStreams(cuda, copies, static_cast<CUstream>(caller_stream), op));
  Status first;
  for (const DeviceCopy& c : copies) {
    const TensorView& t = c.entry->tensor;
    const CudaStream& stream = *streams.at(t.location.device());
    const CUdeviceptr device = reinterpret_cast<CUdeviceptr>(t.data);
    const uint64_t n = *t.ByteSize();
    const std::string what = Naming(op, *c.entry);
    first = to_host ? cuda.CopyToHostAsync(stream, c.host, device, n, what)
                    : cuda.CopyToDeviceAsync(stream, device, c.host, n, what);
    if (!first.ok()) break;
  }
  // Every stream is drained, after an error too: the host memory must not
  // be reused while a copy queued before it still runs. A copy's own error
  // surfaces here, so the message names the tensors of the stream.
  for (const auto& [device, stream] : streams) {
    Status s = cuda.Synchronize(*stream, Tensors(op, copies, device));
    if (first.ok()) first = std::move(s);
  }
  return first;
}

}  // namespace

Result<std::unique_ptr<CudaStream>> OrderedStream(const CudaDriver& cuda,
                                                  int device, CUstream caller,
                                                  std::string_view what) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<CudaStream> stream,
                        cuda.NewStream(device, what));
  if (caller != nullptr) {
    CKPT_RETURN_IF_ERROR(
        cuda.WaitForStream(device, stream->handle(), caller, what));
  } else {
    CKPT_RETURN_IF_ERROR(cuda.SynchronizeDevice(device, what));
  }
  return stream;
}

const Entry* FirstDeviceTensor(const State& state) {
  for (const Entry& e : state.entries()) {
    if (!e.tensor.location.is_host()) return &e;
  }
  return nullptr;
}

Result<CudaDriver*> DriverFor(const Entry& entry, std::string_view op) {
  Result<CudaDriver*> cuda = CudaDriver::Get();
  if (!cuda.ok()) return cuda.status().WithContext(Naming(op, entry));
  return cuda;
}

Status CopyFromDevices(const CudaDriver& cuda,
                       std::span<const DeviceCopy> copies, void* caller_stream,
                       std::string_view op) {
  return Copy(cuda, copies, caller_stream, op, /*to_host=*/true);
}

Status CopyToDevices(const CudaDriver& cuda, std::span<const DeviceCopy> copies,
                     void* caller_stream, std::string_view op) {
  return Copy(cuda, copies, caller_stream, op, /*to_host=*/false);
}

}  // namespace ckpt
