// Rendezvous by TCP (rendezvous.h, Note [Rendezvous protocol]): rank 0's server, the other
// ranks' client.

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>
#include <utility>

#include "../core/error.h"
#include "rendezvous.h"
#include "rendezvous_wire.h"

namespace ember::parallel {

namespace {

using namespace detail;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kStatusOk = 0, kStatusRejected = 1;
constexpr size_t kHelloFixedBytes = 8 + 4 * 4;  // magic, version, rank, world size, key length
constexpr size_t kMaxRejectMessage = 4096;
// Rank 0 holds at most this many connections at once; more wait in the listen backlog (a job of
// thousands of ranks must not run rank 0 out of file descriptors).
constexpr size_t kMaxOpenPeers = 256;
// A connection that has not sent a complete hello by then is dropped (real ranks send it at once).
constexpr auto kHelloIdleLimit = std::chrono::seconds(10);
// A connect() that has not completed by then is abandoned for the next address or attempt.
constexpr auto kConnectAttemptLimit = std::chrono::seconds(5);
constexpr size_t kMaxRejectedShown = 8;

// ---- sockets ------------------------------------------------------------------------------------

// "host:port", "[v6]:port".
std::string host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// An owned file descriptor, closed on every path.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);  // not retried on EINTR: Linux has closed the descriptor anyway
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// poll() until `until`, restarting after signals. Returns poll's result (0: time is up).
int poll_until(pollfd* fds, nfds_t n, Clock::time_point until) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    const int ms = static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
    const int rc = ::poll(fds, n, ms);
    if (rc >= 0 || errno != EINTR) return rc;
  }
}

// Sends all of [p, p + n) before `until`. Returns "" or what went wrong.
std::string send_all(int fd, const uint8_t* p, size_t n, Clock::time_point until) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno_message(errno);
    pollfd pfd{fd, POLLOUT, 0};
    const int rc = poll_until(&pfd, 1, until);
    if (rc < 0) return "poll: " + errno_message(errno);
    if (rc == 0) return "timed out";
  }
  return "";
}

// Receives exactly n bytes into p before `until`. Returns "" or what went wrong.
std::string recv_exact(int fd, uint8_t* p, size_t n, Clock::time_point until) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0) return "the connection was closed";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_message(errno);
    pollfd pfd{fd, POLLIN, 0};
    const int rc = poll_until(&pfd, 1, until);
    if (rc < 0) return "poll: " + errno_message(errno);
    if (rc == 0) return "timed out";
  }
  return "";
}

std::string tcp_who(const std::string& key, int rank, int world_size) {
  return rendezvous_who("tcp", key, rank, world_size);
}

// ---- TCP, rank 0 --------------------------------------------------------------------------------

// A socket listening on `port` on every interface: IPv6 with IPv4-mapped addresses where the
// kernel has IPv6, else IPv4.
Fd listen_on(int port, const std::string& who) {
  int err = 0;
  for (const int family : {AF_INET6, AF_INET}) {
    Fd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) {
      err = errno;
      continue;  // no IPv6 in this kernel
    }
    const int one = 1, zero = 0;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (family == AF_INET6) {
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_addr = in6addr_any;
      a->sin6_port = htons(static_cast<uint16_t>(port));
      len = sizeof *a;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_addr.s_addr = htonl(INADDR_ANY);
      a->sin_port = htons(static_cast<uint16_t>(port));
      len = sizeof *a;
    }
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) == 0 && ::listen(fd.get(), SOMAXCONN) == 0) {
      return fd;
    }
    err = errno;
    if (err == EADDRINUSE || err == EACCES) break;  // IPv4 would say the same
  }
  EMBER_THROW(who, ": cannot listen on port ", port, ": ", errno_message(err),
              err == EADDRINUSE ? " (another process holds it: an earlier job still running, or a launcher's own "
                                  "store on MASTER_PORT; choose another MASTER_PORT)"
                                : "");
}

// The numeric address of an accepted connection, "127.0.0.1:51234" (IPv4-mapped IPv6 shown as IPv4).
std::string peer_address(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "an unknown address";
  }
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);
  return host_port(h, std::atoi(serv));
}

struct Peer {
  enum class State { hello, sending, ack };
  Fd fd;
  std::string addr;
  State state = State::hello;
  std::vector<uint8_t> in;
  size_t sent = 0;  // bytes of the reply sent
  int rank = -1;
  Clock::time_point hello_deadline;
  bool closed = false;
};

class TcpServer {
 public:
  TcpServer(int port, int world_size, const std::string& key, const std::vector<uint8_t>& payload,
            std::chrono::milliseconds timeout)
      : port_(port),
        world_(world_size),
        key_(key),
        timeout_(timeout),
        who_(tcp_who(key, 0, world_size)),
        connected_from_(world_size),
        acked_(world_size, false) {
    reply_.reserve(8 + 4 + 8 + payload.size());
    put_bytes(reply_, kHelloMagic);
    put_u32(reply_, kStatusOk);
    put_u64(reply_, payload.size());
    reply_.insert(reply_.end(), payload.begin(), payload.end());
  }

  void run() {
    const auto deadline = Clock::now() + timeout_;
    const Fd listener = listen_on(port_, who_);
    listener_fd_ = listener.get();
    acked_[0] = true;
    int waiting = world_ - 1;
    auto accept_paused_until = Clock::time_point{};  // after running out of descriptors
    while (waiting > 0) {
      const auto now = Clock::now();
      if (now >= deadline) throw_timeout();
      auto wake = deadline;
      for (auto& p : peers_) {
        if (p->state != Peer::State::hello) continue;
        if (now >= p->hello_deadline) {
          drop(*p, p->addr + ": sent no complete hello within " + seconds(kHelloIdleLimit));
        } else {
          wake = std::min(wake, p->hello_deadline);
        }
      }
      sweep();
      const bool listening = peers_.size() < kMaxOpenPeers && now >= accept_paused_until;
      if (now < accept_paused_until) wake = std::min(wake, accept_paused_until);
      std::vector<pollfd> fds;
      for (auto& p : peers_) {
        fds.push_back({p->fd.get(), static_cast<short>(p->state == Peer::State::sending ? POLLOUT : POLLIN), 0});
      }
      if (listening) fds.push_back({listener.get(), POLLIN, 0});
      const int rc = poll_until(fds.data(), fds.size(), std::max(wake, now));
      EMBER_CHECK(rc >= 0, who_, ": poll failed: ", errno_message(errno));
      if (rc == 0) continue;
      for (size_t i = 0; i < peers_.size(); ++i) {
        if (fds[i].revents != 0) waiting -= step(*peers_[i]);
      }
      sweep();
      if (listening && fds.back().revents != 0 && !accept_all()) {
        accept_paused_until = Clock::now() + std::chrono::milliseconds(50);
      }
    }
  }

 private:
  // Accepts the pending connections. False when out of descriptors or memory (try again later).
  bool accept_all() {
    while (peers_.size() < kMaxOpenPeers) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd = ::accept4(listener_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        auto p = std::make_unique<Peer>();
        p->fd = Fd(fd);
        p->addr = peer_address(ss, len);
        p->hello_deadline = Clock::now() + kHelloIdleLimit;
        peers_.push_back(std::move(p));
        continue;
      }
      switch (errno) {
        case EAGAIN:
#if EWOULDBLOCK != EAGAIN
        case EWOULDBLOCK:
#endif
          return true;
        case EMFILE:
        case ENFILE:
        case ENOBUFS:
        case ENOMEM: return false;
        case EINTR:
        case ECONNABORTED:
        case EPROTO: continue;  // that connection is gone: the next one
        default: return true;   // the pending connection's network error (Linux): the next poll
      }
    }
    return true;
  }

  // Makes progress on one connection whose poll() reported an event. Returns 1 when it completed
  // a rank (its acknowledgement arrived), else 0.
  int step(Peer& p) {
    if (p.state == Peer::State::sending) {
      while (p.sent < reply_.size()) {
        const ssize_t k = ::send(p.fd.get(), reply_.data() + p.sent, reply_.size() - p.sent, MSG_NOSIGNAL);
        if (k > 0) {
          p.sent += static_cast<size_t>(k);
        } else if (k < 0 && errno == EINTR) {
          continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          return 0;
        } else {
          forget(p, "dropped the connection before receiving the payload (" + errno_message(errno) + ")");
          return 0;
        }
      }
      p.state = Peer::State::ack;
      p.in.clear();
      return 0;
    }
    // hello or ack: read what is there.
    uint8_t buf[4096];
    for (;;) {
      const ssize_t k = ::recv(p.fd.get(), buf, sizeof buf, 0);
      if (k > 0) {
        p.in.insert(p.in.end(), buf, buf + k);
        if (p.in.size() > kHelloFixedBytes + kMaxKeyBytes) break;  // enough to judge; more is garbage
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      const std::string why = k == 0 ? "closed the connection" : errno_message(errno);
      if (p.state == Peer::State::hello && !hello_complete(p)) {
        drop(p, p.addr + ": " + why + " after " + std::to_string(p.in.size()) + " bytes " + quoted_bytes(p.in) +
                    ", not a complete ember rendezvous hello");
        return 0;
      }
      if (p.state == Peer::State::ack && p.in.size() < kAckMagic.size() + 4) {
        forget(p, "received the payload but " + why + " before acknowledging it");
        return 0;
      }
      break;
    }
    return p.state == Peer::State::hello ? (on_hello(p), 0) : on_ack(p);
  }

  bool hello_complete(const Peer& p) const {
    return p.in.size() >= kHelloFixedBytes && p.in.size() >= kHelloFixedBytes + get_u32(p.in.data() + 20);
  }

  void on_hello(Peer& p) {
    if (!has_prefix(p.in.data(), p.in.size(), kHelloMagic)) {
      drop(p, p.addr + ": sent " + quoted_bytes(p.in) + ", not an ember rendezvous hello");
      return;
    }
    if (p.in.size() < kHelloFixedBytes) return;
    const uint8_t* h = p.in.data();
    const uint32_t version = get_u32(h + 8), rank = get_u32(h + 12), world = get_u32(h + 16);
    const uint32_t key_len = get_u32(h + 20);
    if (version != kVersion) {
      reject(p, "protocol version " + std::to_string(version) + ", rank 0 speaks version " + std::to_string(kVersion));
      return;
    }
    if (key_len > kMaxKeyBytes) {
      reject(p, "a key of " + std::to_string(key_len) + " bytes (at most " + std::to_string(kMaxKeyBytes) + ")");
      return;
    }
    if (p.in.size() < kHelloFixedBytes + key_len) return;
    const std::string key(reinterpret_cast<const char*>(h + kHelloFixedBytes), key_len);
    const std::string says = "rank " + std::to_string(rank) + " says ";
    if (key != key_) {
      reject(p, says + "key '" + key + "' but rank 0 has key '" + key_ + "' (another job on this port?)");
    } else if (world != static_cast<uint32_t>(world_)) {
      reject(p, says + "world size " + std::to_string(world) + " but rank 0 has world size " + std::to_string(world_));
    } else if (rank == 0 || rank >= static_cast<uint32_t>(world_)) {
      reject(p, says + "it is rank " + std::to_string(rank) + ", not one of 1.." + std::to_string(world_ - 1));
    } else if (!connected_from_[rank].empty()) {
      reject(p, says + "it is rank " + std::to_string(rank) + " but rank " + std::to_string(rank) +
                    " already connected from " + connected_from_[rank] + " (two processes with the same RANK?)");
    } else {
      p.rank = static_cast<int>(rank);
      connected_from_[rank] = p.addr;
      p.state = Peer::State::sending;
      p.sent = 0;
      p.in.clear();
    }
  }

  int on_ack(Peer& p) {
    if (p.in.size() < kAckMagic.size() + 4) return 0;
    if (!has_prefix(p.in.data(), p.in.size(), kAckMagic) || get_u32(p.in.data() + 8) != static_cast<uint32_t>(p.rank)) {
      forget(p, "sent " + quoted_bytes(p.in) + " instead of its acknowledgement");
      return 0;
    }
    acked_[p.rank] = true;
    p.closed = true;
    return 1;
  }

  // Tells a connection that speaks the protocol why it was rejected (best effort: the message is
  // small), logs it and closes it.
  void reject(Peer& p, const std::string& why) {
    std::vector<uint8_t> msg;
    put_bytes(msg, kHelloMagic);
    put_u32(msg, kStatusRejected);
    put_u32(msg, static_cast<uint32_t>(why.size()));
    put_bytes(msg, why);
    (void)!::send(p.fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    drop(p, p.addr + ": " + why);
  }

  // A rank that connected properly and then failed: its slot is free again for a retry.
  void forget(Peer& p, const std::string& why) {
    connected_from_[p.rank].clear();
    drop(p, "rank " + std::to_string(p.rank) + " (" + p.addr + ") " + why);
  }

  void drop(Peer& p, std::string entry) {
    if (rejected_.size() < kMaxRejectedShown) rejected_.push_back(std::move(entry));
    ++rejected_total_;
    p.closed = true;
  }

  void sweep() {
    peers_.erase(std::remove_if(peers_.begin(), peers_.end(), [](const auto& p) { return p->closed; }), peers_.end());
  }

  [[noreturn]] void throw_timeout() const {
    std::vector<int> never, unacked;
    for (int r = 1; r < world_; ++r) {
      if (acked_[r]) continue;
      (connected_from_[r].empty() ? never : unacked).push_back(r);
    }
    std::vector<std::string> parts;
    if (!never.empty()) parts.push_back(rank_list(never) + " never connected");
    for (int r : unacked) {
      parts.push_back("rank " + std::to_string(r) + " (" + connected_from_[r] + ") did not acknowledge the payload");
    }
    if (rejected_total_ > 0) {
      std::string s = "rejected or lost connections:";
      for (const std::string& e : rejected_) s += " [" + e + "]";
      if (rejected_total_ > rejected_.size())
        s += " and " + std::to_string(rejected_total_ - rejected_.size()) + " more";
      parts.push_back(s);
    }
    std::ostringstream os;
    os << who_ << ": timed out after " << seconds(timeout_) << " on port " << port_ << ": ";
    for (size_t i = 0; i < parts.size(); ++i) os << (i > 0 ? "; " : "") << parts[i];
    os << " (are MASTER_ADDR/MASTER_PORT, WORLD_SIZE and the key the same on every rank?)";
    EMBER_THROW(os.str());
  }

  const int port_, world_;
  const std::string key_;
  const std::chrono::milliseconds timeout_;
  const std::string who_;
  std::vector<uint8_t> reply_;               // the same bytes for every rank
  std::vector<std::string> connected_from_;  // per rank: the address it connected from, "" = not
  std::vector<bool> acked_;
  std::vector<std::unique_ptr<Peer>> peers_;  // open connections
  std::vector<std::string> rejected_;         // the first few rejected or lost, for the timeout error
  size_t rejected_total_ = 0;
  int listener_fd_ = -1;  // while run() runs
};

// ---- TCP, ranks 1.. ----------------------------------------------------------------------------

// Whether a loopback connection to a port nobody listens on met itself: TCP's simultaneous open
// succeeds when the kernel happens to pick the destination port as the source port (possible when
// MASTER_PORT lies in the ephemeral range, as the tests' ports do).
bool self_connected(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof self, peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) != 0) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  return self_len == peer_len && std::memcmp(&self, &peer, self_len) == 0;
}

// One attempt to connect to host:port, trying every address the name resolves to. Returns the
// connected socket, or an empty Fd with `error` saying why. Throws when the name does not exist
// (a DNS hiccup, EAI_AGAIN, is only an error for this attempt).
Fd try_connect(const std::string& host, int port, Clock::time_point deadline, const std::string& who,
               std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    error = "cannot resolve '" + host + "': " + (rc == EAI_SYSTEM ? errno_message(errno) : ::gai_strerror(rc));
    EMBER_CHECK(rc == EAI_AGAIN || rc == EAI_SYSTEM || rc == EAI_MEMORY, who, ": ", error,
                " (MASTER_ADDR must be rank 0's host name or IP address)");
    return {};
  }
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> owned(res, &::freeaddrinfo);
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      error = "socket: " + errno_message(errno);
      continue;
    }
    int err = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS || err == EINTR) {  // after EINTR the connection also completes in the background
      pollfd pfd{fd.get(), POLLOUT, 0};
      const int prc = poll_until(&pfd, 1, std::min(deadline, Clock::now() + kConnectAttemptLimit));
      if (prc <= 0) {
        error = prc == 0 ? "connect timed out" : "poll: " + errno_message(errno);
        continue;
      }
      socklen_t len = sizeof err;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0 && !self_connected(fd.get())) return fd;
    error = err == 0 ? "connected to itself (nobody listens on that port)" : errno_message(err);
  }
  return {};
}

std::vector<uint8_t> tcp_join(const std::string& host, int port, int rank, int world_size, const std::string& key,
                              std::chrono::milliseconds timeout) {
  const std::string who = tcp_who(key, rank, world_size);
  const std::string where = host_port(host, port);
  const auto deadline = Clock::now() + timeout;
  std::string last_error = "none";
  auto pause = std::chrono::milliseconds(10);
  Fd fd;
  for (;;) {  // rank 0 may not be listening yet
    fd = try_connect(host, port, deadline, who, last_error);
    if (fd.get() >= 0) break;
    const auto now = Clock::now();
    EMBER_CHECK(now < deadline, who, ": rank 0 did not appear at ", where, " within ", seconds(timeout),
                " (last attempt: ", last_error, "); is rank 0 running, and are MASTER_ADDR/MASTER_PORT right?");
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }

  std::vector<uint8_t> hello;
  put_bytes(hello, kHelloMagic);
  put_u32(hello, kVersion);
  put_u32(hello, static_cast<uint32_t>(rank));
  put_u32(hello, static_cast<uint32_t>(world_size));
  put_u32(hello, static_cast<uint32_t>(key.size()));
  put_bytes(hello, key);
  std::string err = send_all(fd.get(), hello.data(), hello.size(), deadline);
  EMBER_CHECK(err.empty(), who, ": sending the hello to rank 0 at ", where, " failed: ", err);

  uint8_t head[12];
  err = recv_exact(fd.get(), head, sizeof head, deadline);
  EMBER_CHECK(
      err.empty(), who, ": rank 0 at ", where, " did not answer the hello: ", err,
      err == "timed out" ? " after " + seconds(timeout) : " (is something other than ember's rank 0 on that port?)");
  EMBER_CHECK(has_prefix(head, sizeof head, kHelloMagic), who, ": ", where, " is not an ember rendezvous (it answered ",
              quoted_bytes(std::vector<uint8_t>(head, head + sizeof head)), ")");
  const uint32_t status = get_u32(head + 8);
  if (status == kStatusRejected) {
    uint8_t len_bytes[4];
    err = recv_exact(fd.get(), len_bytes, 4, deadline);
    const uint32_t len = err.empty() ? get_u32(len_bytes) : 0;
    std::string why(std::min<size_t>(len, kMaxRejectMessage), '\0');
    if (err.empty()) err = recv_exact(fd.get(), reinterpret_cast<uint8_t*>(why.data()), why.size(), deadline);
    EMBER_THROW(who, ": rank 0 at ", where, " rejected this rank: ", err.empty() ? why : "(reason lost: " + err + ")");
  }
  EMBER_CHECK(status == kStatusOk, who, ": rank 0 at ", where, " answered with unknown status ", status);
  uint8_t len_bytes[8];
  err = recv_exact(fd.get(), len_bytes, sizeof len_bytes, deadline);
  EMBER_CHECK(err.empty(), who, ": receiving the payload from rank 0 at ", where, " failed: ", err);
  const uint64_t len = get_u64(len_bytes);
  EMBER_CHECK(len <= kRendezvousMaxPayload, who, ": rank 0 at ", where, " announces a payload of ", len,
              " bytes, over the limit of ", kRendezvousMaxPayload);
  std::vector<uint8_t> payload(len);
  err = recv_exact(fd.get(), payload.data(), payload.size(), deadline);
  EMBER_CHECK(err.empty(), who, ": receiving the payload from rank 0 at ", where, " failed: ", err);

  std::vector<uint8_t> ack;
  put_bytes(ack, kAckMagic);
  put_u32(ack, static_cast<uint32_t>(rank));
  err = send_all(fd.get(), ack.data(), ack.size(), deadline);
  EMBER_CHECK(err.empty(), who, ": acknowledging the payload to rank 0 at ", where, " failed: ", err);
  return payload;
}

}  // namespace

std::vector<uint8_t> tcp_broadcast_bytes(const std::string& master_addr, int master_port, int rank, int world_size,
                                         const std::string& key, const std::vector<uint8_t>& payload,
                                         std::chrono::milliseconds timeout) {
  const std::string who = tcp_who(key, rank, world_size);
  check_args(who, rank, world_size, key, payload);
  if (world_size == 1) return payload;
  EMBER_CHECK(master_port >= 1 && master_port <= 65535, who, ": port ", master_port,
              " is out of range (1 to 65535; MASTER_PORT)");
  if (rank == 0) {
    TcpServer server(master_port, world_size, key, payload, timeout);
    server.run();
    return payload;
  }
  EMBER_CHECK(!master_addr.empty(), who, ": no address for rank 0 (MASTER_ADDR)");
  return tcp_join(master_addr, master_port, rank, world_size, key, timeout);
}

}  // namespace ember::parallel
