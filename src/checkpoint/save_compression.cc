// Which saves compress (Compression in ckpt/checkpoint_manager.h): kZstd
// always, kAuto where the storage is slower than compressing makes up for.
//
// A rank compresses its chunks before writing its object (data/writer.h),
// so compressing pays when
//
//   bytes / compress_speed + ratio * bytes / write_speed
//       < bytes / write_speed
//
// that is when 1 / compress_speed < (1 - ratio) / write_speed. kAuto asks
// for a tenth to spare (the figures are one save's), so a close call is
// written raw, and decides per save from this rank's own figures: the
// speed its data objects went out at (the fastest of the last three), and
// the speed and ratio of its last compressed save, or of a sample of the
// state compressed once.
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "checkpoint/save.h"
#include "codec/chunk_codec.h"
#include "util/log.h"

namespace ckpt {
namespace {

// Figures from smaller objects are mostly fixed costs (an open, an fsync).
constexpr uint64_t kMeasuredFrom = uint64_t{4} << 20;
// The sample: at most this many bytes, a chunk at a time, of the largest
// host tensors.
constexpr uint64_t kSampleBytes = uint64_t{16} << 20;
constexpr double kMargin = 0.9;
// What no codec here beats: 3 GB/s a thread (float32 compresses at about
// 1.6 here), a third of the bytes left.
constexpr double kFastestBps = 3e9;
constexpr double kBestRatio = 0.3;

// The threads that compress a save's chunks.
int CompressThreads(const Options& o) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::min<int>(o.io_threads, static_cast<int>(cores));
}

// A storage this fast would need a compressor faster than any: no sample
// is spent on it.
bool TooFastToSample(double write_bps, int threads) {
  return write_bps / (kMargin - kBestRatio) > kFastestBps * threads;
}

bool Pays(const RootContext::CompressionFigures& f) {
  return 1.0 / f.compress_bps < (kMargin - f.ratio) / f.write_bps;
}

// The compression a save asks for: its own, or the manager's.
const Compression& Asked(const RootContext& root, const SaveOptions& save) {
  return save.compression ? *save.compression : root.options.compression;
}

// What kAuto decides from this rank's figures alone; kSample: the state's
// chunks must be sampled first (no compression measured yet).
enum class AutoVerdict { kCompress, kRaw, kSample };
AutoVerdict FromFigures(const RootContext& root) {
  const RootContext::CompressionFigures& f = root.compression_figures;
  if (f.write_bps == 0) {
    // Nothing written yet: an object store is slower than compressing on
    // every machine ckpt has met; anything else is measured first.
    return root.storage->url().starts_with("s3://") ? AutoVerdict::kCompress
                                                    : AutoVerdict::kRaw;
  }
  if (f.compress_bps == 0) {
    return TooFastToSample(f.write_bps, CompressThreads(root.options))
               ? AutoVerdict::kRaw
               : AutoVerdict::kSample;
  }
  return Pays(f) ? AutoVerdict::kCompress : AutoVerdict::kRaw;
}

}  // namespace

Status CheckCompression(const Compression& c, const std::string& what) {
  if (c.level < codec::kMinLevel || c.level > codec::kMaxLevel) {
    return InvalidArgumentError(what + ": compression level " +
                                std::to_string(c.level) + " is outside " +
                                std::to_string(codec::kMinLevel) + " to " +
                                std::to_string(codec::kMaxLevel));
  }
  return Status();
}

bool Saver::MayCompress(const SaveOptions& save) const {
  const Compression& c = Asked(root_, save);
  if (c.mode != Compression::Mode::kAuto) {
    return c.mode == Compression::Mode::kZstd;
  }
  return FromFigures(root_) != AutoVerdict::kRaw;
}

std::optional<ChunkCompression> Saver::ChooseCompression(
    const State& state, const SaveOptions& save) {
  const Compression& c = Asked(root_, save);
  if (c.mode == Compression::Mode::kOff) return std::nullopt;
  const ChunkCompression on{c.level, root_.IoPool()};
  if (c.mode == Compression::Mode::kZstd) return on;
  AutoVerdict verdict = FromFigures(root_);
  RootContext::CompressionFigures& f = root_.compression_figures;
  if (verdict == AutoVerdict::kSample) {
    const int threads = CompressThreads(root_.options);
    // Once per manager: the chunks of the largest host tensors, compressed
    // on this thread, scaled by the threads that would compress them.
    std::vector<const TensorView*> tensors;
    for (const Entry& e : state.entries()) {
      if (e.kind == EntryKind::kTensor && e.tensor.location.is_host() &&
          e.tensor.data != nullptr) {
        tensors.push_back(&e.tensor);
      }
    }
    std::sort(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) {
      return *a->ByteSize() > *b->ByteSize();
    });
    uint64_t raw = 0, stored = 0;
    std::vector<std::byte> out;
    const auto start = std::chrono::steady_clock::now();
    for (const TensorView* t : tensors) {
      if (raw >= kSampleBytes) break;
      const uint64_t n = std::min(*t->ByteSize(), root_.options.chunk_size);
      const std::span<const std::byte> bytes(t->data, n);
      raw += n;
      stored += codec::Compress(codec::CodecFor(t->dtype), c.level, bytes, out)
                    ? out.size()
                    : n;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (raw == 0 || seconds <= 0) return std::nullopt;
    f.compress_bps = static_cast<double>(raw) / seconds * threads;
    f.ratio = static_cast<double>(stored) / static_cast<double>(raw);
    verdict = Pays(f) ? AutoVerdict::kCompress : AutoVerdict::kRaw;
  }
  const bool compress = verdict == AutoVerdict::kCompress;
  // Weighed on both figures (not decided before any write, or for a storage
  // too fast to sample for): the figures say why.
  if (f.write_bps > 0 && f.compress_bps > 0 && LogEnabled(LogLevel::kDebug)) {
    Log(LogLevel::kDebug,
        "compression auto: write " + std::to_string(f.write_bps / 1e6) +
            " MB/s, compress " + std::to_string(f.compress_bps / 1e6) +
            " MB/s at ratio " + std::to_string(f.ratio) + ": " +
            (compress ? "compress" : "raw"));
  }
  return compress ? std::optional(on) : std::nullopt;
}

void Saver::NoteWrite(const WrittenObject& w) {
  if (w.raw_bytes < kMeasuredFrom) return;
  RootContext::CompressionFigures& f = root_.compression_figures;
  if (w.write_seconds > 0) {
    // The fastest of the last few: one write slowed by something else (a
    // busy machine, a pause) must not turn the next save to compressing,
    // which would slow down every save after it on a fast storage. A
    // storage that has become slow shows it in each of them.
    f.writes[f.next_write] = static_cast<double>(w.size) / w.write_seconds;
    f.next_write = (f.next_write + 1) % f.writes.size();
    f.write_bps = *std::max_element(f.writes.begin(), f.writes.end());
  }
  if (w.compress_seconds > 0) {
    f.compress_bps = static_cast<double>(w.raw_bytes) / w.compress_seconds;
    f.ratio = static_cast<double>(w.size) / static_cast<double>(w.raw_bytes);
  }
}

}  // namespace ckpt
