// The manager's implementation: the context its protocols share
// (root_context.h), which the facade (manager.cc) owns.
//
// The layer above the manager (the tiers, src/tiers) drives a durable
// root's manager beyond its public API: a local-tier save holds the root's
// lease and records in its catalog, and a share is loaded in two steps
// (staged, then applied once every rank's share is whole, load.h). It
// reaches the manager's context through this one door, so that the public
// header names no layer above it.
#pragma once

#include <memory>
#include <utility>

#include "checkpoint/root_context.h"
#include "ckpt/checkpoint_manager.h"

namespace ckpt {

class CheckpointManager::Impl {
 public:
  Impl(std::unique_ptr<Storage> storage, Options options)
      : root(std::move(storage), std::move(options)) {}

  RootContext root;
};

class ManagerAccess {
 public:
  static RootContext& Of(CheckpointManager& manager) {
    return manager.impl_->root;
  }
};

}  // namespace ckpt
