// Storage::TemporaryOf on file://: the temp files a dead writer leaves are
// recognised, with the key each was written for; nothing else is; and every
// wrapper asks the backend.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "storage/file/file_storage.h"
#include "testing/backends.h"
#include "testing/crash_storage.h"
#include "testing/fault_storage.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class FileTemporaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<std::unique_ptr<Storage>> storage = OpenStorage("file://" + dir_);
    ASSERT_TRUE(storage.ok()) << storage.status().ToString();
    storage_ = std::move(storage).value();
  }

  void TearDown() override { storage_.reset(); }

  std::vector<std::string> ListKeys() {
    std::vector<std::string> out;
    Result<std::vector<ObjectInfo>> listed = storage_->List("");
    EXPECT_TRUE(listed.ok()) << listed.status().ToString();
    if (listed.ok()) {
      for (const ObjectInfo& info : *listed) out.push_back(info.key);
    }
    return out;
  }

  const testing::TempDir temp_{"file-temporary"};
  const std::string dir_ = temp_.string();
  std::unique_ptr<Storage> storage_;
};

// A process killed in the middle of a streamed write runs no destructor, so
// its temp file stays, listed like any object.
TEST_F(FileTemporaryTest, ACrashedWritersTempFileNamesItsKey) {
  const std::string long_name(250, 'n');  // cut to 229 in the temp's name
  const std::vector<std::string> keys = {
      "top", "step-000000000001/r00000-0123456789abcdef.safetensors",
      "long/" + long_name};
  for (const std::string& key : keys) {
    SCOPED_TRACE(key);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Result<std::unique_ptr<Storage>> storage = OpenStorage("file://" + dir_);
      if (!storage.ok()) ::_exit(1);
      Result<std::unique_ptr<WritableObject>> w = (*storage)->NewWritable(key);
      if (!w.ok() || !(*w)->Append(Bytes("never closed")).ok()) ::_exit(2);
      ::_exit(0);
    }
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFEXITED(wstatus)) << wstatus;
    ASSERT_EQ(WEXITSTATUS(wstatus), 0);
  }
  const std::vector<std::string> listed = ListKeys();
  ASSERT_EQ(listed.size(), keys.size());
  std::vector<std::string> targets;
  for (const std::string& key : listed) {
    EXPECT_NE(key.find(kTempMarker), std::string::npos) << key;
    std::optional<std::string> target = storage_->TemporaryOf(key);
    ASSERT_TRUE(target.has_value()) << key;
    targets.push_back(*target);
  }
  EXPECT_EQ(
      targets,
      (std::vector<std::string>{
          "long/" + long_name.substr(0, 229),
          "step-000000000001/r00000-0123456789abcdef.safetensors", "top"}));
}

TEST_F(FileTemporaryTest, OnlyTheBackendsOwnTempNamesAreTemporaries) {
  EXPECT_EQ(storage_->TemporaryOf("x.ckpt-tmp-0123456789abcdef"), "x");
  EXPECT_EQ(storage_->TemporaryOf("a/b/LATEST.ckpt-tmp-fedcba9876543210"),
            "a/b/LATEST");
  // The temp file of a key that itself looks like one.
  EXPECT_EQ(storage_->TemporaryOf(
                "x.ckpt-tmp-0123456789abcdef.ckpt-tmp-0000000000000000"),
            "x.ckpt-tmp-0123456789abcdef");
  for (const char* key : {
           "x.ckpt-tmp-abc",                   // too few digits
           "x.ckpt-tmp-0123456789abcde",       // 15 digits
           "x.ckpt-tmp-0123456789abcdef0",     // 17 digits
           "x.ckpt-tmp-0123456789ABCDEF",      // upper case
           "x.ckpt-tmp-0123456789abcdeg",      // not hex
           "x.ckpt-tmp-0123456789abcdef.bak",  // the marker in the middle
           "x.ckpt-tmp-0123456789abcdef/y",    // in a directory's name
           "x.ckpt-tmp0123456789abcdef0",      // no '-' after the marker
           "x-ckpt-tmp-0123456789abcdef",      // no '.' before it
           ".ckpt-tmp-0123456789abcdef",       // no name before it
           "d/.ckpt-tmp-0123456789abcdef",     // nor here
           "..ckpt-tmp-0123456789abcdef",      // for "." (no key)
           "x",                                // plain keys
           "step-000000000001/MANIFEST.json",
       }) {
    EXPECT_EQ(storage_->TemporaryOf(key), std::nullopt) << key;
  }
}

TEST_F(FileTemporaryTest, WrappersAskTheBackend) {
  const std::string temp = "d/x.ckpt-tmp-0123456789abcdef";
  StorageWrapper wrapper(storage_.get());
  testing::FaultStorage fault(storage_.get());
  Result<std::unique_ptr<testing::CrashStorage>> crash =
      testing::CrashStorage::Wrap(storage_.get());
  ASSERT_TRUE(crash.ok()) << crash.status().ToString();
  for (Storage* s :
       {static_cast<Storage*>(&wrapper), static_cast<Storage*>(&fault),
        static_cast<Storage*>(crash->get())}) {
    EXPECT_EQ(s->TemporaryOf(temp), "d/x");
    EXPECT_EQ(s->TemporaryOf("d/x"), std::nullopt);
  }
}

// A simulated power loss leaves an unfinished write's temp file where the
// backend would (file://), named so that TemporaryOf finds its key, and
// nothing where it would not (mem://).
TEST_F(FileTemporaryTest, CrashStorageLeavesStraysWhereTheBackendWould) {
  const testing::TestRoot mem_root(testing::Backend::kMemory, "file-temporary");
  Result<std::unique_ptr<Storage>> mem = mem_root.Open();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  for (Storage* target : {storage_.get(), mem->get()}) {
    SCOPED_TRACE(target->url());
    Result<std::unique_ptr<testing::CrashStorage>> crash =
        testing::CrashStorage::Wrap(target);
    ASSERT_TRUE(crash.ok()) << crash.status().ToString();
    {
      Result<std::unique_ptr<WritableObject>> w =
          (*crash)->NewWritable("step-000000000002/data");
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->Append(Bytes("unfinished")).ok());
    }
    testing::Damage damage;
    damage.strays = true;
    ASSERT_TRUE((*crash)->PowerLoss(damage).ok());
    Result<std::vector<ObjectInfo>> listed = target->List("");
    ASSERT_TRUE(listed.ok()) << listed.status().ToString();
    if (target == mem->get()) {
      EXPECT_TRUE(listed->empty());
      continue;
    }
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ(target->TemporaryOf((*listed)[0].key), "step-000000000002/data");
  }
}

}  // namespace
}  // namespace ckpt
