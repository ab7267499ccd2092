#include "staging/device_pipeline.h"

#include <algorithm>

#include "staging/device_copy.h"
#include "util/names.h"

namespace ckpt {

DeviceReadPipeline::DeviceReadPipeline(const CudaDriver& cuda,
                                       std::span<std::byte> memory,
                                       std::vector<Segment> segments,
                                       std::string op)
    : cuda_(cuda),
      memory_(memory),
      segments_(std::move(segments)),
      op_(std::move(op)) {
  for (const Segment& s : segments_) {
    starts_.push_back(total_);
    total_ += s.bytes;
  }
}

Result<std::unique_ptr<DeviceReadPipeline>> DeviceReadPipeline::Start(
    const CudaDriver& cuda, std::span<std::byte> memory,
    std::vector<Segment> segments, void* caller, std::string op) {
  if (memory.size() < kMemoryBytes) {
    return InvalidArgumentError(op + ": " + std::to_string(memory.size()) +
                                " bytes of bounce memory, below " +
                                std::to_string(kMemoryBytes));
  }
  std::unique_ptr<DeviceReadPipeline> p(new DeviceReadPipeline(
      cuda, memory.first(kMemoryBytes), std::move(segments), std::move(op)));
  for (const Segment& s : p->segments_) {
    const int device = s.entry->tensor.location.device();
    if (p->streams_.count(device)) continue;
    const std::string what = p->op_ + ": tensor " + Quote(s.entry->name) +
                             " on " + s.entry->tensor.location.ToString();
    std::vector<std::unique_ptr<CudaStream>>& streams = p->streams_[device];
    // Only the first stream of a device waits for the whole device when the
    // caller names no stream: the others are then ordered already.
    CUstream waited = static_cast<CUstream>(caller);
    for (size_t slot = 0; slot < kSlots; ++slot) {
      Result<std::unique_ptr<CudaStream>> stream =
          waited == nullptr && slot > 0
              ? cuda.NewStream(device, what)
              : OrderedStream(cuda, device, waited, what);
      if (!stream.ok()) return stream.status();
      streams.push_back(std::move(stream).value());
    }
  }
  for (uint64_t b = 0; b < std::min<uint64_t>(kSlots, p->blocks()); ++b) {
    CKPT_RETURN_IF_ERROR(p->Enqueue(b));
  }
  return p;
}

DeviceReadPipeline::~DeviceReadPipeline() {
  // The memory must not be reused, nor the streams destroyed, while a copy
  // still writes into it; errors were reported by Read, or nobody asks.
  for (size_t slot = 0; slot < kSlots; ++slot) (void)Await(slot);
}

Status DeviceReadPipeline::Enqueue(uint64_t b) {
  const size_t slot = b % kSlots;
  const uint64_t begin = b * kBlock;
  const uint64_t end = std::min(total_, begin + kBlock);
  std::byte* const into = memory_.data() + slot * kBlock;
  // The segment holding `begin`: the last that starts at or before it.
  size_t i = std::upper_bound(starts_.begin(), starts_.end(), begin) -
             starts_.begin() - 1;
  for (uint64_t at = begin; at < end; ++i) {
    const Segment& s = segments_[i];
    const uint64_t offset = at - starts_[i];
    const uint64_t n = std::min(end, starts_[i] + s.bytes) - at;
    if (n == 0) continue;  // an empty segment
    const int device = s.entry->tensor.location.device();
    in_flight_[slot].tensors[device].push_back(s.entry);
    CKPT_RETURN_IF_ERROR(cuda_.CopyToHostAsync(
        *streams_.at(device)[slot], into + (at - begin),
        reinterpret_cast<CUdeviceptr>(s.entry->tensor.data) + offset, n,
        op_ + ": tensor " + Quote(s.entry->name)));
    at += n;
  }
  return Status();
}

Status DeviceReadPipeline::Await(size_t slot) {
  Status first;
  for (const auto& [device, entries] : in_flight_[slot].tensors) {
    // A copy's error surfaces here, so the message names every tensor the
    // block's copies on this device read.
    std::string what = op_ + (entries.size() > 1 ? ": tensors " : ": tensor ");
    constexpr size_t kNamed = 3;
    for (size_t k = 0; k < std::min(kNamed, entries.size()); ++k) {
      if (k > 0) what += ", ";
      what += Quote(entries[k]->name);
    }
    if (entries.size() > kNamed) {
      what += " and " + std::to_string(entries.size() - kNamed) + " more";
    }
    Status s = cuda_.Synchronize(*streams_.at(device)[slot], what);
    if (first.ok()) first = std::move(s);
  }
  in_flight_[slot].tensors.clear();
  return first;
}

Status DeviceReadPipeline::Read(uint64_t n, const Sink& sink) {
  if (error_.ok() && n > total_ - position_) {
    error_ = InvalidArgumentError(op_ +
                                  ": read past the end of the device "
                                  "bytes");
  }
  while (error_.ok() && n > 0) {
    const uint64_t b = position_ / kBlock;
    const size_t slot = b % kSlots;
    if (ready_block_ != b) {
      error_ = Await(slot);
      if (!error_.ok()) break;
      ready_block_ = b;
    }
    const uint64_t block_end = std::min(total_, (b + 1) * kBlock);
    const uint64_t len = std::min(n, block_end - position_);
    error_ = sink(std::span<const std::byte>(
        memory_.data() + slot * kBlock + position_ % kBlock, len));
    position_ += len;
    n -= len;
    // The block is taken: its slot fetches the block kSlots further on.
    if (error_.ok() && position_ == block_end && b + kSlots < blocks()) {
      error_ = Enqueue(b + kSlots);
    }
  }
  return error_;
}

}  // namespace ckpt
