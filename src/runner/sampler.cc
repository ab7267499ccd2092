// The sampler's permutation is drawn with SplitMix64, never with
// std::shuffle, whose results differ between standard libraries: a
// checkpoint must resume identically wherever it is loaded.
#include "ckpt/sampler.h"

#include <algorithm>

namespace ckpt {

Sampler::Sampler(uint64_t num_samples, uint64_t seed)
    : seed_(seed),
      num_samples_(num_samples),
      state_{static_cast<int64_t>(seed), static_cast<int64_t>(num_samples), -1,
             0} {}

void Sampler::Permute(int64_t epoch) {
  if (perm_epoch_ == epoch) return;
  perm_.resize(num_samples_);
  for (uint64_t i = 0; i < num_samples_; ++i) perm_[i] = i;
  SplitMix64 rng{seed_ ^
                 (static_cast<uint64_t>(epoch) * 0xd1b54a32d192ed03ULL)};
  for (uint64_t i = num_samples_; i > 1; --i) {
    std::swap(perm_[i - 1], perm_[rng.Below(i)]);
  }
  perm_epoch_ = epoch;
}

void Sampler::BeginEpoch(int64_t epoch) {
  if (state_[2] == epoch) return;
  state_[2] = epoch;
  state_[3] = 0;
}

std::vector<uint64_t> Sampler::NextBatch(uint64_t global_batch) {
  std::vector<uint64_t> out;
  const uint64_t pos = position();
  if (pos >= num_samples_ || state_[2] < 0) return out;
  Permute(state_[2]);
  const uint64_t end = std::min(num_samples_, pos + global_batch);
  out.assign(perm_.begin() + static_cast<ptrdiff_t>(pos),
             perm_.begin() + static_cast<ptrdiff_t>(end));
  state_[3] = static_cast<int64_t>(end);
  return out;
}

std::vector<uint64_t> Sampler::Shard(const std::vector<uint64_t>& batch,
                                     int rank, int world) {
  std::vector<uint64_t> out;
  for (size_t i = static_cast<size_t>(rank); i < batch.size();
       i += static_cast<size_t>(world)) {
    out.push_back(batch[i]);
  }
  return out;
}

uint64_t Sampler::SampleAt(int64_t epoch, uint64_t i) const {
  // Permute caches one epoch; a const query on another epoch recomputes.
  if (perm_epoch_ == epoch) return perm_.at(i);
  Sampler other(num_samples_, seed_);
  other.Permute(epoch);
  return other.perm_.at(i);
}

void Sampler::AddTo(State& state, const std::string& name) {
  state.AddTensor(name, View(state_));
}

Status Sampler::CheckRestored() const {
  if (static_cast<uint64_t>(state_[0]) != seed_ ||
      static_cast<uint64_t>(state_[1]) != num_samples_) {
    return InvalidArgumentError(
        "sampler: the checkpoint's sampler has seed " +
        std::to_string(static_cast<uint64_t>(state_[0])) + " over " +
        std::to_string(state_[1]) + " samples, this job's has seed " +
        std::to_string(seed_) + " over " + std::to_string(num_samples_) +
        " (the data set changed)");
  }
  if (state_[3] < 0 || static_cast<uint64_t>(state_[3]) > num_samples_) {
    return InvalidArgumentError("sampler: the checkpoint's position " +
                                std::to_string(state_[3]) +
                                " is outside the data set of " +
                                std::to_string(num_samples_) + " samples");
  }
  return Status();
}

}  // namespace ckpt
