#include "util/shared_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

TEST(SharedMemoryFileTest, TheBackgroundReservationKeepsWhatRanksWrote) {
  // The node's ranks write their parts (each reserved first) while the
  // leader's background reservation takes and makes every page: what they
  // wrote stays, before and after, and the rest reads as zeros.
  constexpr uint64_t kBig = uint64_t{24} << 20;
  auto made = SharedMemoryFile::Create(kBig);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto opened = SharedMemoryFile::Open(made->Invitation(), kBig);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  void* p = ::mmap(nullptr, kBig, PROT_READ | PROT_WRITE, MAP_SHARED,
                   opened->fd(), 0);
  ASSERT_NE(p, MAP_FAILED);
  char* rank = static_cast<char*>(p);
  const auto write = [&](uint64_t at) {
    ASSERT_TRUE(opened->Reserve(at, uint64_t{1} << 20).ok());
    std::memset(rank + at, 0x5a, uint64_t{1} << 20);
  };
  write(uint64_t{3} << 20);
  made->ReserveAllInBackground();
  write(uint64_t{17} << 20);
  ASSERT_TRUE(made->WaitReserved().ok());
  EXPECT_GE(Taken(*made), kBig);
  for (uint64_t at = 0; at < kBig; at += 4096) {
    const uint64_t mib = at >> 20;
    const char want = mib == 3 || mib == 17 ? 0x5a : 0;
    ASSERT_EQ(rank[at], want) << "byte " << at;
    ASSERT_EQ(rank[at + 4095], want) << "byte " << at + 4095;
  }
  ::munmap(p, kBig);
}

// In this process (a child's): a mount namespace of its own with a
// /dev/shm of 4 MiB. Only system calls, so that a child of a threaded
// process may call it.
bool SmallSharedMemory() {
  return ::unshare(CLONE_NEWNS) == 0 &&
         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=4m") == 0;
}

TEST(SharedMemoryFileTest, NoRoomToReserveIsAnErrorNotACrash) {
  // Room when the file is made, taken by another file before its pages
  // are: Reserve says so, where a write would have ended the process.
  const pid_t probe = ::fork();
  ASSERT_GE(probe, 0);
  if (probe == 0) ::_exit(SmallSharedMemory() ? 0 : 1);
  int status = 0;
  ASSERT_EQ(::waitpid(probe, &status, 0), probe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    GTEST_SKIP() << "skipped: no mount namespace with a small /dev/shm here "
                    "(needs root and CAP_SYS_ADMIN)";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!SmallSharedMemory()) std::_Exit(2);
        auto made = SharedMemoryFile::Create(uint64_t{3} << 20);
        if (!made.ok()) std::_Exit(3);
        const int other = ::open("/dev/shm/other", O_CREAT | O_RDWR, 0600);
        if (other < 0 || ::posix_fallocate(other, 0, 2 << 20) != 0) {
          std::_Exit(4);
        }
        const Status room = made->Reserve(0, uint64_t{3} << 20);
        std::fprintf(stderr, "%s\n", room.ToString().c_str());
        std::_Exit(room.ok() ? 5 : 0);
      },
      ::testing::ExitedWithCode(0), "no room for bytes");
}

TEST(SharedMemoryFileTest, NoRoomIsAnErrorNotACrash) {
  // More than any machine's shared memory holds.
  auto made = SharedMemoryFile::Create(uint64_t{1} << 50);
  EXPECT_FALSE(made.ok());
}

}  // namespace
}  // namespace ckpt
