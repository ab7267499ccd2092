// Format constants, in one place. docs/format.md describes the formats in
// prose; a change here is a format change and must be reflected there.
#pragma once

#include <cstdint>
#include <string_view>

namespace ckpt::format {

// --- Manifest -------------------------------------------------------------
inline constexpr std::string_view kManifestName = "MANIFEST.json";
inline constexpr std::string_view kManifestMagic = "ckpt-manifest";
// Version 1: a self-contained checkpoint (or one whose depends_on an older
// tool wrote by hand). Version 2 adds incremental saves: chunks that point
// into earlier checkpoints' data files, and the `parent` and `chain` fields.
// A self-contained checkpoint is still written as version 1, so readers that
// predate version 2 keep reading it; they refuse a version 2 manifest.
inline constexpr int kManifestVersion = 1;
inline constexpr int kIncrementalManifestVersion = 2;
// Version 3: MANIFEST.json is a small commit record naming a binary
// directory, and every rank writes a binary index of its own pieces
// (format/index.h), so no reader decodes every rank's chunk list.
inline constexpr int kScalableManifestVersion = 3;
inline constexpr std::string_view kIndexSuffix = ".ckptidx";
inline constexpr std::string_view kDirectorySuffix = ".ckptdir";
inline constexpr std::string_view kDirectoryPrefix = "directory-";
// The binary objects start with one of these 8 bytes (the last is the
// encoding's version), then the body's length and checksum.
inline constexpr std::string_view kIndexMagic =
    std::string_view("CKPTIDX\x01", 8);
// An index with a compressed chunk: each chunk carries its codec (and, when
// compressed, its stored length and checksum). Indexes without one keep
// encoding 1, which readers that predate compression read.
inline constexpr std::string_view kCompressedIndexMagic =
    std::string_view("CKPTIDX\x02", 8);
inline constexpr std::string_view kDirectoryMagic =
    std::string_view("CKPTDIR\x01", 8);
inline constexpr size_t kBinaryHeaderBytes = 8 + 8 + 16;
// The longest chunk that may be stored compressed: decoding one needs
// memory of its length, which a forged manifest must not be able to make
// any larger (longer chunks are written raw).
inline constexpr uint64_t kMaxCompressedChunk = uint64_t{256} << 20;
// An index or directory larger than this is refused before it is read.
inline constexpr uint64_t kMaxBinaryMetadataBytes = uint64_t{1} << 30;
// A host name in a directory is at most this long (DNS allows 253, Linux's
// gethostname 64): the directory stores each name once and every rank's
// host as an index, so the names it expands to are bounded by this, not by
// the bytes that hold them.
inline constexpr size_t kMaxHostNameBytes = 255;
// depends_on lists at most this many steps, so a chain of incremental saves
// is cut (a full save) before it grows longer.
inline constexpr int kMaxDependsOn = 64;
// Envelope: the manifest file is exactly
//   {"xxh3_128":"<32 hex digits>","manifest":<body>}\n
// where the checksum covers the body's bytes. It stays valid JSON for any tool
// and a reader checks the checksum before it trusts a single field.
inline constexpr std::string_view kEnvelopePrefix = "{\"xxh3_128\":\"";
inline constexpr std::string_view kEnvelopeMiddle = "\",\"manifest\":";
inline constexpr std::string_view kEnvelopeSuffix = "}\n";
// A manifest larger than this is refused before it is read.
inline constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;

// --- Layout under a root --------------------------------------------------
inline constexpr std::string_view kStepPrefix = "step-";
inline constexpr int kStepDigits = 12;
inline constexpr std::string_view kLatestName = "LATEST";
inline constexpr int kRankDigits = 5;
// Ranks are named with kRankDigits digits, so a job has at most 10^5 ranks.
inline constexpr int kMaxWorldSize = 100'000;
// Steps are named with kStepDigits digits.
inline constexpr int64_t kMaxStep = 999'999'999'999;
inline constexpr int kAttemptHexDigits = 16;
inline constexpr std::string_view kDataSuffix = ".safetensors";

// --- Data files (safetensors) ----------------------------------------------
// safetensors' own cap on the JSON header.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
// The data section starts at a multiple of this (the header is padded with
// spaces), so tensors can be mapped and read aligned.
inline constexpr uint64_t kSafetensorsAlignment = 8;
// Data objects whose tensors hold at least kPageAlignFrom bytes start their
// data section on a page instead, so page-aligned memory lines up with its
// place in the file and can be written with O_DIRECT without a copy. Small
// objects are not padded: up to 4 KiB would double an incremental save.
inline constexpr uint64_t kSafetensorsPageAlignment = 4096;
inline constexpr uint64_t kPageAlignFrom = uint64_t{1} << 20;

// --- Chunks ------------------------------------------------------------------
inline constexpr uint64_t kDefaultChunkSize = uint64_t{4} << 20;
inline constexpr uint64_t kMinChunkSize = 4096;

}  // namespace ckpt::format
