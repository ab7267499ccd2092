#include "checkpoint/read_once_measure.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "util/log.h"

namespace ckpt::read_once {

namespace {

// The probe: a message of this many bytes (or the most any rank gets from
// the others, if less) to measure the way between ranks, large enough
// that a partner's wake-up and the handshake of a large message weigh
// little (2.6 MiB still measured the reshard to 12 ranks of the node bed
// 4-5 times slower than it ran).
constexpr uint64_t kProbeBytes = uint64_t{8} << 20;
// One message still costs more per byte than the exchange's batches, which
// keep the way busy: on the node bed the probe's rate predicted the
// exchange 1.5 to 4 times slower than it ran (docs/benchmarks.md). So the
// ranks read for themselves only where storage is this many times faster
// than the probe says the ranks are.
constexpr double kProbeMargin = 2.0;

}  // namespace

Status ProbeRanks(Communicator& comm, const std::vector<uint64_t>& rest,
                  const std::vector<int>& probing, int rounds,
                  ReadOnceRates& mine) {
  const int me = comm.rank();
  const auto at = std::find(probing.begin(), probing.end(), me);
  if (at == probing.end() || probing.size() < 2) return Status();
  const uint64_t probe =
      std::min(kProbeBytes, *std::max_element(rest.begin(), rest.end()));
  if (probe == 0) return Status();
  const int n = static_cast<int>(probing.size());
  const int i = static_cast<int>(at - probing.begin());
  const int k = std::max(1, n / 2);
  const int to = probing[(i + k) % n], from = probing[(i - k + n) % n];
  // First an empty message, not timed: it finds the partner awake and the
  // connection made (an MPI job makes it on the first message), so the
  // timed one measures the way.
  Result<std::string> got = comm.SendRecv(EncodeReadOnceBatch({}), to, from);
  if (!got.ok()) return got.status().WithContext("read once: the probe");
  const std::string message =
      EncodeReadOnceBatch({true}, {std::string(probe, '\0')});
  // The fastest of `rounds`: a rank descheduled for part of one (on the
  // node bed, 6 ranks on 2 processors) measured the way at a third of its
  // rate and sent the load to storage where the ranks were faster.
  double fastest = 0;
  std::string each;
  for (int round = 0; round < std::max(1, rounds); ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    got = comm.SendRecv(message, to, from);
    if (!got.ok()) return got.status().WithContext("read once: the probe");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    if (round == 0 || seconds < fastest) fastest = seconds;
    each += (round == 0 ? "" : ", ") + std::to_string(seconds);
  }
  mine.probe_bytes = probe;
  mine.probe_ns = static_cast<uint64_t>(fastest * 1e9);
  LogInfo("read once: rank " + std::to_string(me) + "'s probe to rank " +
          std::to_string(to) + ": " + std::to_string(probe) + " bytes in " +
          each + " s");
  return Status();
}

Result<bool> RanksFasterThanStorage(Communicator& comm,
                                    const std::vector<uint64_t>& rest,
                                    const std::vector<uint64_t>& read_rest,
                                    const ReadOnceRates& mine) {
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> gathered,
                        comm.AllGather(EncodeReadOnceRates(mine)));
  std::vector<ReadOnceRates> all;
  double slowest = 0;  // bytes a second from storage, the least measured
  for (size_t r = 0; r < gathered.size(); ++r) {
    CKPT_ASSIGN_OR_RETURN(ReadOnceRates m, DecodeReadOnceRates(gathered[r]));
    if (m.read_bytes > 0 && m.read_ns > 0) {
      const double rate = m.read_bytes / (m.read_ns * 1e-9);
      slowest = slowest == 0 ? rate : std::min(slowest, rate);
    }
    all.push_back(m);
  }
  // Nothing measured: read once, as kOn.
  if (slowest == 0 || all.size() != rest.size()) return true;
  double from_storage = 0, from_ranks = 0;  // seconds, the slowest rank's
  for (size_t r = 0; r < all.size(); ++r) {
    const ReadOnceRates& m = all[r];
    const double storage = m.read_bytes > 0 && m.read_ns > 0
                               ? m.read_bytes / (m.read_ns * 1e-9)
                               : slowest;
    from_storage = std::max(from_storage, read_rest[r] / storage);
    if (rest[r] > 0 && m.probe_bytes > 0 && m.probe_ns > 0) {
      from_ranks =
          std::max(from_ranks, rest[r] / (m.probe_bytes / (m.probe_ns * 1e-9)));
    }
  }
  const bool pays = from_ranks < kProbeMargin * from_storage;
  LogInfo("read once: the rest of the shared chunks in " +
          std::to_string(from_ranks) + " s from the ranks, " +
          std::to_string(from_storage) + " s from storage (as measured): " +
          (pays ? "from the ranks" : "each rank reads its own") +
          "; this rank's probe " + std::to_string(mine.probe_ns * 1e-9) +
          " s, its first reads " + std::to_string(mine.read_ns * 1e-9) + " s");
  return pays;
}

}  // namespace ckpt::read_once
