// Writes one rank's data object: a safetensors file streamed straight from
// the caller's buffers, each chunk checksummed by a second thread while the
// bytes stream out. The writer itself holds the header and the chunk list,
// nothing more; what the storage buffers is the storage's (file://: a few
// reused O_DIRECT blocks).
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
// this returns Ok. `in_place`: the pieces' bytes are in memory whose pages
// are cheap for the device to read from (ckpt's own huge-page staging), so
// the storage may write them without copying (WritableObject::
// AppendRetained); otherwise it copies them into its own blocks, which for
// ordinary 4 KiB pages is faster than having the kernel pin every page.
Result<WrittenObject> WriteDataObject(Storage& storage, const std::string& key,
                                      const std::vector<PieceToWrite>& pieces,
                                      uint64_t chunk_size,
                                      bool in_place = false);

}  // namespace ckpt
