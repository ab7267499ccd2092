#include "checkpoint/retention.h"

#include <algorithm>
#include <set>
#include <string>

namespace ckpt {

std::vector<int64_t> StepsToDelete(
    const std::vector<CheckpointInfo>& checkpoints,
    const RetentionPolicy& policy) {
  if (!policy.enabled() || checkpoints.empty()) return {};
  if (!RetentionRanks(checkpoints, policy).ok()) return {};
  // Only the steps that would load count: a step the listing found
  // incomplete (an object missing or truncated) is no resume point, so it
  // must not stand for one of the newest N, nor be the newest kept while
  // the whole ones before it go. It is not deleted either: saving its step
  // again replaces it, and until then it is there to look at.
  std::vector<const CheckpointInfo*> by_step;
  for (const CheckpointInfo& c : checkpoints) {
    if (c.incomplete.empty()) by_step.push_back(&c);
  }
  if (by_step.empty()) return {};
  std::sort(by_step.begin(), by_step.end(),
            [](auto* a, auto* b) { return a->step < b->step; });

  std::set<int64_t> keep;
  keep.insert(by_step.back()->step);  // the resume point is never deleted
  if (policy.keep_last > 0) {
    const size_t n = std::min<size_t>(policy.keep_last, by_step.size());
    for (size_t i = by_step.size() - n; i < by_step.size(); ++i) {
      keep.insert(by_step[i]->step);
    }
  }
  if (policy.keep_every_n_steps > 0) {
    for (auto* c : by_step) {
      if (c->step % policy.keep_every_n_steps == 0) keep.insert(c->step);
    }
  }
  if (policy.keep_every_seconds > 0) {
    // The first checkpoint (by time) of each fixed window: a checkpoint kept
    // this way stays kept as newer ones arrive.
    std::vector<const CheckpointInfo*> by_time = by_step;
    std::stable_sort(by_time.begin(), by_time.end(), [](auto* a, auto* b) {
      return a->created_unix_ms < b->created_unix_ms;
    });
    const int64_t window_ms = policy.keep_every_seconds * 1000;
    std::set<int64_t> windows;
    for (auto* c : by_time) {
      if (windows.insert(c->created_unix_ms / window_ms).second) {
        keep.insert(c->step);
      }
    }
  }
  if (policy.keep_best > 0) {
    std::vector<std::pair<double, const CheckpointInfo*>> scored;
    for (auto* c : by_step) {
      auto it = c->metrics.find(policy.best_metric);
      if (it != c->metrics.end()) scored.emplace_back(it->second, c);
    }
    std::sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
      if (a.first != b.first) {
        return policy.best_higher_is_better ? a.first > b.first
                                            : a.first < b.first;
      }
      return a.second->step > b.second->step;  // ties: the newer wins
    });
    for (size_t i = 0;
         i < scored.size() && i < static_cast<size_t>(policy.keep_best); ++i) {
      keep.insert(scored[i].second->step);
    }
  }
  // Whatever a kept checkpoint references must stay, transitively.
  std::map<int64_t, const CheckpointInfo*> index;
  for (auto* c : by_step) index[c->step] = c;
  std::vector<int64_t> todo(keep.begin(), keep.end());
  while (!todo.empty()) {
    const int64_t s = todo.back();
    todo.pop_back();
    auto it = index.find(s);
    if (it == index.end()) continue;
    for (int64_t d : it->second->depends_on) {
      if (keep.insert(d).second) todo.push_back(d);
    }
  }
  std::vector<int64_t> out;
  for (auto* c : by_step) {
    if (!keep.count(c->step)) out.push_back(c->step);
  }
  return out;
}

Status RetentionRanks(const std::vector<CheckpointInfo>& checkpoints,
                      const RetentionPolicy& policy) {
  if (policy.keep_best <= 0 || checkpoints.empty()) return Status();
  std::set<std::string> names;
  for (const CheckpointInfo& c : checkpoints) {
    if (c.metrics.count(policy.best_metric)) return Status();
    for (const auto& [name, value] : c.metrics) names.insert(name);
  }
  std::string have;
  for (const std::string& name : names) {
    have += (have.empty() ? "\"" : ", \"") + name + "\"";
  }
  return FailedPreconditionError(
      "retention keeps the " + std::to_string(policy.keep_best) +
      " best by metric \"" + policy.best_metric +
      "\", which no committed checkpoint has (" +
      std::to_string(checkpoints.size()) + " checked; " +
      (have.empty() ? std::string("they have no metrics")
                    : "their metrics: " + have) +
      "); nothing is deleted by retention until one has it");
}

}  // namespace ckpt
