// Device bytes read to the host through a few page-locked blocks, the copy
// of the next blocks overlapping the caller's use of the last: a Save of a
// device state checksums and writes one block while the next ones come over
// the bus, so it needs a fixed amount of host memory (kSlots * kBlock),
// not a copy of the state, and the disk never waits for the whole copy.
//
// The pipeline reads a sequence of segments (the first bytes of device
// tensors) as one stream of bytes: block b holds bytes [b*kBlock,
// (b+1)*kBlock) of it, so many small tensors share a block and cost one
// wait, not one each. Block b is copied into slot b % kSlots on a stream of
// ckpt's per device and slot, each ordered after the caller's work; the
// slot is refilled with block b + kSlots once the caller has taken block b.
//
// Used by one thread at a time. The destructor waits for every copy in
// flight, so the memory is free again when the pipeline is gone, whatever
// failed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/state.h"
#include "ckpt/status.h"
#include "device/cuda_driver.h"

namespace ckpt {

class DeviceReadPipeline {
 public:
  // Bytes per block, and blocks in flight: 32 MiB of page-locked memory
  // keeps a disk of a few GB/s busy while copies run at tens of GB/s.
  static constexpr uint64_t kBlock = uint64_t{8} << 20;
  static constexpr size_t kSlots = 4;
  static constexpr uint64_t kMemoryBytes = kBlock * kSlots;

  // The first `bytes` bytes of `entry`'s tensor, which lives on a device.
  struct Segment {
    const Entry* entry;
    uint64_t bytes;
  };

  // Starts copying `segments`, in order, into `memory` (kMemoryBytes bytes,
  // page-locked for full speed), after `caller`'s work on each device (a
  // CUstream; null: after all of each device's work). `op` names the
  // operation in errors. The entries must outlive the pipeline.
  static Result<std::unique_ptr<DeviceReadPipeline>> Start(
      const CudaDriver& cuda, std::span<std::byte> memory,
      std::vector<Segment> segments, void* caller, std::string op);

  ~DeviceReadPipeline();
  DeviceReadPipeline(const DeviceReadPipeline&) = delete;
  DeviceReadPipeline& operator=(const DeviceReadPipeline&) = delete;

  // Hands the next `n` bytes of the stream to `sink`, in order, as spans
  // that each lie in one block; a span is valid only until `sink` returns.
  // The first error (a copy's, the sink's, or reading past the end) is
  // returned by this and every later call.
  using Sink = std::function<Status(std::span<const std::byte>)>;
  Status Read(uint64_t n, const Sink& sink);

 private:
  DeviceReadPipeline(const CudaDriver& cuda, std::span<std::byte> memory,
                     std::vector<Segment> segments, std::string op);

  uint64_t blocks() const { return (total_ + kBlock - 1) / kBlock; }
  // Queues the copies of block `b` into its slot.
  Status Enqueue(uint64_t b);
  // Waits for the copies into `slot`; their error, naming the tensors.
  Status Await(size_t slot);

  const CudaDriver& cuda_;
  const std::span<std::byte> memory_;
  const std::vector<Segment> segments_;
  std::vector<uint64_t> starts_;  // of each segment in the stream
  uint64_t total_ = 0;
  const std::string op_;
  // Per device, one stream per slot.
  std::map<int, std::vector<std::unique_ptr<CudaStream>>> streams_;
  // Per slot: the devices with copies queued into it, and the tensors those
  // copies read, for the message of an error.
  struct InFlight {
    std::map<int, std::vector<const Entry*>> tensors;
  };
  std::vector<InFlight> in_flight_ = std::vector<InFlight>(kSlots);
  uint64_t position_ = 0;  // bytes handed to the caller
  uint64_t ready_block_ = UINT64_MAX;
  Status error_;
};

}  // namespace ckpt
