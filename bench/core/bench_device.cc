// ckpt bench --device cuda:N: ckpt's save and load of a state in device
// memory, beside the raw copies and the raw disk, in one run.
//
// The state's tensors are allocated on device N (CudaDriver::Allocate) and
// filled with a pattern that differs by tensor and offset, copied from the
// host. Per round, on the same bytes:
//   1. the raw disk, as for a host state (bench_common.h);
//   2. raw pinned copies: every tensor device to host into a registered host
//      block (kPinnedBlock, reused: the copies are queued on one stream and
//      waited for once), then ckpt Save of the device state;
//   3. host to device from the block into the tensors (which overwrites
//      them, so the load below has to put every byte back), then ckpt Load
//      into the tensors, cold (the checkpoint's pages dropped);
//   4. the tensors copied back and compared with the pattern: a difference
//      fails the command.
// Then SaveAsync as for a host state, and SaveAsync with the copy staged in
// the background (SaveOptions::stage_in_background): the time it takes to
// return, to WaitStaged() and to commit. Peak host memory as for a host
// state: the device state's SaveAsync and Load hold one host copy of it (the
// manager's staging memory), its Save only the 32 MiB of blocks it streams
// through.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/bench_common.h"
#include "core/bench_report.h"
#include "device/cuda_driver.h"

namespace ckpt::bench {
namespace {

// The registered block's size at most: copies this large run at the bus's
// full speed, and the host memory the bench holds stays small beside the
// state's.
constexpr uint64_t kPinnedBlock = uint64_t{64} << 20;

// Word `i` of tensor `t`'s pattern.
uint64_t PatternWord(int t, uint64_t i) {
  return ((i + 1) * 0x9E3779B97F4A7C15ULL) ^ (static_cast<uint64_t>(t) << 48);
}

// Bytes [offset, offset + n) of tensor `t`'s pattern into `out`; `offset` is
// a multiple of 8.
void FillPattern(int t, uint64_t offset, std::byte* out, uint64_t n) {
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t w = PatternWord(t, (offset + i) / 8);
    std::memcpy(out + i, &w, std::min<uint64_t>(8, n - i));
  }
}

// The first byte of `p` (bytes [offset, offset + n) of tensor `t`) that
// differs from the pattern, or n.
uint64_t FirstDifference(int t, uint64_t offset, const std::byte* p,
                         uint64_t n) {
  for (uint64_t i = 0; i < n; i += 8) {
    const uint64_t w = PatternWord(t, (offset + i) / 8);
    const uint64_t m = std::min<uint64_t>(8, n - i);
    if (std::memcmp(p + i, &w, m) == 0) continue;
    const auto* expected = reinterpret_cast<const std::byte*>(&w);
    for (uint64_t j = 0; j < m; ++j) {
      if (p[i + j] != expected[j]) return i + j;
    }
  }
  return n;
}

// The state on the device, the registered block and the stream the bench's
// own copies run on. Frees and unregisters what it got going away.
class DeviceState {
 public:
  DeviceState(const CudaDriver& cuda, int device)
      : cuda_(cuda), device_(device) {}
  DeviceState(const DeviceState&) = delete;
  DeviceState& operator=(const DeviceState&) = delete;
  ~DeviceState() {
    // Failures here change no figure and have no one left to tell.
    if (registered_) {
      cuda_.Unregister(device_, block_.data(), "ckpt bench").IgnoreError();
    }
    for (const Tensor& t : tensors_) {
      cuda_.Free(device_, t.ptr, "ckpt bench").IgnoreError();
    }
  }

  Status Build(const StatePlan& plan, int num_tensors) {
    const uint64_t bytes = plan.per_tensor * DTypeSize(plan.dtype);
    for (int t = 0; t < num_tensors; ++t) {
      const std::string name = BenchTensorName(t);
      CKPT_ASSIGN_OR_RETURN(const CUdeviceptr p,
                            cuda_.Allocate(device_, bytes, "tensor " + name));
      tensors_.push_back({p, bytes});
      state_.AddTensor(name, TensorView{plan.dtype,
                                        {static_cast<int64_t>(plan.per_tensor)},
                                        reinterpret_cast<std::byte*>(p),
                                        true,
                                        MemoryLocation::Cuda(device_)});
    }
    CKPT_RETURN_IF_ERROR(state_.status());
    // Whole pages, so that registration pins no one else's memory; a
    // multiple of 8, so that every piece starts on a word of the pattern.
    CKPT_RETURN_IF_ERROR(
        block_.Map(std::min(kPinnedBlock, (bytes + 4095) / 4096 * 4096)));
    CKPT_RETURN_IF_ERROR(
        cuda_.Register(device_, block_.data(), block_.size(), "ckpt bench"));
    registered_ = true;
    CKPT_ASSIGN_OR_RETURN(stream_, cuda_.NewStream(device_, "ckpt bench"));
    return Status();
  }

  State& state() { return state_; }
  uint64_t block_bytes() const { return block_.size(); }

  // Writes the pattern into every tensor.
  Status Fill() {
    return ForEachPiece([&](int t, uint64_t offset, uint64_t n) {
      FillPattern(t, offset, block_.data(), n);
      CKPT_RETURN_IF_ERROR(cuda_.CopyToDeviceAsync(
          *stream_, tensors_[t].ptr + offset, block_.data(), n, "fill"));
      return cuda_.Synchronize(*stream_, "fill");
    });
  }

  // Copies every tensor to the block (device to host) or the block to every
  // tensor, queued at once and waited for once.
  Status CopyAll(bool to_host) {
    CKPT_RETURN_IF_ERROR(
        ForEachPiece([&](int t, uint64_t offset, uint64_t n) -> Status {
          const CUdeviceptr p = tensors_[t].ptr + offset;
          if (to_host) {
            return cuda_.CopyToHostAsync(*stream_, block_.data(), p, n,
                                         "pinned copy");
          }
          return cuda_.CopyToDeviceAsync(*stream_, p, block_.data(), n,
                                         "pinned copy");
        }));
    return cuda_.Synchronize(*stream_, "pinned copy");
  }

  // DataLoss unless every tensor holds the pattern.
  Status Verify() {
    return ForEachPiece([&](int t, uint64_t offset, uint64_t n) -> Status {
      CKPT_RETURN_IF_ERROR(cuda_.CopyToHostAsync(
          *stream_, block_.data(), tensors_[t].ptr + offset, n, "verify"));
      CKPT_RETURN_IF_ERROR(cuda_.Synchronize(*stream_, "verify"));
      const uint64_t at = FirstDifference(t, offset, block_.data(), n);
      if (at == n) return Status();
      return DataLossError(fmt::format(
          "the bytes loaded into tensor {} on {} differ from those saved, "
          "from byte {}",
          BenchTensorName(t), MemoryLocation::Cuda(device_).ToString(),
          offset + at));
    });
  }

 private:
  struct Tensor {
    CUdeviceptr ptr;
    uint64_t bytes;
  };

  // Calls `fn(tensor, offset, n)` for every block-sized piece of every
  // tensor, in order.
  template <typename F>
  Status ForEachPiece(F&& fn) {
    for (size_t t = 0; t < tensors_.size(); ++t) {
      for (uint64_t offset = 0; offset < tensors_[t].bytes;
           offset += block_.size()) {
        const uint64_t n =
            std::min<uint64_t>(block_.size(), tensors_[t].bytes - offset);
        CKPT_RETURN_IF_ERROR(fn(static_cast<int>(t), offset, n));
      }
    }
    return Status();
  }

  const CudaDriver& cuda_;
  const int device_;
  std::vector<Tensor> tensors_;
  State state_;
  Buffer block_;
  bool registered_ = false;
  std::unique_ptr<CudaStream> stream_;
};

// One round on the device (steps 2 to 4 above).
Status MeasureDeviceRound(BenchSetup& setup, DeviceState& dev, Figures& f) {
  CheckpointManager& mgr = *setup.mgr;
  CKPT_RETURN_IF_ERROR(dev.Fill());
  CKPT_RETURN_IF_ERROR(Timed(f.pinned_d2h, [&] { return dev.CopyAll(true); }));
  CKPT_RETURN_IF_ERROR(DeleteAll(mgr));
  CKPT_RETURN_IF_ERROR(Timed(
      f.save, [&] { return mgr.Save(++setup.step, dev.state()).status(); }));
  CKPT_RETURN_IF_ERROR(Timed(f.pinned_h2d, [&] { return dev.CopyAll(false); }));
  DropCachedTree(setup.workspace.root());
  CKPT_RETURN_IF_ERROR(Timed(
      f.load_cold, [&] { return mgr.Load(setup.step, dev.state()).status(); }));
  return dev.Verify();
}

// SaveAsync with the staging copy in the background: the time until it
// returns, until WaitStaged() returns and until the save is committed, each
// from the call.
Status MeasureStagedInBackground(BenchSetup& setup, const State& state,
                                 int runs, Figures& f) {
  SaveOptions options;
  options.stage_in_background = true;
  for (int r = 0; r < runs; ++r) {
    CKPT_RETURN_IF_ERROR(DeleteAll(*setup.mgr));
    const auto t0 = BenchClock::now();
    SaveHandle h = setup.mgr->SaveAsync(++setup.step, state, options);
    const auto t1 = BenchClock::now();
    const Status staged = h.WaitStaged();
    const auto t2 = BenchClock::now();
    // The save's own error, which includes the copy's, comes first.
    CKPT_RETURN_IF_ERROR(h.Wait().status());
    CKPT_RETURN_IF_ERROR(staged);
    const auto t3 = BenchClock::now();
    f.async_background_return.push_back(Seconds(t0, t1));
    f.async_background_staged.push_back(Seconds(t0, t2));
    f.async_background_total.push_back(Seconds(t0, t3));
  }
  return Status();
}

}  // namespace

Result<BenchResult> RunDeviceBench(const BenchOptions& options, int device) {
  // Before anything is written: a machine without the driver or the device
  // is told so at once.
  CKPT_ASSIGN_OR_RETURN(CudaDriver * cuda, CudaDriver::Get());
  if (device >= cuda->device_count()) {
    return InvalidArgumentError(
        fmt::format("--device cuda:{}: no such device (the driver {} sees {})",
                    device, cuda->path(), cuda->device_count()));
  }
  // Declared first so that it goes last, after the manager has ended any
  // save that reads it.
  DeviceState dev(*cuda, device);
  BenchSetup setup(options.keep);
  CKPT_RETURN_IF_ERROR(setup.Start(options));
  CKPT_RETURN_IF_ERROR(dev.Build(setup.plan, options.tensors));
  setup.rss.own = dev.block_bytes();

  Figures f;
  for (int r = 0; r < options.runs; ++r) {
    CKPT_RETURN_IF_ERROR(setup.MeasureRawDisk(f));
    CKPT_RETURN_IF_ERROR(MeasureDeviceRound(setup, dev, f));
  }
  setup.rss.sync = MaxRssBytes();
  CKPT_RETURN_IF_ERROR(
      MeasureAsyncStall(*setup.mgr, dev.state(), options.runs, setup.step, f));
  CKPT_RETURN_IF_ERROR(
      MeasureStagedInBackground(setup, dev.state(), options.runs, f));
  setup.rss.async = MaxRssBytes();
  setup.mgr.reset();

  nlohmann::json config = setup.Config(options);
  config["device"] = MemoryLocation::Cuda(device).ToString();
  config["cuda_driver"] = cuda->path();
  config["pinned_block_bytes"] = dev.block_bytes();
  const double bytes = static_cast<double>(setup.plan.state_bytes);
  return BenchResult{MakeDeviceReport(std::move(config), bytes, f, setup.rss),
                     RoundsJson(f, bytes)};
}

}  // namespace ckpt::bench
