#include "checkpoint/writer.h"

#include <algorithm>

#include "format/safetensors.h"
#include "util/checksum.h"

namespace ckpt {
namespace {

// Hash and write in slices this big, so the bytes are still in cache when
// they are handed to the storage after being hashed.
constexpr size_t kSlice = size_t{1} << 20;

}  // namespace

Result<WrittenObject> WriteDataObject(Storage& storage, const std::string& key,
                                      const std::vector<PieceToWrite>& pieces,
                                      uint64_t chunk_size) {
  std::vector<format::TensorLayout> layout;
  layout.reserve(pieces.size());
  for (const PieceToWrite& p : pieces) {
    layout.push_back(format::TensorLayout{p.tensor_name, p.dtype, p.lengths});
  }
  CKPT_ASSIGN_OR_RETURN(std::string header,
                        format::EncodeSafetensorsHeader(layout, {}));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> out,
                        storage.NewWritable(key));
  auto as_bytes = [](std::string_view s) {
    return std::span<const std::byte>(
        reinterpret_cast<const std::byte*>(s.data()), s.size());
  };
  CKPT_RETURN_IF_ERROR(out->Append(as_bytes(header)));

  WrittenObject written;
  written.chunks.resize(pieces.size());
  Xxh3Hasher hasher;
  uint64_t offset = header.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::span<const std::byte> bytes = pieces[i].bytes;
    if (bytes.size() != layout[i].end - layout[i].begin) {
      return InvalidArgumentError("write " + key + ": piece " +
                                  pieces[i].tensor_name +
                                  " has the wrong number of bytes");
    }
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t len = std::min<uint64_t>(chunk_size, bytes.size() - pos);
      hasher.Reset();
      for (size_t s = 0; s < len; s += kSlice) {
        std::span<const std::byte> slice =
            bytes.subspan(pos + s, std::min(kSlice, len - s));
        hasher.Update(slice);
        CKPT_RETURN_IF_ERROR(out->Append(slice));
      }
      written.chunks[i].push_back(
          format::ChunkRecord{0, offset, len, hasher.Digest()});
      offset += len;
      pos += len;
    }
  }
  CKPT_RETURN_IF_ERROR(out->Close());
  written.size = offset;
  return written;
}

}  // namespace ckpt
