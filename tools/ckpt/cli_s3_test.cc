// `ckpt ls`, `show`, `verify`, `export` and `gc` on an s3:// root, run as a
// user would: the binary reaches moto's S3 server (started by the test) through
// the AWS_* environment variables alone.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "format/safetensors.h"
#include "gtest/gtest.h"
#include "testing/backends.h"
#include "testing/files.h"
#include "testing/moto_s3.h"
#include "testing/scoped_env.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::RunResult;

class CliS3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<testing::MotoS3*> server = testing::MotoS3::Shared();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = *server;
  }

  RunResult Ckpt(const std::vector<std::string>& args) {
    return testing::RunProgram(CKPT_CLI_PATH, args, dir_);
  }

  // Saves `steps`, each with a tensor whose values depend on the step.
  void SaveSteps(const std::vector<int64_t>& steps) {
    auto mgr = CheckpointManager::Open(root_);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    for (int64_t step : steps) {
      std::vector<float> weights(6);
      for (size_t i = 0; i < weights.size(); ++i) weights[i] = step + i * 0.5f;
      State state;
      state.AddTensor("weights", View(std::span<float>(weights), {2, 3}))
          .AddBlob("rng", "rng-" + std::to_string(step));
      ASSERT_TRUE((*mgr)->Save(step, state, {.epoch = step}).ok());
    }
  }

  testing::MotoS3* server_ = nullptr;
  // The root exports the AWS_* environment: for this process and the ckpt
  // it runs.
  const testing::TestRoot s3_root_{testing::Backend::kS3, "cli"};
  const std::string root_ = s3_root_.url();
  const testing::TempDir temp_{"cli-s3"};
  const fs::path dir_ = temp_.path();
};

TEST_F(CliS3Test, LsShowVerifyExportAndGcOnAnS3Root) {
  SaveSteps({1, 2, 3});

  RunResult r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json ls = nlohmann::json::parse(r.out);
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(ls[0]["step"], 1);
  EXPECT_EQ(ls[2]["step"], 3);
  EXPECT_EQ(ls[2]["epoch"], 3);

  r = Ckpt({"show", root_, "--step", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "weights"));
  EXPECT_TRUE(Contains(r.out, "[2, 3]"));

  r = Ckpt({"verify", root_, "--all"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "ok: step 3,"));

  const std::string out = (dir_ / "step3.safetensors").string();
  r = Ckpt({"export", root_, "--step", "3", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string exported = testing::ReadFile(out);
  auto header = format::ParseSafetensorsFile(exported, out);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  bool found = false;
  for (const auto& t : header->tensors) {
    if (t.name != "weights") continue;
    found = true;
    const std::vector<float> want = {3, 3.5, 4, 4.5, 5, 5.5};
    ASSERT_EQ(t.end - t.begin, want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(exported.data() + header->data_start + t.begin,
                          want.data(), t.end - t.begin),
              0);
  }
  EXPECT_TRUE(found);

  r = Ckpt({"gc", root_, "--keep-last", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Ckpt({"ls", root_, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ls = nlohmann::json::parse(r.out);
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0]["step"], 3);
  auto storage = OpenStorage(root_);
  ASSERT_TRUE(storage.ok());
  auto objects = (*storage)->List("");
  ASSERT_TRUE(objects.ok());
  // Step 3's objects, the hint and the root's lease (which gc took and
  // gave back; the generation before it stays until the next takeover):
  // nothing else.
  int leases = 0;
  for (const ObjectInfo& o : *objects) {
    if (format::ParseLeaseKey(o.key) >= 0) {
      ++leases;
      continue;
    }
    EXPECT_TRUE(o.key == "LATEST" || o.key.starts_with("step-000000000003/"))
        << o.key;
  }
  EXPECT_EQ(leases, 2);
}

// No secret key and no session token in anything the tool prints or writes
// for people, with every log line on (CKPT_LOG=debug), on success and on
// failure. (moto checks no signature, so the secret can be a marker.)
TEST_F(CliS3Test, NoSecretKeyOrSessionTokenInWhatTheToolWrites) {
  const std::string secret = "ckpt-test-secret-7c41d9e2";
  const std::string token = "ckpt-test-session-token-5a0b83f1";
  testing::ScopedEnv secret_env("AWS_SECRET_ACCESS_KEY", secret.c_str());
  testing::ScopedEnv token_env("AWS_SESSION_TOKEN", token.c_str());
  testing::ScopedEnv log("CKPT_LOG", "debug");
  SaveSteps({1, 2});
  const std::string page = (dir_ / "report.html").string();
  const std::string missing = root_ + "-missing";
  std::string written;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"ls", root_, "--json"},
           {"show", root_, "--json"},
           {"verify", root_, "--all", "--json"},
           {"report", root_, "-o", page},
           {"ls", missing},
           {"show", missing, "--json"}}) {
    RunResult r = Ckpt(args);
    EXPECT_EQ(r.exit_code == 0, args[1] == root_) << args[0] << ": " << r.err;
    written += r.out + r.err;
  }
  EXPECT_TRUE(Contains(written, "missing")) << "the failures were printed";
  std::ifstream in(page);
  ASSERT_TRUE(in) << page;
  written += std::string(std::istreambuf_iterator<char>(in), {});
  EXPECT_FALSE(Contains(written, secret));
  EXPECT_FALSE(Contains(written, token));
}

TEST_F(CliS3Test, VerifyNamesADamagedObject) {
  SaveSteps({1});
  auto storage = OpenStorage(root_);
  ASSERT_TRUE(storage.ok());
  auto listed = (*storage)->List("step-000000000001/r");
  ASSERT_TRUE(listed.ok());
  // The data object (the rank's index lies beside it).
  std::vector<ObjectInfo> objects;
  for (const ObjectInfo& o : *listed) {
    if (o.key.ends_with(".safetensors")) objects.push_back(o);
  }
  ASSERT_EQ(objects.size(), 1u);
  const std::string key = objects[0].key;
  auto bytes = (*storage)->ReadAll(key);
  ASSERT_TRUE(bytes.ok());
  std::string damaged = *bytes;
  damaged.back() ^= 0x40;  // the last data byte: same size, other contents
  ASSERT_TRUE((*storage)->PutString(key, damaged).ok());
  RunResult r = Ckpt({"verify", root_});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out + r.err, key));
}

TEST_F(CliS3Test, MissingAndMalformedRootsAreErrorsQuotingTheUrl) {
  const std::string missing = root_ + "-never-written";
  for (const char* command : {"ls", "show", "verify"}) {
    RunResult r = Ckpt({command, missing});
    EXPECT_EQ(r.exit_code, 1) << command << ": " << r.err;
    EXPECT_TRUE(Contains(r.err, missing)) << command;
  }
  RunResult bad = Ckpt({"ls", "s3://Not_A_Bucket/x"});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_TRUE(Contains(bad.err, "\"s3://Not_A_Bucket/x\""));
  // Nothing was created by the failed reads.
  auto storage = OpenStorage("s3://" + server_->bucket());
  ASSERT_TRUE(storage.ok());
  auto objects = (*storage)->List(missing.substr(missing.rfind('/') + 1));
  ASSERT_TRUE(objects.ok());
  EXPECT_TRUE(objects->empty());
}

}  // namespace
}  // namespace ckpt
