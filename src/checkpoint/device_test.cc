// Save and Load of states with tensors on CUDA devices, on the double of the
// driver (src/testing/fake_cuda.h): every path bit-identical, and every
// injected failure a clear error with nothing committed.
//
// The library reaches the driver through CudaDriver::Get(), the process's,
// which loads what CKPT_CUDA_DRIVER names: the tests set it to the double
// before the first device call. NoDriverTest runs in a process of its own
// (checkpoint_device_no_driver_test), where CKPT_CUDA_DRIVER names a
// library that does not exist.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "device/cuda_api.h"
#include "device/cuda_driver.h"
#include "gtest/gtest.h"
#include "staging/device_pipeline.h"
#include "testing/backends.h"
#include "testing/fake_cuda.h"
#include "testing/run_ranks.h"
#include "testing/test_util.h"

namespace ckpt {
namespace {

using testing::RandomBytes;
using testing::RunRanks;

// The double's entry points the tests call themselves: device memory, the
// framework's own stream and context, and the controls.
struct Fake {
  Fake() {
    lib = dlopen(CKPT_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
#define CKPT_FAKE_ENTRY(name) \
  name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));
    CKPT_FAKE_ENTRY(cuInit)
    CKPT_FAKE_ENTRY(cuDevicePrimaryCtxRetain)
    CKPT_FAKE_ENTRY(cuDevicePrimaryCtxRelease_v2)
    CKPT_FAKE_ENTRY(cuCtxSetCurrent)
    CKPT_FAKE_ENTRY(cuMemAlloc_v2)
    CKPT_FAKE_ENTRY(cuMemFree_v2)
    CKPT_FAKE_ENTRY(cuMemcpyHtoD_v2)
    CKPT_FAKE_ENTRY(cuMemcpyDtoH_v2)
    CKPT_FAKE_ENTRY(cuMemcpyHtoDAsync_v2)
    CKPT_FAKE_ENTRY(cuStreamCreate)
    CKPT_FAKE_ENTRY(cuStreamDestroy_v2)
    CKPT_FAKE_ENTRY(cuStreamSynchronize)
#undef CKPT_FAKE_ENTRY
    inject = reinterpret_cast<CkptFakeCudaInjectFn>(
        dlsym(lib, "ckpt_fake_cuda_inject"));
    stats = reinterpret_cast<CkptFakeCudaStatsFn>(
        dlsym(lib, "ckpt_fake_cuda_stats"));
    reset = reinterpret_cast<CkptFakeCudaResetFn>(
        dlsym(lib, "ckpt_fake_cuda_reset"));
  }

  void* lib = nullptr;
  decltype(&::cuInit) cuInit = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease_v2) cuDevicePrimaryCtxRelease_v2 =
      nullptr;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuMemAlloc_v2) cuMemAlloc_v2 = nullptr;
  decltype(&::cuMemFree_v2) cuMemFree_v2 = nullptr;
  decltype(&::cuMemcpyHtoD_v2) cuMemcpyHtoD_v2 = nullptr;
  decltype(&::cuMemcpyDtoH_v2) cuMemcpyDtoH_v2 = nullptr;
  decltype(&::cuMemcpyHtoDAsync_v2) cuMemcpyHtoDAsync_v2 = nullptr;
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamDestroy_v2) cuStreamDestroy_v2 = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  CkptFakeCudaInjectFn inject = nullptr;
  CkptFakeCudaStatsFn stats = nullptr;
  CkptFakeCudaResetFn reset = nullptr;
};

// A writable F32 view of `shape` at device address `p` on `device`.
TensorView DeviceView(CUdeviceptr p, std::vector<int64_t> shape,
                      int device = 0) {
  return TensorView{DType::kF32, std::move(shape),
                    reinterpret_cast<std::byte*>(p), true,
                    MemoryLocation::Cuda(device)};
}

class DeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Before the library's first device call, which loads the driver once.
    setenv("CKPT_CUDA_DRIVER", CKPT_FAKE_CUDA, /*overwrite=*/0);
  }

  void SetUp() override {
    ASSERT_NE(fake_.lib, nullptr) << dlerror();
    Result<CudaDriver*> cuda = CudaDriver::Get();
    ASSERT_TRUE(cuda.ok()) << cuda.status().ToString();
    // The framework's contexts, as PyTorch's: the test's thread allocates
    // and copies in them.
    for (int d = 0; d < 2; ++d) {
      ASSERT_EQ(fake_.cuDevicePrimaryCtxRetain(&framework_[d], d),
                CUDA_SUCCESS);
    }
    ASSERT_EQ(fake_.cuCtxSetCurrent(framework_[0]), CUDA_SUCCESS);
    root_.emplace(testing::Backend::kFile, "device");
  }

  void TearDown() override {
    for (CUstream s : streams_) fake_.cuStreamDestroy_v2(s);
    for (CUdeviceptr p : allocations_) fake_.cuMemFree_v2(p);
    fake_.cuCtxSetCurrent(nullptr);
    for (int d = 0; d < 2; ++d) fake_.cuDevicePrimaryCtxRelease_v2(d);
    // Clears the faults; the process's driver stays, so init again.
    fake_.reset();
    ASSERT_EQ(fake_.cuInit(0), CUDA_SUCCESS);
  }

  std::unique_ptr<CheckpointManager> Open(Communicator* comm = nullptr,
                                          uint64_t chunk_size = 4096) {
    Options o;
    o.communicator = comm;
    o.chunk_size = chunk_size;
    auto mgr = CheckpointManager::Open(root_->url(), o);
    EXPECT_TRUE(mgr.ok()) << mgr.status().ToString();
    return mgr.ok() ? std::move(mgr).value() : nullptr;
  }

  // Device memory on `device` holding `bytes`, freed by TearDown.
  CUdeviceptr ToDevice(const std::vector<std::byte>& bytes, int device = 0) {
    CUdeviceptr p = 0;
    EXPECT_EQ(fake_.cuCtxSetCurrent(framework_[device]), CUDA_SUCCESS);
    EXPECT_EQ(fake_.cuMemAlloc_v2(&p, bytes.size()), CUDA_SUCCESS);
    EXPECT_EQ(fake_.cuMemcpyHtoD_v2(p, bytes.data(), bytes.size()),
              CUDA_SUCCESS);
    EXPECT_EQ(fake_.cuCtxSetCurrent(framework_[0]), CUDA_SUCCESS);
    allocations_.push_back(p);
    return p;
  }
  // Device memory of `n` zero bytes.
  CUdeviceptr Zeros(size_t n, int device = 0) {
    return ToDevice(std::vector<std::byte>(n), device);
  }
  // `n` bytes of device memory, copied to the host through the driver.
  std::vector<std::byte> FromDevice(CUdeviceptr p, size_t n, int device = 0) {
    std::vector<std::byte> out(n);
    EXPECT_EQ(fake_.cuCtxSetCurrent(framework_[device]), CUDA_SUCCESS);
    EXPECT_EQ(fake_.cuMemcpyDtoH_v2(out.data(), p, n), CUDA_SUCCESS);
    EXPECT_EQ(fake_.cuCtxSetCurrent(framework_[0]), CUDA_SUCCESS);
    return out;
  }
  // A stream of the framework's on device 0, destroyed by TearDown.
  CUstream FrameworkStream() {
    CUstream s = nullptr;
    EXPECT_EQ(fake_.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    streams_.push_back(s);
    return s;
  }
  CkptFakeCudaStats Stats() {
    CkptFakeCudaStats s;
    fake_.stats(&s);
    return s;
  }
  // The bytes of entry `name` of step `step`, loaded to the host.
  std::vector<std::byte> Saved(int64_t step, const std::string& name) {
    auto mgr = Open();
    Result<LoadedCheckpoint> all = mgr->LoadAll(step, {name});
    EXPECT_TRUE(all.ok()) << all.status().ToString();
    if (!all.ok()) return {};
    const TensorView& t = all->state.Find(name)->tensor;
    return std::vector<std::byte>(t.data, t.data + *t.ByteSize());
  }
  std::vector<int64_t> Steps() {
    auto mgr = Open();
    Result<std::vector<CheckpointInfo>> list = mgr->List();
    EXPECT_TRUE(list.ok());
    std::vector<int64_t> steps;
    for (const CheckpointInfo& i : *list) steps.push_back(i.step);
    return steps;
  }

  Fake fake_;
  CUcontext framework_[2] = {nullptr, nullptr};
  std::vector<CUdeviceptr> allocations_;
  std::vector<CUstream> streams_;
  std::optional<testing::TestRoot> root_;
};

constexpr size_t kFloats = 75001;  // not a whole number of pages
constexpr size_t kBytes = kFloats * sizeof(float);

TEST_F(DeviceTest, SaveAndLoadAreBitIdenticalOnTwoDevicesBesideTheHost) {
  const auto w = RandomBytes(kBytes, 1);
  constexpr size_t kHalf = kFloats / 2;
  const auto m = RandomBytes(kHalf * sizeof(float), 2);
  std::vector<double> host(1000);
  std::iota(host.begin(), host.end(), 0.5);
  State s;
  s.AddTensor("w", DeviceView(ToDevice(w, 0), {kFloats}, 0))
      .AddTensor("m", DeviceView(ToDevice(m, 1), {kHalf}, 1))
      .AddTensor("host", View(host))
      .AddBlob("rng", "rng-state")
      .AddMetadata("info", {{"epoch", "3"}});
  auto mgr = Open();
  Result<SaveResult> saved = mgr->Save(1, s);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(Saved(1, "w"), w);
  EXPECT_EQ(Saved(1, "m"), m);
  // The staging memory is page-locked, once, and every copy ran from it.
  CkptFakeCudaStats st = Stats();
  EXPECT_EQ(st.registrations, 1);
  EXPECT_EQ(st.pageable_async_copies, 0);
  EXPECT_EQ(st.bytes_to_host, static_cast<int64_t>(w.size() + m.size()));

  const CUdeviceptr w2 = Zeros(kBytes, 0), m2 = Zeros(m.size(), 1);
  std::vector<double> host2(1000);
  State into;
  into.AddTensor("w", DeviceView(w2, {kFloats}, 0))
      .AddTensor("m", DeviceView(m2, {kHalf}, 1))
      .AddTensor("host", View(host2))
      .AddBlob("rng", "")
      .AddMetadata("info", {});
  Result<CheckpointInfo> loaded = mgr->Load(1, into);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(FromDevice(w2, kBytes, 0), w);
  EXPECT_EQ(FromDevice(m2, m.size(), 1), m);
  EXPECT_EQ(host2, host);
  EXPECT_EQ(*into.BlobString("rng"), "rng-state");
  EXPECT_EQ(Stats().pageable_async_copies, 0);
  mgr.reset();
  // The manager gave its registration back.
  EXPECT_EQ(Stats().registrations, 0);
}

TEST_F(DeviceTest, AHostOnlyStateNeverTouchesTheDriver) {
  std::vector<float> w(kFloats, 1.5f);
  State s;
  s.AddTensor("w", View(w));
  auto mgr = Open();
  ASSERT_TRUE(mgr->Save(1, s).ok());
  ASSERT_TRUE(mgr->SaveAsync(2, s).Wait().ok());
  ASSERT_TRUE(mgr->Load(2, s).ok());
  const CkptFakeCudaStats st = Stats();
  EXPECT_EQ(st.copies, 0);
  EXPECT_EQ(st.registrations, 0);
  EXPECT_EQ(st.streams, 0);
}

TEST_F(DeviceTest, SaveAsyncHoldsTheBytesOfWhenItReturned) {
  const auto before = RandomBytes(kBytes, 3);
  const auto after = RandomBytes(kBytes, 4);
  const CUdeviceptr p = ToDevice(before);
  State s;
  s.AddTensor("w", DeviceView(p, {kFloats}));
  auto mgr = Open();
  // Slow streams: a save that had not finished its copies would see `after`.
  ASSERT_EQ(fake_.inject("stream_delay_us", 2000), 0);
  SaveHandle h = mgr->SaveAsync(1, s);
  // The training step overwrites the tensor at once.
  ASSERT_EQ(fake_.cuMemcpyHtoD_v2(p, after.data(), kBytes), CUDA_SUCCESS);
  Result<SaveResult> saved = h.Wait();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(Saved(1, "w"), before);
  // The next asynchronous save reuses the registered staging memory.
  ASSERT_TRUE(mgr->SaveAsync(2, s).Wait().ok());
  EXPECT_EQ(Saved(2, "w"), after);
  EXPECT_EQ(Stats().registrations, 1);
}

// The opt-in mode: SaveAsync returns before the copy, which runs on the
// background thread; the caller changes its tensors after WaitStaged().
TEST_F(DeviceTest, StagingInTheBackgroundHoldsTheBytesOfWhenItWasStaged) {
  const auto before = RandomBytes(kBytes, 13);
  const auto after = RandomBytes(kBytes, 14);
  const CUdeviceptr p = ToDevice(before);
  std::vector<float> host(16, 2.5f);
  State s;
  s.AddTensor("w", DeviceView(p, {kFloats}));
  s.AddTensor(
      "h",
      TensorView{
          DType::kF32, {16}, reinterpret_cast<std::byte*>(host.data()), false});
  auto mgr = Open();
  ASSERT_EQ(fake_.inject("stream_delay_us", 2000), 0);
  SaveHandle h = mgr->SaveAsync(1, s, {.stage_in_background = true});
  ASSERT_TRUE(h.WaitStaged().ok());
  ASSERT_EQ(fake_.cuMemcpyHtoD_v2(p, after.data(), kBytes), CUDA_SUCCESS);
  host.assign(16, -1.0f);
  Result<SaveResult> saved = h.Wait();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(Saved(1, "w"), before);
  EXPECT_TRUE(h.WaitStaged().ok());  // again, after the save: the same
  // A copy that fails: WaitStaged reports it, the save commits nothing.
  ASSERT_EQ(fake_.inject("copy_fails_on_call", 0), 0);
  SaveHandle failed = mgr->SaveAsync(2, s, {.stage_in_background = true});
  const Status staging = failed.WaitStaged();
  EXPECT_NE(staging.message().find("CUDA_ERROR_ILLEGAL_ADDRESS"),
            std::string::npos)
      << staging.ToString();
  EXPECT_FALSE(failed.Wait().ok());
  EXPECT_EQ(*mgr->Latest(), 1);
  // A handle of no save, and one of a synchronous fallback, never block.
  EXPECT_EQ(SaveHandle().WaitStaged().code(), ErrorCode::kFailedPrecondition);
}

TEST_F(DeviceTest, IncrementalSavesWriteOnlyWhatChangedOnTheDevice) {
  auto bytes = RandomBytes(1 << 20, 5);
  const CUdeviceptr p = ToDevice(bytes);
  State s;
  s.AddTensor("w", DeviceView(p, {(1 << 20) / 4}));
  auto mgr = Open();
  ASSERT_TRUE(mgr->Save(1, s, {.incremental = true}).ok());
  // One page changes on the device.
  for (size_t i = 8192; i < 8192 + 4096; ++i) bytes[i] = ~bytes[i];
  ASSERT_EQ(fake_.cuMemcpyHtoD_v2(p, bytes.data(), bytes.size()), CUDA_SUCCESS);
  Result<SaveResult> second = mgr->Save(2, s, {.incremental = true});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->info.parent, 1);
  EXPECT_GT(second->info.referenced_bytes, 0u);
  const CUdeviceptr back = Zeros(bytes.size());
  State into;
  into.AddTensor("w", DeviceView(back, {(1 << 20) / 4}));
  ASSERT_TRUE(mgr->Load(2, into).ok());
  EXPECT_EQ(FromDevice(back, bytes.size()), bytes);
}

// A compressed save of device tensors compresses them (copied to the
// staging memory first, whose host chunks the I/O pool compresses), and
// loads back onto the device bit for bit.
TEST_F(DeviceTest, CompressedSavesCompressDeviceTensors) {
  // Floats of a few exponents, as trained weights have: they compress.
  std::vector<float> w(kFloats);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] = 0.01f * static_cast<float>(1 + (i * 7919) % 97);
  }
  std::vector<std::byte> bytes(kBytes);
  std::memcpy(bytes.data(), w.data(), kBytes);
  State s;
  s.AddTensor("w", DeviceView(ToDevice(bytes), {kFloats}));
  auto mgr = Open();
  Result<SaveResult> raw = mgr->Save(1, s);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  Result<SaveResult> packed =
      mgr->Save(2, s, {.compression = Compression{Compression::Mode::kZstd}});
  ASSERT_TRUE(packed.ok()) << packed.status().ToString();
  EXPECT_LT(packed->info.bytes, raw->info.bytes * 9 / 10);
  const CUdeviceptr back = Zeros(kBytes);
  State into;
  into.AddTensor("w", DeviceView(back, {kFloats}));
  ASSERT_TRUE(mgr->Load(2, into).ok());
  EXPECT_EQ(FromDevice(back, kBytes), bytes);
  Result<VerifyReport> verified = mgr->Verify(2);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_TRUE(verified->ok());
}

TEST_F(DeviceTest, TheCopyWaitsForTheCallersStream) {
  const auto old_bytes = RandomBytes(kBytes, 6);
  const auto computed = RandomBytes(kBytes, 7);
  const CUdeviceptr p = ToDevice(old_bytes);
  auto mgr = Open();
  ASSERT_EQ(fake_.inject("stream_delay_us", 20000), 0);
  for (bool named : {true, false}) {
    SCOPED_TRACE(named ? "the caller's stream" : "no stream: the device");
    CUstream caller = FrameworkStream();
    // The framework computes the tensor on its stream, still running when
    // Save is called.
    ASSERT_EQ(fake_.cuMemcpyHtoDAsync_v2(p, computed.data(), kBytes, caller),
              CUDA_SUCCESS);
    State s;
    s.AddTensor("w", DeviceView(p, {kFloats}));
    if (named) s.SetCudaStream(caller);
    const int64_t step = named ? 1 : 2;
    ASSERT_TRUE(mgr->Save(step, s).ok());
    EXPECT_EQ(Saved(step, "w"), computed);
    ASSERT_EQ(fake_.cuStreamSynchronize(caller), CUDA_SUCCESS);
    ASSERT_EQ(fake_.cuMemcpyHtoD_v2(p, old_bytes.data(), kBytes), CUDA_SUCCESS);
  }
  // A load into the device is done when it returns.
  const CUdeviceptr back = Zeros(kBytes);
  State into;
  into.AddTensor("w", DeviceView(back, {kFloats}));
  into.SetCudaStream(FrameworkStream());
  ASSERT_TRUE(mgr->Load(1, into).ok());
  EXPECT_EQ(FromDevice(back, kBytes), computed);
}

// A full save reads device tensors through a few page-locked blocks
// (DeviceReadPipeline), not a copy of the state: here a state larger than
// those blocks, with a large tensor spanning several, many small ones
// sharing blocks on two devices, an empty one, host entries between them,
// and chunks that straddle blocks. Every byte is copied once, from
// registered memory only, and a copy failing in a later block fails the
// save naming the tensor, committing nothing.
TEST_F(DeviceTest, AFullSaveStreamsThroughBlocksSmallerThanTheState) {
  constexpr size_t kBig = (40 << 20) + 12;
  constexpr int kSmall = 150;
  constexpr size_t kSmallFloats = 1001;
  const auto big = RandomBytes(kBig, 20);
  std::vector<std::vector<std::byte>> small;
  std::vector<double> host(5000);
  std::iota(host.begin(), host.end(), 0.25);
  State s;
  s.AddTensor("big", DeviceView(ToDevice(big, 0), {kBig / 4}, 0));
  s.AddTensor("host", View(host));
  s.AddTensor("empty", DeviceView(Zeros(4, 1), {0}, 1));
  int64_t device_bytes = kBig;
  for (int i = 0; i < kSmall; ++i) {
    small.push_back(RandomBytes(kSmallFloats * 4, 100 + i));
    s.AddTensor(
        "small/" + std::to_string(i),
        DeviceView(ToDevice(small.back(), i % 2), {kSmallFloats}, i % 2));
    device_bytes += kSmallFloats * 4;
  }
  ASSERT_GT(device_bytes,
            static_cast<int64_t>(DeviceReadPipeline::kMemoryBytes));
  // Three pages: chunks end inside blocks, and blocks inside chunks.
  auto mgr = Open(nullptr, 3 * 4096);
  Result<SaveResult> saved = mgr->Save(1, s);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  CkptFakeCudaStats st = Stats();
  EXPECT_EQ(st.registered_bytes,
            static_cast<int64_t>(DeviceReadPipeline::kMemoryBytes));
  EXPECT_EQ(st.pageable_async_copies, 0);
  EXPECT_EQ(st.bytes_to_host, device_bytes);

  State into;
  const CUdeviceptr big2 = Zeros(kBig, 0);
  std::vector<double> host2(host.size());
  std::vector<CUdeviceptr> small2;
  into.AddTensor("big", DeviceView(big2, {kBig / 4}, 0));
  into.AddTensor("host", View(host2));
  into.AddTensor("empty", DeviceView(Zeros(4, 1), {0}, 1));
  for (int i = 0; i < kSmall; ++i) {
    small2.push_back(Zeros(kSmallFloats * 4, i % 2));
    into.AddTensor("small/" + std::to_string(i),
                   DeviceView(small2.back(), {kSmallFloats}, i % 2));
  }
  // Load checks every chunk's checksum, so they were computed right.
  Result<CheckpointInfo> loaded = mgr->Load(1, into);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(FromDevice(big2, kBig, 0), big);
  EXPECT_EQ(host2, host);
  for (int i = 0; i < kSmall; ++i) {
    ASSERT_EQ(FromDevice(small2[i], kSmallFloats * 4, i % 2), small[i]) << i;
  }

  // The third block's copy fails.
  ASSERT_EQ(fake_.inject("copy_fails_after_bytes", 20 << 20), 0);
  Result<SaveResult> failed = mgr->Save(2, s);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("CUDA_ERROR_ILLEGAL_ADDRESS"),
            std::string::npos)
      << failed.status().ToString();
  EXPECT_NE(failed.status().message().find("tensor \"big\""), std::string::npos)
      << failed.status().ToString();
  fake_.reset();
  ASSERT_EQ(fake_.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(Steps(), std::vector<int64_t>{1});
}

// 4 ranks as threads each save a device piece of "weights" (rows split in
// 4, alternating devices); 2 ranks load it split in 2, into device pieces.
TEST_F(DeviceTest, ManyRanksSaveAndLoadReshardedPieces) {
  constexpr int64_t kRows = 96, kCols = 40;
  std::vector<float> global(kRows * kCols);
  std::iota(global.begin(), global.end(), 0.0f);
  auto rows = [&](int64_t first, int64_t n) {
    std::vector<std::byte> out(n * kCols * sizeof(float));
    std::memcpy(out.data(), global.data() + first * kCols, out.size());
    return out;
  };
  std::vector<CUdeviceptr> pieces;
  for (int r = 0; r < 4; ++r)
    pieces.push_back(ToDevice(rows(r * 24, 24), r % 2));
  RunRanks(4, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    State s;
    s.AddTensorPiece("weights", {kRows, kCols}, {rank * 24, 0},
                     DeviceView(pieces[rank], {24, kCols}, rank % 2));
    Result<SaveResult> saved = mgr->Save(1, s);
    ASSERT_TRUE(saved.ok())
        << "rank " << rank << ": " << saved.status().ToString();
  });
  const std::vector<CUdeviceptr> halves = {
      Zeros(48 * kCols * sizeof(float), 0),
      Zeros(48 * kCols * sizeof(float), 1)};
  RunRanks(2, [&](int rank, Communicator* comm) {
    auto mgr = Open(comm);
    State s;
    s.AddTensorPiece("weights", {kRows, kCols}, {rank * 48, 0},
                     DeviceView(halves[rank], {48, kCols}, rank));
    Result<CheckpointInfo> loaded = mgr->Load(1, s);
    ASSERT_TRUE(loaded.ok())
        << "rank " << rank << ": " << loaded.status().ToString();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(FromDevice(halves[r], 48 * kCols * sizeof(float), r),
              rows(r * 48, 48));
  }
}

TEST_F(DeviceTest, ACopyFailingMidSaveFailsEveryRankAndCommitsNothing) {
  const auto first = RandomBytes(kBytes, 8);
  std::vector<CUdeviceptr> p = {ToDevice(first), ToDevice(first, 1)};
  auto save = [&](int64_t step) {
    std::vector<Status> out(2);
    RunRanks(2, [&](int rank, Communicator* comm) {
      auto mgr = Open(comm);
      State s;
      s.AddTensor("w", DeviceView(p[0], {kFloats}, 0));
      s.AddRankLocalTensor("own", DeviceView(p[1], {kFloats}, 1));
      out[rank] = mgr->Save(step, s).status();
    });
    return out;
  };
  for (const Status& s : save(1)) ASSERT_TRUE(s.ok()) << s.ToString();
  // Half way through the next save's bytes, the device fails.
  ASSERT_EQ(fake_.inject("copy_fails_after_bytes", kBytes / 2), 0);
  for (const Status& s : save(2)) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
        << s.ToString();
  }
  fake_.reset();
  ASSERT_EQ(fake_.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(Steps(), std::vector<int64_t>{1});
  EXPECT_EQ(Saved(1, "w"), first);
}

TEST_F(DeviceTest, FailuresOfTheDriverAreClearErrorsAndCommitNothing) {
  const auto bytes = RandomBytes(kBytes, 9);
  const CUdeviceptr p = ToDevice(bytes);
  State s;
  s.AddTensor("w", DeviceView(p, {kFloats}));
  ASSERT_TRUE(Open()->Save(1, s).ok());
  struct Case {
    const char* fault;
    std::string expected;
  };
  for (const Case& c :
       {Case{"register_fails", "page-lock"}, Case{"stream_fails", "stream"},
        Case{"copy_fails_on_call", "tensor \"w\""}}) {
    SCOPED_TRACE(c.fault);
    // A fresh manager: its staging memory is not registered yet.
    auto mgr = Open();
    ASSERT_EQ(fake_.inject(c.fault, 0), 0);
    for (bool async : {false, true}) {
      Result<SaveResult> r =
          async ? mgr->SaveAsync(2, s).Wait() : mgr->Save(2, s);
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find(c.expected), std::string::npos)
          << r.status().ToString();
    }
    fake_.reset();
    ASSERT_EQ(fake_.cuInit(0), CUDA_SUCCESS);
    EXPECT_EQ(Steps(), std::vector<int64_t>{1});
  }
  EXPECT_EQ(Saved(1, "w"), bytes);
}

TEST_F(DeviceTest, AFailedLoadLeavesTheDeviceMemoryAsItWas) {
  const auto bytes = RandomBytes(kBytes, 10);
  State s;
  s.AddTensor("w", DeviceView(ToDevice(bytes), {kFloats}));
  auto mgr = Open();
  ASSERT_TRUE(mgr->Save(1, s).ok());
  const auto mine = RandomBytes(kBytes, 11);
  const CUdeviceptr p = ToDevice(mine);
  State into;
  into.AddTensor("w", DeviceView(p, {kFloats}));

  // The copy to the device fails: an error naming the entry.
  ASSERT_EQ(fake_.inject("copy_fails_on_call", 0), 0);
  Result<CheckpointInfo> r = mgr->Load(1, into);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tensor \"w\""), std::string::npos)
      << r.status().ToString();
  fake_.reset();
  ASSERT_EQ(fake_.cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(FromDevice(p, kBytes), mine);

  // Page-locking the staging memory is refused. A fresh manager's first
  // device load page-locks it beside the reads: the load still fails with
  // that error, and nothing reaches the device.
  {
    auto fresh = Open();
    ASSERT_EQ(fake_.inject("register_fails", 0), 0);
    r = fresh->Load(1, into);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("page-lock"), std::string::npos)
        << r.status().ToString();
    EXPECT_EQ(FromDevice(p, kBytes), mine);
    fake_.reset();
    ASSERT_EQ(fake_.cuInit(0), CUDA_SUCCESS);
  }

  // A corrupt chunk: DataLoss, and not a byte reaches the device.
  auto storage = root_->Open();
  ASSERT_TRUE(storage.ok());
  auto d = mgr->Describe(1);
  ASSERT_TRUE(d.ok());
  const std::string key = d->objects.at(0).key;
  Result<std::string> object = (*storage)->ReadAll(key);
  ASSERT_TRUE(object.ok());
  (*object)[object->size() / 2] ^= 1;
  ASSERT_TRUE(
      (*storage)
          ->Put(key, std::as_bytes(std::span(object->data(), object->size())))
          .ok());
  r = mgr->Load(1, into);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kDataLoss) << r.status().ToString();
  EXPECT_EQ(FromDevice(p, kBytes), mine);
}

// In checkpoint_device_no_driver_test, whose CKPT_CUDA_DRIVER names no
// library: a device state fails clearly, host states work as ever.
TEST(NoDriverTest, ADeviceStateIsUnavailableNamingTheEntry) {
  if (CudaDriver::Get().ok()) {
    GTEST_SKIP() << "a CUDA driver loads here; "
                    "checkpoint_device_no_driver_test runs this without one";
  }
  testing::TestRoot root(testing::Backend::kFile, "nodriver");
  auto mgr = CheckpointManager::Open(root.url());
  ASSERT_TRUE(mgr.ok());
  std::vector<float> host(100, 2.0f);
  State saved_state;
  saved_state.AddTensor("w", View(host));
  ASSERT_TRUE((*mgr)->Save(1, saved_state).ok());

  // Any address: nothing may dereference it.
  State s;
  s.AddTensor("w", DeviceView(0x1000, {100}));
  for (bool async : {false, true}) {
    Result<SaveResult> r =
        async ? (*mgr)->SaveAsync(2, s).Wait() : (*mgr)->Save(2, s);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kUnavailable);
    EXPECT_NE(r.status().message().find("tensor \"w\" on cuda:0"),
              std::string::npos)
        << r.status().ToString();
  }
  Result<CheckpointInfo> load = (*mgr)->Load(1, s);
  ASSERT_FALSE(load.ok());
  EXPECT_EQ(load.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(load.status().message().find("tensor \"w\" on cuda:0"),
            std::string::npos)
      << load.status().ToString();

  // Nothing committed; the previous checkpoint loads.
  Result<std::vector<CheckpointInfo>> list = (*mgr)->List();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  std::vector<float> back(100);
  State into;
  into.AddTensor("w", View(back));
  ASSERT_TRUE((*mgr)->Load(1, into).ok());
  EXPECT_EQ(back, host);
}

}  // namespace
}  // namespace ckpt
