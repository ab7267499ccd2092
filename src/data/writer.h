// Writes one rank's data object: a safetensors file streamed straight from
// the caller's buffers, each chunk checksummed by a second thread while the
// bytes stream out. The writer itself holds the header and the chunk list,
// nothing more; what the storage buffers is the storage's (file://: a few
// reused O_DIRECT blocks).
//
// DataObjectStream writes the same object a piece at a time, for a caller
// that never holds every piece in memory at once (a forced delete copies a
// dependant's chunks through one reused buffer).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "format/manifest.h"
#include "format/safetensors.h"
#include "staging/device_pipeline.h"

namespace ckpt {

struct PieceToWrite {
  std::string tensor_name;  // name inside the safetensors file
  DType dtype = DType::kU8;
  std::vector<int64_t> lengths;  // the piece's shape
  // Host memory; on a device, only its size counts: the bytes come from the
  // DeviceReadPipeline given to WriteDataObject.
  std::span<const std::byte> bytes;
  bool on_device = false;
};

struct WrittenObject {
  uint64_t size = 0;
  // What the write cost, for Compression::kAuto: seconds compressing (0
  // when nothing was) and seconds writing the object's bytes.
  double compress_seconds = 0;
  double write_seconds = 0;
  uint64_t raw_bytes = 0;  // the pieces' bytes (size less the header, raw)
  // Chunks of each piece, in the order given; ChunkRecord::object is 0.
  std::vector<std::vector<format::ChunkRecord>> chunks;
};

class ThreadPool;

// The safetensors metadata of a data object with compressed chunks (none
// otherwise): a reader other than ckpt then sees why its pieces are U8
// bytes, and `ckpt verify` that a header's metadata is one of the two.
const std::map<std::string, std::string>& CompressedMetadata();

// How WriteDataObject compresses the chunks of host pieces (docs/format.md,
// "Compressed chunks"): each chunk in byte planes of its element and zstd
// at `level`, stored raw when that does not shrink it. The chunks are
// compressed on `pool` and the calling thread before the object is written:
// the safetensors header, which comes first, gives every piece's stored
// size. Pieces on a device, and chunks longer than kMaxCompressedChunk, are
// written raw.
struct ChunkCompression {
  int level = 1;
  ThreadPool* pool = nullptr;
};

// Writes `pieces` into `key` durably. Nothing is published under `key` unless
// this returns Ok. `in_place`: the pieces' bytes are in memory whose pages
// are cheap for the device to read from (ckpt's own huge-page staging), so
// the storage may write them without copying (WritableObject::
// AppendRetained); otherwise it copies them into its own blocks, which for
// ordinary 4 KiB pages is faster than having the kernel pin every page.
// Pieces `on_device` are read, in order, from `device` (which the caller
// started on exactly those pieces) and checksummed as each block arrives,
// while it is in the cache.
Result<WrittenObject> WriteDataObject(
    Storage& storage, const std::string& key,
    const std::vector<PieceToWrite>& pieces, uint64_t chunk_size,
    bool in_place = false, DeviceReadPipeline* device = nullptr,
    const ChunkCompression* compress = nullptr);

// A data object's layout, known from its pieces' names, dtypes and shapes
// alone: the header, and where each chunk lies. Both writers write exactly
// this. Large objects start their data on a page (kPageAlignFrom).
struct DataObjectLayout {
  struct Chunk {
    size_t piece;
    uint64_t pos;  // within the piece
    uint64_t len;
    uint64_t offset;  // within the object
  };
  std::string header;                 // the bytes before the data
  std::vector<uint64_t> piece_bytes;  // in the order given
  std::vector<Chunk> chunks;          // in the order of the bytes
  uint64_t size = 0;                  // of the whole object
};
Result<DataObjectLayout> LayOutDataObject(
    std::vector<format::TensorLayout> tensors, uint64_t chunk_size);

// A data object written one piece at a time, byte for byte what
// WriteDataObject writes for the same pieces and chunk size, for a caller
// that cannot hold every piece in memory at once. The header goes out when
// it starts; each Append takes the next piece's bytes and checksums them;
// Close publishes the object. Nothing is published under the key unless
// Close returns Ok (destroyed before that, the object is discarded); after
// an error from Append, destroy it. Used by one thread at a time.
class DataObjectStream {
 public:
  // Starts `key` with the header of pieces `tensors` (their names, dtypes and
  // shapes; begin and end are ignored).
  static Result<DataObjectStream> Start(
      Storage& storage, const std::string& key,
      std::vector<format::TensorLayout> tensors, uint64_t chunk_size);

  // Appends the next piece: exactly as many bytes as its shape holds. They
  // are copied, so the caller may reuse them once this returns.
  Status Append(std::span<const std::byte> bytes);
  // Once every piece is appended: makes the object durable and publishes it.
  Result<WrittenObject> Close();

 private:
  DataObjectStream(std::string key, DataObjectLayout layout,
                   std::unique_ptr<WritableObject> out)
      : key_(std::move(key)),
        layout_(std::move(layout)),
        out_(std::move(out)) {}

  std::string key_;
  DataObjectLayout layout_;
  std::unique_ptr<WritableObject> out_;
  size_t next_piece_ = 0;
  size_t next_chunk_ = 0;  // the first chunk of the next piece
  WrittenObject written_;
};

}  // namespace ckpt
