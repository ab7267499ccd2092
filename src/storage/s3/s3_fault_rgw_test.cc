// Saves and loads on a real object store (radosgw, started by the test)
// through a network that fails: a proxy (testing/fault_proxy.h) resets
// requests part-way, stalls answers past the request timeout, answers 503
// SlowDown, and loses the answers to requests the store carried out —
// conditional PUTs of leases and manifests among them. The backend's
// retries must carry every save and load through, and every load must
// return the bytes saved. CKPT_FAULT_STEPS=N saves N steps (default 100,
// each loaded back: 200 operations); CKPT_FAULT_SEED=S replays a run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "testing/fault_proxy.h"
#include "testing/rgw.h"

namespace ckpt {
namespace {

using testing::FaultProxy;

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

TEST(S3FaultRgwTest,
     SavesAndLoadsGoThroughResetsStallsSlowDownsAndLostReplies) {
  Result<testing::Rgw*> server = testing::Rgw::Shared();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string endpoint = (*server)->endpoint();
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  const int64_t steps = EnvInt("CKPT_FAULT_STEPS", 100);
  const uint64_t seed = static_cast<uint64_t>(EnvInt(
      "CKPT_FAULT_SEED",
      std::chrono::system_clock::now().time_since_epoch().count() % 1000000));
  std::printf("fault proxy seed %llu (CKPT_FAULT_SEED replays it)\n",
              static_cast<unsigned long long>(seed));
  auto proxy = FaultProxy::Start(
      port,
      {.reset = 0.04, .stall = 0.002, .slow_down = 0.04, .lose_reply = 0.04},
      seed);
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();

  StorageOptions so;
  so.s3 = (*server)->Options();
  so.s3.endpoint = (*proxy)->endpoint();
  // Short, so a stall costs little; enough tries that a run of bad luck
  // (each try fails with about one chance in eight) never exhausts them.
  so.s3.request_timeout_ms = 1500;
  so.s3.connect_timeout_ms = 1000;
  so.s3.max_attempts = 12;
  so.s3.initial_backoff_ms = 5;
  so.s3.max_backoff_ms = 100;
  auto storage = OpenStorage((*server)->NewRoot("faults"), so);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  auto mgr = CheckpointManager::Open(std::move(storage).value());
  ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();

  std::mt19937_64 rng(seed);
  int saved = 0, loaded = 0;
  const auto started = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= steps; ++step) {
    std::vector<float> weights(1 + rng() % (64 << 10));
    for (size_t i = 0; i < weights.size(); ++i) {
      weights[i] = static_cast<float>(step * 1000 + i % 997);
    }
    const std::string note = "step " + std::to_string(step);
    State state;
    state
        .AddTensor("weights", View(std::span<float>(weights),
                                   {static_cast<int64_t>(weights.size())}))
        .AddBlob("note", note);
    auto s = (*mgr)->Save(step, state);
    ASSERT_TRUE(s.ok()) << "save " << step << ": " << s.status().ToString();
    ++saved;

    std::vector<float> back(weights.size());
    State into;
    into.AddTensor("weights", View(std::span<float>(back),
                                   {static_cast<int64_t>(back.size())}))
        .AddBlob("note", "");
    auto l = (*mgr)->Load(step, into);
    ASSERT_TRUE(l.ok()) << "load " << step << ": " << l.status().ToString();
    EXPECT_TRUE(back == weights) << "step " << step;
    EXPECT_EQ(into.BlobString("note").value(), note);
    ++loaded;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count();
  std::printf("%d saves and %d loads, all whole, in %.1f s; connections:",
              saved, loaded, seconds);
  for (int f = 0; f < FaultProxy::kFates; ++f) {
    const auto fate = static_cast<FaultProxy::Fate>(f);
    std::printf(
        " %llu %s%s", static_cast<unsigned long long>((*proxy)->count(fate)),
        FaultProxy::Name(fate), f + 1 < FaultProxy::kFates ? "," : "\n");
  }
  std::fflush(stdout);
  // Every kind of fault struck (at these chances, over this many requests,
  // each is all but certain).
  for (auto fate :
       {FaultProxy::kReset, FaultProxy::kSlowDown, FaultProxy::kLoseReply}) {
    EXPECT_GT((*proxy)->count(fate), 0u) << FaultProxy::Name(fate);
  }
}

}  // namespace
}  // namespace ckpt
