// The C API's CUDA entries (ckpt_state_set_location,
// ckpt_state_set_cuda_stream) as a binding sees them: libckpt.so loads the
// double of the driver (src/testing/fake_cuda.h) that CKPT_CUDA_DRIVER
// names, and the test reaches the same double with dlopen for its "device
// memory".
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/c.h"
#include "device/cuda_api.h"
#include "testing/fake_cuda.h"
#include "testing/temp_dir.h"

namespace {

using ::testing::HasSubstr;

// The message of a failed call, freed.
struct Err {
  char* text = nullptr;
  ~Err() { ckpt_free(text); }
  std::string str() const { return text ? text : ""; }
};

class CApiDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Before libckpt.so's first device call, which loads the driver once.
    setenv("CKPT_CUDA_DRIVER", CKPT_FAKE_CUDA, /*overwrite=*/1);
  }

  void SetUp() override {
    lib_ = dlopen(CKPT_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    auto init = Sym<decltype(&::cuInit)>("cuInit");
    auto retain =
        Sym<decltype(&::cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
    auto set = Sym<decltype(&::cuCtxSetCurrent)>("cuCtxSetCurrent");
    alloc_ = Sym<decltype(&::cuMemAlloc_v2)>("cuMemAlloc_v2");
    free_ = Sym<decltype(&::cuMemFree_v2)>("cuMemFree_v2");
    to_device_ = Sym<decltype(&::cuMemcpyHtoD_v2)>("cuMemcpyHtoD_v2");
    to_host_ = Sym<decltype(&::cuMemcpyDtoH_v2)>("cuMemcpyDtoH_v2");
    // The framework's context, current on the test's thread.
    ASSERT_EQ(init(0), CUDA_SUCCESS);
    ASSERT_EQ(retain(&context_, 0), CUDA_SUCCESS);
    ASSERT_EQ(set(context_), CUDA_SUCCESS);
    Err err;
    ASSERT_EQ(
        ckpt_manager_open(folder_.url().c_str(), nullptr, &manager_, &err.text),
        CKPT_OK)
        << err.str();
  }

  void TearDown() override {
    ckpt_manager_close(manager_);
    for (CUdeviceptr p : allocations_) free_(p);
  }

  template <typename F>
  F Sym(const char* name) {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }

  CUdeviceptr ToDevice(const std::vector<float>& v) {
    CUdeviceptr p = 0;
    EXPECT_EQ(alloc_(&p, v.size() * sizeof(float)), CUDA_SUCCESS);
    EXPECT_EQ(to_device_(p, v.data(), v.size() * sizeof(float)), CUDA_SUCCESS);
    allocations_.push_back(p);
    return p;
  }
  std::vector<float> FromDevice(CUdeviceptr p, size_t n) {
    std::vector<float> v(n);
    EXPECT_EQ(to_host_(v.data(), p, n * sizeof(float)), CUDA_SUCCESS);
    return v;
  }

  // A state of one F32 tensor "w" of n elements at `data`, on `device`,
  // and a blob "rng".
  ckpt_state_t* State(void* data, int64_t n, int device, bool for_load) {
    static char rng[] = "rng";
    ckpt_entry_t e[2] = {};
    e[0].name = "w";
    e[0].kind = CKPT_KIND_TENSOR;
    e[0].dtype = "F32";
    e[0].ndim = 1;
    e[0].shape = &n;
    e[0].data = data;
    e[0].nbytes = static_cast<uint64_t>(n) * sizeof(float);
    e[1].name = "rng";
    e[1].kind = CKPT_KIND_BLOB;
    e[1].data = rng;
    e[1].nbytes = 3;
    ckpt_state_t* s = ckpt_state_create();
    Err err;
    EXPECT_EQ(ckpt_state_add(s, e, 2, for_load, &err.text), CKPT_OK)
        << err.str();
    EXPECT_EQ(ckpt_state_set_location(s, 0, device, &err.text), CKPT_OK)
        << err.str();
    return s;
  }

  void* lib_ = nullptr;
  decltype(&::cuMemAlloc_v2) alloc_ = nullptr;
  decltype(&::cuMemFree_v2) free_ = nullptr;
  decltype(&::cuMemcpyHtoD_v2) to_device_ = nullptr;
  decltype(&::cuMemcpyDtoH_v2) to_host_ = nullptr;
  CUcontext context_ = nullptr;
  std::vector<CUdeviceptr> allocations_;
  ckpt::testing::TempDir folder_{"c-dev"};
  ckpt_manager_t* manager_ = nullptr;
};

TEST_F(CApiDeviceTest, SavesAndLoadsDeviceTensorsBitIdentically) {
  std::vector<float> w(10000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i);
  const CUdeviceptr p = ToDevice(w);
  ckpt_state_t* s = State(reinterpret_cast<void*>(p), 10000, 0, false);
  Err err;
  ASSERT_EQ(ckpt_state_set_cuda_stream(s, 0, &err.text), CKPT_OK);
  ASSERT_EQ(ckpt_manager_save(manager_, 1, s, nullptr, nullptr, &err.text),
            CKPT_OK)
      << err.str();
  // Staged on the background thread: the state lives until the copy is.
  ckpt_save_options_t* so = ckpt_save_options_create();
  ckpt_save_options_set_stage_in_background(so, 1);
  ckpt_save_t* h = ckpt_manager_save_async(manager_, 2, s, so);
  ckpt_save_options_destroy(so);
  ASSERT_EQ(ckpt_save_wait_staged(h, &err.text), CKPT_OK) << err.str();
  ckpt_state_destroy(s);
  ASSERT_EQ(ckpt_save_wait(h, nullptr, &err.text), CKPT_OK) << err.str();
  ckpt_save_destroy(h);

  const CUdeviceptr back = ToDevice(std::vector<float>(10000));
  ckpt_state_t* into = State(reinterpret_cast<void*>(back), 10000, 0, true);
  for (int64_t step : {1, 2}) {
    ASSERT_EQ(ckpt_manager_load(manager_, step, into, 0, nullptr, &err.text),
              CKPT_OK)
        << err.str();
    EXPECT_EQ(FromDevice(back, 10000), w);
  }
  ckpt_state_destroy(into);
}

TEST_F(CApiDeviceTest, OnlyTensorsLiveOnADevice) {
  float w[4] = {};
  ckpt_state_t* s = State(w, 4, -1, false);
  Err err;
  EXPECT_EQ(ckpt_state_set_location(s, 1, 0, &err.text), CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("entry \"rng\" is a blob"));
  EXPECT_EQ(ckpt_state_set_location(s, 2, 0, &err.text), CKPT_NOT_FOUND);
  EXPECT_EQ(ckpt_state_set_location(s, 0, -2, &err.text),
            CKPT_INVALID_ARGUMENT);
  EXPECT_THAT(err.str(), HasSubstr("entry \"w\": device -2"));
  EXPECT_EQ(ckpt_state_set_location(nullptr, 0, 0, &err.text),
            CKPT_INVALID_ARGUMENT);
  // Back on the host, where `w` is: the save works without the driver.
  EXPECT_EQ(ckpt_state_set_location(s, 0, -1, &err.text), CKPT_OK);
  EXPECT_EQ(ckpt_manager_save(manager_, 1, s, nullptr, nullptr, &err.text),
            CKPT_OK)
      << err.str();
  ckpt_state_destroy(s);
}

}  // namespace
