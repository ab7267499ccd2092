// ckpt and the AWS command line on one real object store (Ceph's radosgw,
// started by the test): what ckpt saves, `aws s3 ls` lists and `aws s3 cp`
// downloads as a safetensors file any reader opens; what `aws s3 cp`
// uploads (a multipart upload, for a large file), `ckpt import` reads from
// its s3:// URL. Each side signs its own requests, so the two must agree on
// SigV4, on keys and on ETags.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ckpt/checkpoint_manager.h"
#include "format/safetensors.h"
#include "gtest/gtest.h"
#include "testing/aws_cli.h"
#include "testing/backends.h"
#include "testing/files.h"
#include "testing/rgw.h"
#include "testing/subprocess.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::Contains;
using testing::RunResult;

// A safetensors file written by hand (not by ckpt): `tensors` as F32 of the
// given shapes, values i * scale + offset, and `metadata`.
struct HandTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
std::string HandWrittenSafetensors(
    const std::vector<HandTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = metadata;
  std::string data;
  for (const HandTensor& t : tensors) {
    const size_t begin = data.size();
    data.append(reinterpret_cast<const char*>(t.values.data()),
                t.values.size() * sizeof(float));
    header[t.name] = {{"dtype", "F32"},
                      {"shape", t.shape},
                      {"data_offsets", {begin, data.size()}}};
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i)
    file[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return file + json + data;
}

class RgwInteropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<testing::Rgw*> server = testing::Rgw::Shared();
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = *server;
    aws_ = testing::AwsCli();
    ASSERT_FALSE(aws_.empty()) << "awscli is not installed (no `aws` on "
                                  "PATH): run scripts/install-deps.sh";
    // awscli reads no file of this machine's user, and asks no instance
    // metadata service for credentials: only the test user's keys count.
    ::setenv("AWS_CONFIG_FILE", (dir_ / "aws-config").c_str(), 1);
    ::setenv("AWS_SHARED_CREDENTIALS_FILE", (dir_ / "aws-credentials").c_str(),
             1);
    ::setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    ::setenv("AWS_DEFAULT_REGION", "us-east-1", 1);
    ::unsetenv("AWS_PROFILE");
  }

  RunResult Ckpt(const std::vector<std::string>& args) {
    return testing::RunProgram(CKPT_CLI_PATH, args, dir_);
  }
  RunResult AwsS3(std::vector<std::string> args) {
    args.insert(args.begin(), {"--endpoint-url", server_->endpoint(),
                               "--no-cli-pager", "s3"});
    return testing::RunProgram(aws_, args, dir_);
  }
  // "s3://ckpt-test/PREFIX/": the root as a folder of the bucket.
  std::string Folder(const std::string& root) const { return root + "/"; }

  testing::Rgw* server_ = nullptr;
  std::string aws_;
  // The root exports the AWS_* environment: for this process and the ckpt
  // it runs.
  const testing::TestRoot rgw_root_{testing::Backend::kRgw, "interop"};
  const std::string root_ = rgw_root_.url();
  const testing::TempDir temp_{"rgw-interop"};
  const fs::path dir_ = temp_.path();
};

TEST_F(RgwInteropTest, AwsCliListsAndDownloadsWhatCkptSaved) {
  {
    auto mgr = CheckpointManager::Open(root_);
    ASSERT_TRUE(mgr.ok()) << mgr.status().ToString();
    for (int64_t step : {1, 2}) {
      std::vector<float> weights(6);
      for (size_t i = 0; i < weights.size(); ++i) weights[i] = step + i * 0.5f;
      State state;
      state.AddTensor("weights", View(std::span<float>(weights), {2, 3}));
      ASSERT_TRUE((*mgr)->Save(step, state).ok());
    }
  }

  RunResult ls = AwsS3({"ls", Folder(root_)});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(Contains(ls.out, "PRE step-000000000001/"));
  EXPECT_TRUE(Contains(ls.out, "PRE step-000000000002/"));
  EXPECT_TRUE(Contains(ls.out, " LATEST\n"));

  ls = AwsS3({"ls", "--recursive", Folder(root_) + "step-000000000002/"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  // "2026-01-01 00:00:00       1234 PREFIX/step-000000000002/r00000-....":
  // the key is the last column.
  std::string data_key;
  std::istringstream lines(ls.out);
  for (std::string line; std::getline(lines, line);) {
    const std::string key = line.substr(line.rfind(' ') + 1);
    if (key.ends_with(".safetensors")) data_key = key;
  }
  ASSERT_FALSE(data_key.empty()) << ls.out;

  const fs::path local = dir_ / "downloaded.safetensors";
  RunResult cp = AwsS3(
      {"cp", "s3://" + server_->bucket() + "/" + data_key, local.string()});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;
  const std::string file = testing::ReadFile(local);
  auto header = format::ParseSafetensorsFile(file, local.string());
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  ASSERT_EQ(header->tensors.size(), 1u);
  const format::TensorLayout& t = header->tensors[0];
  EXPECT_EQ(t.name, "weights");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
  const std::vector<float> want = {2, 2.5, 3, 3.5, 4, 4.5};
  ASSERT_EQ(t.end - t.begin, want.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(file.data() + header->data_start + t.begin, want.data(),
                        t.end - t.begin),
            0);
}

TEST_F(RgwInteropTest, CkptImportsWhatAwsCliUploaded) {
  // 9 MiB: above awscli's 8 MiB threshold, so a multipart upload (whose
  // ETag is no MD5 of the bytes).
  std::vector<float> big(9 << 18);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 977);
  const std::string model =
      HandWrittenSafetensors({{"bias", {3}, {0.5f, -1.0f, 2.0f}},
                              {"embedding", {9 << 8, 1 << 10}, big}},
                             {{"source", "aws s3 cp"}});
  const fs::path local = dir_ / "model.safetensors";
  ASSERT_TRUE(testing::WriteFile(local, model));
  const std::string object = root_ + "-models/llm/model.safetensors";
  RunResult cp = AwsS3({"cp", local.string(), object});
  ASSERT_EQ(cp.exit_code, 0) << cp.err;

  const std::string imported = root_ + "-imported";
  RunResult r = Ckpt({"import", object, imported, "--step", "5"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Contains(r.out, "imported 2 entries"));

  RunResult ls = AwsS3({"ls", Folder(imported)});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(Contains(ls.out, "PRE step-000000000005/"));

  // Back out through ckpt: the same tensors and metadata as the upload.
  const fs::path out = dir_ / "exported.safetensors";
  r = Ckpt({"export", imported, "--step", "5", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string exported = testing::ReadFile(out);
  auto header = format::ParseSafetensorsFile(exported, out.string());
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->metadata.at("source"), "aws s3 cp");
  ASSERT_EQ(header->tensors.size(), 2u);
  for (const format::TensorLayout& t : header->tensors) {
    const std::string_view bytes(exported.data() + header->data_start + t.begin,
                                 t.end - t.begin);
    if (t.name == "bias") {
      const std::vector<float> want = {0.5f, -1.0f, 2.0f};
      EXPECT_EQ(bytes,
                std::string_view(reinterpret_cast<const char*>(want.data()),
                                 want.size() * sizeof(float)));
    } else {
      EXPECT_EQ(t.name, "embedding");
      EXPECT_EQ(t.shape, (std::vector<int64_t>{9 << 8, 1 << 10}));
      EXPECT_TRUE(bytes ==
                  std::string_view(reinterpret_cast<const char*>(big.data()),
                                   big.size() * sizeof(float)));
    }
  }

  // A URL that names no object is an error that quotes it.
  r = Ckpt({"import", root_ + "-models/llm/missing.safetensors", imported,
            "--step", "6"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(Contains(r.err, "missing.safetensors"));
}

}  // namespace
}  // namespace ckpt
