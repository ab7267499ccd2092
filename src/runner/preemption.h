// Process-wide preemption signals. The handler only bumps an atomic counter
// (async-signal-safe); runners compare it with the value they saw when they
// started. Handlers are installed by the first runner that wants a signal
// and the previous ones restored when the last such runner is done.
//
// Thread-safe: runners on several threads may install and remove handlers at
// once.
#pragma once

#include <cstdint>
#include <vector>

namespace ckpt::runner {

// Signals counted so far (by every installed handler).
uint64_t PreemptSignalCount();

// Installs the handler for `signals` while it lives.
class PreemptSignals {
 public:
  explicit PreemptSignals(std::vector<int> signals);
  ~PreemptSignals();
  PreemptSignals(const PreemptSignals&) = delete;
  PreemptSignals& operator=(const PreemptSignals&) = delete;

 private:
  std::vector<int> signals_;
};

}  // namespace ckpt::runner
