// libFuzzer target: a hostile safetensors data file. The parser must return
// a value or an error, never crash, read out of bounds or hang; what it
// accepts must be self-consistent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  auto header = ckpt::format::ParseSafetensorsFile(file, "fuzz.safetensors");
  if (!header.ok()) return 0;
  // Accepted: every tensor lies inside the data section, in order, and the
  // data section inside the file.
  if (header->data_start > size ||
      header->data_size > size - header->data_start) {
    std::abort();
  }
  uint64_t at = 0;
  for (const auto& t : header->tensors) {
    if (t.begin != at || t.end < t.begin || t.end > header->data_size) {
      std::abort();
    }
    at = t.end;
  }
  if (at != header->data_size) std::abort();
  return 0;
}
