// Error paths of the NCCL shim (kernels/simt/nccl_shim.cpp) with ranks as threads
// (nccl_ranks.h): every argument and initialization error returns the status NCCL returns;
// a non-blocking communicator says ncclInProgress until its peers arrive; ranks calling different
// collectives fail with ncclInvalidUsage on every rank; a rank that leaves fails its peers with
// ncclRemoteError, and ncclCommAbort wakes its own rank's blocked call. None of them may hang.
// Registered as simt:, simt-perturbed: and simt-defer: like test_simt.cu.

#include <array>
#include <cstdint>
#include <cstring>

#include "nccl_ranks.h"

using namespace ember::testing::nccl;
using namespace std::chrono_literals;

TEST_CASE("nccl shim: argument errors return NCCL's status and leave the communicator usable", "[simt][nccl]") {
  Clique q(2, Mode::Blocking);
  ncclComm_t c0 = q.comm[0];
  DeviceBytes a(0, 64), b(0, 64), big(0, 256), elsewhere(1, 64);
  auto* A = a.p;
  auto* B = b.p;

  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclSum, nullptr, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "comm argument is NULL"));
  // Data types and reduction ops: out of range, and the fp8 types the shim does not support.
  CHECK(ncclAllReduce(A, B, 16, ncclNumTypes, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(A, B, 16, static_cast<ncclDataType_t>(-1), ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(A, B, 16, ncclFloat8e4m3, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "ncclFloat8e4m3 is not supported"));
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclNumOps, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, static_cast<ncclRedOp_t>(-1), c0, nullptr) == ncclInvalidArgument);
  // Roots.
  CHECK(ncclBroadcast(A, B, 16, ncclFloat32, 2, c0, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "invalid root 2"));
  CHECK(ncclBroadcast(A, B, 16, ncclFloat32, -1, c0, nullptr) == ncclInvalidArgument);
  // Buffers: null, host memory, pinned host memory, another device's memory, too short.
  std::vector<float> host(16);
  float* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), 64) == cudaSuccess);
  CHECK(ncclAllReduce(nullptr, B, 16, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(A, nullptr, 16, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(host.data(), B, 16, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "sendbuff"));
  CHECK(contains(last_error(), "is not device memory"));
  CHECK(ncclAllReduce(A, pinned, 16, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "recvbuff"));
  CHECK(ncclAllReduce(elsewhere.p, B, 16, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "memory of device 1 but the communicator's device is 0"));
  CHECK(ncclAllReduce(A, B, 17, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "run past the end"));
  CHECK(ncclAllReduce(A + 4, big.p, 16, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllGather(A, B, 16, ncclFloat32, c0, nullptr) == ncclInvalidArgument);  // recv needs 2 x 16
  CHECK(ncclBroadcast(A, elsewhere.p, 16, ncclFloat32, 0, c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(A, B, SIZE_MAX, ncclFloat32, ncclSum, c0, nullptr) == ncclInvalidArgument);
  cudaFreeHost(pinned);
  // Streams: destroyed, or of another device.
  cudaStream_t gone = nullptr, other = nullptr;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&gone) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  REQUIRE(cudaStreamCreate(&other) == cudaSuccess);  // before the destroy: it must not reuse the address
  REQUIRE(cudaStreamDestroy(gone) == cudaSuccess);
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclSum, c0, gone) == ncclInvalidArgument);
  CHECK(contains(last_error(), "is not a live stream"));
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclSum, c0, other) == ncclInvalidArgument);
  CHECK(contains(last_error(), "belongs to device 1"));
  REQUIRE(cudaStreamDestroy(other) == cudaSuccess);
  // NCCL drops empty collectives before looking at the buffers: nothing to post, nothing to wait for.
  CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, c0, nullptr) == ncclSuccess);
  CHECK(ncclAllGather(nullptr, nullptr, 0, ncclFloat32, c0, nullptr) == ncclSuccess);
  // Queries.
  int value = -1;
  CHECK(ncclCommCount(c0, &value) == ncclSuccess);
  CHECK(value == 2);
  CHECK(ncclCommCuDevice(q.comm[1], &value) == ncclSuccess);
  CHECK(value == 1);
  CHECK(ncclCommUserRank(q.comm[1], &value) == ncclSuccess);
  CHECK(value == 1);
  CHECK(ncclCommCount(c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommCuDevice(nullptr, &value) == ncclInvalidArgument);
  CHECK(ncclCommUserRank(c0, nullptr) == ncclInvalidArgument);
  ncclResult_t state = ncclInternalError;
  CHECK(ncclCommGetAsyncError(c0, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommGetAsyncError(c0, &state) == ncclSuccess);
  CHECK(state == ncclSuccess);

  // None of the failed calls took a round: a real all-reduce still pairs up.
  a.set(std::vector<float>(16, 1.5f));
  elsewhere.set(std::vector<float>(16, 2.0f));
  std::array<ncclResult_t, 2> result{};
  run_ranks(2, [&](int r) {
    void* x = r == 0 ? a.p : elsewhere.p;
    result[r] = ncclAllReduce(x, x, 16, ncclFloat32, ncclSum, q.comm[r], nullptr);
  });
  CHECK(result[0] == ncclSuccess);
  CHECK(result[1] == ncclSuccess);
  CHECK(a.get<float>() == std::vector<float>(16, 3.5f));
  CHECK(elsewhere.get<float>() == std::vector<float>(16, 3.5f));

  // A one-rank communicator on the main thread: finalized, destroyed, then used.
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ncclComm_t solo = nullptr;
  REQUIRE(ncclCommInitRank(&solo, 1, new_id(), 0) == ncclSuccess);
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclMax, solo, nullptr) == ncclSuccess);
  CHECK(b.get<float>() == std::vector<float>(16, 3.5f));
  CHECK(ncclCommFinalize(solo) == ncclSuccess);
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclSum, solo, nullptr) == ncclInvalidUsage);
  CHECK(ncclCommDestroy(solo) == ncclSuccess);
  CHECK(ncclAllReduce(A, B, 16, ncclFloat32, ncclSum, solo, nullptr) == ncclInvalidArgument);
  CHECK(contains(last_error(), "not a live communicator"));
  CHECK(ncclCommGetAsyncError(solo, &state) == ncclInvalidArgument);
  CHECK(ncclCommDestroy(solo) == ncclInvalidArgument);
  CHECK(ncclCommAbort(solo) == ncclInvalidArgument);
  CHECK(ncclCommDestroy(nullptr) == ncclSuccess);
  CHECK(ncclCommAbort(nullptr) == ncclSuccess);
}

TEST_CASE("nccl shim: initialization errors", "[simt][nccl]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(nullptr, 2, new_id(), 0) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&comm, 0, new_id(), 0) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&comm, 2, new_id(), -1) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&comm, 2, new_id(), 2) == ncclInvalidArgument);
  CHECK(comm == nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, new_id(), 0, &config) == ncclInvalidArgument);
  config = NCCL_CONFIG_INITIALIZER;
  config.version = 0;
  CHECK(ncclCommInitRankConfig(&comm, 1, new_id(), 0, &config) == ncclInvalidArgument);
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  CHECK(ncclCommInitRankConfig(&comm, 1, new_id(), 0, &config) == ncclInvalidArgument);
  // An id from another process: bytes 8..15 hold the creating pid (layout in nccl_shim.cpp).
  ncclUniqueId forged = new_id();
  const uint64_t other_pid = static_cast<uint64_t>(getpid()) + 1;
  std::memcpy(forged.internal + 8, &other_pid, sizeof other_pid);
  CHECK(ncclCommInitRank(&comm, 1, forged, 0) == ncclInvalidUsage);
  CHECK(contains(last_error(), "joins threads of one process only"));
  ncclUniqueId garbage;
  std::memset(&garbage, 0x5a, sizeof garbage);
  CHECK(ncclCommInitRank(&comm, 1, garbage, 0) == ncclInvalidUsage);
  CHECK(comm == nullptr);

  // Two ranks whose joins conflict: both fail (neither waits for a clique that can never fill).
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  struct Conflict {
    const char* what;
    int device[2];
    int nranks[2];
    int rank[2];
    ncclResult_t want;
    const char* message;
  };
  const Conflict conflicts[] = {
      {"duplicate device", {0, 0}, {2, 2}, {0, 1}, ncclInvalidUsage, "Duplicate GPU detected: rank "},
      {"duplicate rank", {0, 1}, {2, 2}, {0, 0}, ncclInvalidArgument, "joined twice"},
      {"nranks disagree", {0, 1}, {2, 3}, {0, 1}, ncclInvalidArgument, "joined with nranks"},
  };
  for (const Conflict& k : conflicts) {
    INFO(k.what);
    const ncclUniqueId id = new_id();
    std::array<ncclResult_t, 2> result{};
    std::array<std::string, 2> message;
    run_ranks(2, [&](int t) {
      cudaSetDevice(k.device[t]);
      ncclComm_t c = join(k.nranks[t], id, k.rank[t], mode, &result[t]);
      message[t] = last_error();
      ncclCommDestroy(c);  // the non-blocking joiner that got a handle; null otherwise
    });
    for (int t = 0; t < 2; ++t) {
      CHECK(result[t] == k.want);
      CHECK(contains(message[t], k.message));
    }
  }
}

TEST_CASE("nccl shim: non-blocking communicators report ncclInProgress until their peers arrive", "[simt][nccl]") {
  const ncclUniqueId id = new_id();
  std::array<ncclComm_t, 2> comm{};
  std::atomic<int> stage{0};
  std::array<std::vector<ncclResult_t>, 2> seen;
  DeviceBytes x0(0, 32), x1(1, 32);
  x0.set(std::vector<double>{1, 2, 3, 4});
  x1.set(std::vector<double>{10, 20, 30, 40});
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  run_ranks(2, [&](int r) {
    std::vector<ncclResult_t>& s = seen[r];
    ncclResult_t st = ncclInternalError;
    int count = 0;
    if (r == 0) {
      s.push_back(ncclCommInitRankConfig(&comm[0], 2, id, 0, &config));  // ncclInProgress
      ncclCommGetAsyncError(comm[0], &st);
      s.push_back(st);                              // ncclInProgress: rank 1 has not joined
      s.push_back(ncclCommCount(comm[0], &count));  // ncclInvalidArgument: not ready yet
      stage = 1;
      s.push_back(settle(comm[0], ncclInProgress));                                       // ncclSuccess
      s.push_back(ncclAllReduce(x0.p, x0.p, 4, ncclFloat64, ncclSum, comm[0], nullptr));  // ncclInProgress
      s.push_back(ncclAllReduce(x0.p, x0.p, 4, ncclFloat64, ncclSum, comm[0], nullptr));  // ncclInvalidArgument
      ncclCommGetAsyncError(comm[0], &st);
      s.push_back(st);  // ncclInProgress: rank 1 has not posted
      stage = 2;
      s.push_back(settle(comm[0], ncclInProgress));  // ncclSuccess
    } else {
      wait_for(stage, 1);
      s.push_back(settle(comm[1], ncclCommInitRankConfig(&comm[1], 2, id, 1, &config)));  // ncclSuccess
      wait_for(stage, 2);
      // The last rank to post finds its round complete: ncclSuccess without polling.
      s.push_back(ncclAllReduce(x1.p, x1.p, 4, ncclFloat64, ncclSum, comm[1], nullptr));
    }
  });
  CHECK(seen[0] == std::vector<ncclResult_t>{ncclInProgress, ncclInProgress, ncclInvalidArgument, ncclSuccess,
                                             ncclInProgress, ncclInvalidArgument, ncclInProgress, ncclSuccess});
  CHECK(seen[1] == std::vector<ncclResult_t>{ncclSuccess, ncclSuccess});
  CHECK(x0.get<double>() == std::vector<double>{11, 22, 33, 44});
  CHECK(x1.get<double>() == std::vector<double>{11, 22, 33, 44});
  for (ncclComm_t c : comm) CHECK(ncclCommDestroy(c) == ncclSuccess);
}

TEST_CASE("nccl shim: ranks calling different collectives fail on every rank", "[simt][nccl]") {
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  struct Mismatch {
    const char* what;
    std::function<ncclResult_t(int rank, void* buf, ncclComm_t c)> call;
    const char* mention[2];
  };
  const Mismatch mismatches[] = {
      {"kind and count",
       [](int r, void* buf, ncclComm_t c) {
         return r == 0 ? ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr)
                       : ncclBroadcast(buf, buf, 4, ncclFloat32, 0, c, nullptr);
       },
       {"called ncclAllReduce(count 8, ncclFloat32, ncclSum)", "called ncclBroadcast(count 4, ncclFloat32, root 0)"}},
      {"reduction op",
       [](int r, void* buf, ncclComm_t c) {
         return ncclAllReduce(buf, buf, 8, ncclFloat32, r == 0 ? ncclSum : ncclMax, c, nullptr);
       },
       {"ncclAllReduce(count 8, ncclFloat32, ncclSum)", "ncclAllReduce(count 8, ncclFloat32, ncclMax)"}},
  };
  for (const Mismatch& m : mismatches) {
    INFO(m.what);
    Clique q(2, mode);
    DeviceBytes b0(0, 32), b1(1, 32);
    std::array<std::vector<ncclResult_t>, 2> result;
    std::array<std::string, 2> message;
    run_ranks(2, [&](int r) {
      ncclComm_t c = q.comm[r];
      void* buf = r == 0 ? b0.p : b1.p;
      result[r].push_back(settle(c, m.call(r, buf, c)));
      message[r] = last_error();
      // Sticky: the communicator stays failed (NCCL's asynchronous errors do too).
      result[r].push_back(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr));
      ncclResult_t st = ncclInternalError;
      ncclCommGetAsyncError(c, &st);
      result[r].push_back(st);
    });
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r);
      CHECK(result[r] == std::vector<ncclResult_t>(3, ncclInvalidUsage));
      CHECK(contains(message[r], "collective #1 differs between ranks"));
      CHECK(contains(message[r], m.mention[0]));
      CHECK(contains(message[r], m.mention[1]));
    }
  }
}

TEST_CASE("nccl shim: a rank that leaves fails its peers' pending and later collectives", "[simt][nccl]") {
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  DeviceBytes b0(0, 32), b1(1, 32);

  SECTION("ncclCommAbort before every rank joined") {
    // nranks 3 and rank 2 never comes: rank 0 waits to initialize until rank 1 gives up.
    const ncclUniqueId id = new_id();
    std::atomic<int> stage{0};
    Blocker blocker;
    ncclResult_t waiter = ncclInternalError, late = ncclInternalError;
    std::array<ncclResult_t, 2> left{ncclInternalError, ncclInternalError};
    std::string message;
    run_ranks(2, [&](int r) {
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      ncclComm_t c = nullptr;
      if (r == 0) {
        config.blocking = mode == Mode::Blocking ? 1 : 0;
        if (mode == Mode::Blocking) blocker.about_to_block();
        const ncclResult_t first = ncclCommInitRankConfig(&c, 3, id, 0, &config);
        if (mode == Mode::NonBlocking) stage = 1;
        waiter = settle(c, first);
        message = last_error();
        ncclCommDestroy(c);  // the handle of a non-blocking join; null after a failed blocking one
      } else {
        config.blocking = 0;
        left[0] = ncclCommInitRankConfig(&c, 3, id, 1, &config);  // ncclInProgress
        if (mode == Mode::Blocking)
          blocker.wait_until_blocked();
        else
          wait_for(stage, 1);
        left[1] = ncclCommAbort(c);
      }
    });
    ncclComm_t c = nullptr;
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    late = ncclCommInitRank(&c, 3, id, 2);
    CHECK(left == std::array<ncclResult_t, 2>{ncclInProgress, ncclSuccess});
    CHECK(waiter == ncclRemoteError);
    CHECK(contains(message, "rank 1 left the communicator (ncclCommAbort) before all 3 ranks had joined"));
    CHECK(late == ncclRemoteError);
    CHECK(c == nullptr);
  }

  SECTION("ncclCommAbort while the peer waits in a round") {
    Clique q(2, mode);
    std::atomic<int> stage{0};
    Blocker blocker;
    std::array<std::vector<ncclResult_t>, 2> result;
    std::string message;
    run_ranks(2, [&](int r) {
      ncclComm_t c = q.comm[r];
      void* buf = r == 0 ? b0.p : b1.p;
      result[r].push_back(settle(c, ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr)));
      if (r == 0) {
        if (mode == Mode::Blocking) blocker.about_to_block();
        ncclResult_t first = ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr);
        if (mode == Mode::NonBlocking) {
          result[r].push_back(first);  // ncclInProgress: posted, rank 1 has not
          stage = 1;
        }
        result[r].push_back(settle(c, first));
        message = last_error();
        result[r].push_back(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr));
      } else {
        if (mode == Mode::Blocking)
          blocker.wait_until_blocked();
        else
          wait_for(stage, 1);
        result[r].push_back(ncclCommAbort(c));
        q.comm[1] = nullptr;
      }
    });
    std::vector<ncclResult_t> want0{ncclSuccess, ncclRemoteError, ncclRemoteError};
    if (mode == Mode::NonBlocking) want0.insert(want0.begin() + 1, ncclInProgress);
    CHECK(result[0] == want0);
    CHECK(result[1] == std::vector<ncclResult_t>{ncclSuccess, ncclSuccess});
    CHECK(contains(message, "rank 1 left the communicator (ncclCommAbort) before joining ncclAllReduce #2"));
  }

  SECTION("ncclCommDestroy before the peer's next collective") {
    Clique q(2, mode);
    std::atomic<int> stage{0};
    std::array<std::vector<ncclResult_t>, 2> result;
    std::string message;
    run_ranks(2, [&](int r) {
      ncclComm_t c = q.comm[r];
      void* buf = r == 0 ? b0.p : b1.p;
      result[r].push_back(settle(c, ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, c, nullptr)));
      if (r == 1) {
        result[r].push_back(ncclCommDestroy(c));
        q.comm[1] = nullptr;
        stage = 1;
      } else {
        wait_for(stage, 1);
        result[r].push_back(settle(c, ncclBroadcast(buf, buf, 8, ncclFloat32, 0, c, nullptr)));
        message = last_error();
        ncclResult_t st = ncclInternalError;
        ncclCommGetAsyncError(c, &st);
        result[r].push_back(st);
      }
    });
    CHECK(result[0] == std::vector<ncclResult_t>{ncclSuccess, ncclRemoteError, ncclRemoteError});
    CHECK(result[1] == std::vector<ncclResult_t>{ncclSuccess, ncclSuccess});
    CHECK(contains(message, "rank 1 left the communicator (ncclCommDestroy) before joining ncclBroadcast #2"));
  }

  SECTION("ncclCommAbort of a rank's own communicator, from the thread that polls or another one") {
    // Non-blocking: the pattern of a caller with a deadline (poll, give up, abort from the same
    // thread). Blocking: another thread of rank 0 aborts while the call waits; the call returns.
    Clique q(2, mode);
    Blocker blocker;
    ncclResult_t waiter = ncclInternalError, polled = ncclInternalError, aborted = ncclInternalError;
    std::string message;
    {
      Watchdog watchdog;
      std::thread rank0([&] {
        cudaSetDevice(0);
        if (mode == Mode::Blocking) blocker.about_to_block();
        ncclResult_t r = ncclAllReduce(b0.p, b0.p, 8, ncclFloat32, ncclSum, q.comm[0], nullptr);
        if (mode == Mode::NonBlocking) {
          for (int i = 0; i < 3 && r == ncclInProgress; ++i) ncclCommGetAsyncError(q.comm[0], &r);
          polled = r;
          aborted = ncclCommAbort(q.comm[0]);
          waiter = ncclCommGetAsyncError(q.comm[0], &r);  // the freed handle
        } else {
          waiter = r;
          message = last_error();
        }
      });
      if (mode == Mode::Blocking) {
        blocker.wait_until_blocked();
        aborted = ncclCommAbort(q.comm[0]);
      }
      rank0.join();
    }
    ncclComm_t gone = q.comm[0];
    q.comm[0] = nullptr;
    CHECK(aborted == ncclSuccess);
    if (mode == Mode::Blocking) {
      CHECK(waiter == ncclRemoteError);
      CHECK(contains(message, "rank 0 left the communicator (ncclCommAbort) during ncclAllReduce #1"));
    } else {
      CHECK(polled == ncclInProgress);
      CHECK(waiter == ncclInvalidArgument);
    }
    ncclResult_t peer = ncclInternalError;
    run_ranks(2, [&](int r) {
      if (r == 1) peer = settle(q.comm[1], ncclAllReduce(b1.p, b1.p, 8, ncclFloat32, ncclSum, q.comm[1], nullptr));
    });
    CHECK(peer == ncclRemoteError);
    CHECK(ncclCommDestroy(gone) == ncclInvalidArgument);
  }
}
