// A TCP proxy on 127.0.0.1 in front of an HTTP server (a test's radosgw or
// moto) that breaks connections the way networks and loaded stores do, so
// a test can show that the S3 backend's retries carry a save or a load
// through them. Each connection draws one fate:
//   - kPass:       forwarded untouched;
//   - kReset:      the request is cut off part-way (in its body where it
//                  has one, else in its head) and both sides are reset;
//   - kStall:      the request reaches the server, the answer is held back
//                  until the client gives up (or kMaxStall passes);
//   - kSlowDown:   answered at once with 503 SlowDown, the server never
//                  sees it;
//   - kLoseReply:  the request reaches the server and is carried out, then
//                  the client's connection is reset before any answer.
// Every answer that passes gets `Connection: close`, so each request comes
// on a new connection and draws its own fate.
//
// Thread-safe: the counters may be read while connections are served.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/status.h"

namespace ckpt::testing {

class FaultProxy {
 public:
  enum Fate { kPass, kReset, kStall, kSlowDown, kLoseReply, kFates };
  // Chances per connection; kPass takes what is left.
  struct Chances {
    double reset = 0;
    double stall = 0;
    double slow_down = 0;
    double lose_reply = 0;
  };

  // Listens on a free port of 127.0.0.1 and forwards to 127.0.0.1:`port`.
  static Result<std::unique_ptr<FaultProxy>> Start(int port, Chances chances,
                                                   uint64_t seed);
  ~FaultProxy();
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::string endpoint() const;  // http://127.0.0.1:PORT
  // Connections that drew `fate` so far.
  uint64_t count(Fate fate) const { return counts_[fate].load(); }
  static const char* Name(Fate fate);

 private:
  FaultProxy() = default;
  void Accept();
  void Serve(int client, Fate fate, uint64_t seed);

  int listen_fd_ = -1;
  int port_ = 0;
  int target_port_ = 0;
  Chances chances_;
  std::mt19937_64 rng_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::thread> workers_;
  std::array<std::atomic<uint64_t>, kFates> counts_{};
};

}  // namespace ckpt::testing
