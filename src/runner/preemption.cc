#include "runner/preemption.h"

#include <signal.h>

#include <atomic>
#include <map>

#include "util/mutex.h"

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

// The installed handlers, by signal.
struct Table {
  Mutex mu;
  std::map<int, Installed> signals GUARDED_BY(mu);
};
Table& Handlers() {
  static auto* table = new Table();
  return *table;
}

}  // namespace

uint64_t PreemptSignalCount() {
  return g_count.load(std::memory_order_relaxed);
}

PreemptSignals::PreemptSignals(std::vector<int> signals)
    : signals_(std::move(signals)) {
  Table& table = Handlers();
  MutexLock lock(&table.mu);
  for (int sig : signals_) {
    Installed& in = table.signals[sig];
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
  Table& table = Handlers();
  MutexLock lock(&table.mu);
  for (int sig : signals_) {
    auto it = table.signals.find(sig);
    if (it == table.signals.end() || --it->second.users > 0) continue;
    sigaction(sig, &it->second.previous, nullptr);
    table.signals.erase(it);
  }
}

}  // namespace ckpt::runner
