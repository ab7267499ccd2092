// A resumable data sampler and the random generator it draws with, for a
// training job whose data order must survive a restart: their whole state
// goes into the checkpoint, and a resumed job draws exactly what one that
// never stopped would. Jobs run by the job runner (ckpt/runner.h) are their
// usual users, but they need nothing of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/state.h"
#include "ckpt/status.h"

namespace ckpt {

// A small deterministic random generator (SplitMix64) whose whole state is
// one integer: save `state` with the job (a U64 tensor) and a resumed job
// draws the same numbers as one that never stopped. Its results are the same
// with every compiler and standard library, which std::shuffle's and the
// std::uniform_*_distribution's are not.
struct SplitMix64 {
  uint64_t state = 0;

  uint64_t Next();
  // Uniform in [0, bound), without bias; bound > 0.
  uint64_t Below(uint64_t bound);
};

// A deterministic, resumable sampler over a data set of `num_samples`
// samples: each epoch is a permutation of [0, num_samples) drawn from (seed,
// epoch) alone, consumed in global batches. Its position counts samples of
// the whole job, not of one rank, so a job resumed on another number of
// ranks gets exactly the samples not yet seen, split across its new ranks.
//
// Its state (seed, number of samples, epoch, position) is one small I64
// tensor that AddTo puts in a State, replicated on every rank. The epoch's
// permutation is held in memory: 8 bytes per sample.
class Sampler {
 public:
  Sampler(uint64_t num_samples, uint64_t seed);

  // Starts `epoch`: a new permutation, position 0 — unless the sampler is
  // already in that epoch (restored from a checkpoint taken mid-epoch), in
  // which case it continues where it was.
  void BeginEpoch(int64_t epoch);
  // The next global batch of at most `global_batch` sample indices (fewer
  // at the end of the epoch, none after it), and advances past it.
  std::vector<uint64_t> NextBatch(uint64_t global_batch);
  // This rank's share of a global batch: the indices at positions rank,
  // rank + world, rank + 2 * world, ...
  static std::vector<uint64_t> Shard(const std::vector<uint64_t>& batch,
                                     int rank, int world);

  bool done() const { return position() >= num_samples(); }
  int64_t epoch() const { return state_[2]; }
  uint64_t position() const { return static_cast<uint64_t>(state_[3]); }
  uint64_t num_samples() const { return static_cast<uint64_t>(state_[1]); }
  // The sample at position `i` of `epoch`'s permutation.
  uint64_t SampleAt(int64_t epoch, uint64_t i) const;

  // Adds the sampler's state as tensor `name`; a Load fills it back.
  void AddTo(State& state, const std::string& name);
  // After a Load: InvalidArgument when the checkpoint's seed or number of
  // samples differ from this sampler's (the data set changed), naming both.
  Status CheckRestored() const;

 private:
  void Permute(int64_t epoch);

  uint64_t seed_;
  uint64_t num_samples_;
  int64_t perm_epoch_ = -1;
  std::vector<uint64_t> perm_;
  std::vector<int64_t> state_;  // seed, num_samples, epoch, position
};

}  // namespace ckpt
