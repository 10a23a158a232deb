#pragma once
// Ranks as threads for the NCCL shim's tests (test_nccl_shim.cpp, test_nccl_shim_errors.cpp):
// rank r runs on its own thread on emulated device r. Rank threads only record what they see
// (Catch's assertions are not thread-safe) and the test checks the records after joining them;
// every group of rank threads runs under a Watchdog, so a hang in the shim fails the test instead
// of stalling ctest until its timeout.

#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ember::testing::nccl {

enum class Mode { Blocking, NonBlocking };

inline const char* mode_name(Mode m) { return m == Mode::Blocking ? "blocking" : "non-blocking"; }

inline bool deferred() {
  const char* v = std::getenv("EMBER_SIMT_DEFER");
  return v != nullptr && v[0] == '1';
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

inline std::string last_error() { return ncclGetLastError(nullptr); }

// Aborts the process when the ranks are still running after `limit`: a hang in the shim.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit = std::chrono::seconds(30))
      : thread_([this, limit] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "test_nccl_shim: ranks still running after %lld s: the NCCL shim hangs\n",
                         static_cast<long long>(limit.count()));
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// Runs body(rank) on one thread per rank, on device `rank`, and joins them. Bodies only record
// what they see (Catch's assertions are not thread-safe); the test checks the records afterwards.
inline void run_ranks(int nranks, const std::function<void(int)>& body) {
  Watchdog watchdog;
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&body, r] {
      if (cudaSetDevice(r) != cudaSuccess) std::abort();
      body(r);
    });
  for (std::thread& t : threads) t.join();
}

// Waits (inside run_ranks, under its watchdog) until `stage` reaches `value`.
inline void wait_for(const std::atomic<int>& stage, int value) {
  while (stage.load() < value) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

// How a rank thread lets another act while it waits inside a blocking call: it publishes its
// thread id right before the call, and the other waits until that thread sleeps (the state field of
// Linux's /proc/self/task/<tid>/stat), the only outside sign that it waits in there. (A plain
// sleep works until the machine is loaded.)
class Blocker {
 public:
  void about_to_block() { tid_ = static_cast<long>(syscall(SYS_gettid)); }
  void wait_until_blocked() const {
    while (tid_.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    const std::string path = "/proc/self/task/" + std::to_string(tid_.load()) + "/stat";
    for (;; std::this_thread::sleep_for(std::chrono::microseconds(100))) {
      std::ifstream in(path);
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t end = stat.rfind(')');  // "tid (name) S ...": the name may contain anything
      if (end != std::string::npos && end + 2 < stat.size() && stat[end + 2] == 'S') return;
    }
  }

 private:
  std::atomic<long> tid_{0};
};

// The outcome of a call that returned `r`: ncclInProgress is polled with ncclCommGetAsyncError.
inline ncclResult_t settle(ncclComm_t comm, ncclResult_t r) {
  while (r == ncclInProgress) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) return ncclInternalError;
  }
  return r;
}

inline ncclUniqueId new_id() {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) std::abort();
  return id;
}

inline ncclComm_t join(int nranks, const ncclUniqueId& id, int rank, Mode mode, ncclResult_t* result) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = mode == Mode::Blocking ? 1 : 0;
  ncclComm_t comm = nullptr;
  *result = settle(comm, ncclCommInitRankConfig(&comm, nranks, id, rank, &config));
  return comm;
}

// nranks communicators of one clique, rank r on device r; destroyed at the end.
struct Clique {
  std::vector<ncclComm_t> comm;
  Clique(int nranks, Mode mode) : comm(static_cast<size_t>(nranks), nullptr) {
    const ncclUniqueId id = new_id();
    std::vector<ncclResult_t> result(static_cast<size_t>(nranks), ncclInternalError);
    run_ranks(nranks, [&](int r) { comm[r] = join(nranks, id, r, mode, &result[r]); });
    for (ncclResult_t x : result) REQUIRE(x == ncclSuccess);
  }
  ~Clique() {
    for (ncclComm_t c : comm)
      if (c != nullptr) ncclCommDestroy(c);
  }
  Clique(const Clique&) = delete;
  Clique& operator=(const Clique&) = delete;
};

// Device memory of one emulated device, allocated, filled and read back by the main thread.
struct DeviceBytes {
  unsigned char* p = nullptr;
  size_t n = 0;
  DeviceBytes(int device, size_t bytes) : n(bytes) {
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), bytes) == cudaSuccess);
  }
  ~DeviceBytes() { cudaFree(p); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  template <class T>
  void set(const std::vector<T>& h, size_t offset_bytes = 0) {
    REQUIRE(offset_bytes + h.size() * sizeof(T) <= n);
    REQUIRE(cudaMemcpy(p + offset_bytes, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  template <class T>
  std::vector<T> get() const {
    std::vector<T> h(n / sizeof(T));
    REQUIRE(cudaMemcpy(h.data(), p, h.size() * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

}  // namespace ember::testing::nccl
