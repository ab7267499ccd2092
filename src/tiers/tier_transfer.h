// Copies one committed step of a share's root from one rank to another
// through the communicator: for replication after a local-tier save, and
// for recovery when a node lost its shares.
//
// The stream (one SendRecv message each, a TransferPart of messages.h, at
// most `block` bytes of data):
//   kObject <key> <size>   an object of the step begins
//   kData <bytes>          the next bytes of that object
//   kEnd                   every object was sent: commit
//   kFailed <why>          the sender failed: drop what came
// The sender sends the objects the step's manifest names, then the manifest
// itself. The receiver writes each object durably as it comes (a streamed
// write, so it holds one block at a time) and puts the manifest last with
// create-if-absent: the copy is committed by the same rule as the original,
// and a stream cut short leaves only garbage that gc removes. The receiver
// refuses keys outside the step's directory and objects whose bytes do not
// match the announced size.
#pragma once

#include <cstdint>

#include "ckpt/checkpoint_manager.h"
#include "ckpt/communicator.h"
#include "ckpt/status.h"
#include "util/pacer.h"

namespace ckpt {

// What one side of a transfer is doing; a rank may send and receive at once
// (a ring of replicas).
struct TransferSide {
  // Sending: `root`'s committed `step` to rank `peer`. Receiving: into
  // `root` (its storage), from rank `peer`. Peer -1: not this side. A null
  // root with a peer still takes part, so the peer is not left waiting: a
  // sender sends a failed stream, a receiver drains what comes and fails
  // with `status` (set it to why there is no root).
  CheckpointManager* root = nullptr;
  int peer = -1;
  // Set by the transfer: the outcome of this side, and the bytes moved.
  Status status;
  uint64_t bytes = 0;
};

// Runs both sides of one rank's part of a transfer of `step` until each has
// ended. Returns an error only when the communicator failed (the group is
// then unusable); each side's own failure (a read, a write, a full tier, a
// sender that failed) is in its `status`, after the stream was drained so
// the peer is not left waiting. With a `pacer`, each block sent waits for
// its share of the rate first.
Status TransferStep(Communicator& comm, int64_t step, uint64_t block,
                    TransferSide& send, TransferSide& receive,
                    Pacer* pacer = nullptr);

}  // namespace ckpt
