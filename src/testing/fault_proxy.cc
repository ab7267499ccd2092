// One thread accepts; each connection gets a thread that pumps bytes both
// ways with poll(2) and acts out the connection's fate. The request head
// (up to "\r\n\r\n") is read before a cut is placed, so a reset can fall
// inside the body where Content-Length says there is one. A reset is a
// close with SO_LINGER 0, which sends RST, as a dropped connection or a
// crashed peer does.
#include "testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>

#include "testing/free_port.h"

namespace ckpt::testing {
namespace {

constexpr auto kMaxStall = std::chrono::seconds(10);
constexpr size_t kMaxHead = 64 << 10;

void Reset(int fd) {
  if (fd < 0) return;
  linger l{};
  l.l_onoff = 1;
  l.l_linger = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  ::close(fd);
}

bool SendAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The Content-Length of a request head, 0 if it has none.
uint64_t ContentLength(std::string_view head) {
  std::string lower(head);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  const size_t at = lower.find("\r\ncontent-length:");
  if (at == std::string::npos) return 0;
  return std::strtoull(lower.c_str() + at + 17, nullptr, 10);
}

// `head` without its Connection header lines (radosgw says Keep-Alive).
std::string WithoutConnectionHeader(const std::string& head) {
  const size_t end = head.find("\r\n\r\n");
  std::string out;
  size_t at = 0;
  while (at < head.size()) {
    size_t next = head.find("\r\n", at);
    next = next == std::string::npos ? head.size() : next + 2;
    std::string line = head.substr(at, next - at);
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (end == std::string::npos || at > end ||
        !lower.starts_with("connection:")) {
      out += line;
    }
    at = next;
  }
  return out;
}

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

const char* FaultProxy::Name(Fate fate) {
  switch (fate) {
    case kPass:
      return "passed";
    case kReset:
      return "reset mid-request";
    case kStall:
      return "stalled";
    case kSlowDown:
      return "503 SlowDown";
    case kLoseReply:
      return "reply lost";
    case kFates:
      break;
  }
  return "?";
}

Result<std::unique_ptr<FaultProxy>> FaultProxy::Start(int port, Chances chances,
                                                      uint64_t seed) {
  std::unique_ptr<FaultProxy> proxy(new FaultProxy());
  proxy->target_port_ = port;
  proxy->chances_ = chances;
  proxy->rng_.seed(seed);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "socket for the fault proxy");
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 128) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError(err, "listen on 127.0.0.1 for the fault proxy");
  }
  proxy->listen_fd_ = fd;
  proxy->port_ = ntohs(addr.sin_port);
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->Accept(); });
  return proxy;
}

FaultProxy::~FaultProxy() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

std::string FaultProxy::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(port_);
}

void FaultProxy::Accept() {
  std::uniform_real_distribution<double> draw(0, 1);
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    double x = draw(rng_);
    Fate fate = kPass;
    for (auto [chance, f] :
         {std::pair{chances_.reset, kReset}, std::pair{chances_.stall, kStall},
          std::pair{chances_.slow_down, kSlowDown},
          std::pair{chances_.lose_reply, kLoseReply}}) {
      if (x < chance) {
        fate = f;
        break;
      }
      x -= chance;
    }
    counts_[fate].fetch_add(1);
    const uint64_t seed = rng_();
    std::lock_guard<std::mutex> lock(mu_);
    workers_.emplace_back(
        [this, client, fate, seed] { Serve(client, fate, seed); });
  }
}

void FaultProxy::Serve(int client, Fate fate, uint64_t seed) {
  std::mt19937_64 rng(seed);
  char buf[64 << 10];
  if (fate == kSlowDown) {
    std::string head;
    const auto deadline = std::chrono::steady_clock::now() + kMaxStall;
    while (head.find("\r\n\r\n") == std::string::npos &&
           head.size() < kMaxHead && !stop_ &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    const std::string body =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
        "<Message>Please reduce your request rate.</Message></Error>";
    const std::string answer =
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    SendAll(client, answer.data(), answer.size());
    ::shutdown(client, SHUT_WR);
    // Take in the rest of the request, so closing sends no RST that could
    // overtake the answer.
    const auto drain =
        std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!stop_ && std::chrono::steady_clock::now() < drain) {
      pollfd p{client, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      if (::recv(client, buf, sizeof(buf), 0) <= 0) break;
    }
    ::close(client);
    return;
  }
  const int server = ConnectLoopback(target_port_);
  if (server < 0) {
    Reset(client);
    return;
  }
  // Client to server: what came and is not yet forwarded, the head's end
  // once known, and where a kReset cuts (bytes from the start).
  std::string up;
  uint64_t up_sent = 0;
  size_t head_end = std::string::npos;
  uint64_t cut = UINT64_MAX;
  // Server to client: the answer's head, until `Connection: close` is in.
  std::string down;
  bool down_rewritten = false;
  bool client_eof = false, server_eof = false;
  const auto started = std::chrono::steady_clock::now();
  while (!stop_ && !(client_eof && server_eof)) {
    if (fate == kStall &&
        std::chrono::steady_clock::now() - started > kMaxStall) {
      break;
    }
    pollfd fds[2] = {{client, static_cast<short>(client_eof ? 0 : POLLIN), 0},
                     {server, static_cast<short>(server_eof ? 0 : POLLIN), 0}};
    if (::poll(fds, 2, 100) <= 0) continue;
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(client, buf, sizeof(buf), 0);
      if (n <= 0) {
        client_eof = true;
        if (fate == kStall) break;  // the client gave up
        ::shutdown(server, SHUT_WR);
      } else {
        up.append(buf, static_cast<size_t>(n));
        if (head_end == std::string::npos) {
          const size_t at = up.find("\r\n\r\n");
          if (at != std::string::npos) {
            head_end = at + 4;
            const uint64_t body = ContentLength(up.substr(0, head_end));
            cut =
                body > 0 ? head_end + rng() % body : 1 + rng() % (head_end - 1);
          }
        }
        if (fate != kReset || head_end != std::string::npos) {
          uint64_t take = up.size();
          if (fate == kReset) take = std::min<uint64_t>(take, cut - up_sent);
          if (!SendAll(server, up.data(), take)) break;
          up_sent += take;
          up.erase(0, take);
          if (fate == kReset && up_sent == cut) break;
        }
      }
    }
    if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
      const ssize_t n = ::recv(server, buf, sizeof(buf), 0);
      if (n <= 0) {
        server_eof = true;
        ::shutdown(client, SHUT_WR);
      } else if (fate == kLoseReply) {
        break;  // the server has answered: the request was carried out
      } else if (fate == kStall) {
        // Held back: the client waits for an answer that never comes.
      } else if (down_rewritten) {
        if (!SendAll(client, buf, static_cast<size_t>(n))) break;
      } else {
        down.append(buf, static_cast<size_t>(n));
        const size_t line = down.find("\r\n");
        if (down.find("\r\n\r\n") != std::string::npos ||
            down.size() > kMaxHead) {
          if (line != std::string::npos) {
            down = WithoutConnectionHeader(down);
            down.insert(line + 2, "Connection: close\r\n");
          }
          down_rewritten = true;
          if (!SendAll(client, down.data(), down.size())) break;
          down.clear();
        }
      }
    }
  }
  if (fate == kPass || fate == kStall) {
    ::close(client);
    ::close(server);
  } else {
    Reset(client);
    Reset(server);
  }
}

}  // namespace ckpt::testing
