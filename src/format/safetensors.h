// safetensors data files: encoding of the header and bounds-checked parsing.
//
// A file is: 8 bytes (little-endian u64) header length N; N bytes of JSON
// {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//  ..., "__metadata__": {"key": "value"}}; then the data section. Offsets are
// relative to the data section, and the tensors must tile it exactly: no
// holes, no overlaps, nothing past the end. ckpt pads the header with spaces
// so the data section is 8-byte aligned, as the reference writer does.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/status.h"
#include "format/constants.h"

namespace ckpt::format {

struct TensorLayout {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offset in the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  // Sorted by `begin` (the order of the bytes in the file).
  std::vector<TensorLayout> tensors;
  std::map<std::string, std::string> metadata;
  // Absolute file offset of the data section (8 + header length).
  uint64_t data_start = 0;
  // Bytes in the data section.
  uint64_t data_size = 0;
};

// Lays `tensors` out back to back in the given order (filling begin and end)
// and returns the bytes that precede the data: the 8-byte length and the
// JSON header, padded with spaces so that the data section starts at a
// multiple of `alignment` (a power of two, at least 8: the format's own).
// Fails on invalid names, duplicate names or overflowing shapes.
Result<std::string> EncodeSafetensorsHeader(
    std::vector<TensorLayout>& tensors,
    const std::map<std::string, std::string>& metadata,
    uint64_t alignment = kSafetensorsAlignment);

// Decodes the 8-byte length prefix of a file of `file_size` bytes and checks
// that the header fits (at most kMaxSafetensorsHeader and inside the file).
// `what` names the file in errors.
Result<uint64_t> DecodeSafetensorsHeaderLength(
    std::span<const std::byte> prefix, uint64_t file_size,
    std::string_view what);

// Parses and validates the JSON header of a file of `file_size` bytes whose
// header is `json` (exactly the header-length bytes after the prefix).
// Errors (DataLoss) name the file and the tensor.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view json,
                                                 uint64_t file_size,
                                                 std::string_view what);

// Both steps on a whole file held in memory.
Result<SafetensorsHeader> ParseSafetensorsFile(std::string_view file,
                                               std::string_view what);

}  // namespace ckpt::format
