// Rendezvous (parallel/rendezvous.h): rank 0's bytes on every rank, over real sockets on the
// loopback interface and through files, with ranks as threads; the failures each side reports.

#include <arpa/inet.h>
#include <ember/parallel/rendezvous.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include "test_util.h"

using namespace ember;
using namespace ember::parallel;
using namespace std::chrono_literals;
using ember::testing::TempDir;

namespace {

using Bytes = std::vector<uint8_t>;

struct RankResult {
  Bytes bytes;
  std::string error;  // the ember::Error's message, "" when the rank succeeded
};

// Runs f(rank) for the given ranks on threads, rank 0 started `rank0_delay` after the others.
// (Catch's assertions are not thread-safe: f reports through its result or by throwing.)
std::map<int, RankResult> run_ranks(const std::vector<int>& ranks, const std::function<Bytes(int)>& f,
                                    std::chrono::milliseconds rank0_delay = 0ms) {
  std::map<int, RankResult> results;
  for (int r : ranks) results[r];
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      if (r == 0) std::this_thread::sleep_for(rank0_delay);
      try {
        results[r].bytes = f(r);
      } catch (const Error& e) {
        results[r].error = e.what();
      } catch (const std::exception& e) {
        results[r].error = std::string("test helper failed: ") + e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

std::vector<int> all_ranks(int world) {
  std::vector<int> r;
  for (int i = 0; i < world; ++i) r.push_back(i);
  return r;
}

Bytes pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 131 + (i >> 8));
  return b;
}

// Throws when a test helper's system call failed (usable on the ranks' threads, unlike REQUIRE).
void check_sys(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

// A socket owned by a test.
struct TestSocket {
  int fd = -1;
  explicit TestSocket(int family) : fd(::socket(family, SOCK_STREAM, 0)) { check_sys(fd >= 0, "socket"); }
  TestSocket(const TestSocket&) = delete;
  TestSocket& operator=(const TestSocket&) = delete;
  ~TestSocket() {
    if (fd >= 0) ::close(fd);
  }
};

// A listening IPv4 socket on a port the kernel picked; port() reads it back.
struct Listener : TestSocket {
  Listener() : TestSocket(AF_INET) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    check_sys(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "bind");
    check_sys(::listen(fd, 4) == 0, "listen");
  }
  int port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    check_sys(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0, "getsockname");
    return ntohs(a.sin_port);
  }
};

// A port that was free a moment ago (the kernel's pick, released again).
int free_port() { return Listener().port(); }

// A raw connection to 127.0.0.1:port, retried while nobody listens yet.
std::unique_ptr<TestSocket> raw_connect(int port) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    auto s = std::make_unique<TestSocket>(AF_INET);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(s->fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return s;
    std::this_thread::sleep_for(5ms);
  }
  throw std::runtime_error("cannot connect to port " + std::to_string(port));
}

bool ipv6_loopback_available() {
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

EnvLookup env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("rendezvous: TCP world of 3, rank 0 starting last, a 128-byte id and a 1 MiB payload", "[rendezvous]") {
  std::vector<std::pair<std::string, Bytes>> cases = {{"127.0.0.1", pattern(128, 7)},
                                                      {"localhost", pattern(kRendezvousMaxPayload, 3)}};
  if (ipv6_loopback_available()) cases.push_back({"::1", pattern(128, 9)});
  for (const auto& [addr, id] : cases) {
    INFO("MASTER_ADDR " << addr << ", " << id.size() << " bytes");
    const int port = free_port();
    auto results = run_ranks(
        all_ranks(3),
        [&](int r) {
          return tcp_broadcast_bytes(addr, port, r, 3, "nccl-id", r == 0 ? id : Bytes{1, 2}, 5s);
        },
        100ms);
    for (auto& [r, res] : results) {
      INFO("rank " << r);
      CHECK(res.error == "");
      CHECK(res.bytes == id);
    }
  }
}

TEST_CASE("rendezvous: a world of one needs no socket and no file", "[rendezvous]") {
  const Bytes id = pattern(128, 1);
  CHECK(tcp_broadcast_bytes("", 0, 0, 1, "nccl-id", id, 1ms) == id);
  CHECK(file_broadcast_bytes("/nonexistent/dir/file", 0, 1, "nccl-id", id, 1ms) == id);
  CHECK(rendezvous_broadcast(LaunchInfo{}, "nccl-id", id, 1ms, env_of({})) == id);
  // The payload limit holds in a world of one too, so it does not first show on a cluster.
  CHECK_THROWS_WITH(tcp_broadcast_bytes("", 0, 0, 1, "nccl-id", Bytes(kRendezvousMaxPayload + 1), 1ms),
                    Catch::Contains("1048577 bytes is over the limit of 1048576 bytes"));
}

TEST_CASE("rendezvous: rank 0 times out naming the rank that never connected and the garbage it rejected",
          "[rendezvous]") {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<TestSocket> stray;
  auto results = run_ranks({0, 1, 9}, [&](int r) -> Bytes {
    if (r == 9) {  // not a rank: someone curl-ing the port
      stray = raw_connect(port);
      const std::string get = "GET / HTTP/1.1\r\n\r\n";
      check_sys(::send(stray->fd, get.data(), get.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(get.size()), "send");
      return {};
    }
    return tcp_broadcast_bytes("127.0.0.1", port, r, 3, "nccl-id", pattern(128, 5), 300ms);
  });
  CHECK(seconds_since(t0) < 2.0);
  CHECK(results[9].error == "");
  CHECK(results[1].error == "");
  CHECK(results[1].bytes == pattern(128, 5));
  const std::string& e = results[0].error;
  CHECK_THAT(e, Catch::Contains("tcp rendezvous 'nccl-id' (rank 0 of 3): timed out after 0.3 s on port " +
                                std::to_string(port)));
  CHECK_THAT(e, Catch::Contains("rank 2 never connected"));
  CHECK_THAT(e, Catch::Contains("127.0.0.1:"));
  CHECK_THAT(e, Catch::Contains("'GET / HTTP/1.1\\x0d\\x0a...', not an ember rendezvous hello"));
  CHECK_THAT(e, !Catch::Contains("rank 1"));
}

TEST_CASE("rendezvous: a stray connection is rejected while the real ranks succeed", "[rendezvous]") {
  const int port = free_port();
  const Bytes id = pattern(128, 11);
  std::unique_ptr<TestSocket> garbage, silent;
  auto results = run_ranks({0, 1, 2, 9}, [&](int r) -> Bytes {
    if (r == 9) {
      garbage = raw_connect(port);  // connects once rank 0 listens
      const char junk[] = "EMBERXXX\x01\x02\x03 hello?";
      check_sys(::send(garbage->fd, junk, sizeof junk, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof junk), "send");
      silent = raw_connect(port);  // and one that says nothing and stays open
      return {};
    }
    if (r != 0) std::this_thread::sleep_for(100ms);  // the strays come first
    return tcp_broadcast_bytes("127.0.0.1", port, r, 3, "nccl-id", id, 5s);
  });
  for (int r : {0, 1, 2, 9}) {
    INFO("rank " << r);
    CHECK(results[r].error == "");
    if (r != 9) CHECK(results[r].bytes == id);
  }
  // Rank 0 closed the garbage connection without answering.
  REQUIRE(garbage);
  char c = 0;
  CHECK(::recv(garbage->fd, &c, 1, 0) <= 0);
}

TEST_CASE("rendezvous: a key or world-size mismatch fails the rank at once and is named by rank 0", "[rendezvous]") {
  struct Case {
    std::string key1;
    int world1;
    std::string rank1_says, rank0_says;
  };
  const std::vector<Case> cases = {
      {"other-id", 2, "rejected this rank: rank 1 says key 'other-id' but rank 0 has key 'nccl-id'",
       "rank 1 says key 'other-id' but rank 0 has key 'nccl-id'"},
      {"nccl-id", 3, "rejected this rank: rank 1 says world size 3 but rank 0 has world size 2",
       "rank 1 says world size 3 but rank 0 has world size 2"}};
  for (const Case& c : cases) {
    const int port = free_port();
    auto results = run_ranks({0, 1}, [&](int r) {
      if (r == 0) return tcp_broadcast_bytes("127.0.0.1", port, 0, 2, "nccl-id", pattern(128, 2), 300ms);
      return tcp_broadcast_bytes("127.0.0.1", port, 1, c.world1, c.key1, {}, 2s);
    });
    CHECK_THAT(results[1].error,
               Catch::Contains("tcp rendezvous '" + c.key1 + "' (rank 1 of " + std::to_string(c.world1) +
                               "): rank 0 at 127.0.0.1:" + std::to_string(port) + " " + c.rank1_says));
    CHECK_THAT(results[0].error, Catch::Contains("rank 1 never connected"));
    CHECK_THAT(results[0].error, Catch::Contains("[127.0.0.1:"));
    CHECK_THAT(results[0].error, Catch::Contains(c.rank0_says));
  }
}

TEST_CASE("rendezvous: TCP errors name the address, port and timeout", "[rendezvous]") {
  const Bytes id = pattern(128, 4);
  SECTION("rank 0 never appears") {
    const int port = free_port();
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_WITH(tcp_broadcast_bytes("127.0.0.1", port, 2, 3, "nccl-id", {}, 300ms),
                      Catch::Contains("tcp rendezvous 'nccl-id' (rank 2 of 3): rank 0 did not appear at 127.0.0.1:" +
                                      std::to_string(port) + " within 0.3 s (last attempt: Connection refused)"));
    CHECK(seconds_since(t0) < 1.5);
  }
  SECTION("an address that does not resolve") {
    CHECK_THROWS_WITH(tcp_broadcast_bytes("no-such-host.invalid", 29500, 1, 2, "nccl-id", {}, 300ms),
                      Catch::Contains("cannot resolve 'no-such-host.invalid'"));
  }
  SECTION("a port in use on rank 0") {
    Listener taken;
    CHECK_THROWS_WITH(
        tcp_broadcast_bytes("127.0.0.1", taken.port(), 0, 2, "nccl-id", id, 300ms),
        Catch::Contains("cannot listen on port " + std::to_string(taken.port()) + ": Address already in use"));
  }
  SECTION("a port out of range, a bad rank, a payload over the limit") {
    CHECK_THROWS_WITH(tcp_broadcast_bytes("127.0.0.1", 70000, 1, 2, "nccl-id", {}, 300ms),
                      Catch::Contains("port 70000 is out of range (1 to 65535; MASTER_PORT)"));
    CHECK_THROWS_WITH(tcp_broadcast_bytes("127.0.0.1", 0, 0, 2, "nccl-id", id, 300ms),
                      Catch::Contains("port 0 is out of range"));
    CHECK_THROWS_WITH(tcp_broadcast_bytes("127.0.0.1", 29500, 2, 2, "nccl-id", {}, 300ms),
                      Catch::Contains("rank 2 is outside a world of size 2"));
    CHECK_THROWS_WITH(tcp_broadcast_bytes("127.0.0.1", 29500, 0, 2, "nccl-id", Bytes(kRendezvousMaxPayload + 1), 300ms),
                      Catch::Contains("over the limit of 1048576 bytes"));
  }
}

TEST_CASE("rendezvous: through a shared file, world of 3, acks cleaned up", "[rendezvous]") {
  TempDir dir("ember_rendezvous");
  const std::string path = (dir.path / "nccl-id").string();
  const Bytes id = pattern(128, 6);
  auto results = run_ranks(
      all_ranks(3), [&](int r) { return file_broadcast_bytes(path, r, 3, "nccl-id", r == 0 ? id : Bytes{}, 5s); },
      50ms);
  for (auto& [r, res] : results) {
    INFO("rank " << r);
    CHECK(res.error == "");
    CHECK(res.bytes == id);
  }
  // Rank 0 returned after every ack and removed the file, its temporary and the acks.
  CHECK(std::filesystem::is_empty(dir.path));

  // A larger payload, rank 0 first this time.
  const Bytes big = pattern(kRendezvousMaxPayload, 8);
  results = run_ranks(all_ranks(3), [&](int r) {
    if (r != 0) std::this_thread::sleep_for(30ms);
    return file_broadcast_bytes(path, r, 3, "nccl-id", r == 0 ? big : Bytes{}, 5s);
  });
  for (auto& [r, res] : results) CHECK((res.error == "" && res.bytes == big));
  CHECK(std::filesystem::is_empty(dir.path));
}

TEST_CASE("rendezvous: file errors: stale file, timeouts, mismatches, missing directory", "[rendezvous]") {
  TempDir dir("ember_rendezvous");
  const std::string path = (dir.path / "id").string();
  const Bytes id = pattern(128, 6);
  SECTION("a stale file of an earlier job is refused and left alone") {
    std::ofstream(path) << "old";
    CHECK_THROWS_WITH(file_broadcast_bytes(path, 0, 2, "nccl-id", id, 300ms),
                      Catch::Contains(path + " already exists, probably left by an earlier job: delete it"));
    CHECK(std::filesystem::exists(path));
  }
  SECTION("rank 0 times out naming the ranks that did not read, and removes the file") {
    CHECK_THROWS_WITH(file_broadcast_bytes(path, 0, 3, "nccl-id", id, 300ms),
                      Catch::Contains("file rendezvous 'nccl-id' (rank 0 of 3): timed out after 0.3 s: ranks 1-2 "
                                      "did not read " +
                                      path));
    CHECK(std::filesystem::is_empty(dir.path));
  }
  SECTION("another rank times out naming the path") {
    CHECK_THROWS_WITH(file_broadcast_bytes(path, 1, 3, "nccl-id", {}, 300ms),
                      Catch::Contains(path + " did not appear within 0.3 s"));
  }
  SECTION("key and world-size mismatch") {
    auto results = run_ranks({0, 1, 2}, [&](int r) -> Bytes {
      if (r == 0) return file_broadcast_bytes(path, 0, 3, "nccl-id", id, 300ms);
      if (r == 1) return file_broadcast_bytes(path, 1, 3, "other-id", {}, 2s);
      return file_broadcast_bytes(path, 2, 4, "nccl-id", {}, 2s);
    });
    CHECK_THAT(results[1].error,
               Catch::Contains(path + " was written for key 'nccl-id' but this rank expects 'other-id'"));
    CHECK_THAT(results[2].error,
               Catch::Contains(path + " was written by rank 0 of a world of 3 but this rank is in a world of 4"));
    CHECK_THAT(results[0].error, Catch::Contains("ranks 1-2 did not read"));
    CHECK(std::filesystem::is_empty(dir.path));
  }
  SECTION("a directory that does not exist") {
    const std::string missing = (dir.path / "no-such-dir" / "id").string();
    for (int r : {0, 1}) {
      CHECK_THROWS_WITH(file_broadcast_bytes(missing, r, 2, "nccl-id", id, 300ms),
                        Catch::Contains("the directory of " + missing + " does not exist"));
    }
  }
}

TEST_CASE("rendezvous: rendezvous_broadcast picks the file, else MASTER_ADDR/MASTER_PORT, else says what to set",
          "[rendezvous]") {
  const Bytes id = pattern(128, 12);
  TempDir dir("ember_rendezvous");
  const std::string path = (dir.path / "id").string();
  auto launch = [](int rank, const std::string& addr, int port) {
    LaunchInfo li;
    li.rank = rank;
    li.world_size = 2;
    li.launcher = "torchrun";
    li.master_addr = addr;
    li.master_port = port;
    return li;
  };

  // EMBER_RENDEZVOUS_FILE wins over MASTER_ADDR/MASTER_PORT (nobody listens on that port).
  const int unused_port = free_port();
  auto results = run_ranks({0, 1}, [&](int r) {
    return rendezvous_broadcast(launch(r, "127.0.0.1", unused_port), "nccl-id", r == 0 ? id : Bytes{}, 5s,
                                env_of({{"EMBER_RENDEZVOUS_FILE", path}}));
  });
  for (auto& [r, res] : results) CHECK((res.error == "" && res.bytes == id));
  CHECK(std::filesystem::is_empty(dir.path));

  // Without it: TCP to MASTER_ADDR:MASTER_PORT.
  const int port = free_port();
  results = run_ranks({0, 1}, [&](int r) {
    return rendezvous_broadcast(launch(r, "127.0.0.1", port), "nccl-id", r == 0 ? id : Bytes{}, 5s, env_of({}));
  });
  for (auto& [r, res] : results) CHECK((res.error == "" && res.bytes == id));

  // EMBER_RENDEZVOUS_PORT overrides MASTER_PORT (under torchrun, MASTER_PORT is its own store's).
  const int other = free_port();
  results = run_ranks({0, 1}, [&](int r) {
    return rendezvous_broadcast(launch(r, "127.0.0.1", port), "nccl-id", r == 0 ? id : Bytes{}, 5s,
                                env_of({{"EMBER_RENDEZVOUS_PORT", std::to_string(other)}}));
  });
  for (auto& [r, res] : results) CHECK((res.error == "" && res.bytes == id));
  CHECK_THROWS_WITH(rendezvous_broadcast(launch(1, "127.0.0.1", port), "nccl-id", {}, 300ms,
                                         env_of({{"EMBER_RENDEZVOUS_PORT", "70000"}})),
                    Catch::Contains("EMBER_RENDEZVOUS_PORT='70000' is not a TCP port"));

  // Neither: an error naming the variables.
  CHECK_THROWS_WITH(rendezvous_broadcast(launch(1, "", 0), "nccl-id", {}, 300ms, env_of({})),
                    Catch::Contains("rendezvous 'nccl-id' (rank 1 of 2, launcher torchrun): no way to reach rank 0: "
                                    "MASTER_ADDR is not set; set MASTER_ADDR and MASTER_PORT") &&
                        Catch::Contains("or EMBER_RENDEZVOUS_FILE=<a path on a file system every rank sees>"));
  CHECK_THROWS_WITH(rendezvous_broadcast(launch(1, "10.0.0.1", 0), "nccl-id", {}, 300ms, env_of({})),
                    Catch::Contains("MASTER_PORT is not set"));
}
