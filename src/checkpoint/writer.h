// Writes one rank's data object: a safetensors file streamed straight from
// the caller's buffers, each chunk checksummed on its way out. Memory use is
// the header plus nothing: bytes are never copied into a staging buffer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "format/manifest.h"

namespace ckpt {

struct PieceToWrite {
  std::string tensor_name;  // name inside the safetensors file
  DType dtype = DType::kU8;
  std::vector<int64_t> lengths;  // the piece's shape
  std::span<const std::byte> bytes;
};

struct WrittenObject {
  uint64_t size = 0;
  // Chunks of each piece, in the order given; ChunkRecord::object is 0.
  std::vector<std::vector<format::ChunkRecord>> chunks;
};

// Writes `pieces` into `key` durably. Nothing is published under `key` unless
// this returns Ok.
Result<WrittenObject> WriteDataObject(Storage& storage, const std::string& key,
                                      const std::vector<PieceToWrite>& pieces,
                                      uint64_t chunk_size);

}  // namespace ckpt
