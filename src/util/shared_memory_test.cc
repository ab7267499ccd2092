#include "util/shared_memory.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace ckpt {
namespace {

constexpr uint64_t kSize = 1 << 20;

char* Map(const SharedMemoryFile& f) {
  void* p =
      ::mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd(), 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<char*>(p);
}

TEST(SharedMemoryFileTest, WhatOneMappingWritesTheOtherSees) {
  auto made = SharedMemoryFile::Create(kSize);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto opened = SharedMemoryFile::Open(made->Invitation(), kSize);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  char* a = Map(*made);
  char* b = Map(*opened);
  std::memcpy(a + kSize - 5, "held", 5);
  EXPECT_STREQ(b + kSize - 5, "held");
  // The name goes; the mappings stay.
  made->Unlink();
  EXPECT_EQ(SharedMemoryFile::Open(made->Invitation(), kSize).status().code(),
            ErrorCode::kNotFound);
  EXPECT_STREQ(b + kSize - 5, "held");
  ::munmap(a, kSize);
  ::munmap(b, kSize);
}

TEST(SharedMemoryFileTest, OpensOnlyTheFileItWasInvitedTo) {
  auto made = SharedMemoryFile::Create(kSize);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  const std::string invitation = made->Invitation();
  const std::string name = invitation.substr(0, invitation.find(' '));
  // Another token (another host's file of that name), another size, and
  // names that are not the files Create makes.
  EXPECT_EQ(SharedMemoryFile::Open(name + " " + std::string(32, '0'), kSize)
                .status()
                .code(),
            ErrorCode::kNotFound);
  EXPECT_EQ(SharedMemoryFile::Open(invitation, kSize + 4096).status().code(),
            ErrorCode::kNotFound);
  for (const std::string& bad :
       {std::string(), std::string("/etc/passwd ") + std::string(32, '0'),
        "/ckpt-read-once-../../x " + std::string(32, '0'),
        name + " " + std::string(31, '0'), name}) {
    EXPECT_EQ(SharedMemoryFile::Open(bad, kSize).status().code(),
              ErrorCode::kInvalidArgument)
        << bad;
  }
}

TEST(SharedMemoryFileTest, TheCreatorRemovesTheNameWhenItGoes) {
  std::string invitation;
  {
    auto made = SharedMemoryFile::Create(kSize);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    invitation = made->Invitation();
  }
  EXPECT_EQ(SharedMemoryFile::Open(invitation, kSize).status().code(),
            ErrorCode::kNotFound);
}

TEST(SharedMemoryFileTest, AWaitForALockEndsWhenItsHolderLetsGoOrCloses) {
  auto made = SharedMemoryFile::Create(kSize);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto opened = SharedMemoryFile::Open(made->Invitation(), kSize);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_TRUE(made->Lock(0, /*exclusive=*/true, /*wait=*/false));
  // Held by the other open file: not to be had without waiting, on either
  // byte's own terms (byte 1 is free).
  EXPECT_FALSE(opened->Lock(0, /*exclusive=*/false, /*wait=*/false));
  EXPECT_TRUE(opened->Lock(1, /*exclusive=*/false, /*wait=*/false));
  opened->Unlock(1);
  std::atomic<bool> let_go{false};
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    let_go = true;
    made->Unlock(0);
  });
  EXPECT_TRUE(opened->Lock(0, /*exclusive=*/false, /*wait=*/true));
  EXPECT_TRUE(let_go.load());
  opened->Unlock(0);
  holder.join();
  // A holder that ends (closes the file) lets go too.
  auto other = SharedMemoryFile::Open(made->Invitation(), kSize);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(other->Lock(1, /*exclusive=*/false, /*wait=*/false));
  std::thread closer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    SharedMemoryFile gone = std::move(*other);
  });
  EXPECT_TRUE(made->Lock(1, /*exclusive=*/true, /*wait=*/true));
  closer.join();
}

// The bytes of the file's memory that its file system holds pages for.
uint64_t Taken(const SharedMemoryFile& f) {
  struct stat st {};
  EXPECT_EQ(::fstat(f.fd(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST(SharedMemoryFileTest, PagesAreTakenWhereReservedAndNotBefore) {
  constexpr uint64_t kBig = uint64_t{20} << 20;
  auto made = SharedMemoryFile::Create(kBig);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  // The token's page, no more: a host's ranks take the pages as they go.
  EXPECT_LT(Taken(*made), uint64_t{1} << 20);
  auto opened = SharedMemoryFile::Open(made->Invitation(), kBig);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  // Any process that opened it reserves what it is about to write.
  ASSERT_TRUE(opened->Reserve(uint64_t{4} << 20, uint64_t{9} << 20).ok());
  EXPECT_GE(Taken(*made), uint64_t{9} << 20);
  EXPECT_LT(Taken(*made), uint64_t{11} << 20);
  // Again (idempotent), and nothing past the memory.
  EXPECT_TRUE(made->Reserve(uint64_t{4} << 20, 1).ok());
  const Status past = made->Reserve(kBig - 1, 2);
  EXPECT_EQ(past.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(past.message().find("past its end"), std::string::npos)
      << past.ToString();
  EXPECT_EQ(made->Reserve(UINT64_MAX, 2).code(), ErrorCode::kInvalidArgument);
  EXPECT_LT(Taken(*made), uint64_t{11} << 20);
}

TEST(SharedMemoryFileTest, TheBackgroundReservationTakesEveryPage) {
  constexpr uint64_t kBig = uint64_t{40} << 20;
  auto made = SharedMemoryFile::Create(kBig);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  made->ReserveAllInBackground();
  // Moved while it runs: the reservation goes with the file.
  SharedMemoryFile moved = std::move(*made);
  EXPECT_TRUE(moved.WaitReserved().ok());
  EXPECT_GE(Taken(moved), kBig);
  // Waited for once; later waits have nothing to wait for.
  EXPECT_TRUE(moved.WaitReserved().ok());
  // A file that goes while its reservation runs waits for it (no write to
  // a closed descriptor, or to another file given its number).
  auto gone = SharedMemoryFile::Create(kBig);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  gone->ReserveAllInBackground();
  *gone = std::move(moved);
  EXPECT_GE(Taken(*gone), kBig);
}

TEST(SharedMemoryFileTest, NoRoomIsAnErrorNotACrash) {
  // More than any machine's shared memory holds.
  auto made = SharedMemoryFile::Create(uint64_t{1} << 50);
  EXPECT_FALSE(made.ok());
}

}  // namespace
}  // namespace ckpt
