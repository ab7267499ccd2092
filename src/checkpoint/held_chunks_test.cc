// The memory a read-once load holds its chunks in (held_chunks.h): reads
// take the held bytes from it and the rest from the root's storage, and
// views are offered only once every chunk the rank needs is held, and stay
// valid after the load lets the storage go.
#include "checkpoint/held_chunks.h"

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/communicator.h"
#include "gtest/gtest.h"
#include "testing/run_ranks.h"

namespace ckpt {
namespace {

constexpr uint64_t kPage = 4096;

std::string Pattern(size_t n, char base) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(base + i % 23);
  return s;
}

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

class HeldChunksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened =
        OpenStorage("mem://held-chunks-" +
                    std::to_string(reinterpret_cast<uintptr_t>(this)));
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    storage_ = std::move(*opened);
    object_ = Pattern(3 * kPage, 'a');
    ASSERT_TRUE(storage_->Put("obj", Bytes(object_), PutMode::kOverwrite).ok());
  }
  std::unique_ptr<Storage> storage_;
  std::string object_;
};

TEST_F(HeldChunksTest, ReadsTakeHeldBytesFromMemoryAndTheRestFromStorage) {
  auto held = HeldChunks::Make(storage_.get(), {{"obj", 3 * kPage}});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  // The held chunk, marked, so that a read that takes it is told apart
  // from one that reads storage.
  std::string chunk = Pattern(kPage, 'A');
  std::memcpy((*held)->At("obj", kPage), chunk.data(), kPage);
  (*held)->Hold("obj", kPage, kPage);
  std::string out(3 * kPage, '\0');
  ASSERT_TRUE((*held)
                  ->ReadRange("obj", 0, std::as_writable_bytes(std::span(out)))
                  .ok());
  EXPECT_EQ(out.substr(0, kPage), object_.substr(0, kPage));
  EXPECT_EQ(out.substr(kPage, kPage), chunk);
  EXPECT_EQ(out.substr(2 * kPage), object_.substr(2 * kPage));
  // A read inside the held chunk, and one across its end.
  std::string part(100, '\0');
  ASSERT_TRUE((*held)
                  ->ReadRange("obj", 2 * kPage - 50,
                              std::as_writable_bytes(std::span(part)))
                  .ok());
  EXPECT_EQ(part, chunk.substr(kPage - 50) + object_.substr(2 * kPage, 50));
}

TEST_F(HeldChunksTest, ViewsOnlyOnceEveryChunkIsHeldAndTheyOutliveIt) {
  auto held = HeldChunks::Make(storage_.get(), {{"obj", 3 * kPage}});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::memcpy((*held)->At("obj", kPage), object_.data() + kPage, 2 * kPage);
  (*held)->Hold("obj", kPage, 2 * kPage);
  EXPECT_FALSE((*held)->capabilities().object_views);
  EXPECT_FALSE((*held)->capabilities().direct_reads);
  auto none = (*held)->ViewObject("obj");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);

  (*held)->SetComplete();
  EXPECT_TRUE((*held)->capabilities().object_views);
  auto view = (*held)->ViewObject("obj");
  ASSERT_TRUE(view.ok() && *view != nullptr);
  held->reset();  // the load keeps the views it took, not the storage
  const std::span<const std::byte> bytes = (*view)->bytes();
  ASSERT_EQ(bytes.size(), 3 * kPage);
  EXPECT_EQ(
      std::memcmp(bytes.data() + kPage, object_.data() + kPage, 2 * kPage), 0);
}

TEST(CommunicatorIntoTest, BytesLandInTheCallersMemoryOfTheExpectedSize) {
  testing::RunRanks(3, [](int rank, Communicator* comm) {
    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    const std::string mine = Pattern(1000, static_cast<char>('a' + rank));
    std::string got(1000, '\0');
    ASSERT_TRUE(comm->SendRecvInto(Bytes(mine), next,
                                   std::as_writable_bytes(std::span(got)), prev)
                    .ok());
    EXPECT_EQ(got, Pattern(1000, static_cast<char>('a' + prev)));
    std::string shorter(999, '\0');
    EXPECT_EQ(
        comm->SendRecvInto(Bytes(mine), next,
                           std::as_writable_bytes(std::span(shorter)), prev)
            .code(),
        ErrorCode::kDataLoss);
    std::string sent = rank == 2 ? Pattern(500, 'x') : std::string(500, '\0');
    ASSERT_TRUE(
        comm->BroadcastInto(std::as_writable_bytes(std::span(sent)), 2).ok());
    EXPECT_EQ(sent, Pattern(500, 'x'));
    std::string wrong(rank == 2 ? 500 : 400, '\0');
    const Status s =
        comm->BroadcastInto(std::as_writable_bytes(std::span(wrong)), 2);
    EXPECT_EQ(s.code(), rank == 2 ? ErrorCode::kOk : ErrorCode::kDataLoss);
  });
}

}  // namespace
}  // namespace ckpt
