// What the kernel says of one mapping of this process (/proc/self/smaps):
// for tests that check how memory is held (huge pages, advice), which no
// system call reports.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

namespace ckpt::testing {

// The line of the mapping that holds `p` which starts with `field` (e.g.
// "VmFlags:", "ShmemPmdMapped:"), or "" if there is none.
inline std::string SmapsLineOf(const void* p, std::string_view field) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    // A mapping's first line starts with its range; no other line of
    // smaps starts with a hex number followed by '-'.
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind(field, 0) == 0) {
      return line;
    }
  }
  return "";
}

}  // namespace ckpt::testing
