// A one-line progress bar for long operations. The `ckpt` command draws
// them: `verify`, one per checkpoint it reads (with --json too: the bar is
// on stderr, the JSON on stdout); `import`, one over the save; `export`, one
// over the load and one over writing the file; `delete --force`, one over
// the bytes it copies into the dependants; `gc`, one over the bytes it
// frees. `import`, `export`, `delete` and `gc` draw none with --json. The
// library itself never draws one.
//
// It draws on stderr only when stderr is a terminal, so logs and pipes stay
// clean; otherwise every call is a no-op. Redraws are limited to about ten a
// second, so calling Update for every chunk costs next to nothing.
//
//   ProgressBar bar("verify step 42", total_bytes);
//   for (...) bar.Update(done_bytes);
//   bar.Finish();
//
// Thread-compatible: one bar may move between threads, but concurrent calls
// need the caller's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ckpt {

// A byte count in binary units for people: "512 B", "1.5 KiB", "3.0 GiB".
std::string FormatBytes(uint64_t bytes);

class ProgressBar {
 public:
  ProgressBar(std::string label, uint64_t total);
  // Whether bars draw here (stderr is a terminal): a command may skip work
  // it would do only to size a bar.
  static bool Enabled();
  // Ends the line if the bar was drawn but not finished (an error path), so
  // the next message starts on a line of its own.
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `done` bytes of `total` are complete.
  void Update(uint64_t done);
  // Draws the final state and ends the line. Later calls do nothing.
  void Finish();

 private:
  void Draw(std::chrono::steady_clock::time_point now);

  const std::string label_;
  const uint64_t total_;
  const bool enabled_;  // stderr is a terminal
  const std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
  uint64_t done_ = 0;
  bool drawn_ = false;
  bool finished_ = false;
};

}  // namespace ckpt
