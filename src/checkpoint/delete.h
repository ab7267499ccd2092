// Delete and delete --force, rewriting dependants (delete.cc).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/root_context.h"

namespace ckpt {

// What one listing of the root says, for deleting many steps in one run
// (a collection): with it each delete reads no listing of its own, so a
// run over N steps costs one listing instead of N.
struct DeleteRun {
  // Steps deleted in the same run, whose dependence on a step does not
  // hold it back.
  std::set<int64_t> going;
  // The steps that stay (not going, manifest valid) that depend on each
  // step, and every object they name.
  std::map<int64_t, std::vector<int64_t>> dependants;
  std::set<std::string> named_by_staying;
  // The listed objects of each step directory.
  std::map<int64_t, std::vector<ObjectInfo>> objects;
};

class Deleter {
 public:
  explicit Deleter(RootContext& root) : root_(root) {}

  // `run`: the collection this delete is part of (null: a delete alone,
  // which lists what it needs and updates the LATEST hint itself).
  // `report` (never null) gets what it did, or would do in a dry run.
  Status Delete(int64_t step, const DeleteRun* run, DeleteReport* report,
                bool dry_run, bool rewrite_dependants = false);

 private:
  // Copies the chunks of `dependant` that lie in objects of `step` into a new
  // object of its own and rewrites its manifest, so `step` can go; returns
  // the bytes copied.
  Result<uint64_t> RewriteDependant(int64_t dependant, int64_t step);
  // The bytes RewriteDependant would copy, read from the manifest; an
  // error where an object it would copy from is gone or too short (the
  // rewrite would fail).
  Result<uint64_t> BytesToRewrite(int64_t dependant, int64_t step);

  RootContext& root_;
};

}  // namespace ckpt
