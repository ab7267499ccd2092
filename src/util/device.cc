#include "ckpt/device.h"

namespace ckpt {

std::string MemoryLocation::ToString() const {
  if (is_host()) return "host";
  return "cuda:" + std::to_string(device_);
}

}  // namespace ckpt
