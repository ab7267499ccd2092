#include "checkpoint/reader.h"

#include <cstring>
#include <memory>

#include "util/checksum.h"
#include "util/names.h"

namespace ckpt {

Status ReadChunk(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry,
                 const format::ChunkRecord& chunk, std::span<std::byte> dest) {
  const std::string& key = manifest.objects[chunk.object].key;
  const std::string where = "read " + key + " bytes [" +
                            std::to_string(chunk.offset) + ", " +
                            std::to_string(chunk.offset + chunk.length) +
                            ") of entry " + Quote(entry.name);
  CKPT_RETURN_IF_ERROR_CTX(storage.ReadRange(key, chunk.offset, dest), where);
  if (Xxh3_128(dest) != chunk.checksum) {
    return DataLossError(where + ": checksum mismatch (the data is damaged)");
  }
  return Status();
}

void CopyBoxInto(const std::vector<int64_t>& shape,
                 const std::vector<int64_t>& offsets,
                 const std::vector<int64_t>& lengths, size_t elem_size,
                 std::span<const std::byte> box_bytes,
                 std::span<std::byte> dest) {
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dest.data(), box_bytes.data(), elem_size);
    return;
  }
  for (int64_t l : lengths) {
    if (l == 0) return;
  }
  // Row-major strides of the whole tensor, in bytes.
  std::vector<size_t> stride(rank);
  stride[rank - 1] = elem_size;
  for (size_t d = rank - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  const size_t run = lengths[rank - 1] * elem_size;  // contiguous bytes
  std::vector<int64_t> idx(rank, 0);                 // position inside the box
  size_t src = 0;
  while (true) {
    size_t off = 0;
    for (size_t d = 0; d < rank; ++d) off += (offsets[d] + idx[d]) * stride[d];
    std::memcpy(dest.data() + off, box_bytes.data() + src, run);
    src += run;
    // Advance every dimension but the last, like an odometer.
    size_t d = rank - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < lengths[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

Status ReadEntry(Storage& storage, const format::Manifest& manifest,
                 const format::EntryRecord& entry, std::span<std::byte> dest) {
  const size_t elem = DTypeSize(entry.dtype);
  for (const format::PieceRecord& piece : entry.pieces) {
    const bool whole = piece.lengths == entry.shape;
    std::unique_ptr<std::byte[]> staging;
    std::span<std::byte> target = dest;
    if (!whole) {
      // Inside the shape (the manifest was validated), so no overflow.
      const uint64_t bytes =
          *TensorView{entry.dtype, piece.lengths, nullptr, false}.ByteSize();
      staging = std::make_unique_for_overwrite<std::byte[]>(bytes ? bytes : 1);
      target = std::span<std::byte>(staging.get(), bytes);
    }
    uint64_t pos = 0;
    for (const format::ChunkRecord& c : piece.chunks) {
      CKPT_RETURN_IF_ERROR(ReadChunk(storage, manifest, entry, c,
                                     target.subspan(pos, c.length)));
      pos += c.length;
    }
    if (!whole) {
      CopyBoxInto(entry.shape, piece.offsets, piece.lengths, elem, target,
                  dest);
    }
  }
  return Status();
}

}  // namespace ckpt
