#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ckpt {
namespace {

constexpr std::chrono::milliseconds kRedrawInterval(100);
constexpr int kBarWidth = 24;

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B",   "KiB", "MiB", "GiB",
                                           "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", value, kUnits[unit]);
  return buf;
}

bool ProgressBar::Enabled() { return isatty(STDERR_FILENO) == 1; }

ProgressBar::ProgressBar(std::string label, uint64_t total)
    : label_(std::move(label)),
      total_(total),
      enabled_(Enabled()),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (drawn_ && !finished_) std::fputc('\n', stderr);
}

void ProgressBar::Update(uint64_t done) {
  if (!enabled_ || finished_) return;
  done_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (drawn_ && now - last_draw_ < kRedrawInterval) return;
  Draw(now);
}

void ProgressBar::Finish() {
  if (!enabled_ || finished_) return;
  Draw(std::chrono::steady_clock::now());
  std::fputc('\n', stderr);
  finished_ = true;
}

void ProgressBar::Draw(std::chrono::steady_clock::time_point now) {
  last_draw_ = now;
  drawn_ = true;
  const uint64_t done = std::min(done_, total_);
  // An empty operation is complete as soon as it starts.
  const double fraction =
      total_ == 0 ? 1.0
                  : static_cast<double>(done) / static_cast<double>(total_);
  const int filled = static_cast<int>(fraction * kBarWidth);
  std::string bar(filled, '#');
  bar.append(kBarWidth - filled, '-');
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const std::string rate =
      seconds > 0 ? FormatBytes(static_cast<uint64_t>(done / seconds)) + "/s"
                  : "-";
  // "\r" rewrites the line in place; "\x1b[K" clears what a longer previous
  // line left behind.
  std::fprintf(stderr, "\r%s [%s] %3d%%  %s / %s  %s\x1b[K", label_.c_str(),
               bar.c_str(), static_cast<int>(fraction * 100),
               FormatBytes(done).c_str(), FormatBytes(total_).c_str(),
               rate.c_str());
  std::fflush(stderr);
}

}  // namespace ckpt
