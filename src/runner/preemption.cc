#include "runner/preemption.h"

#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>

namespace ckpt::runner {
namespace {

std::atomic<uint64_t> g_count{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

void OnSignal(int) { g_count.fetch_add(1, std::memory_order_relaxed); }

struct Installed {
  int users = 0;
  struct sigaction previous = {};
};

std::mutex g_mu;
std::map<int, Installed>& Table() {
  static auto* table = new std::map<int, Installed>();
  return *table;
}

}  // namespace

uint64_t PreemptSignalCount() {
  return g_count.load(std::memory_order_relaxed);
}

PreemptSignals::PreemptSignals(std::vector<int> signals)
    : signals_(std::move(signals)) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int sig : signals_) {
    Installed& in = Table()[sig];
    if (in.users++ > 0) continue;
    struct sigaction sa = {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    // Interrupted system calls restart: a save in progress must not see
    // EINTR because a second signal arrived.
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, &in.previous);
  }
}

PreemptSignals::~PreemptSignals() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int sig : signals_) {
    auto it = Table().find(sig);
    if (it == Table().end() || --it->second.users > 0) continue;
    sigaction(sig, &it->second.previous, nullptr);
    Table().erase(it);
  }
}

}  // namespace ckpt::runner
