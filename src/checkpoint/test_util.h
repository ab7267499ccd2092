// Helpers shared by the checkpoint tests: deterministic states and
// comparisons.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ckpt/state.h"

namespace ckpt::testing {

// Random bytes for tensors, reproducible from a seed.
inline std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = gen();
    std::memcpy(out.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return out;
}

// A small model-like state whose contents depend on `seed`; owns its bytes.
struct TestModel {
  std::vector<float> weights;
  std::vector<double> moments;
  std::vector<int64_t> counters;
  std::string rng;

  explicit TestModel(uint64_t seed, size_t n = 10000) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> f(-1, 1);
    weights.resize(n);
    for (float& w : weights) w = f(gen);
    moments.resize(n / 4 + 1);
    for (double& m : moments) m = f(gen);
    counters = {static_cast<int64_t>(seed), 7, -3};
    rng = "rng-state-" + std::to_string(seed);
  }

  State MakeState() {
    State s;
    s.AddTensor("model/weights", View(weights))
        .AddTensor("optimizer/moments", View(moments))
        .AddTensor("counters", View(counters))
        .AddBlob("rng", rng)
        .AddMetadata("info", {{"seed", rng}});
    return s;
  }

  bool operator==(const TestModel& o) const {
    return weights.size() == o.weights.size() &&
           std::memcmp(weights.data(), o.weights.data(),
                       weights.size() * sizeof(float)) == 0 &&
           moments.size() == o.moments.size() &&
           std::memcmp(moments.data(), o.moments.data(),
                       moments.size() * sizeof(double)) == 0 &&
           counters == o.counters && rng == o.rng;
  }
};

}  // namespace ckpt::testing
