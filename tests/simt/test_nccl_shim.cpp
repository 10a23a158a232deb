// Results of the NCCL shim (kernels/simt/nccl_shim.cpp) with ranks as threads (nccl_ranks.h),
// compared bit for bit with a CPU computation written independently of the shim (f16/bf16
// through ember::Half/BFloat16; the shim uses CUDA's __half): all-reduce of every type and op,
// broadcast, all-gather, in and out of place, and the order against work on the stream. The error
// paths are in test_nccl_shim_errors.cpp.
//
// Registered as simt:, simt-perturbed: and simt-defer: like test_simt.cu; the 3-rank cases need a
// third device and run only as simt-3dev: / simt-3dev-defer: (EMBER_SIMT_DEVICES=3, see
// tests/simt/CMakeLists.txt), where they assert the device count.

#include <ember/core/dtype.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

#include "nccl_ranks.h"

using namespace ember::testing::nccl;

namespace {

// ---- the CPU reference of all-reduce ------------------------------------------------------------
// Ref<T>: inputs of storage type T from a small integer v, and the accumulator the reference
// reduces in: float for f16/bf16/f32 (rounded once at the end), double for f64, int64/uint64 for
// integers (narrowed at the end, which wraps exactly like wrapping at every step).
template <class T>
struct Ref {
  using Acc = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  static T make(int v, int) { return static_cast<T>(std::is_signed_v<T> ? v : v + 50); }
  static Acc in(T x) { return static_cast<Acc>(x); }
  static T out(Acc a) { return static_cast<T>(a); }
};
template <>
struct Ref<float> {
  using Acc = float;
  static float make(int v, int r) { return static_cast<float>(v * 0.173 + r * 0.001); }
  static float in(float x) { return x; }
  static float out(float a) { return a; }
};
template <>
struct Ref<double> {
  using Acc = double;
  static double make(int v, int r) { return v * 0.173 + r * 0.001; }
  static double in(double x) { return x; }
  static double out(double a) { return a; }
};
template <>
struct Ref<ember::Half> {
  using Acc = float;
  static ember::Half make(int v, int r) { return ember::Half(static_cast<float>(v * 0.173 + r * 0.001)); }
  static float in(ember::Half x) { return static_cast<float>(x); }
  static ember::Half out(float a) { return ember::Half(a); }
};
template <>
struct Ref<ember::BFloat16> {
  using Acc = float;
  static ember::BFloat16 make(int v, int r) { return ember::BFloat16(static_cast<float>(v * 0.173 + r * 0.001)); }
  static float in(ember::BFloat16 x) { return static_cast<float>(x); }
  static ember::BFloat16 out(float a) { return ember::BFloat16(a); }
};

template <class A>
A combine(ncclRedOp_t op, A a, A b) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax:
      if constexpr (std::is_floating_point_v<A>)
        return std::fmax(a, b);
      else
        return a > b ? a : b;
    case ncclMin:
      if constexpr (std::is_floating_point_v<A>)
        return std::fmin(a, b);
      else
        return a < b ? a : b;
    default: return a + b;  // ncclSum, ncclAvg
  }
}

template <class T>
std::vector<unsigned char> bytes_of(const std::vector<T>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

struct AllReduceCase {
  std::string name;
  ncclDataType_t type;
  ncclRedOp_t op;
  bool in_place;
  size_t count;
  std::vector<std::vector<unsigned char>> input;  // by rank
  std::vector<unsigned char> want;                // every rank's result
};

template <class T>
AllReduceCase all_reduce_case(const char* type_name, ncclDataType_t type, ncclRedOp_t op, bool in_place, int nranks,
                              size_t count) {
  using R = Ref<T>;
  using Acc = typename R::Acc;
  static const char* const op_names[] = {"sum", "prod", "max", "min", "avg"};
  AllReduceCase c{std::string(type_name) + " " + op_names[op] + (in_place ? " in place" : " out of place"),
                  type,
                  op,
                  in_place,
                  count,
                  {},
                  {}};
  std::vector<std::vector<T>> x(static_cast<size_t>(nranks), std::vector<T>(count));
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; ++i)
      x[r][i] =
          R::make(static_cast<int>((i * 37 + static_cast<size_t>(r) * 11 + static_cast<size_t>(op) * 5) % 101) - 50, r);
  std::vector<T> want(count);
  for (size_t i = 0; i < count; ++i) {
    Acc acc = R::in(x[0][i]);
    for (int r = 1; r < nranks; ++r) acc = combine(op, acc, R::in(x[r][i]));
    if (op == ncclAvg) {
      // Integers: the sum wraps in the element type first (NCCL sums, then divides), and the
      // division truncates toward zero.
      if constexpr (std::is_integral_v<T>) acc = static_cast<Acc>(static_cast<T>(acc));
      acc = static_cast<Acc>(acc / static_cast<Acc>(nranks));
    }
    want[i] = R::out(acc);
  }
  for (const std::vector<T>& xr : x) c.input.push_back(bytes_of(xr));
  c.want = bytes_of(want);
  return c;
}

// Every supported type with the given ops, in and out of place.
std::vector<AllReduceCase> all_reduce_cases(int nranks, size_t count, std::initializer_list<ncclRedOp_t> ops) {
  std::vector<AllReduceCase> cases;
  for (ncclRedOp_t op : ops)
    for (bool in_place : {false, true}) {
      cases.push_back(all_reduce_case<int8_t>("int8", ncclInt8, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<uint8_t>("uint8", ncclUint8, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<int32_t>("int32", ncclInt32, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<uint32_t>("uint32", ncclUint32, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<int64_t>("int64", ncclInt64, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<uint64_t>("uint64", ncclUint64, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<ember::Half>("f16", ncclFloat16, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<float>("f32", ncclFloat32, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<double>("f64", ncclFloat64, op, in_place, nranks, count));
      cases.push_back(all_reduce_case<ember::BFloat16>("bf16", ncclBfloat16, op, in_place, nranks, count));
    }
  return cases;
}

// Runs every case on the clique (one collective per case, in order, stream 0) and checks the
// statuses and every rank's result bytes.
void check_all_reduces(Clique& q, const std::vector<AllReduceCase>& cases) {
  const int nranks = static_cast<int>(q.comm.size());
  struct Buffers {
    std::unique_ptr<DeviceBytes> send, recv;
  };
  std::vector<std::vector<Buffers>> buf(cases.size());  // [case][rank]
  for (size_t k = 0; k < cases.size(); ++k) {
    const AllReduceCase& c = cases[k];
    for (int r = 0; r < nranks; ++r) {
      Buffers b;
      b.send = std::make_unique<DeviceBytes>(r, c.want.size());
      b.send->set(c.input[r]);
      if (!c.in_place) b.recv = std::make_unique<DeviceBytes>(r, c.want.size());
      buf[k].push_back(std::move(b));
    }
  }
  std::vector<std::vector<ncclResult_t>> result(static_cast<size_t>(nranks),
                                                std::vector<ncclResult_t>(cases.size(), ncclInternalError));
  run_ranks(nranks, [&](int r) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const Buffers& b = buf[k][r];
      unsigned char* recv = cases[k].in_place ? b.send->p : b.recv->p;
      result[r][k] = settle(
          q.comm[r], ncclAllReduce(b.send->p, recv, cases[k].count, cases[k].type, cases[k].op, q.comm[r], nullptr));
    }
  });
  for (size_t k = 0; k < cases.size(); ++k) {
    const AllReduceCase& c = cases[k];
    INFO(c.name << ", " << nranks << " ranks");
    for (int r = 0; r < nranks; ++r) {
      INFO("rank " << r);
      CHECK(result[r][k] == ncclSuccess);
      const Buffers& b = buf[k][r];
      CHECK((c.in_place ? b.send : b.recv)->get<unsigned char>() == c.want);
      if (!c.in_place) CHECK(b.send->get<unsigned char>() == c.input[r]);  // the input is untouched
    }
  }
}

}  // namespace

TEST_CASE("nccl shim: version, unique ids and error strings", "[simt][nccl]") {
  int version = 0;
  CHECK(ncclGetVersion(&version) == ncclSuccess);
  CHECK(version == NCCL_VERSION_CODE);
  CHECK(ncclGetVersion(nullptr) == ncclInvalidArgument);
  const ncclUniqueId a = new_id(), b = new_id();
  CHECK(std::memcmp(&a, &b, sizeof a) != 0);
  CHECK(ncclGetUniqueId(nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetErrorString(ncclSuccess)) == "no error");
  CHECK(std::string(ncclGetErrorString(ncclInvalidUsage)) == "invalid usage (run with NCCL_DEBUG=WARN for details)");
  CHECK(std::string(ncclGetErrorString(ncclRemoteError)) == "remote process exited or there was a network error");
  CHECK(std::string(ncclGetErrorString(static_cast<ncclResult_t>(99))) == "unknown result code");
}

TEST_CASE("nccl shim: all-reduce of every type and op matches the CPU bit for bit", "[simt][nccl]") {
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  Clique q(2, mode);
  check_all_reduces(q, all_reduce_cases(2, 37, {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}));

  // Integer averages truncate toward zero: (-3 + 0) / 2 == -1, (7 + 0) / 2 == 3.
  DeviceBytes x0(0, 16), x1(1, 16);
  x0.set(std::vector<int64_t>{-3, 7});
  x1.set(std::vector<int64_t>{0, 0});
  std::array<ncclResult_t, 2> result{};
  run_ranks(2, [&](int r) {
    void* x = r == 0 ? x0.p : x1.p;
    result[r] = settle(q.comm[r], ncclAllReduce(x, x, 2, ncclInt64, ncclAvg, q.comm[r], nullptr));
  });
  CHECK(result[0] == ncclSuccess);
  CHECK(result[1] == ncclSuccess);
  CHECK(x0.get<int64_t>() == std::vector<int64_t>{-1, 3});
  CHECK(x1.get<int64_t>() == std::vector<int64_t>{-1, 3});
}

TEST_CASE("nccl shim: broadcast from root 1 and all-gather, in and out of place", "[simt][nccl]") {
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  Clique q(2, mode);
  const size_t n = 29;
  std::vector<std::vector<float>> data(2, std::vector<float>(n));
  std::vector<std::vector<int32_t>> part(2, std::vector<int32_t>(n));
  for (size_t i = 0; i < n; ++i)
    for (int r = 0; r < 2; ++r) {
      data[r][i] = static_cast<float>(i) * 0.5f + static_cast<float>(100 * r);
      part[r][i] = static_cast<int32_t>(1000 * r + i);
    }
  std::vector<std::unique_ptr<DeviceBytes>> bsend, brecv, binplace, gsend, grecv, ginplace;
  for (int r = 0; r < 2; ++r) {
    bsend.push_back(std::make_unique<DeviceBytes>(r, n * 4));
    brecv.push_back(std::make_unique<DeviceBytes>(r, n * 4));
    binplace.push_back(std::make_unique<DeviceBytes>(r, n * 4));
    gsend.push_back(std::make_unique<DeviceBytes>(r, n * 4));
    grecv.push_back(std::make_unique<DeviceBytes>(r, 2 * n * 4));
    ginplace.push_back(std::make_unique<DeviceBytes>(r, 2 * n * 4));
    bsend[r]->set(data[r]);  // rank 0's is not read: only the root's send buffer is
    binplace[r]->set(data[r]);
    gsend[r]->set(part[r]);
    ginplace[r]->set(std::vector<int32_t>(2 * n, -7));
    ginplace[r]->set(part[r], static_cast<size_t>(r) * n * 4);  // in place: this rank's slot
  }
  std::vector<std::vector<ncclResult_t>> result(2);
  run_ranks(2, [&](int r) {
    ncclComm_t c = q.comm[r];
    result[r].push_back(settle(c, ncclBroadcast(bsend[r]->p, brecv[r]->p, n, ncclFloat32, 1, c, nullptr)));
    result[r].push_back(settle(c, ncclBroadcast(binplace[r]->p, binplace[r]->p, n, ncclFloat32, 1, c, nullptr)));
    result[r].push_back(settle(c, ncclAllGather(gsend[r]->p, grecv[r]->p, n, ncclInt32, c, nullptr)));
    unsigned char* own_slot = ginplace[r]->p + static_cast<size_t>(r) * n * 4;
    result[r].push_back(settle(c, ncclAllGather(own_slot, ginplace[r]->p, n, ncclInt32, c, nullptr)));
  });
  std::vector<int32_t> gathered = part[0];
  gathered.insert(gathered.end(), part[1].begin(), part[1].end());
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(result[r] == std::vector<ncclResult_t>(4, ncclSuccess));
    CHECK(brecv[r]->get<float>() == data[1]);
    CHECK(bsend[r]->get<float>() == data[r]);
    CHECK(binplace[r]->get<float>() == data[1]);
    CHECK(grecv[r]->get<int32_t>() == gathered);
    CHECK(gsend[r]->get<int32_t>() == part[r]);
    CHECK(ginplace[r]->get<int32_t>() == gathered);
  }
}

TEST_CASE("nccl shim: a collective sees the stream's earlier work and later work sees its result", "[simt][nccl]") {
  // No kernels: an async copy fills the send buffer right before the collective (directly on its
  // stream, then from a second stream through an event), an async copy reads the result after.
  // With EMBER_SIMT_DEFER=1 the copies are still queued when the collective is called.
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  Clique q(2, mode);
  const size_t n = 64, bytes = n * sizeof(float);
  struct PerRank {
    std::unique_ptr<DeviceBytes> send, recv;
    float* in[2] = {nullptr, nullptr};
    float* out[2] = {nullptr, nullptr};
    cudaStream_t stream = nullptr, side = nullptr;
    cudaEvent_t filled = nullptr;
  };
  std::vector<PerRank> rank(2);
  for (int r = 0; r < 2; ++r) {
    PerRank& p = rank[r];
    p.send = std::make_unique<DeviceBytes>(r, bytes);
    p.recv = std::make_unique<DeviceBytes>(r, bytes);
    p.send->set(std::vector<float>(n, -1.0f));
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&p.stream) == cudaSuccess);
    REQUIRE(cudaStreamCreate(&p.side) == cudaSuccess);
    REQUIRE(cudaEventCreate(&p.filled) == cudaSuccess);
    for (int k = 0; k < 2; ++k) {  // pinned: copies from and to it are truly asynchronous
      REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p.in[k]), bytes) == cudaSuccess);
      REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&p.out[k]), bytes) == cudaSuccess);
      for (size_t i = 0; i < n; ++i) {
        p.in[k][i] = static_cast<float>((k + 1) * (r + 1)) + static_cast<float>(i);
        p.out[k][i] = -2.0f;
      }
    }
  }
  std::vector<std::vector<ncclResult_t>> result(2);
  std::vector<std::vector<cudaError_t>> queued(2);
  run_ranks(2, [&](int r) {
    PerRank& p = rank[r];
    ncclComm_t c = q.comm[r];
    cudaMemcpyAsync(p.send->p, p.in[0], bytes, cudaMemcpyHostToDevice, p.stream);
    queued[r].push_back(cudaStreamQuery(p.stream));
    result[r].push_back(settle(c, ncclAllReduce(p.send->p, p.recv->p, n, ncclFloat32, ncclSum, c, p.stream)));
    cudaMemcpyAsync(p.out[0], p.recv->p, bytes, cudaMemcpyDeviceToHost, p.stream);
    cudaStreamSynchronize(p.stream);

    cudaMemcpyAsync(p.send->p, p.in[1], bytes, cudaMemcpyHostToDevice, p.side);
    cudaEventRecord(p.filled, p.side);
    cudaStreamWaitEvent(p.stream, p.filled, 0);
    queued[r].push_back(cudaStreamQuery(p.side));
    result[r].push_back(settle(c, ncclAllReduce(p.send->p, p.recv->p, n, ncclFloat32, ncclSum, c, p.stream)));
    cudaMemcpyAsync(p.out[1], p.recv->p, bytes, cudaMemcpyDeviceToHost, p.stream);
    cudaStreamSynchronize(p.stream);
  });
  const cudaError_t pending = deferred() ? cudaErrorNotReady : cudaSuccess;
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(result[r] == std::vector<ncclResult_t>(2, ncclSuccess));
    CHECK(queued[r] == std::vector<cudaError_t>(2, pending));  // the copies had not run yet when deferred
    for (int k = 0; k < 2; ++k) {
      std::vector<float> want(n), got(rank[r].out[k], rank[r].out[k] + n);
      for (size_t i = 0; i < n; ++i) want[i] = rank[0].in[k][i] + rank[1].in[k][i];
      CHECK(got == want);
    }
  }
  for (PerRank& p : rank) {
    for (int k = 0; k < 2; ++k) {
      cudaFreeHost(p.in[k]);
      cudaFreeHost(p.out[k]);
    }
    cudaEventDestroy(p.filled);
    cudaStreamDestroy(p.side);
    cudaStreamDestroy(p.stream);
  }
}

// Needs EMBER_SIMT_DEVICES >= 3: hidden from the default registrations, run by simt-3dev:.
TEST_CASE("nccl shim: three ranks on three devices", "[.nccl3][nccl]") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  REQUIRE(devices >= 3);  // run with EMBER_SIMT_DEVICES=3 (ctest does): never a silent skip
  const Mode mode = GENERATE(Mode::Blocking, Mode::NonBlocking);
  INFO(mode_name(mode));
  Clique q(3, mode);
  check_all_reduces(q, all_reduce_cases(3, 19, {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}));

  // f16 accumulates in float and rounds once: 1 + 2^-11 + 2^-11 = 1 + 2^-10 (0x3c01). Rounding
  // after each addition would give 1 (1 + 2^-11 is a tie, to even: 1).
  std::vector<std::unique_ptr<DeviceBytes>> h;
  const float value[3] = {1.0f, 0x1p-11f, 0x1p-11f};
  for (int r = 0; r < 3; ++r) {
    h.push_back(std::make_unique<DeviceBytes>(r, 2));
    h[r]->set(std::vector<ember::Half>{ember::Half(value[r])});
  }
  std::array<ncclResult_t, 3> result{};
  run_ranks(3, [&](int r) {
    result[r] = settle(q.comm[r], ncclAllReduce(h[r]->p, h[r]->p, 1, ncclFloat16, ncclSum, q.comm[r], nullptr));
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(result[r] == ncclSuccess);
    CHECK(h[r]->get<uint16_t>() == std::vector<uint16_t>{0x3c01});
  }

  // Broadcast from root 2 and all-gather over three ranks.
  std::vector<std::unique_ptr<DeviceBytes>> b, g;
  for (int r = 0; r < 3; ++r) {
    b.push_back(std::make_unique<DeviceBytes>(r, 5 * 8));
    b[r]->set(std::vector<int64_t>(5, 100 + r));
    g.push_back(std::make_unique<DeviceBytes>(r, 3 * 2 * 4));
    g[r]->set(std::vector<int32_t>{r, -r}, static_cast<size_t>(r) * 8);
  }
  std::array<std::vector<ncclResult_t>, 3> results;
  run_ranks(3, [&](int r) {
    ncclComm_t c = q.comm[r];
    results[r].push_back(settle(c, ncclBroadcast(b[r]->p, b[r]->p, 5, ncclInt64, 2, c, nullptr)));
    results[r].push_back(settle(c, ncclAllGather(g[r]->p + r * 8, g[r]->p, 2, ncclInt32, c, nullptr)));
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(results[r] == std::vector<ncclResult_t>(2, ncclSuccess));
    CHECK(b[r]->get<int64_t>() == std::vector<int64_t>(5, 102));
    CHECK(g[r]->get<int32_t>() == std::vector<int32_t>{0, 0, 1, -1, 2, -2});
  }

  // A mismatch between ranks 0 and 1 fails them before rank 2 posts, and rank 2 when it does.
  std::atomic<int> returned{0};
  std::array<ncclResult_t, 3> mismatch{};
  run_ranks(3, [&](int r) {
    ncclComm_t c = q.comm[r];
    if (r == 2) wait_for(returned, 2);
    mismatch[r] = settle(c, ncclBroadcast(b[r]->p, b[r]->p, r == 1 ? 4 : 5, ncclInt64, 0, c, nullptr));
    ++returned;
  });
  CHECK(mismatch == std::array<ncclResult_t, 3>{ncclInvalidUsage, ncclInvalidUsage, ncclInvalidUsage});
}
