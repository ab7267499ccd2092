#include "checkpoint/writer.h"

#include <algorithm>
#include <future>

#include "format/constants.h"
#include "format/safetensors.h"
#include "util/checksum.h"

namespace ckpt {
namespace {

// Bytes handed to the storage per Append (its buffers take them in pieces
// of their own anyway).
constexpr size_t kSlice = size_t{8} << 20;

}  // namespace

Result<WrittenObject> WriteDataObject(Storage& storage, const std::string& key,
                                      const std::vector<PieceToWrite>& pieces,
                                      uint64_t chunk_size, bool in_place) {
  std::vector<format::TensorLayout> layout;
  layout.reserve(pieces.size());
  uint64_t data_bytes = 0;
  for (const PieceToWrite& p : pieces) {
    layout.push_back(format::TensorLayout{p.tensor_name, p.dtype, p.lengths});
    data_bytes += p.bytes.size();
  }
  // Large objects start their data on a page, so that page-aligned memory
  // (the asynchronous save's staging) lines up with its place in the file.
  const uint64_t alignment = data_bytes >= format::kPageAlignFrom
                                 ? format::kSafetensorsPageAlignment
                                 : format::kSafetensorsAlignment;
  CKPT_ASSIGN_OR_RETURN(std::string header,
                        format::EncodeSafetensorsHeader(layout, {}, alignment));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> out,
                        storage.NewWritable(key));
  auto as_bytes = [](std::string_view s) {
    return std::span<const std::byte>(
        reinterpret_cast<const std::byte*>(s.data()), s.size());
  };
  CKPT_RETURN_IF_ERROR(out->Append(as_bytes(header)));

  // The chunk layout is known before a byte is written, so the checksums
  // are computed on a second thread while this one streams the bytes out:
  // on two cores, hashing then hides behind the copy into the storage.
  struct ChunkSpan {
    size_t piece;
    uint64_t pos;  // within the piece
    uint64_t len;
    uint64_t offset;  // within the object
  };
  std::vector<ChunkSpan> chunks;
  uint64_t offset = header.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const uint64_t n = pieces[i].bytes.size();
    if (n != layout[i].end - layout[i].begin) {
      return InvalidArgumentError("write " + key + ": piece " +
                                  pieces[i].tensor_name +
                                  " has the wrong number of bytes");
    }
    for (uint64_t pos = 0; pos < n; pos += chunk_size) {
      const uint64_t len = std::min<uint64_t>(chunk_size, n - pos);
      chunks.push_back(ChunkSpan{i, pos, len, offset});
      offset += len;
    }
  }
  std::vector<Checksum128> sums(chunks.size());
  // Declared after what it reads: its destructor waits for the thread on
  // every way out of this function.
  std::future<void> hashing = std::async(std::launch::async, [&] {
    for (size_t c = 0; c < chunks.size(); ++c) {
      sums[c] = Xxh3_128(
          pieces[chunks[c].piece].bytes.subspan(chunks[c].pos, chunks[c].len));
    }
  });
  // The pieces outlive `out` (the caller owns them), as AppendRetained asks.
  for (const PieceToWrite& p : pieces) {
    for (size_t pos = 0; pos < p.bytes.size(); pos += kSlice) {
      const auto slice =
          p.bytes.subspan(pos, std::min(kSlice, p.bytes.size() - pos));
      CKPT_RETURN_IF_ERROR(in_place ? out->AppendRetained(slice)
                                    : out->Append(slice));
    }
  }
  hashing.get();
  WrittenObject written;
  written.chunks.resize(pieces.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    written.chunks[chunks[c].piece].push_back(
        format::ChunkRecord{0, chunks[c].offset, chunks[c].len, sums[c]});
  }
  CKPT_RETURN_IF_ERROR(out->Close());
  written.size = offset;
  return written;
}

}  // namespace ckpt
