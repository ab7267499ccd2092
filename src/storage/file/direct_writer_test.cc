// Streamed writes to file:// roots go through O_DIRECT blocks: objects of
// every size around the block and alignment edges come back byte for byte.
#include "storage/file/direct_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ckpt/storage.h"
#include "gtest/gtest.h"
#include "testing/files.h"
#include "testing/temp_dir.h"

namespace ckpt {
namespace {

std::vector<std::byte> Bytes(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(gen());
  return out;
}

class DirectWriterTest : public ::testing::Test {
 protected:
  // On disk: a tmpfs /tmp may refuse O_DIRECT.
  const testing::TempDir temp_{"direct", "/var/tmp"};
  const std::string dir_ = temp_.string();
};

TEST_F(DirectWriterTest, StreamedObjectsOfEverySizeReadBackExactly) {
  auto storage = OpenStorage(dir_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  const size_t block = DirectWriter::kBlock;
  const size_t align = DirectWriter::kAlign;
  const std::vector<size_t> sizes = {
      0,     1,         align - 1,         align,    align + 1, block - 1,
      block, block + 1, 3 * block + 12345, 5 * block};
  for (size_t size : sizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    const std::vector<std::byte> want = Bytes(size, size);
    auto w = (*storage)->NewWritable("obj/" + std::to_string(size));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    // Appends of awkward lengths, as the writer's header and slices are.
    for (size_t pos = 0, step = 777; pos < size; pos += step, step *= 3) {
      const size_t n = std::min(step, size - pos);
      ASSERT_TRUE((*w)->Append(std::span(want).subspan(pos, n)).ok());
    }
    EXPECT_EQ((*w)->size(), size);
    ASSERT_TRUE((*w)->Close().ok());
    auto info = (*storage)->Stat("obj/" + std::to_string(size));
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->size, size);
    auto got = (*storage)->ReadAll("obj/" + std::to_string(size));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), size);
    // memcmp must not see the null data() of an empty vector.
    if (size > 0) {
      EXPECT_EQ(std::memcmp(got->data(), want.data(), size), 0);
    }
  }
}

TEST_F(DirectWriterTest, WritesAFileOpenedWithODirect) {
  const std::string path = dir_ + "/direct";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0) << "this file system refuses O_DIRECT";
  const std::vector<std::byte> want = Bytes(2 * DirectWriter::kBlock + 5, 9);
  {
    DirectWriter w(fd);
    ASSERT_EQ(w.Append(want), 0);
    ASSERT_EQ(w.Finish(), 0);
  }
  ::close(fd);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), want.size());
}

// Retained appends go out in place where memory and file position are both
// aligned and are copied elsewhere; any mix of the two, at any offsets and
// lengths, must give exactly the bytes appended, in order.
TEST_F(DirectWriterTest, RetainedAppendsInPlaceOrCopiedReadBackExactly) {
  constexpr size_t kAlign = DirectWriter::kAlign;
  const size_t source_size = 3 * DirectWriter::kBlock;
  // Page-aligned memory, as staging copies and mmap'ed tensors are.
  std::byte* source =
      static_cast<std::byte*>(std::aligned_alloc(kAlign, source_size));
  ASSERT_NE(source, nullptr);
  std::mt19937_64 gen(17);
  for (size_t i = 0; i < source_size; i += sizeof(uint64_t)) {
    const uint64_t v = gen();
    std::memcpy(source + i, &v, sizeof v);
  }
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string path = dir_ + "/mixed" + std::to_string(round);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
    ASSERT_GE(fd, 0) << "this file system refuses O_DIRECT";
    std::vector<std::byte> want;
    uint64_t in_place = 0;
    {
      DirectWriter w(fd);
      for (int op = 0; op < 8; ++op) {
        // Aligned starts and lengths half of the time, so that stretches
        // line up; odd ones otherwise, to break the alignment mid-object.
        const bool aligned = gen() % 2 == 0;
        size_t len = gen() % (DirectWriter::kBlock + 3 * kAlign);
        if (aligned) len = len / kAlign * kAlign;
        size_t start = gen() % (source_size - len + 1);
        if (aligned) start = start / kAlign * kAlign;
        const std::span<const std::byte> data(source + start, len);
        want.insert(want.end(), data.begin(), data.end());
        ASSERT_EQ(gen() % 4 == 0 ? w.Append(data) : w.AppendRetained(data), 0);
      }
      ASSERT_EQ(w.Finish(), 0);
      in_place = w.bytes_in_place();
    }
    ::close(fd);
    const std::string got = testing::ReadFile(path);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_TRUE(want.empty() ||
                std::memcmp(got.data(), want.data(), want.size()) == 0);
    EXPECT_LE(in_place, want.size());
  }
  std::free(source);
}

TEST_F(DirectWriterTest, AlignedRetainedBytesAreNotCopied) {
  const size_t size = 3 * DirectWriter::kBlock + 100;
  // aligned_alloc wants a whole number of alignments.
  std::byte* source = static_cast<std::byte*>(std::aligned_alloc(
      DirectWriter::kAlign,
      (size / DirectWriter::kAlign + 1) * DirectWriter::kAlign));
  ASSERT_NE(source, nullptr);
  std::memset(source, 7, size);
  const std::string path = dir_ + "/inplace";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  ASSERT_GE(fd, 0) << "this file system refuses O_DIRECT";
  {
    DirectWriter w(fd);
    // A page of header first, as a data object's, then the tensor.
    const std::vector<std::byte> header(DirectWriter::kAlign, std::byte{1});
    ASSERT_EQ(w.Append(header), 0);
    ASSERT_EQ(w.AppendRetained(std::span<const std::byte>(source, size)), 0);
    ASSERT_EQ(w.Finish(), 0);
    // All but the unaligned tail of 100 bytes went out in place.
    EXPECT_EQ(w.bytes_in_place(), 3 * DirectWriter::kBlock);
  }
  ::close(fd);
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), DirectWriter::kAlign + size);
  std::free(source);
}

// Reads of 1 MiB and more go through O_DIRECT blocks: any offset and length
// (unaligned, across blocks, up to the very end) must give exactly the bytes,
// and a range past the end must still be refused.
TEST_F(DirectWriterTest, LargeRangeReadsAtAnyOffsetReadBackExactly) {
  auto storage = OpenStorage(dir_);
  ASSERT_TRUE(storage.ok()) << storage.status().ToString();
  const size_t size = 2 * DirectWriter::kBlock + 4321;
  const std::vector<std::byte> want = Bytes(size, 23);
  ASSERT_TRUE((*storage)->Put("big", want).ok());
  std::mt19937_64 gen(29);
  std::vector<std::pair<size_t, size_t>> ranges = {
      {0, size},
      {1, size - 1},
      {size - (1 << 20), 1 << 20},
      {DirectWriter::kBlock - 1, DirectWriter::kBlock + 2}};
  for (int i = 0; i < 20; ++i) {
    const size_t len = (1 << 20) + gen() % (size - (1 << 20));
    ranges.emplace_back(gen() % (size - len + 1), len);
  }
  for (auto [offset, len] : ranges) {
    SCOPED_TRACE("offset " + std::to_string(offset) + " length " +
                 std::to_string(len));
    std::vector<std::byte> got(len);
    ASSERT_TRUE((*storage)->ReadRange("big", offset, got).ok());
    EXPECT_EQ(std::memcmp(got.data(), want.data() + offset, len), 0);
  }
  std::vector<std::byte> past(1 << 20);
  EXPECT_EQ((*storage)->ReadRange("big", size - past.size() + 1, past).code(),
            ErrorCode::kDataLoss);
}

TEST_F(DirectWriterTest, AWriteErrorIsReported) {
  // A read-only descriptor: every write fails with EBADF.
  const std::string path = dir_ + "/ro";
  ::close(::open(path.c_str(), O_WRONLY | O_CREAT, 0644));
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  {
    DirectWriter w(fd);
    const std::vector<std::byte> data = Bytes(3 * DirectWriter::kBlock, 1);
    int err = w.Append(data);
    if (err == 0) err = w.Finish();
    EXPECT_EQ(err, EBADF);
  }
  ::close(fd);
}

}  // namespace
}  // namespace ckpt
