// bench_nodes on 16 MiB (bench/nodes.cc): the node bed comes up, the state
// is saved by 8 ranks on 4 nodes and loaded replicated, sharded and
// resharded to 6 and 12 ranks, with read-once on, off and as the default
// decides, each node's link to storage paced (--storage-mbps). What a
// reader of its figures relies on: every ratio is there, counts every
// rank's reads (with read-once off, each of 8 ranks reads the whole
// replicated state itself), read-once reads every stored byte once (bytes
// read over bytes needed at most 1.05), every loaded byte was checked and
// right, and the bed and the work folder are gone afterwards. No timing
// is asserted, nor what the default chose (it measures). Needs root;
// skipped, saying why, without.
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(BenchNodesSmoke, ReportsEveryRatioAndLoadsEveryByteRight) {
  const testing::TempDir dir("bench-nodes", "/var/tmp");
  const testing::RunResult run = testing::RunProgram(
      CKPT_BENCH_NODES,
      // One uncounted load before all, not a twin before each: the
      // measured loads are the same, in half the jobs.
      {"--mib", "16", "--storage-mbps", "200", "--json", "--no-twins", "--dir",
       dir.string()},
      dir.path());
  if (run.exit_code == 77) GTEST_SKIP() << run.err;
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const json out = json::parse(run.out);

  const uint64_t state = out.at("state_bytes");
  EXPECT_GE(state, uint64_t{16} << 20);
  EXPECT_EQ(out.at("nodes"), 4);
  EXPECT_EQ(out.at("save_ranks"), 8);
  EXPECT_EQ(out.at("every_byte_right"), true);
  EXPECT_EQ(out.at("storage_mbps"), 200);
  EXPECT_EQ(out.at("twins"), false);
  for (const char* k : {"read_once_speedup_replicated", "default_vs_best_worst",
                        "replicated_on_vs_bed_floor"}) {
    ASSERT_TRUE(out.at("ratios").contains(k)) << out.dump(1);
    EXPECT_GT(out["ratios"][k].get<double>(), 0) << k;
  }
  // The bed's exchange without ckpt moved each rank's share to every
  // other: 7 shares of an eighth of the state into each rank.
  EXPECT_GT(out.at("bed_exchange_s").get<double>(), 0);
  EXPECT_EQ(out.at("bed_exchange_bytes_per_rank").get<uint64_t>(),
            state / 8 * 7);
  EXPECT_GT(out.at("replicated_read_once_floor_s").get<double>(),
            out.at("bed_exchange_s").get<double>());

  const struct {
    const char* name;
    int ranks;
    uint64_t checked;  // bytes the ranks' boxes hold together
  } cases[] = {{"replicated", 8, 8 * state},
               {"sharded", 8, state},
               {"reshard_8_6", 6, state},
               {"reshard_8_12", 12, state}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string key = std::string("read_amplification_") + c.name;
    for (const std::string& k : {key, key + "_off", key + "_auto"}) {
      ASSERT_TRUE(out.at("ratios").contains(k)) << out.dump(1);
      ASSERT_TRUE(out["ratios"][k].is_number()) << k;
      // Every byte of the state comes from storage at least once.
      EXPECT_GE(out["ratios"][k].get<double>(), 1.0) << k;
    }
    // Read once, across real nodes under mpirun: no stored byte is read
    // twice, in any layout (the rest is manifests and indexes).
    EXPECT_LE(out["ratios"][key].get<double>(), 1.05) << key;
    for (const char* suffix : {"", "_off", "_auto"}) {
      ASSERT_TRUE(out.at("load_s").contains(c.name + std::string(suffix)));
    }
    const json& entry = out.at("cases").at(c.name);
    EXPECT_EQ(entry.at("ranks"), c.ranks);
    // 2 ranks a node (3 for 12 ranks); 6 ranks fill 3 nodes.
    EXPECT_EQ(entry.at("nodes_used"), c.ranks == 6 ? 3 : 4);
    for (const char* mode : {"on", "off", "auto"}) {
      SCOPED_TRACE(mode);
      EXPECT_EQ(entry.at(mode).at("wrong_bytes"), 0);
      EXPECT_EQ(entry.at(mode).at("verified_bytes"), c.checked);
      EXPECT_GT(entry.at(mode).at("load_s").get<double>(), 0);
    }
  }
  // Off, each of the 8 ranks reads the replicated state itself: the
  // count sees every rank's reads.
  EXPECT_GE(out["ratios"]["read_amplification_replicated_off"].get<double>(),
            8.0);

  // The bed is down: no state, no namespaces.
  const std::string bed = out.at("bed");
  EXPECT_FALSE(fs::exists("/run/ckpt-node-bed/" + bed));
  const testing::RunResult ns =
      testing::RunProgram("/usr/bin/env", {"ip", "netns", "list"}, dir.path());
  ASSERT_EQ(ns.exit_code, 0) << ns.err;
  EXPECT_EQ(ns.out.find("ckb-" + bed + "-"), std::string::npos) << ns.out;
  // And the work folder with the roots is gone.
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_FALSE(e.path().filename().string().starts_with("ckpt-bench-nodes-"))
        << e.path();
  }
}

}  // namespace
}  // namespace ckpt
