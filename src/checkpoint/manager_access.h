// The layer above the manager (the tiers, src/tiers) drives a durable
// root's manager beyond its public API: a local-tier save holds the root's
// lease and records in its catalog, and a share is loaded in two steps
// (staged, then applied once every rank's share is whole). It reaches the
// manager's implementation (manager_impl.h) through this one door, so that
// the public header names no layer above it.
#pragma once

#include "checkpoint/manager_impl.h"
#include "ckpt/checkpoint_manager.h"

namespace ckpt {

class ManagerAccess {
 public:
  using Impl = CheckpointManager::Impl;
  static Impl& Of(CheckpointManager& manager) { return *manager.impl_; }
};

}  // namespace ckpt
