// kAuto's measure for a read-once load over storage reached through a
// link (read_once.h; docs/design.md, "Every byte read once"): a probe of
// the way between ranks, and whether the rest of the shared chunks comes
// sooner from the ranks that read them than from storage.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/communicator.h"
#include "ckpt/status.h"
#include "messages/messages.h"

namespace ckpt::read_once {

// The probe of the way between ranks that the exchange takes: each of
// `probing` (every rank on one host; on several, the nodes' leaders, each
// for its node's link) sends a message of 8 MiB (no more
// than the most any rank gets of the shared chunks, `rest`) to the one
// half-way along the list from it (on another node where the ranks fill
// the nodes in order) while it receives one from the one half-way back;
// `mine` gets its size and time, the fastest of `rounds` messages (ranks
// not in `probing` send nothing).
// Called by every rank just after the plans' all-gather, so that the ranks
// start it together and it times the way, not a wait for a partner still
// busy; the first reads of the share run beside it.
Status ProbeRanks(Communicator& comm, const std::vector<uint64_t>& rest,
                  const std::vector<int>& probing, int rounds,
                  ReadOnceRates& mine);

// Whether the rest of the shared chunks, `rest[r]` bytes for rank r, comes
// sooner from the ranks that read them than `read_rest[r]` bytes from
// storage (on several nodes `rest` is a node's, at its leader: what
// crosses into the node; where a node's ranks share their memory its
// leader receives all the node lacks, each of its ranks reads a part of
// it, read_once_node.h). `mine` holds this rank's probe (ProbeRanks) and
// the first of its share of the shared chunks read from storage, timed,
// with every rank reading at once: its rate from storage. The figures are
// all-gathered, so every rank decides alike: rank to rank where the rank
// slowest to get its rest gets it sooner at its probe's rate than at its rate
// from storage (a rank that read nothing takes the slowest rate measured). The
// model is rough: relays and broadcasts pass a byte on more than once, which
// the probe's one hop does not see; where the two are close, either way costs
// about the same.
Result<bool> RanksFasterThanStorage(Communicator& comm,
                                    const std::vector<uint64_t>& rest,
                                    const std::vector<uint64_t>& read_rest,
                                    const ReadOnceRates& mine);

}  // namespace ckpt::read_once
