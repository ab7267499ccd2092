// Verify: re-read every byte of one checkpoint and report every problem
// found, instead of stopping at the first as a load does.
//
//   1. Read the manifest again (not from the cache: damage that kept its
//      size and mtime would hide behind it) and validate it, one rank's
//      pieces at a time (ManifestStore::ForEachRank): a checkpoint of
//      16,384 ranks holds millions of pieces, and verify's memory stays
//      that of one rank's and a span per chunk.
//   2. For each object those pieces name: present, of the recorded size,
//      and a valid safetensors file (length prefix and header).
//   3. For each chunk of each entry: within its object, inside a tensor of
//      the entry's (or of one of its incremental runs) in the object's
//      header, and matching its xxh3-128 checksum when read back.
#include "checkpoint/verify.h"

#include <algorithm>
#include <optional>
#include <set>

#include "data/reader.h"
#include "data/writer.h"
#include "format/safetensors.h"
#include "util/checksum.h"
#include "util/names.h"

namespace ckpt {

using format::Manifest;

namespace {

// What step 2 learnt about one object.
struct ObjectCheck {
  bool readable = false;
  uint64_t size = 0;
  std::optional<format::SafetensorsHeader> header;
};

// The safetensors header of `key` (`size` bytes long).
Result<format::SafetensorsHeader> ReadHeader(Storage& storage,
                                             const std::string& key,
                                             uint64_t size) {
  if (size < 8) return DataLossError("shorter than 8 bytes");
  std::byte prefix[8];
  CKPT_RETURN_IF_ERROR(storage.ReadRange(key, 0, prefix));
  CKPT_ASSIGN_OR_RETURN(
      uint64_t n, format::DecodeSafetensorsHeaderLength(prefix, size, key));
  std::string header(n, '\0');
  CKPT_RETURN_IF_ERROR(storage.ReadRange(
      key, 8,
      std::span<std::byte>(reinterpret_cast<std::byte*>(header.data()),
                           header.size())));
  return format::ParseSafetensorsHeader(header, size, key);
}

// A read that failed other than for damage: a resume stops there instead
// of skipping the step (ResumeSkips).
bool NotDamage(const Status& s) { return !s.ok() && !ResumeSkips(s); }

// Sets `unreadable` where a problem is NotDamage; counts in
// `header_problems` the problems that lie in the safetensors header only.
ObjectCheck CheckObject(Storage& storage, const format::ObjectRecord& o,
                        std::vector<std::string>& problems, bool& unreadable,
                        size_t& header_problems) {
  ObjectCheck check;
  Result<ObjectInfo> info = storage.Stat(o.key);
  if (!info.ok()) {
    problems.push_back(o.key + ": " + info.status().ToString());
    unreadable |= NotDamage(info.status());
    return check;
  }
  check.readable = true;
  check.size = info->size;
  if (info->size != o.size) {
    problems.push_back(o.key + ": is " + std::to_string(info->size) +
                       " bytes, the manifest records " +
                       std::to_string(o.size) + " (truncated or replaced)");
  }
  Result<format::SafetensorsHeader> h = ReadHeader(storage, o.key, info->size);
  if (h.ok()) {
    // ckpt writes no metadata into a data object but its compression
    // marker: anything else is a damaged header.
    if (!h->metadata.empty() && h->metadata != CompressedMetadata()) {
      problems.push_back(o.key +
                         ": safetensors header: __metadata__ is not what ckpt "
                         "writes (damaged)");
      ++header_problems;
    }
    check.header = std::move(h).value();
  } else {
    problems.push_back(o.key +
                       ": safetensors header: " + h.status().ToString());
    if (NotDamage(h.status())) {
      unreadable = true;
    } else {
      ++header_problems;
    }
  }
  return check;
}

// Whether the header places chunk `c` inside entry `entry`'s own tensor: a
// damaged name or offset there is damage that no chunk checksum sees.
bool HeaderHolds(const format::SafetensorsHeader& h, const std::string& entry,
                 const format::ChunkRecord& c) {
  return std::any_of(h.tensors.begin(), h.tensors.end(), [&](const auto& t) {
    // An incremental save writes the changed runs of a piece as
    // "<entry>@<first chunk>" (format/layout.h).
    return (t.name == entry || format::IsRunOf(t.name, entry)) &&
           c.offset >= h.data_start + t.begin &&
           c.StoredEnd() <= h.data_start + t.end;
  });
}

std::string Range(const format::ChunkRecord& c) {
  return "[" + std::to_string(c.offset) + ", " + std::to_string(c.StoredEnd()) +
         ")";
}

// Chunks longer than this are read and hashed a slice at a time: a chunk's
// length is the metadata's word, and verify's memory must not follow it to
// the size of a data object.
constexpr uint64_t kSliceBytes = uint64_t{16} << 20;

// ReadChunk, in slices of at most kSliceBytes through `buf`.
Status CheckChunkBytes(Storage& storage, const Manifest& m,
                       const format::EntryRecord& e,
                       const format::ChunkRecord& c,
                       std::vector<std::byte>& buf) {
  // A compressed chunk is read and decompressed whole: the manifest's rules
  // bound its length (format::kMaxCompressedChunk).
  if (c.length <= kSliceBytes || c.compressed()) {
    buf.resize(c.length);
    return ReadChunk(storage, m, e, c, buf);
  }
  const std::string& key = m.objects[c.object].key;
  const std::string where =
      key + ": entry " + Quote(e.name) + " bytes " + Range(c);
  buf.resize(kSliceBytes);
  Xxh3Hasher hasher;
  for (uint64_t done = 0; done < c.length;) {
    const std::span<std::byte> slice(buf.data(),
                                     std::min(kSliceBytes, c.length - done));
    CKPT_RETURN_IF_ERROR_CTX(storage.ReadRange(key, c.offset + done, slice),
                             where);
    hasher.Update(slice);
    done += slice.size();
  }
  if (hasher.Digest() != c.checksum) {
    return DataLossError(where + ": checksum mismatch (the data is damaged)");
  }
  return Status();
}

}  // namespace

Result<VerifyReport> Verifier::Verify(int64_t step,
                                      const ProgressFn& progress) {
  VerifyReport report;
  report.step = step;
  uint64_t total = 0, done = 0;
  bool first = true;
  // Objects already stat'ed and their problems reported: a data object
  // that several ranks' pieces name (an incremental parent's) is reported
  // once.
  std::set<std::string> objects_seen;
  std::vector<std::byte> buf;
  // Problems in report.problems that lie in a safetensors header only.
  size_t header_problems = 0;
  // 1. The manifest, read again (not from the cache: damage that kept its
  // size and mtime would hide behind it), one rank's pieces at a time.
  CKPT_RETURN_IF_ERROR(
      root_.manifests.ForEachRank(step, [&](const Manifest& m) -> Status {
        if (first) {
          // The pieces tile every entry once: the bytes to check are the
          // entries' own.
          for (const auto& e : m.entries) {
            if (e.kind == EntryKind::kMetadata) continue;
            total += TensorView{e.dtype, e.shape, nullptr, false}
                         .ByteSize()
                         .value_or(0);
          }
          first = false;
        }
        // 2. The objects these pieces name.
        std::vector<ObjectCheck> objects;
        std::vector<std::string> reported_again;
        size_t header_problems_again = 0;
        for (const format::ObjectRecord& o : m.objects) {
          const bool first_seen = objects_seen.insert(o.key).second;
          objects.push_back(CheckObject(
              *root_.storage, o, first_seen ? report.problems : reported_again,
              report.unreadable,
              first_seen ? header_problems : header_problems_again));
        }
        // 3. Every chunk, re-read and re-hashed.
        for (const auto& e : m.entries) {
          for (const auto& p : e.pieces) {
            for (const auto& c : p.chunks) {
              const std::string& key = m.objects[c.object].key;
              const ObjectCheck& object = objects[c.object];
              if (!object.readable) continue;  // already reported
              if (c.offset > object.size ||
                  c.StoredLength() > object.size - c.offset) {
                report.problems.push_back(key + ": entry " + Quote(e.name) +
                                          " bytes " + Range(c) +
                                          " lie past the end of the object");
                continue;
              }
              if (object.header && !HeaderHolds(*object.header, e.name, c)) {
                report.problems.push_back(
                    key + ": safetensors header: no tensor " + Quote(e.name) +
                    " holds bytes " + Range(c) + " of entry " + Quote(e.name));
                ++header_problems;
              }
              Status s = CheckChunkBytes(*root_.storage, m, e, c, buf);
              if (!s.ok()) {
                report.problems.push_back(s.ToString());
                report.unreadable |= NotDamage(s);
              } else {
                ++report.chunks_checked;
                report.bytes_checked += c.length;
              }
              done += c.length;
              if (progress) progress(done, std::max(done, total));
            }
          }
        }
        return Status();
      }));
  report.header_only =
      !report.problems.empty() && header_problems == report.problems.size();
  return report;
}

}  // namespace ckpt
