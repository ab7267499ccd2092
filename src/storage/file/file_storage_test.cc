#include "storage/file/file_storage.h"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "storage/file/huge_pages.h"
#include "testing/files.h"
#include "testing/scoped_env.h"
#include "testing/smaps.h"
#include "testing/storage_conformance.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;
using testing::ReadFile;
using testing::WriteFile;

std::unique_ptr<Storage> OpenOrNull(const std::string& url,
                                    const StorageOptions& options) {
  Result<std::unique_ptr<Storage>> storage = OpenStorage(url, options);
  if (!storage.ok()) {
    ADD_FAILURE() << storage.status().ToString();
    return nullptr;
  }
  return std::move(storage).value();
}

INSTANTIATE_TEST_SUITE_P(File, StorageConformanceTest,
                         ::testing::Values(StorageConformanceParams{
                             .name = "File",
                             .backend = testing::Backend::kFile}),
                         StorageConformanceTestName);

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> ListKeys(Storage& storage, std::string_view prefix) {
  std::vector<std::string> out;
  Result<std::vector<ObjectInfo>> listed = storage.List(prefix);
  if (!listed.ok()) {
    ADD_FAILURE() << listed.status().ToString();
    return out;
  }
  for (const ObjectInfo& info : *listed) out.push_back(info.key);
  return out;
}

// Every path under `dir` whose name has the temp marker.
std::vector<std::string> TempFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (Contains(entry.path().filename().string(), kTempMarker)) {
      out.push_back(entry.path().string());
    }
  }
  return out;
}

// A refusal caused by a symlink: the key is named, and it is not mistaken
// for a missing object.
::testing::AssertionResult RefusedForSymlink(const Status& status,
                                             std::string_view key) {
  if (status.ok()) return ::testing::AssertionFailure() << "succeeded";
  if (status.code() != ErrorCode::kInvalidArgument &&
      status.code() != ErrorCode::kIOError) {
    return ::testing::AssertionFailure()
           << "expected InvalidArgument or IOError: " << status.ToString();
  }
  if (!Contains(status.message(), key)) {
    return ::testing::AssertionFailure()
           << "message does not name " << key << ": " << status.ToString();
  }
  return ::testing::AssertionSuccess();
}

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

class FileStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = dir_ + "/root";
    outside_ = dir_ + "/outside";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    ASSERT_TRUE(WriteFile(outside_ + "/secret", "secret"));
  }

  void TearDown() override {
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
  }

  std::unique_ptr<Storage> OpenRoot() {
    return OpenOrNull("file://" + root_, {});
  }

  // The names in `outside_`: a test checks nothing there was touched.
  std::vector<std::string> OutsideNames() {
    std::vector<std::string> out;
    for (const auto& entry : fs::recursive_directory_iterator(outside_)) {
      out.push_back(fs::relative(entry.path(), outside_).string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  testing::TempDir temp_{"file-storage"};
  const std::string dir_ = temp_.string();  // all the test makes is here
  std::string root_;                        // the storage root
  std::string outside_;  // a sibling of the root with one file, "secret"
  std::string mounted_;  // a tmpfs to unmount, if any
};

TEST_F(FileStorageTest, RootThatIsARegularFileIsInvalid) {
  const std::string file = dir_ + "/plain";
  ASSERT_TRUE(WriteFile(file, "x"));
  Result<std::unique_ptr<Storage>> storage = OpenStorage("file://" + file);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(storage.status().message(), file))
      << storage.status().ToString();
}

TEST_F(FileStorageTest, MissingRootWithoutCreateIsNotFound) {
  const std::string missing = dir_ + "/missing/deeper";
  StorageOptions options;
  options.create = false;
  Result<std::unique_ptr<Storage>> storage =
      OpenStorage("file://" + missing, options);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(Contains(storage.status().message(), missing))
      << storage.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ + "/missing"));
}

TEST_F(FileStorageTest, MissingRootIsCreatedWithItsParents) {
  const std::string missing = dir_ + "/a/b/c";
  std::unique_ptr<Storage> storage = OpenOrNull("file://" + missing + "/", {});
  ASSERT_NE(storage, nullptr);
  EXPECT_TRUE(fs::is_directory(missing));
  ASSERT_TRUE(storage->PutString("k", "v").ok());
  EXPECT_EQ(ReadFile(missing + "/k"), "v");
}

// create_on_first_write: opening leaves nothing behind; the root reads as
// empty, CheckRoot names it, and the first write creates it.
TEST_F(FileStorageTest, RootMadeByItsFirstWrite) {
  const std::string missing = dir_ + "/lazy/root";
  std::unique_ptr<Storage> storage = OpenOrNull(
      "file://" + missing, {.create = true, .create_on_first_write = true});
  ASSERT_NE(storage, nullptr);
  EXPECT_FALSE(fs::exists(dir_ + "/lazy"));
  const Status root = storage->CheckRoot();
  EXPECT_EQ(root.code(), ErrorCode::kNotFound);
  EXPECT_EQ(root.message(), "root " + missing + " does not exist");
  EXPECT_TRUE(storage->List("").value().empty());
  EXPECT_EQ(storage->ReadAll("k").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(storage->Stat("k").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(storage->Delete("k").code(), ErrorCode::kNotFound);
  EXPECT_FALSE(fs::exists(dir_ + "/lazy"));

  ASSERT_TRUE(storage->PutString("a/k", "v").ok());
  EXPECT_EQ(ReadFile(missing + "/a/k"), "v");
  EXPECT_TRUE(storage->CheckRoot().ok());
  EXPECT_EQ(storage->ReadAll("a/k").value(), "v");

  // A root another party creates meanwhile is read.
  const std::string later = dir_ + "/later";
  std::unique_ptr<Storage> reader = OpenOrNull(
      "file://" + later, {.create = true, .create_on_first_write = true});
  ASSERT_NE(reader, nullptr);
  fs::create_directories(later);
  ASSERT_TRUE(WriteFile(later + "/x", "y"));
  EXPECT_TRUE(reader->CheckRoot().ok());
  EXPECT_EQ(reader->ReadAll("x").value(), "y");
}

TEST_F(FileStorageTest, BarePathAndFileUrlOpenTheSameDirectory) {
  std::unique_ptr<Storage> by_url = OpenRoot();
  std::unique_ptr<Storage> by_path = OpenOrNull(root_, {});
  ASSERT_NE(by_url, nullptr);
  ASSERT_NE(by_path, nullptr);
  EXPECT_EQ(by_path->url(), root_);
  ASSERT_TRUE(by_url->PutString("k", "v").ok());
  Result<std::string> read = by_path->ReadAll("k");
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, "v");
}

TEST_F(FileStorageTest, FileUrlWithAHostIsInvalid) {
  Result<std::unique_ptr<Storage>> storage =
      OpenStorage("file://otherhost" + root_);
  ASSERT_FALSE(storage.ok());
  EXPECT_EQ(storage.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(Contains(storage.status().message(), "otherhost"))
      << storage.status().ToString();
}

TEST_F(FileStorageTest, ObjectsArePlainFilesUnderTheRoot) {
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  ASSERT_TRUE(storage->PutString("step-000000000001/MANIFEST.json", "{}").ok());
  EXPECT_EQ(ReadFile(root_ + "/step-000000000001/MANIFEST.json"), "{}");
  EXPECT_TRUE(storage->capabilities().atomic_create_if_absent);
  EXPECT_TRUE(storage->capabilities().range_reads);
  EXPECT_TRUE(storage->capabilities().hard_links);
}

TEST_F(FileStorageTest, ReadsFromALocalFileSystemAreLocal) {
  // The test's folder lies on this machine's disk or tmpfs, as a test
  // machine's does: read again, its bytes cost a copy from the page cache.
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  EXPECT_TRUE(storage->capabilities().local_reads);
  // A root its first write will make is judged by its nearest parent.
  std::unique_ptr<Storage> later =
      OpenOrNull("file://" + dir_ + "/not-yet/deeper",
                 {.create = true, .create_on_first_write = true});
  ASSERT_NE(later, nullptr);
  EXPECT_TRUE(later->capabilities().local_reads);
}

TEST_F(FileStorageTest, RootMayItselfBeASymlink) {
  const std::string link = dir_ + "/root-link";
  ASSERT_EQ(::symlink(root_.c_str(), link.c_str()), 0);
  std::unique_ptr<Storage> storage = OpenOrNull("file://" + link, {});
  ASSERT_NE(storage, nullptr);
  ASSERT_TRUE(storage->PutString("k", "v").ok());
  EXPECT_EQ(ReadFile(root_ + "/k"), "v");
}

TEST_F(FileStorageTest, SymlinkedDirectoryInsideTheRootIsNeverFollowed) {
  ASSERT_EQ(::symlink(outside_.c_str(), (root_ + "/link").c_str()), 0);
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  std::string one(1, '\0');
  std::span<std::byte> out(reinterpret_cast<std::byte*>(one.data()), 1);

  EXPECT_TRUE(
      RefusedForSymlink(storage->PutString("link/new", "x"), "link/new"));
  EXPECT_TRUE(RefusedForSymlink(
      storage->PutString("link/new", "x", PutMode::kCreateIfAbsent),
      "link/new"));
  EXPECT_TRUE(RefusedForSymlink(storage->PutString("link/deeper/new", "x"),
                                "link/deeper/new"));
  EXPECT_TRUE(
      RefusedForSymlink(storage->NewWritable("link/new").status(), "link/new"));
  EXPECT_TRUE(RefusedForSymlink(storage->ReadAll("link/secret").status(),
                                "link/secret"));
  EXPECT_TRUE(RefusedForSymlink(storage->ReadRange("link/secret", 0, out),
                                "link/secret"));
  EXPECT_TRUE(
      RefusedForSymlink(storage->Stat("link/secret").status(), "link/secret"));
  EXPECT_TRUE(RefusedForSymlink(storage->Delete("link/secret"), "link/secret"));
  EXPECT_EQ(ListKeys(*storage, ""), std::vector<std::string>{});
  EXPECT_EQ(ListKeys(*storage, "link/"), std::vector<std::string>{});

  EXPECT_EQ(OutsideNames(), std::vector<std::string>{"secret"});
  EXPECT_EQ(ReadFile(outside_ + "/secret"), "secret");
  EXPECT_TRUE(fs::is_symlink(root_ + "/link"));
}

TEST_F(FileStorageTest, SymlinkedFileInsideTheRootIsNeverFollowed) {
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(), (root_ + "/f").c_str()),
            0);
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0755), 0);
  ASSERT_EQ(::symlink((outside_ + "/secret").c_str(), (root_ + "/d/f").c_str()),
            0);
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  std::string one(1, '\0');
  std::span<std::byte> out(reinterpret_cast<std::byte*>(one.data()), 1);

  for (const std::string key : {"f", "d/f"}) {
    SCOPED_TRACE(key);
    EXPECT_TRUE(RefusedForSymlink(storage->PutString(key, "x"), key));
    EXPECT_TRUE(RefusedForSymlink(
        storage->PutString(key, "x", PutMode::kCreateIfAbsent), key));
    EXPECT_TRUE(RefusedForSymlink(storage->NewWritable(key).status(), key));
    EXPECT_TRUE(RefusedForSymlink(storage->ReadAll(key).status(), key));
    EXPECT_TRUE(RefusedForSymlink(storage->ReadRange(key, 0, out), key));
    EXPECT_TRUE(RefusedForSymlink(storage->Stat(key).status(), key));
    EXPECT_TRUE(RefusedForSymlink(storage->Delete(key), key));
  }
  EXPECT_EQ(ListKeys(*storage, ""), std::vector<std::string>{});
  EXPECT_EQ(OutsideNames(), std::vector<std::string>{"secret"});
  EXPECT_EQ(ReadFile(outside_ + "/secret"), "secret");
  EXPECT_TRUE(fs::is_symlink(root_ + "/f"));
  EXPECT_TRUE(fs::is_symlink(root_ + "/d/f"));
  EXPECT_EQ(TempFilesUnder(root_), std::vector<std::string>{});
}

// A file URL's path is percent-encoded, as Python's Path.as_uri() writes
// it; a plain path is taken as it is, '%' and all.
TEST_F(FileStorageTest, AFileUrlsEscapesAreDecodedAPlainPathsAreNot) {
  auto url = OpenStorage("file://" + root_ + "/a%20b%C3%A9");
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  ASSERT_TRUE((*url)->PutString("k", "1").ok());
  EXPECT_TRUE(fs::is_regular_file(root_ + "/a b\xC3\xA9/k"));
  auto plain = OpenStorage(root_ + "/c%20d");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_TRUE((*plain)->PutString("k", "2").ok());
  EXPECT_TRUE(fs::is_regular_file(root_ + "/c%20d/k"));
  for (const std::string bad : {"/x%2", "/x%zz", "/x%00y"}) {
    auto opened = OpenStorage("file://" + root_ + bad);
    EXPECT_EQ(opened.status().code(), ErrorCode::kInvalidArgument) << bad;
  }
}

TEST_F(FileStorageTest, ADirectoryIsNotAnObject) {
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  ASSERT_TRUE(storage->PutString("d/sub/x", "1").ok());
  // Something is there, which is not an object: not NotFound, so that no
  // caller takes the key for free (garbage collection keeps a step whose
  // manifest is such a thing).
  EXPECT_EQ(storage->Stat("d/sub").status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(storage->ReadAll("d/sub").status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(storage->Delete("d/sub").code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(fs::is_directory(root_ + "/d/sub"));
  EXPECT_EQ(storage->PutString("d/sub", "2").code(),
            ErrorCode::kInvalidArgument);
  // An object where a directory of the key would have to be.
  EXPECT_EQ(storage->PutString("d/sub/x/y", "3").code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(storage->Stat("d/sub/x/y").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ListKeys(*storage, ""), std::vector<std::string>{"d/sub/x"});
  EXPECT_EQ(TempFilesUnder(root_), std::vector<std::string>{});
}

TEST_F(FileStorageTest, AFifoIsNotAnObjectAndDoesNotBlock) {
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  EXPECT_EQ(storage->ReadAll("fifo").status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(storage->Stat("fifo").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ListKeys(*storage, ""), std::vector<std::string>{});
}

TEST_F(FileStorageTest, TempFilesOfACrashedWriterAreListed) {
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 0755), 0);
  ASSERT_TRUE(WriteFile(root_ + "/x.ckpt-tmp-abc", "partial"));
  ASSERT_TRUE(WriteFile(root_ + "/d/y.ckpt-tmp-def", "partial"));
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  EXPECT_EQ(ListKeys(*storage, ""),
            (std::vector<std::string>{"d/y.ckpt-tmp-def", "x.ckpt-tmp-abc"}));
  EXPECT_EQ(ListKeys(*storage, "x"),
            (std::vector<std::string>{"x.ckpt-tmp-abc"}));
  ASSERT_TRUE(storage->Delete("d/y.ckpt-tmp-def").ok());
  ASSERT_TRUE(storage->Delete("x.ckpt-tmp-abc").ok());
  EXPECT_TRUE(fs::is_empty(root_));
}

TEST_F(FileStorageTest, DurableWritesLeaveNoTempFiles) {
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  ASSERT_TRUE(storage->PutString("a", "1").ok());
  ASSERT_TRUE(storage->PutString("a", "2").ok());
  ASSERT_TRUE(storage->PutString("s/m", "3", PutMode::kCreateIfAbsent).ok());
  EXPECT_EQ(storage->PutString("s/m", "4", PutMode::kCreateIfAbsent).code(),
            ErrorCode::kAlreadyExists);
  {
    Result<std::unique_ptr<WritableObject>> w = storage->NewWritable("s/w");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(Bytes("5")).ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  {
    Result<std::unique_ptr<WritableObject>> w = storage->NewWritable("s/x");
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Append(Bytes("6")).ok());
  }
  EXPECT_EQ(TempFilesUnder(root_), std::vector<std::string>{});
  EXPECT_EQ(ListKeys(*storage, ""),
            (std::vector<std::string>{"a", "s/m", "s/w"}));
}

// A file root hands a large read over in cache-sized stretches (so a load
// checks each while it is in the cache), on a disk (read with O_DIRECT) and
// on tmpfs (a local tier under /dev/shm, read through its pages), and a
// streamed write of an odd size reads back whole on both.
TEST_F(FileStorageTest, LargeReadsAreHandedOverInStretchesOnDiskAndTmpfs) {
  std::vector<std::string> roots = {root_};
  std::optional<testing::TempDir> shm;
  if (fs::is_directory("/dev/shm")) {
    shm.emplace("file-storage-shm", "/dev/shm");
    roots.push_back(shm->string());
  } else {
    std::printf("SKIPPED the tmpfs half: no /dev/shm on this machine\n");
  }
  std::string data((3 << 20) + 5, '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>((i * 40503u) >> 7);
  }
  for (const std::string& dir : roots) {
    std::unique_ptr<Storage> storage = OpenOrNull("file://" + dir, {});
    ASSERT_NE(storage, nullptr) << dir;
    {
      Result<std::unique_ptr<WritableObject>> w = storage->NewWritable("obj");
      ASSERT_TRUE(w.ok()) << dir;
      for (size_t at = 0; at < data.size(); at += 1000003) {
        ASSERT_TRUE(
            (*w)->Append(Bytes(std::string_view(data).substr(
                             at, std::min<size_t>(1000003, data.size() - at))))
                .ok());
      }
      ASSERT_TRUE((*w)->Close().ok()) << dir;
    }
    std::string out(data.size() - 1, '\0');
    std::vector<size_t> pieces;
    ASSERT_TRUE(storage
                    ->ReadRangeFilling(
                        "obj", 1,
                        {reinterpret_cast<std::byte*>(out.data()), out.size()},
                        [&](std::span<const std::byte> piece) {
                          pieces.push_back(piece.size());
                        })
                    .ok())
        << dir;
    EXPECT_TRUE(out == data.substr(1)) << dir;
    EXPECT_GT(pieces.size(), 3u) << dir;
    EXPECT_LE(*std::max_element(pieces.begin(), pieces.end()), size_t{1} << 20)
        << dir;
  }
}

// Whether the file at `path` is held in 2 MiB pages, as far as a mapping of
// its first `bytes` shows (ShmemPmdMapped in /proc/self/smaps).
bool HeldInHugePages(const std::string& path, size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  file::AlignedFileMapping mapping(fd, 0, bytes);
  ::close(fd);
  if (mapping.data() == nullptr) return false;
  const volatile char* map = mapping.data();
  for (size_t i = 0; i < bytes; i += 4096) (void)map[i];
  constexpr std::string_view kField = "ShmemPmdMapped:";
  const std::string pmd = testing::SmapsLineOf(mapping.data(), kField);
  return !pmd.empty() &&
         std::strtoull(pmd.c_str() + kField.size(), nullptr, 10) > 0;
}

// On tmpfs a streamed write asked for huge pages readies 2 MiB pages ahead
// of its data (huge_pages.h) and cuts the file back at the end: objects of
// every size around those pages, written in appends of every size, read
// back whole and exactly as long as written, asked or not.
TEST_F(FileStorageTest, WritesOnTmpfsReadBackWholeAtEverySize) {
  if (!fs::is_directory("/dev/shm")) {
    GTEST_SKIP() << "no /dev/shm on this machine";
  }
  const std::vector<size_t> appends = {1,         4095,          (1 << 20) + 3,
                                       300 << 10, (3 << 20) + 1, 8 << 20};
  const std::vector<size_t> sizes = {(2 << 20) - 1, 2 << 20, (2 << 20) + 1,
                                     (33 << 20) + 7, (70 << 20) + 3};
  std::string data(sizes.back(), '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  for (const char* huge : {"1", "0"}) {
    SCOPED_TRACE(std::string("CKPT_TMPFS_HUGE_PAGES=") + huge);
    testing::ScopedEnv env("CKPT_TMPFS_HUGE_PAGES", huge);
    testing::TempDir shm("file-storage-huge", "/dev/shm");
    std::unique_ptr<Storage> storage = OpenOrNull("file://" + shm.string(), {});
    ASSERT_NE(storage, nullptr);
    for (size_t s = 0; s < sizes.size(); ++s) {
      const std::string key = "obj" + std::to_string(s);
      const std::string_view want(data.data(), sizes[s]);
      SCOPED_TRACE(key + " of " + std::to_string(sizes[s]) + " bytes");
      {
        Result<std::unique_ptr<WritableObject>> w = storage->NewWritable(key);
        ASSERT_TRUE(w.ok());
        for (size_t at = 0, i = s; at < want.size(); ++i) {
          const size_t n =
              std::min(appends[i % appends.size()], want.size() - at);
          ASSERT_TRUE((*w)->Append(Bytes(want.substr(at, n))).ok());
          at += n;
        }
        ASSERT_TRUE((*w)->Close().ok());
      }
      ASSERT_TRUE(storage->Put("put" + key, Bytes(want)).ok());
      for (const std::string& k : {key, "put" + key}) {
        EXPECT_EQ(fs::file_size(shm.string() + "/" + k), want.size()) << k;
        Result<std::string> got = storage->ReadAll(k);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_TRUE(*got == want) << k;
      }
    }
    EXPECT_EQ(TempFilesUnder(shm.string()), std::vector<std::string>{});
    // Not asserted (the kernel may lack MADV_COLLAPSE, or contiguous memory
    // at that moment): whether the pages are huge, for the log.
    std::printf(
        "NOTE: with CKPT_TMPFS_HUGE_PAGES=%s the 70 MiB object %s "
        "held in 2 MiB pages\n",
        huge,
        HeldInHugePages(shm.string() + "/obj4", 64 << 20) ? "is" : "is NOT");
  }
}

// A tmpfs with little room left: however the huge pages are readied
// around it, a write that fits succeeds and reads back whole.
TEST_F(FileStorageTest, HugePagesAheadNeverCostAWriteThatFits) {
  const std::string small = dir_ + "/small";
  ASSERT_EQ(::mkdir(small.c_str(), 0755), 0);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=24m") != 0) {
    FAIL() << "cannot mount a 24 MiB tmpfs (mount(2): " << std::strerror(errno)
           << "): run the tests as root (CAP_SYS_ADMIN), as CI does";
  }
  mounted_ = small;
  testing::ScopedEnv env("CKPT_TMPFS_HUGE_PAGES", "1");
  std::unique_ptr<Storage> storage = OpenOrNull("file://" + small, {});
  ASSERT_NE(storage, nullptr);
  const std::string big((23 << 20) + 5, 'z');
  {
    Result<std::unique_ptr<WritableObject>> w = storage->NewWritable("big");
    ASSERT_TRUE(w.ok());
    for (size_t at = 0; at < big.size(); at += 3 << 20) {
      const size_t n = std::min<size_t>(3 << 20, big.size() - at);
      ASSERT_TRUE((*w)->Append(Bytes(std::string_view(big).substr(at, n))).ok())
          << "at " << at;
    }
    const Status closed = (*w)->Close();
    ASSERT_TRUE(closed.ok()) << closed.ToString();
  }
  Result<std::string> got = storage->ReadAll("big");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == big);
  EXPECT_EQ(TempFilesUnder(small), std::vector<std::string>{});
}

TEST_F(FileStorageTest, DeleteRemovesEmptyParentsButNotTheRoot) {
  std::unique_ptr<Storage> storage = OpenRoot();
  ASSERT_NE(storage, nullptr);
  ASSERT_TRUE(storage->PutString("a/b/c/d", "1").ok());
  ASSERT_TRUE(storage->PutString("a/x", "2").ok());
  ASSERT_TRUE(storage->Delete("a/b/c/d").ok());
  EXPECT_FALSE(fs::exists(root_ + "/a/b"));
  EXPECT_TRUE(fs::exists(root_ + "/a/x"));
  ASSERT_TRUE(storage->Delete("a/x").ok());
  EXPECT_FALSE(fs::exists(root_ + "/a"));
  ASSERT_TRUE(storage->PutString("top", "3").ok());
  ASSERT_TRUE(storage->Delete("top").ok());
  EXPECT_TRUE(fs::is_directory(root_));
  EXPECT_TRUE(fs::is_empty(root_));
}

TEST_F(FileStorageTest, WritableOutlivesItsStorage) {
  Result<std::unique_ptr<WritableObject>> w = [&] {
    std::unique_ptr<Storage> storage = OpenRoot();
    return storage->NewWritable("late/object");
  }();
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_TRUE((*w)->Append(Bytes("bytes")).ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(ReadFile(root_ + "/late/object"), "bytes");
}

// Runs `fn` without the privilege to bypass permission checks: as root, in
// a child process that drops to uid/gid 65534 and reports the Status it got
// (its code as the exit status, its message through a pipe).
Status RunUnprivileged(const std::function<Status()>& fn) {
  if (::geteuid() != 0) return fn();
  int fds[2];
  if (::pipe(fds) != 0) return ErrnoError(errno, "pipe");
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoError(errno, "fork");
  if (pid == 0) {
    ::close(fds[0]);
    constexpr int kCannotDrop = 100;
    if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
        ::setresuid(65534, 65534, 65534) != 0) {
      ::_exit(kCannotDrop);
    }
    const Status status = fn();
    const std::string& m = status.message();
    for (size_t done = 0; done < m.size();) {
      const ssize_t n = ::write(fds[1], m.data() + done, m.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(static_cast<int>(status.code()));
  }
  ::close(fds[1]);
  std::string message;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    message.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus)) return AbortedError("the child process died");
  const int code = WEXITSTATUS(wstatus);
  if (code > static_cast<int>(ErrorCode::kFailedPrecondition)) {
    return AbortedError("the child could not drop to uid 65534");
  }
  return Status(static_cast<ErrorCode>(code), message);
}

TEST_F(FileStorageTest, PermissionDeniedIsAnIOErrorNamingThePath) {
  // uid 65534 must reach dir_ to be refused by `locked` itself.
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const std::string locked = dir_ + "/locked";
  ASSERT_EQ(::mkdir(locked.c_str(), 0700), 0);
  if (::geteuid() != 0) {
    ASSERT_EQ(::chmod(locked.c_str(), 0), 0);
  }

  const Status open_root =
      RunUnprivileged([&] { return OpenStorage("file://" + locked).status(); });
  EXPECT_EQ(open_root.code(), ErrorCode::kIOError) << open_root.ToString();
  EXPECT_TRUE(Contains(open_root.message(), locked)) << open_root.ToString();
  EXPECT_TRUE(Contains(open_root.message(), "Permission denied"))
      << open_root.ToString();

  const Status create_under = RunUnprivileged(
      [&] { return OpenStorage("file://" + locked + "/sub").status(); });
  EXPECT_EQ(create_under.code(), ErrorCode::kIOError)
      << create_under.ToString();
  EXPECT_TRUE(Contains(create_under.message(), locked + "/sub"))
      << create_under.ToString();
  ::chmod(locked.c_str(), 0700);
}

TEST_F(FileStorageTest, UnwritableDirectoryInsideTheRootIsAnIOError) {
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod(root_.c_str(), 0777), 0);
  ASSERT_EQ(::mkdir((root_ + "/ro").c_str(), 0555), 0);
  const Status put = RunUnprivileged([&] {
    Result<std::unique_ptr<Storage>> storage = OpenStorage("file://" + root_);
    if (!storage.ok()) return storage.status();
    return (*storage)->PutString("ro/x", "data");
  });
  if (::geteuid() != 0) {
    ::chmod((root_ + "/ro").c_str(), 0755);
  }
  EXPECT_EQ(put.code(), ErrorCode::kIOError) << put.ToString();
  EXPECT_TRUE(Contains(put.message(), "ro/x")) << put.ToString();
  EXPECT_TRUE(Contains(put.message(), root_)) << put.ToString();
  EXPECT_TRUE(Contains(put.message(), "Permission denied")) << put.ToString();
  EXPECT_EQ(TempFilesUnder(root_), std::vector<std::string>{});
}

TEST_F(FileStorageTest, FullDiskFailsWithoutHarm) {
  const std::string small = dir_ + "/small";
  ASSERT_EQ(::mkdir(small.c_str(), 0755), 0);
  if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=1m") != 0) {
    // Only a really full file system shows what ENOSPC does; mounting one
    // needs CAP_SYS_ADMIN, which CI has (it runs as root).
    FAIL() << "cannot mount a 1 MiB tmpfs to fill (mount(2): "
           << std::strerror(errno)
           << "): run the tests as root (CAP_SYS_ADMIN), as CI does";
  }
  mounted_ = small;
  std::unique_ptr<Storage> storage = OpenOrNull("file://" + small, {});
  ASSERT_NE(storage, nullptr);
  ASSERT_TRUE(storage->PutString("keep", "precious").ok());

  const std::string big(2 << 20, 'x');
  for (const char* key : {"keep", "big"}) {
    SCOPED_TRACE(key);
    const Status put = storage->PutString(key, big);
    EXPECT_EQ(put.code(), ErrorCode::kIOError) << put.ToString();
    EXPECT_TRUE(Contains(put.message(), "No space left")) << put.ToString();
    EXPECT_TRUE(Contains(put.message(), key)) << put.ToString();
  }
  {
    Result<std::unique_ptr<WritableObject>> w = storage->NewWritable("stream");
    ASSERT_TRUE(w.ok());
    Status status;
    for (int i = 0; i < 32 && status.ok(); ++i) {
      status = (*w)->Append(Bytes(std::string_view(big).substr(0, 64 << 10)));
    }
    if (status.ok()) status = (*w)->Close();
    EXPECT_EQ(status.code(), ErrorCode::kIOError) << status.ToString();
    EXPECT_TRUE(Contains(status.message(), "No space left"))
        << status.ToString();
  }

  Result<std::string> kept = storage->ReadAll("keep");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(*kept, "precious");
  EXPECT_EQ(ListKeys(*storage, ""), std::vector<std::string>{"keep"});
  EXPECT_EQ(TempFilesUnder(small), std::vector<std::string>{});
  // The failed writes gave their space back.
  EXPECT_TRUE(storage->PutString("after", std::string(512 << 10, 'y')).ok());
}

}  // namespace
}  // namespace ckpt
