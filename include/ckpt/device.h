// Where memory lives: on the host, or on one CUDA device.
//
// ckpt reaches CUDA devices through the CUDA driver, loaded at run time
// (docs/gpu.md); a program on a machine without one never needs it.
#pragma once

#include <string>

namespace ckpt {

class MemoryLocation {
 public:
  enum class Kind { kHost, kCuda };

  // Host memory (pageable or page-locked).
  constexpr MemoryLocation() = default;
  static constexpr MemoryLocation Host() { return MemoryLocation(); }
  // The memory of CUDA device `ordinal`, numbered as the driver numbers the
  // devices this process sees (after CUDA_VISIBLE_DEVICES).
  static constexpr MemoryLocation Cuda(int ordinal) {
    return MemoryLocation(Kind::kCuda, ordinal);
  }

  constexpr Kind kind() const { return kind_; }
  constexpr bool is_host() const { return kind_ == Kind::kHost; }
  // The device ordinal; -1 on the host.
  constexpr int device() const { return device_; }

  // "host", "cuda:0"
  std::string ToString() const;

  friend constexpr bool operator==(const MemoryLocation&,
                                   const MemoryLocation&) = default;

 private:
  constexpr MemoryLocation(Kind kind, int device)
      : kind_(kind), device_(device) {}

  Kind kind_ = Kind::kHost;
  int device_ = -1;
};

}  // namespace ckpt
