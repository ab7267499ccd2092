// Hostile names and paths against a file:// root: hundreds of keys built
// from "..", absolute paths, NUL and control bytes, backslashes, empty and
// overlong components, and symlinks planted inside the root that point out
// of it. Every operation on each is refused (or finds nothing), and nothing
// outside the root is created, changed, removed or read. The same keys put
// in a manifest, and as entry names of a state, are refused too.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include "ckpt/checkpoint_manager.h"
#include "format/layout.h"
#include "format/manifest.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/step_model.h"
#include "testing/temp_dir.h"
#include "testing/test_util.h"
#include "util/names.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kSecret = "the secret outside the root";

// Every path under `dir` with its contents (or its link target), to show
// that nothing there changed.
std::map<std::string, std::string> Tree(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    std::string what;
    if (e.is_symlink()) {
      what = "-> " + fs::read_symlink(e.path()).string();
    } else if (e.is_regular_file()) {
      what = testing::ReadFile(e.path());
    } else {
      what = "dir";
    }
    out[e.path().string()] = what;
  }
  return out;
}

// Keys that name something outside the root, or are not names at all.
std::vector<std::string> HostileKeys() {
  const std::string nul("\0", 1);
  const std::vector<std::string> bad_parts = {
      "..",          ".",        "",         "../outside",
      "..\\outside", "a\\b",     "x" + nul,  nul + "x",
      "a\nb",        "\x01",     "\x7f",     "\x1b[2J",
      "\xff\xfe",    "\xc0\xaf", "\xe2\x80", std::string(256, 'n'),
      "...\\..",     "..\x00."};
  const std::vector<std::string> wraps = {"",     "step-1/", "a/b/",   "out/",
                                          "abs/", "loop/",   "../../", "/"};
  const std::vector<std::string> tails = {"", "/x", "/../x", "/MANIFEST.json",
                                          "/outside/secret"};
  std::set<std::string> keys;
  for (const std::string& w : wraps) {
    for (const std::string& p : bad_parts) {
      for (const std::string& t : tails) keys.insert(w + p + t);
    }
  }
  // Absolute and climbing paths to the real files outside.
  for (const char* p :
       {"/etc/passwd", "//etc/passwd", "/tmp", "../outside/secret",
        "a/../../outside/secret", "./outside", "a/./b", "a//b", "a/",
        "\\etc\\passwd", "C:\\Windows"}) {
    keys.insert(p);
  }
  // Overlong: a whole key, and one component, past the limits.
  keys.insert(std::string(kMaxNameLength + 1, 'k'));
  keys.insert("a/" + std::string(300, 'c') + "/b");
  // Through the symlinks planted in the root (SetUp): never followed.
  for (const std::string link :
       {"out", "abs", "loop", "step-000000000001/escape"}) {
    for (const char* t : {"", "/secret", "/x", "/a/b"}) {
      keys.insert(link + t);
    }
  }
  return {keys.begin(), keys.end()};
}

class HostileNamesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(base_ / "outside");
    ASSERT_TRUE(testing::WriteFile(base_ / "outside" / "secret", kSecret));
    // A committed checkpoint, then symlinks planted among its files. A
    // JSON manifest, which ManifestNamingAHostileObjectIsRefused edits.
    Options options;
    options.metadata_layout = Options::MetadataLayout::kJson;
    auto mgr = CheckpointManager::Open(root_.string(), options);
    ASSERT_TRUE(mgr.ok());
    testing::StepModel model(1, 1, 1);
    ASSERT_TRUE((*mgr)->Save(1, model.ForRank(0)).ok());
    fs::create_directory_symlink(base_ / "outside", root_ / "out");
    fs::create_directory_symlink("/", root_ / "abs");
    fs::create_symlink("loop", root_ / "loop");
    fs::create_symlink(base_ / "outside",
                       root_ / "step-000000000001" / "escape");
    outside_ = Tree(base_ / "outside");
  }
  const testing::TempDir temp_{"hostile"};
  const fs::path base_ = temp_.path();
  const fs::path root_ = base_ / "root";
  std::map<std::string, std::string> outside_;
};

TEST_F(HostileNamesTest, NoKeyReachesOutsideTheRoot) {
  const std::vector<std::string> keys = HostileKeys();
  ASSERT_GE(keys.size(), 500u);
  auto storage = OpenStorage("file://" + root_.string());
  ASSERT_TRUE(storage.ok());
  Storage& s = **storage;
  const std::string secret(kSecret);
  const auto payload = std::string("overwritten by a hostile key");
  for (const std::string& key : keys) {
    SCOPED_TRACE("key " + Quote(key));
    EXPECT_FALSE(s.PutString(key, payload).ok());
    EXPECT_FALSE(s.PutString(key, payload, PutMode::kCreateIfAbsent).ok());
    auto w = s.NewWritable(key);
    if (w.ok()) {
      // Refused at the latest when it would be published.
      (void)(*w)->Append(std::span<const std::byte>(
          reinterpret_cast<const std::byte*>(payload.data()), payload.size()));
      EXPECT_FALSE((*w)->Close().ok());
    }
    auto all = s.ReadAll(key);
    EXPECT_FALSE(all.ok()) << *all;
    std::string one(4, '\0');
    EXPECT_FALSE(
        s.ReadRange(key, 0,
                    std::span<std::byte>(
                        reinterpret_cast<std::byte*>(one.data()), one.size()))
            .ok());
    EXPECT_FALSE(s.Stat(key).ok());
    EXPECT_FALSE(s.Delete(key).ok());
    auto listed = s.List(key);
    if (listed.ok()) {
      for (const ObjectInfo& o : *listed) {
        EXPECT_TRUE(ValidateKey(o.key).ok()) << Quote(o.key);
        EXPECT_TRUE(s.ReadAll(o.key).value_or("") != secret) << Quote(o.key);
      }
    }
  }
  EXPECT_EQ(Tree(base_ / "outside"), outside_) << "something escaped";
  // Names that only look hostile are ordinary names, inside the root.
  for (const std::string odd :
       {"~/.ssh/id_rsa", "%2e%2e/x", "..a/b", ". ./c", "a..", "C:"}) {
    ASSERT_TRUE(s.PutString(odd, payload).ok()) << odd;
    EXPECT_TRUE(fs::is_regular_file(root_ / odd)) << odd;
    EXPECT_EQ(s.ReadAll(odd).value_or(""), payload);
    EXPECT_TRUE(s.Delete(odd).ok());
  }
  // The root itself still holds its checkpoint, intact.
  auto mgr = CheckpointManager::Open(root_.string());
  ASSERT_TRUE(mgr.ok());
  EXPECT_EQ(testing::CheckStep(**mgr, 1, 1, 1), "");
  std::printf("[ hostile ] %zu hostile keys, 9 operations each, refused\n",
              keys.size());
}

// A data object swapped for a symbolic link to a copy of it (a backup
// restored with `cp -s`): never followed, so the step is damaged, as `ckpt
// ls` says; a resume loads the one before it, a load of that step names
// the object and the link.
TEST_F(HostileNamesTest, AResumeSkipsAStepWhoseDataObjectIsASymlink) {
  auto mgr = CheckpointManager::Open(root_.string());
  ASSERT_TRUE(mgr.ok());
  testing::StepModel model(2, 1, 1);
  ASSERT_TRUE((*mgr)->Save(2, model.ForRank(0)).ok());
  std::vector<fs::path> data;
  for (const auto& e : fs::directory_iterator(root_ / "step-000000000002")) {
    if (e.path().extension() == ".safetensors") data.push_back(e.path());
  }
  ASSERT_EQ(data.size(), 1u);
  fs::rename(data[0], base_ / "outside" / "copy");
  fs::create_symlink(base_ / "outside" / "copy", data[0]);
  auto reopened = CheckpointManager::Open(root_.string());
  ASSERT_TRUE(reopened.ok());
  Result<LoadedCheckpoint> resumed = (*reopened)->LoadAll(std::nullopt);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed->info.step, 1);
  EXPECT_EQ(testing::StepModel(1, 1, 1).Diff(resumed->state), "");
  Result<LoadedCheckpoint> two = (*reopened)->LoadAll(2);
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().code(), ErrorCode::kDataLoss);
  EXPECT_NE(two.status().message().find(data[0].filename().string()),
            std::string::npos)
      << two.status().ToString();
  EXPECT_NE(two.status().message().find("symbolic link"), std::string::npos)
      << two.status().ToString();
}

TEST_F(HostileNamesTest, ManifestNamingAHostileObjectIsRefused) {
  auto storage = OpenStorage("file://" + root_.string());
  ASSERT_TRUE(storage.ok());
  const std::string key = format::ManifestKey(1);
  auto bytes = (*storage)->ReadAll(key);
  ASSERT_TRUE(bytes.ok());
  auto manifest = format::DecodeManifest(*bytes, key);
  ASSERT_TRUE(manifest.ok());
  int refused = 0;
  for (const std::string& hostile : HostileKeys()) {
    if (ValidateKey(hostile).ok()) continue;  // a symlink's name: a key
    format::Manifest m = *manifest;
    m.objects[0].key = hostile;
    // The encoder replaces bytes that are not UTF-8, so what comes back
    // (if anything) must be a valid key, never the hostile one.
    auto decoded = format::DecodeManifest(format::EncodeManifest(m), key);
    if (decoded.ok()) {
      EXPECT_NE(decoded->objects[0].key, hostile) << Quote(hostile);
      EXPECT_TRUE(ValidateKey(decoded->objects[0].key).ok()) << Quote(hostile);
    }
    ++refused;
  }
  EXPECT_GE(refused, 500);
  EXPECT_EQ(Tree(base_ / "outside"), outside_);
}

TEST_F(HostileNamesTest, StateWithAHostileEntryNameIsRefused) {
  auto mgr = CheckpointManager::Open(root_.string());
  ASSERT_TRUE(mgr.ok());
  std::vector<float> w(4, 1.0f);
  int64_t step = 2;
  for (const std::string& name : HostileKeys()) {
    if (ValidateEntryName(name).ok()) continue;
    State s;
    s.AddTensor(name, View(w));
    EXPECT_FALSE((*mgr)->Save(step, s).ok()) << Quote(name);
  }
  EXPECT_EQ(testing::ListedSteps(**mgr), std::vector<int64_t>{1});
  EXPECT_EQ(Tree(base_ / "outside"), outside_);
}

}  // namespace
}  // namespace ckpt
