#include "testing/storage_conformance.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace ckpt {

// Deterministic bytes that differ with `seed`, so reading the wrong object
// or the wrong offset shows.
std::string TestPattern(size_t size, uint64_t seed) {
  std::string out(size, '\0');
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (char& c : out) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return out;
}

void PrintTo(const StorageConformanceParams& params, std::ostream* os) {
  *os << params.name;
}

std::string StorageConformanceTestName(
    const ::testing::TestParamInfo<StorageConformanceParams>& info) {
  return info.param.name;
}

namespace {

std::unique_ptr<Storage> Open(const StorageConformanceParams& params,
                              const testing::TestRoot& root,
                              const std::string& url, bool create) {
  if (params.open) return params.open(url, create);
  Result<std::unique_ptr<Storage>> storage =
      OpenStorage(url, root.storage_options(create));
  if (!storage.ok()) {
    ADD_FAILURE() << storage.status().ToString();
    return nullptr;
  }
  return std::move(storage).value();
}

}  // namespace

void StorageConformanceTest::SetUp() {
  root_.emplace(GetParam().backend, "conformance-" + GetParam().name);
  storage_ = Open(GetParam(), *root_, root_->url(), true);
  ASSERT_NE(storage_, nullptr) << GetParam().name << ": open failed";
  url_ = storage_->url();
}

void StorageConformanceTest::TearDown() {
  storage_.reset();
  root_.reset();
}

std::unique_ptr<Storage> StorageConformanceTest::Reopen() {
  return Open(GetParam(), *root_, url_, false);
}

namespace {

std::span<const std::byte> Bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

std::span<std::byte> MutableBytes(std::string& s) {
  return {reinterpret_cast<std::byte*>(s.data()), s.size()};
}

using Strings = std::vector<std::string>;

Strings Keys(const std::vector<ObjectInfo>& infos) {
  Strings out;
  for (const ObjectInfo& info : infos) out.push_back(info.key);
  return out;
}

// The keys List(prefix) returns, or a failure and nothing.
Strings ListKeys(Storage& storage, std::string_view prefix) {
  Result<std::vector<ObjectInfo>> listed = storage.List(prefix);
  if (!listed.ok()) {
    ADD_FAILURE() << "List(\"" << prefix
                  << "\"): " << listed.status().ToString();
    return {};
  }
  return Keys(*listed);
}

// The object's bytes, or a failure and a string no test expects.
std::string Read(Storage& storage, std::string_view key) {
  Result<std::string> read = storage.ReadAll(key);
  if (!read.ok()) {
    ADD_FAILURE() << "ReadAll(\"" << key << "\"): " << read.status().ToString();
    return "<read failed>";
  }
  return *std::move(read);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

::testing::AssertionResult IsOk(const Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status.ToString();
}

::testing::AssertionResult HasCode(const Status& status, ErrorCode code) {
  if (status.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected " << ErrorCodeName(code) << ", got " << status.ToString();
}

TEST_P(StorageConformanceTest, PutThenReadAndStat) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{5} << 20}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::string key = "dir/object-" + std::to_string(size);
    const std::string data = TestPattern(size, size);
    const int64_t before_ms = NowMs();
    ASSERT_TRUE(IsOk(storage().Put(key, Bytes(data))));

    Result<std::string> read = storage().ReadAll(key);
    ASSERT_TRUE(IsOk(read.status()));
    EXPECT_TRUE(*read == data) << "ReadAll returned different bytes";

    Result<ObjectInfo> info = storage().Stat(key);
    ASSERT_TRUE(IsOk(info.status()));
    EXPECT_EQ(info->key, key);
    EXPECT_EQ(info->size, size);
    // Generous bounds: a remote store's clock may differ from ours.
    EXPECT_GT(info->mtime_unix_ms, before_ms - 24 * 3600 * 1000);
    EXPECT_LT(info->mtime_unix_ms, NowMs() + 24 * 3600 * 1000);

    if (size > 2) {
      std::string middle(size - 2, '\0');
      ASSERT_TRUE(IsOk(storage().ReadRange(key, 1, MutableBytes(middle))));
      EXPECT_TRUE(middle == data.substr(1, size - 2));
    }
  }
}

// A writer that learns an object's first bytes last (a compressed data
// object's header) rewrites them before Close where the storage can; the
// published object holds the new bytes and the rest as streamed, over
// O_DIRECT blocks and small appends alike (s3://: a single PUT, and a
// multipart upload whose first part waits until Close). A storage that
// cannot says so.
TEST_P(StorageConformanceTest, RewrittenPrefixIsPublished) {
  for (size_t size : {size_t{100}, size_t{9} << 20}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::string key = "dir/rewritten-" + std::to_string(size);
    std::string data = TestPattern(size, 7);
    auto w = storage().NewWritable(key);
    ASSERT_TRUE(IsOk(w.status()));
    if (!(*w)->KeepPrefix(64)) {
      EXPECT_FALSE((*w)->RewritePrefix(Bytes(data.substr(0, 1))).ok());
      GTEST_SKIP() << "this storage does not rewrite first bytes (writers "
                      "hold what follows instead)";
    }
    ASSERT_TRUE(IsOk((*w)->Append(Bytes(std::string(64, ' ')))));
    ASSERT_TRUE(IsOk((*w)->Append(Bytes(data.substr(64)))));
    EXPECT_FALSE((*w)->RewritePrefix(Bytes(data + "x")).ok());
    ASSERT_TRUE(IsOk((*w)->RewritePrefix(Bytes(data.substr(0, 64)))));
    ASSERT_TRUE(IsOk((*w)->Close()));
    EXPECT_TRUE(Read(storage(), key) == data);
  }
}

TEST_P(StorageConformanceTest, MissingObjectIsNotFound) {
  ASSERT_TRUE(IsOk(storage().PutString("present", "x")));
  EXPECT_TRUE(HasCode(storage().Stat("absent").status(), ErrorCode::kNotFound));
  EXPECT_TRUE(
      HasCode(storage().ReadAll("absent").status(), ErrorCode::kNotFound));
  EXPECT_TRUE(
      HasCode(storage().Stat("no/such/dir/x").status(), ErrorCode::kNotFound));
  std::string one(1, '\0');
  EXPECT_TRUE(HasCode(storage().ReadRange("absent", 0, MutableBytes(one)),
                      ErrorCode::kNotFound));
}

TEST_P(StorageConformanceTest, OverwriteReplaces) {
  ASSERT_TRUE(IsOk(storage().PutString("k", "first, and longer")));
  ASSERT_TRUE(IsOk(storage().PutString("k", "second")));
  Result<std::string> read = storage().ReadAll("k");
  ASSERT_TRUE(IsOk(read.status()));
  EXPECT_EQ(*read, "second");
  EXPECT_EQ(storage().Stat("k")->size, 6u);

  Result<std::unique_ptr<WritableObject>> w = storage().NewWritable("k");
  ASSERT_TRUE(IsOk(w.status()));
  ASSERT_TRUE(IsOk((*w)->Append(Bytes("third"))));
  ASSERT_TRUE(IsOk((*w)->Close()));
  EXPECT_EQ(Read(storage(), "k"), "third");
}

// A reader racing an overwrite sees the old object or the new one, never a
// mix. (Both have the same size, so the check does not depend on ReadAll
// reading size and bytes from one version.)
TEST_P(StorageConformanceTest, OverwriteIsAtomicForReaders) {
  constexpr size_t kSize = 256 << 10;
  const std::string a(kSize, 'a');
  const std::string b(kSize, 'b');
  ASSERT_TRUE(IsOk(storage().Put("atomic", Bytes(a))));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> failed{0};
  std::thread reader([&] {
    while (!done.load()) {
      Result<std::string> read = storage().ReadAll("atomic");
      if (!read.ok()) {
        failed.fetch_add(1);
      } else if (*read != a && *read != b) {
        torn.fetch_add(1);
      }
    }
  });
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(IsOk(storage().Put("atomic", Bytes(i % 2 ? a : b))));
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0) << "a reader saw a partly written object";
  EXPECT_EQ(failed.load(), 0) << "a read failed during an overwrite";
}

TEST_P(StorageConformanceTest, CreateIfAbsentKeepsTheFirst) {
  ASSERT_TRUE(
      IsOk(storage().PutString("commit", "first", PutMode::kCreateIfAbsent)));
  EXPECT_TRUE(
      HasCode(storage().PutString("commit", "second", PutMode::kCreateIfAbsent),
              ErrorCode::kAlreadyExists));
  EXPECT_EQ(Read(storage(), "commit"), "first");
  EXPECT_EQ(ListKeys(storage(), "commit"), (Strings{"commit"}));
}

// With atomic_create_if_absent, exactly one of racing writers wins. Without
// it (a store that cannot refuse an existing object: create-if-absent is a
// check and then a write) the race is documented, and what is checked is
// that it stays benign: someone wins and every loser is told AlreadyExists.
// Either way the object then holds one winner's bytes, whole: a write takes
// effect entirely or not at all, also when several writers put one key at
// once (two takers of a root's lease on such a store do). Each writes
// 256 KiB, so that bytes of two writers could interleave.
TEST_P(StorageConformanceTest, CreateIfAbsentRaceHasOneWinner) {
  const bool atomic = storage().capabilities().atomic_create_if_absent;
  constexpr int kThreads = 8;
  auto Body = [](int t) {
    return "writer " + std::to_string(t) + ":" +
           std::string(256 << 10, static_cast<char>('a' + t));
  };
  for (int round = 0; round < 5; ++round) {
    const std::string key = "step-" + std::to_string(round) + "/MANIFEST.json";
    std::atomic<int> ready{0};
    std::vector<Status> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < kThreads) std::this_thread::yield();
        results[t] =
            storage().PutString(key, Body(t), PutMode::kCreateIfAbsent);
      });
    }
    for (std::thread& t : threads) t.join();
    std::vector<std::string> winners;
    for (int t = 0; t < kThreads; ++t) {
      if (results[t].ok()) {
        winners.push_back(Body(t));
      } else {
        EXPECT_TRUE(HasCode(results[t], ErrorCode::kAlreadyExists));
      }
    }
    ASSERT_FALSE(winners.empty()) << "no writer won " << key;
    if (atomic) {
      EXPECT_EQ(winners.size(), 1u) << "two writers won " << key;
    }
    const std::string stored = Read(storage(), key);
    EXPECT_NE(std::find(winners.begin(), winners.end(), stored), winners.end())
        << key << " holds " << stored.size() << " bytes beginning \""
        << stored.substr(0, 16) << "\", which no winner wrote whole";
  }
}

TEST_P(StorageConformanceTest, StreamedWriteOfManyParts) {
  Result<std::unique_ptr<WritableObject>> w =
      storage().NewWritable("stream/data");
  ASSERT_TRUE(IsOk(w.status()));
  std::string expected;
  // Many tiny parts, empty ones, and parts larger than any write buffer.
  for (int i = 0; i < 10000; ++i) {
    const std::string part = TestPattern(i % 7, i);
    ASSERT_TRUE(IsOk((*w)->Append(Bytes(part))));
    expected += part;
  }
  for (size_t size : {size_t{3} << 20, size_t{1}, size_t{300} << 10}) {
    const std::string part = TestPattern(size, size);
    ASSERT_TRUE(IsOk((*w)->Append(Bytes(part))));
    expected += part;
  }
  EXPECT_EQ((*w)->size(), expected.size());

  EXPECT_TRUE(
      HasCode(storage().Stat("stream/data").status(), ErrorCode::kNotFound));
  for (const std::string& key : ListKeys(storage(), "")) {
    EXPECT_NE(key, "stream/data") << "visible before Close";
  }

  ASSERT_TRUE(IsOk((*w)->Close()));
  Result<std::string> read = storage().ReadAll("stream/data");
  ASSERT_TRUE(IsOk(read.status()));
  EXPECT_EQ(read->size(), expected.size());
  EXPECT_TRUE(*read == expected) << "streamed bytes differ";

  EXPECT_FALSE((*w)->Append(Bytes("late")).ok());
  EXPECT_FALSE((*w)->Close().ok());
  EXPECT_TRUE(Read(storage(), "stream/data") == expected);
}

TEST_P(StorageConformanceTest, WritableDestroyedWithoutCloseLeavesNothing) {
  {
    Result<std::unique_ptr<WritableObject>> w =
        storage().NewWritable("abandoned/object");
    ASSERT_TRUE(IsOk(w.status()));
    ASSERT_TRUE(IsOk((*w)->Append(Bytes(TestPattern(2 << 20, 1)))));
  }
  EXPECT_TRUE(HasCode(storage().Stat("abandoned/object").status(),
                      ErrorCode::kNotFound));
  EXPECT_EQ(ListKeys(storage(), "abandoned/object"), Strings{});

  // An object already under the key is left as it was.
  ASSERT_TRUE(IsOk(storage().PutString("kept", "old")));
  {
    Result<std::unique_ptr<WritableObject>> w = storage().NewWritable("kept");
    ASSERT_TRUE(IsOk(w.status()));
    ASSERT_TRUE(IsOk((*w)->Append(Bytes("new"))));
  }
  EXPECT_EQ(Read(storage(), "kept"), "old");
  EXPECT_EQ(ListKeys(storage(), "kept"), (Strings{"kept"}));
}

TEST_P(StorageConformanceTest, ReadRangeAtTheEdges) {
  const std::string data = "0123456789";
  ASSERT_TRUE(IsOk(storage().PutString("ten", data)));
  std::string out;

  EXPECT_TRUE(IsOk(storage().ReadRange("ten", 10, MutableBytes(out))));
  EXPECT_TRUE(IsOk(storage().ReadRange("ten", 0, MutableBytes(out))));
  out.assign(10, '\0');
  EXPECT_TRUE(IsOk(storage().ReadRange("ten", 0, MutableBytes(out))));
  EXPECT_EQ(out, data);
  out.assign(1, '\0');
  EXPECT_TRUE(IsOk(storage().ReadRange("ten", 9, MutableBytes(out))));
  EXPECT_EQ(out, "9");

  out.assign(2, '\0');
  Status past = storage().ReadRange("ten", 9, MutableBytes(out));
  EXPECT_TRUE(HasCode(past, ErrorCode::kDataLoss));
  EXPECT_NE(past.message().find("ten"), std::string::npos) << past.ToString();
  out.clear();
  EXPECT_TRUE(HasCode(storage().ReadRange("ten", 11, MutableBytes(out)),
                      ErrorCode::kDataLoss));
  out.assign(1, '\0');
  EXPECT_TRUE(
      HasCode(storage().ReadRange("ten", std::numeric_limits<uint64_t>::max(),
                                  MutableBytes(out)),
              ErrorCode::kDataLoss));
  EXPECT_TRUE(HasCode(storage().ReadRange("missing", 0, MutableBytes(out)),
                      ErrorCode::kNotFound));

  ASSERT_TRUE(IsOk(storage().PutString("empty", "")));
  out.clear();
  EXPECT_TRUE(IsOk(storage().ReadRange("empty", 0, MutableBytes(out))));
  out.assign(1, '\0');
  EXPECT_TRUE(HasCode(storage().ReadRange("empty", 0, MutableBytes(out)),
                      ErrorCode::kDataLoss));
}

// ReadRangeFilling hands over every byte of the range, in order, each
// stretch once it holds its bytes, and fails as ReadRange does.
TEST_P(StorageConformanceTest, ReadRangeFillingHandsOverTheRangeInOrder) {
  std::string data(3 * 1024 * 1024 + 4099, '\0');
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>((i * 2654435761u) >> 13);
  }
  ASSERT_TRUE(IsOk(storage().PutString("big", data)));
  for (const auto& [offset, len] :
       std::vector<std::pair<uint64_t, size_t>>{{0, data.size()},
                                                {4097, data.size() - 4097},
                                                {777, 5},
                                                {data.size(), 0}}) {
    std::string out(len, '\0');
    const std::byte* next = reinterpret_cast<const std::byte*>(out.data());
    bool in_place = true;
    std::string seen;
    EXPECT_TRUE(IsOk(storage().ReadRangeFilling(
        "big", offset, MutableBytes(out),
        [&](std::span<const std::byte> piece) {
          in_place = in_place && piece.data() == next;
          next = piece.data() + piece.size();
          // What the stretch holds when it is handed over.
          seen.append(reinterpret_cast<const char*>(piece.data()),
                      piece.size());
        })));
    EXPECT_TRUE(in_place) << "offset " << offset;
    EXPECT_EQ(next, reinterpret_cast<const std::byte*>(out.data()) + len);
    EXPECT_TRUE(seen == data.substr(offset, len)) << "offset " << offset;
    EXPECT_TRUE(out == seen) << "offset " << offset;
  }
  auto none = [](std::span<const std::byte>) {};
  std::string out(2, '\0');
  EXPECT_TRUE(HasCode(storage().ReadRangeFilling("big", data.size() - 1,
                                                 MutableBytes(out), none),
                      ErrorCode::kDataLoss));
  EXPECT_TRUE(
      HasCode(storage().ReadRangeFilling("missing", 0, MutableBytes(out), none),
              ErrorCode::kNotFound));
}

TEST_P(StorageConformanceTest, ListByPrefix) {
  EXPECT_EQ(ListKeys(storage(), ""), Strings{});
  // No key is both an object and a directory of others: file:// cannot
  // store that.
  for (const char* key : {"b/y/z", "ab/d/e", "abc", "a.txt", "ab/c", "b/x",
                          "step-000000000042/MANIFEST.json",
                          "step-000000000042/r00000-1.safetensors"}) {
    ASSERT_TRUE(IsOk(storage().PutString(key, key)));
  }
  EXPECT_EQ(ListKeys(storage(), ""),
            (Strings{"a.txt", "ab/c", "ab/d/e", "abc", "b/x", "b/y/z",
                     "step-000000000042/MANIFEST.json",
                     "step-000000000042/r00000-1.safetensors"}));
  EXPECT_EQ(ListKeys(storage(), "a"),
            (Strings{"a.txt", "ab/c", "ab/d/e", "abc"}));
  EXPECT_EQ(ListKeys(storage(), "ab"), (Strings{"ab/c", "ab/d/e", "abc"}));
  EXPECT_EQ(ListKeys(storage(), "ab/"), (Strings{"ab/c", "ab/d/e"}));
  EXPECT_EQ(ListKeys(storage(), "ab/d"), (Strings{"ab/d/e"}));
  EXPECT_EQ(ListKeys(storage(), "b/y/z"), (Strings{"b/y/z"}));
  EXPECT_EQ(ListKeys(storage(), "step-"),
            (Strings{"step-000000000042/MANIFEST.json",
                     "step-000000000042/r00000-1.safetensors"}));
  EXPECT_EQ(ListKeys(storage(), "step-000000000042/M"),
            (Strings{"step-000000000042/MANIFEST.json"}));
  EXPECT_EQ(ListKeys(storage(), "zzz"), Strings{});
  EXPECT_EQ(ListKeys(storage(), "ab/c/"), Strings{});
  EXPECT_EQ(ListKeys(storage(), "no/such/dir/"), Strings{});

  Result<std::vector<ObjectInfo>> infos = storage().List("ab/d/");
  ASSERT_TRUE(IsOk(infos.status()));
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].size, std::string("ab/d/e").size());
  EXPECT_GT((*infos)[0].mtime_unix_ms, 0);
}

TEST_P(StorageConformanceTest, DeleteRemovesTheObject) {
  ASSERT_TRUE(IsOk(storage().PutString("gone", "x")));
  ASSERT_TRUE(IsOk(storage().Delete("gone")));
  EXPECT_TRUE(HasCode(storage().Stat("gone").status(), ErrorCode::kNotFound));
  EXPECT_TRUE(
      HasCode(storage().ReadAll("gone").status(), ErrorCode::kNotFound));
  EXPECT_TRUE(HasCode(storage().Delete("gone"), ErrorCode::kNotFound));
  EXPECT_TRUE(HasCode(storage().Delete("never/was"), ErrorCode::kNotFound));
  EXPECT_EQ(ListKeys(storage(), ""), Strings{});
}

TEST_P(StorageConformanceTest, DeleteOfANestedObjectKeepsItsSiblings) {
  ASSERT_TRUE(IsOk(storage().PutString("x/y/z", "1")));
  ASSERT_TRUE(IsOk(storage().PutString("x/w", "2")));
  ASSERT_TRUE(IsOk(storage().Delete("x/y/z")));
  EXPECT_EQ(ListKeys(storage(), "x"), (Strings{"x/w"}));
  EXPECT_EQ(Read(storage(), "x/w"), "2");
  // The key can be written again after its directories went away.
  ASSERT_TRUE(IsOk(storage().PutString("x/y/z", "3")));
  EXPECT_EQ(Read(storage(), "x/y/z"), "3");
  ASSERT_TRUE(IsOk(storage().Delete("x/y/z")));
  ASSERT_TRUE(IsOk(storage().Delete("x/w")));
  EXPECT_EQ(ListKeys(storage(), ""), Strings{});
}

TEST_P(StorageConformanceTest, InvalidKeysAreRejectedByEveryMethod) {
  ASSERT_TRUE(IsOk(storage().PutString("a/b", "x")));
  const std::vector<std::string> bad = {
      "",     "/abs",  "a/../b", "a//b", std::string("a\0b", 3),
      "..",   "a/./b", ".",      "a/",   "../escape",
      "a\\b", "a\nb"};
  for (const std::string& key : bad) {
    SCOPED_TRACE("key \"" + key + "\"");
    std::string out(1, '\0');
    EXPECT_TRUE(
        HasCode(storage().PutString(key, "x"), ErrorCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(storage().PutString(key, "x", PutMode::kCreateIfAbsent),
                        ErrorCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(storage().NewWritable(key).status(),
                        ErrorCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(storage().ReadRange(key, 0, MutableBytes(out)),
                        ErrorCode::kInvalidArgument));
    EXPECT_TRUE(
        HasCode(storage().ReadAll(key).status(), ErrorCode::kInvalidArgument));
    EXPECT_TRUE(
        HasCode(storage().Stat(key).status(), ErrorCode::kInvalidArgument));
    EXPECT_TRUE(HasCode(storage().Delete(key), ErrorCode::kInvalidArgument));
  }
  EXPECT_EQ(ListKeys(storage(), ""), (Strings{"a/b"}));
  EXPECT_EQ(Read(storage(), "a/b"), "x");
}

// A prefix is not a key, so a backend may reject a hostile one or list
// nothing for it; it must never list objects it does not hold.
TEST_P(StorageConformanceTest, HostilePrefixesListNothing) {
  ASSERT_TRUE(IsOk(storage().PutString("a/b", "x")));
  for (const std::string& prefix :
       {std::string("../"), std::string("/"), std::string("a/../"),
        std::string("a//"), std::string("a/./"), std::string("a\0b", 3)}) {
    SCOPED_TRACE("prefix \"" + prefix + "\"");
    Result<std::vector<ObjectInfo>> listed = storage().List(prefix);
    if (listed.ok()) {
      EXPECT_EQ(Keys(*listed), Strings{});
    } else {
      EXPECT_TRUE(HasCode(listed.status(), ErrorCode::kInvalidArgument));
    }
  }
}

TEST_P(StorageConformanceTest, LongKeyComponent) {
  const std::string key =
      "dir/" + std::string(GetParam().longest_key_component, 'n');
  ASSERT_TRUE(IsOk(storage().PutString(key, "long")));
  ASSERT_TRUE(IsOk(storage().PutString(key, "longer")));
  EXPECT_EQ(Read(storage(), key), "longer");
  EXPECT_EQ(ListKeys(storage(), "dir/"), (Strings{key}));
}

TEST_P(StorageConformanceTest, ReopenSeesTheData) {
  ASSERT_TRUE(IsOk(storage().PutString("top", "1")));
  ASSERT_TRUE(IsOk(storage().PutString("step-000000000001/MANIFEST.json", "2",
                                       PutMode::kCreateIfAbsent)));
  Result<std::unique_ptr<WritableObject>> w =
      storage().NewWritable("step-000000000001/r00000.safetensors");
  ASSERT_TRUE(IsOk(w.status()));
  ASSERT_TRUE(IsOk((*w)->Append(Bytes("3"))));
  ASSERT_TRUE(IsOk((*w)->Close()));

  std::unique_ptr<Storage> second = Reopen();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(Read(*second, "top"), "1");

  storage_.reset();  // as after a restart: the first handle is gone
  std::unique_ptr<Storage> third = Reopen();
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(ListKeys(*third, ""),
            (Strings{"step-000000000001/MANIFEST.json",
                     "step-000000000001/r00000.safetensors", "top"}));
  EXPECT_EQ(Read(*third, "step-000000000001/MANIFEST.json"), "2");
  EXPECT_EQ(Read(*third, "step-000000000001/r00000.safetensors"), "3");
  EXPECT_TRUE(HasCode(third->PutString("step-000000000001/MANIFEST.json", "4",
                                       PutMode::kCreateIfAbsent),
                      ErrorCode::kAlreadyExists));
  storage_ = std::move(third);
}

// Writers and deleters sharing directories: a Delete that empties a
// directory must not break a writer about to create a file in it.
TEST_P(StorageConformanceTest, ConcurrentWritesAndDeletesInSharedDirs) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  const bool keep = GetParam().keep_shared_folder_nonempty;
  if (keep) {
    ASSERT_TRUE(storage().PutString("shared/dir/keep", "k").ok());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        const std::string key = "shared/dir/t" + std::to_string(t);
        const std::string data = std::to_string(i);
        Status put = storage().PutString(key, data);
        if (!put.ok()) {
          ADD_FAILURE() << put.ToString();
          failures.fetch_add(1);
          continue;
        }
        Result<std::string> read = storage().ReadAll(key);
        if (!read.ok() || *read != data) {
          ADD_FAILURE() << "read back " << key << ": "
                        << (read.ok()
                                ? "\"" + *read + "\", wrote \"" + data + "\""
                                : read.status().ToString());
          failures.fetch_add(1);
        }
        if (i + 1 < kRounds) {
          Status del = storage().Delete(key);
          if (!del.ok()) {
            ADD_FAILURE() << del.ToString();
            failures.fetch_add(1);
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  Strings expected = {"shared/dir/t0", "shared/dir/t1", "shared/dir/t2",
                      "shared/dir/t3"};
  if (keep) expected.insert(expected.begin(), "shared/dir/keep");
  EXPECT_EQ(ListKeys(storage(), "shared/"), expected);
}

// Writes that finished, were refused or were abandoned leave only the
// objects written, and neither those nor any other key a user or ckpt
// writes is mistaken for a temporary: on every backend, TemporaryOf marks
// only the remains of a crashed write (the file backend's test checks those).
TEST_P(StorageConformanceTest, OrdinaryKeysAreNotTemporaries) {
  const Strings written = {
      "LATEST",
      "notes.txt",
      "step-000000000001/MANIFEST.json",
      "step-000000000001/r00000-0123456789abcdef.safetensors",
      "user/data.ckpt-tmp",
  };
  for (const std::string& key : written) {
    ASSERT_TRUE(IsOk(storage().PutString(key, "bytes"))) << key;
  }
  EXPECT_TRUE(
      HasCode(storage().PutString("LATEST", "again", PutMode::kCreateIfAbsent),
              ErrorCode::kAlreadyExists));
  {
    Result<std::unique_ptr<WritableObject>> abandoned =
        storage().NewWritable("step-000000000002/r00000-0123456789abcdef");
    ASSERT_TRUE(IsOk(abandoned.status()));
    ASSERT_TRUE(IsOk((*abandoned)->Append(Bytes("never closed"))));
  }
  EXPECT_EQ(ListKeys(storage(), ""), written);
  Strings keys = written;
  keys.insert(keys.end(), {"a", "a/b/c", "x.tmp",
                           "step-000000000002/r00000-0123456789abcdef"});
  for (const std::string& key : keys) {
    EXPECT_EQ(storage().TemporaryOf(key), std::nullopt) << key;
  }
}

}  // namespace
}  // namespace ckpt
