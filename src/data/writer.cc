#include "data/writer.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>

#include "ckpt/state.h"
#include "codec/chunk_codec.h"
#include "format/constants.h"
#include "util/checksum.h"
#include "util/thread_pool.h"

namespace ckpt {
namespace {

// Bytes handed to the storage per Append (its buffers take them in pieces
// of their own anyway).
constexpr size_t kSlice = size_t{8} << 20;

std::span<const std::byte> AsBytes(std::string_view s) {
  return std::span<const std::byte>(
      reinterpret_cast<const std::byte*>(s.data()), s.size());
}

Status AppendSlices(WritableObject& out, std::span<const std::byte> bytes,
                    bool in_place) {
  for (size_t pos = 0; pos < bytes.size(); pos += kSlice) {
    const auto slice = bytes.subspan(pos, std::min(kSlice, bytes.size() - pos));
    CKPT_RETURN_IF_ERROR(in_place ? out.AppendRetained(slice)
                                  : out.Append(slice));
  }
  return Status();
}

// The alignment of a data object's tensors: large objects start their data
// on a page, so that page-aligned memory (the asynchronous save's staging)
// lines up with its place in the file.
uint64_t DataAlignment(uint64_t data_bytes) {
  return data_bytes >= format::kPageAlignFrom
             ? format::kSafetensorsPageAlignment
             : format::kSafetensorsAlignment;
}

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Result<DataObjectLayout> LayOutDataObject(
    std::vector<format::TensorLayout> tensors, uint64_t chunk_size) {
  if (chunk_size == 0) return InvalidArgumentError("chunk size 0");
  // A shape that is invalid or overflows fails the encoding below, whatever
  // alignment this picks.
  uint64_t data_bytes = 0;
  for (const format::TensorLayout& t : tensors) {
    Result<uint64_t> n =
        TensorView{.dtype = t.dtype, .shape = t.shape}.ByteSize();
    if (n.ok()) data_bytes += std::min(*n, UINT64_MAX - data_bytes);
  }
  const uint64_t alignment = DataAlignment(data_bytes);
  DataObjectLayout layout;
  CKPT_ASSIGN_OR_RETURN(
      layout.header, format::EncodeSafetensorsHeader(tensors, {}, alignment));
  uint64_t offset = layout.header.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].end - tensors[i].begin;
    layout.piece_bytes.push_back(n);
    for (uint64_t pos = 0; pos < n; pos += chunk_size) {
      const uint64_t len = std::min<uint64_t>(chunk_size, n - pos);
      layout.chunks.push_back(DataObjectLayout::Chunk{i, pos, len, offset});
      offset += len;
    }
  }
  layout.size = offset;
  return layout;
}

const std::map<std::string, std::string>& CompressedMetadata() {
  static const std::map<std::string, std::string> m = {
      {"ckpt.compressed",
       "tensors of dtype U8 here hold compressed chunks: read them with "
       "ckpt (ckpt export writes the tensors themselves)"}};
  return m;
}

namespace {

// Appends the device piece `piece` of `layout`, read from `device`, to
// `out`, checksumming each chunk into `sums` as its bytes pass.
Status AppendFromDevice(WritableObject& out, DeviceReadPipeline& device,
                        const DataObjectLayout& layout, size_t piece,
                        std::vector<Checksum128>& sums) {
  const std::vector<DataObjectLayout::Chunk>& chunks = layout.chunks;
  size_t c = std::lower_bound(chunks.begin(), chunks.end(), piece,
                              [](const DataObjectLayout::Chunk& ch, size_t p) {
                                return ch.piece < p;
                              }) -
             chunks.begin();
  Xxh3Hasher hasher;
  uint64_t in_chunk = 0;
  auto append = [&](std::span<const std::byte> bytes) -> Status {
    CKPT_RETURN_IF_ERROR(out.Append(bytes));
    while (!bytes.empty()) {
      const uint64_t n =
          std::min<uint64_t>(bytes.size(), chunks[c].len - in_chunk);
      hasher.Update(bytes.first(n));
      bytes = bytes.subspan(n);
      in_chunk += n;
      if (in_chunk == chunks[c].len) {
        sums[c++] = hasher.Digest();
        hasher.Reset();
        in_chunk = 0;
      }
    }
    return Status();
  };
  return device.Read(layout.piece_bytes[piece], append);
}

// One chunk compressed (or left raw where that does not shrink it) into
// `r` and `stored`.
void CompressChunk(const PieceToWrite& p, const DataObjectLayout::Chunk& c,
                   int level, format::ChunkRecord& r,
                   std::vector<std::byte>& stored) {
  const auto bytes = p.bytes.subspan(c.pos, c.len);
  r.length = c.len;
  r.checksum = Xxh3_128(bytes);
  const codec::Codec codec = codec::CodecFor(p.dtype);
  if (c.len <= format::kMaxCompressedChunk &&
      codec::Compress(codec, level, bytes, stored)) {
    r.SetCompressed(codec, stored.size(),
                    Xxh3_64(std::span<const std::byte>(stored)));
  } else {
    stored = {};
  }
}

// The header of a data object whose pieces are U8 tensors of `stored`
// bytes each (`shrunk`; the others keep their dtype and shape).
Result<std::string> CompressedHeader(const std::vector<PieceToWrite>& pieces,
                                     const std::vector<uint64_t>& stored,
                                     const std::vector<bool>& shrunk,
                                     uint64_t alignment) {
  std::vector<format::TensorLayout> tensors;
  bool any = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PieceToWrite& p = pieces[i];
    any = any || shrunk[i];
    tensors.push_back(
        shrunk[i] ? format::TensorLayout{p.tensor_name,
                                         DType::kU8,
                                         {static_cast<int64_t>(stored[i])}}
                  : format::TensorLayout{p.tensor_name, p.dtype, p.lengths});
  }
  return format::EncodeSafetensorsHeader(
      tensors,
      any ? CompressedMetadata() : std::map<std::string, std::string>{},
      alignment);
}

// `header`, its JSON padded with spaces to `size` bytes in all (the length
// prefix says so): JSON allows them, and the placeholder it replaces was
// that long.
Result<std::string> PadHeader(std::string header, uint64_t size) {
  if (header.size() > size) {
    return InvalidArgumentError("a data object's header outgrew its room");
  }
  header.append(size - header.size(), ' ');
  const uint64_t n = size - 8;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(n >> (8 * i));
  return header;
}

// WriteDataObject with every host piece's chunks compressed. Where the
// storage can rewrite an object's first bytes, the chunks are compressed a
// batch at a time on the pool while this thread writes the batch before,
// behind a placeholder header (every piece a U8 tensor, as large as its
// raw bytes: the real header, with the stored sizes, is never longer),
// rewritten at the end; elsewhere every chunk is compressed first, then
// the object written.
Result<WrittenObject> WriteCompressed(Storage& storage, const std::string& key,
                                      const std::vector<PieceToWrite>& pieces,
                                      const DataObjectLayout& raw,
                                      const ChunkCompression& compress,
                                      bool in_place) {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<DataObjectLayout::Chunk>& chunks = raw.chunks;
  std::vector<format::ChunkRecord> records(chunks.size());
  std::vector<std::vector<std::byte>> stored(chunks.size());
  const int parallelism =
      compress.pool == nullptr ? 1 : compress.pool->size() + 1;
  auto compress_range = [&](size_t begin, size_t end) {
    return ParallelFor(compress.pool, parallelism, end - begin, [&](size_t i) {
      const size_t c = begin + i;
      CompressChunk(pieces[chunks[c].piece], chunks[c], compress.level,
                    records[c], stored[c]);
      return Status();
    });
  };
  uint64_t raw_bytes = 0;
  for (uint64_t n : raw.piece_bytes) raw_bytes += n;
  const uint64_t alignment = DataAlignment(raw_bytes);
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> out,
                        storage.NewWritable(key));
  CKPT_ASSIGN_OR_RETURN(
      std::string header,
      CompressedHeader(pieces, raw.piece_bytes,
                       std::vector<bool>(pieces.size(), true), alignment));
  const bool streaming = out->KeepPrefix(header.size());
  if (!streaming) CKPT_RETURN_IF_ERROR(compress_range(0, chunks.size()));
  const auto compressed = std::chrono::steady_clock::now();
  std::vector<uint64_t> stored_bytes(pieces.size(), 0);
  std::vector<bool> shrunk(pieces.size(), streaming);
  if (!streaming) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      stored_bytes[chunks[c].piece] += records[c].StoredLength();
      if (records[c].compressed()) shrunk[chunks[c].piece] = true;
    }
    CKPT_ASSIGN_OR_RETURN(
        header, CompressedHeader(pieces, stored_bytes, shrunk, alignment));
  }
  CKPT_RETURN_IF_ERROR(out->Append(AsBytes(header)));
  WrittenObject written;
  written.chunks.resize(pieces.size());
  uint64_t offset = header.size();
  double writing = 0;  // seconds this thread spent handing bytes over
  auto write_range = [&](size_t begin, size_t end) -> Status {
    const auto t0 = std::chrono::steady_clock::now();
    struct Timed {
      double& total;
      std::chrono::steady_clock::time_point t0;
      ~Timed() { total += Seconds(t0, std::chrono::steady_clock::now()); }
    } timed{writing, t0};
    for (size_t c = begin; c < end; ++c) {
      const PieceToWrite& p = pieces[chunks[c].piece];
      format::ChunkRecord& r = records[c];
      r.offset = offset;
      offset += r.StoredLength();
      stored_bytes[chunks[c].piece] += streaming ? r.StoredLength() : 0;
      if (r.compressed()) {
        CKPT_RETURN_IF_ERROR(out->Append(stored[c]));
        stored[c] = {};  // memory back as the object goes out
      } else {
        CKPT_RETURN_IF_ERROR(AppendSlices(
            *out, p.bytes.subspan(chunks[c].pos, chunks[c].len), in_place));
      }
      written.chunks[chunks[c].piece].push_back(r);
    }
    return Status();
  };
  if (!streaming) {
    CKPT_RETURN_IF_ERROR(write_range(0, chunks.size()));
  } else {
    // Two batches in memory at most: the one being written and the next,
    // being compressed meanwhile.
    const size_t batch =
        std::max<size_t>(8, 2 * static_cast<size_t>(parallelism));
    size_t begin = 0;
    size_t end = std::min(batch, chunks.size());
    CKPT_RETURN_IF_ERROR(compress_range(begin, end));
    while (begin < chunks.size()) {
      const size_t next_end = std::min(end + batch, chunks.size());
      std::future<Status> next;
      if (end < next_end) {
        next = std::async(std::launch::async, [&, end, next_end] {
          return compress_range(end, next_end);
        });
      }
      const Status wrote = write_range(begin, end);
      const Status ahead = next.valid() ? next.get() : Status();
      CKPT_RETURN_IF_ERROR(wrote);
      CKPT_RETURN_IF_ERROR(ahead);
      begin = end;
      end = next_end;
    }
    CKPT_ASSIGN_OR_RETURN(
        std::string real,
        CompressedHeader(pieces, stored_bytes, shrunk, alignment));
    CKPT_ASSIGN_OR_RETURN(real, PadHeader(std::move(real), header.size()));
    CKPT_RETURN_IF_ERROR(out->RewritePrefix(AsBytes(real)));
  }
  const auto closing = std::chrono::steady_clock::now();
  CKPT_RETURN_IF_ERROR(out->Close());
  written.size = offset;
  // Streaming, compressing and writing overlap: the write's time is what
  // this thread spent handing bytes over and closing, and the compression
  // speed stays what a sample or an earlier save measured.
  written.compress_seconds = streaming ? 0 : Seconds(started, compressed);
  written.write_seconds =
      streaming ? writing + Seconds(closing, std::chrono::steady_clock::now())
                : Seconds(compressed, std::chrono::steady_clock::now());
  written.raw_bytes = raw_bytes;
  return written;
}

}  // namespace

Result<WrittenObject> WriteDataObject(Storage& storage, const std::string& key,
                                      const std::vector<PieceToWrite>& pieces,
                                      uint64_t chunk_size, bool in_place,
                                      DeviceReadPipeline* device,
                                      const ChunkCompression* compress) {
  std::vector<format::TensorLayout> tensors;
  tensors.reserve(pieces.size());
  for (const PieceToWrite& p : pieces) {
    tensors.push_back(format::TensorLayout{p.tensor_name, p.dtype, p.lengths});
  }
  CKPT_ASSIGN_OR_RETURN(DataObjectLayout layout,
                        LayOutDataObject(std::move(tensors), chunk_size));
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].on_device && device == nullptr) {
      return InvalidArgumentError("write " + key + ": piece " +
                                  pieces[i].tensor_name +
                                  " is on a device, and no device reader");
    }
    if (pieces[i].bytes.size() != layout.piece_bytes[i]) {
      return InvalidArgumentError("write " + key + ": piece " +
                                  pieces[i].tensor_name +
                                  " has the wrong number of bytes");
    }
  }
  const bool on_device =
      std::any_of(pieces.begin(), pieces.end(),
                  [](const PieceToWrite& p) { return p.on_device; });
  if (compress != nullptr && !on_device) {
    return WriteCompressed(storage, key, pieces, layout, *compress, in_place);
  }
  const auto started = std::chrono::steady_clock::now();
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> out,
                        storage.NewWritable(key));
  CKPT_RETURN_IF_ERROR(out->Append(AsBytes(layout.header)));

  // The chunk layout is known before a byte is written, so the checksums
  // are computed on a second thread while this one streams the bytes out:
  // on two cores, hashing then hides behind the copy into the storage.
  const std::vector<DataObjectLayout::Chunk>& chunks = layout.chunks;
  std::vector<Checksum128> sums(chunks.size());
  // Device pieces are checksummed as their blocks arrive instead. Declared
  // after what it reads: its destructor waits for the thread on every way
  // out of this function.
  std::future<void> hashing = std::async(std::launch::async, [&] {
    for (size_t c = 0; c < chunks.size(); ++c) {
      const PieceToWrite& p = pieces[chunks[c].piece];
      if (p.on_device) continue;
      sums[c] = Xxh3_128(p.bytes.subspan(chunks[c].pos, chunks[c].len));
    }
  });
  // The pieces outlive `out` (the caller owns them), as AppendRetained asks.
  for (size_t i = 0; i < pieces.size(); ++i) {
    CKPT_RETURN_IF_ERROR(pieces[i].on_device
                             ? AppendFromDevice(*out, *device, layout, i, sums)
                             : AppendSlices(*out, pieces[i].bytes, in_place));
  }
  hashing.get();
  WrittenObject written;
  written.chunks.resize(pieces.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    written.chunks[chunks[c].piece].push_back(
        format::ChunkRecord{.offset = chunks[c].offset,
                            .length = chunks[c].len,
                            .checksum = sums[c]});
  }
  CKPT_RETURN_IF_ERROR(out->Close());
  written.size = layout.size;
  written.write_seconds = Seconds(started, std::chrono::steady_clock::now());
  for (uint64_t n : layout.piece_bytes) written.raw_bytes += n;
  return written;
}

Result<DataObjectStream> DataObjectStream::Start(
    Storage& storage, const std::string& key,
    std::vector<format::TensorLayout> tensors, uint64_t chunk_size) {
  CKPT_ASSIGN_OR_RETURN(DataObjectLayout layout,
                        LayOutDataObject(std::move(tensors), chunk_size));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<WritableObject> out,
                        storage.NewWritable(key));
  CKPT_RETURN_IF_ERROR(out->Append(AsBytes(layout.header)));
  return DataObjectStream(key, std::move(layout), std::move(out));
}

Status DataObjectStream::Append(std::span<const std::byte> bytes) {
  const size_t piece = next_piece_;
  if (piece == layout_.piece_bytes.size()) {
    return InvalidArgumentError("write " + key_ +
                                ": more pieces than it was started with");
  }
  if (bytes.size() != layout_.piece_bytes[piece]) {
    return InvalidArgumentError("write " + key_ + ": piece " +
                                std::to_string(piece) +
                                " has the wrong number of bytes");
  }
  std::vector<format::ChunkRecord>& records = written_.chunks.emplace_back();
  for (; next_chunk_ < layout_.chunks.size() &&
         layout_.chunks[next_chunk_].piece == piece;
       ++next_chunk_) {
    const DataObjectLayout::Chunk& c = layout_.chunks[next_chunk_];
    records.push_back(
        format::ChunkRecord{.offset = c.offset,
                            .length = c.len,
                            .checksum = Xxh3_128(bytes.subspan(c.pos, c.len))});
  }
  CKPT_RETURN_IF_ERROR(AppendSlices(*out_, bytes, /*in_place=*/false));
  ++next_piece_;
  return Status();
}

Result<WrittenObject> DataObjectStream::Close() {
  if (next_piece_ != layout_.piece_bytes.size()) {
    return InvalidArgumentError(
        "write " + key_ + ": closed after " + std::to_string(next_piece_) +
        " of " + std::to_string(layout_.piece_bytes.size()) + " pieces");
  }
  CKPT_RETURN_IF_ERROR(out_->Close());
  written_.size = layout_.size;
  return std::move(written_);
}

}  // namespace ckpt
