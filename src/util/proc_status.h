// What the kernel says of this process, for the benchmarks (ckpt bench's
// too) and tests that measure their own memory.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace ckpt {

// A "Vm...:   1234 kB" line of /proc/self/status, in bytes; 0 if absent.
inline uint64_t ProcStatus(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(field) && line.size() > field.size() &&
        line[field.size()] == ':') {
      return std::strtoull(line.c_str() + field.size() + 1, nullptr, 10) * 1024;
    }
  }
  return 0;
}

}  // namespace ckpt
