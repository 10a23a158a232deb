// The NCCL communicator (parallel/nccl_communicator.h): in-process ranks, each on its own CUDA
// device (the emulator's cuda:0 and cuda:1, with kernels/simt/nccl_shim.cpp as NCCL; on a GPU
// build, real NCCL and as many GPUs as the machine has). Collectives against CPU-computed values,
// header checks, timeouts, and DistributedDataParallel through NCCL (and, for comparison, through
// the in-process communicator on the same devices) equal to full-batch training.
// Cases that need two devices carry [multi-gpu] (scripts/gpu-check.sh leaves them out on a
// one-GPU machine and says so). Registered a third time with deferred streams ("cuda-defer:"),
// where a missing stream dependency (the comm stream not waiting for the caller's kernels) reads
// stale data.

// clang-format off
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/nccl_communicator.h>
#include <ember/parallel/rendezvous.h>

#include "../parallel/ddp_scenarios.h"
#include "nccl_ranks.h"
// clang-format on

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing::ddp;
using namespace ember::testing::ranks;

namespace {

// The message of what fn throws ("" when it does not).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Rank r's test data: values that differ per rank and per element.
Tensor rank_data(int r, const Shape& shape, DType dt, Device d) {
  Tensor t = arange(0, static_cast<double>(numel_of(shape)), 1, {.dtype = DType::f64}).view(shape);
  t = t * (r + 1) + 0.25 * r;
  return t.to(d, dt);
}

// max |got - want| over all elements (shapes must match).
double max_abs_diff(const Tensor& got, const Tensor& want) {
  if (got.shape() != want.shape()) return INFINITY;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, std::abs(a[k] - b[k]));
  return worst;
}

}  // namespace

TEST_CASE("nccl: the build has a communicator and a unique id is 128 bytes", "[cuda][nccl]") {
  REQUIRE(nccl_built());
  CHECK(nccl_unique_id().size() == 128);
  CHECK(!nccl_version().empty());
}

TEST_CASE("nccl: a world of one (a single GPU) reduces to itself", "[cuda][nccl]") {
  REQUIRE(all_ok(run_nccl(1, [&](std::shared_ptr<Communicator> c) {
    Tensor t = rank_data(0, {5}, DType::f32, Device::cuda(0));
    c->all_reduce(t, ReduceOp::avg);
    EXPECT(max_abs_diff(t, rank_data(0, {5}, DType::f64, Device::cpu())) == 0);
    const std::vector<Tensor> g = c->all_gather(t);
    EXPECT(g.size() == 1 && max_abs_diff(g[0], t) == 0);
    c->barrier();
  })));
}

TEST_CASE("nccl: all_reduce, broadcast, all_gather and barrier on 2 ranks equal the CPU's values", "[cuda][nccl][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  const int world = 2;
  std::vector<std::vector<std::string>> failures(world);
  REQUIRE(all_ok(run_nccl(world, [&](std::shared_ptr<Communicator> c) {
    const int r = c->rank();
    const Device dev = Device::cuda(r);
    EXPECT(c->backend() == "nccl");
    // Sum and average in f32 and f64, sum in i64.
    for (DType dt : {DType::f32, DType::f64, DType::i64}) {
      Tensor t = rank_data(r, {3, 5}, dt, dev);
      c->all_reduce(t);
      const Tensor want = rank_data(0, {3, 5}, dt, Device::cpu()).to(DType::f64) +
                          rank_data(1, {3, 5}, dt, Device::cpu()).to(DType::f64);
      EXPECT(t.device() == dev);
      EXPECT(max_abs_diff(t, want) == 0);
    }
    {
      Tensor t = rank_data(r, {7}, DType::f32, dev);
      c->all_reduce(t, ReduceOp::avg);
      const Tensor want =
          (rank_data(0, {7}, DType::f64, Device::cpu()) + rank_data(1, {7}, DType::f64, Device::cpu())) / 2;
      EXPECT(max_abs_diff(t, want) < 1e-5);
    }
    // A non-contiguous view and a CPU tensor are staged through the device and written back.
    {
      Tensor base = rank_data(r, {4, 6}, DType::f32, dev);
      Tensor view = base.transpose(0, 1).narrow(0, 1, 3);  // 3x4, strided
      c->all_reduce(view);
      Tensor want = (rank_data(0, {4, 6}, DType::f64, Device::cpu()) + rank_data(1, {4, 6}, DType::f64, Device::cpu()));
      want = want.transpose(0, 1).narrow(0, 1, 3);
      EXPECT(max_abs_diff(view, want) == 0);
      // Outside the view, the base is untouched.
      EXPECT(max_abs_diff(base.narrow(1, 0, 1), rank_data(r, {4, 6}, DType::f64, Device::cpu()).narrow(1, 0, 1)) == 0);
      Tensor counts = from_vector<int64_t>({int64_t{10} * (r + 1), 3});
      c->all_reduce(counts);
      EXPECT(counts.device().is_cpu());
      EXPECT(counts.to_vector<int64_t>() == std::vector<int64_t>{30, 6});
    }
    // Broadcast from rank 1.
    {
      Tensor t = rank_data(r, {2, 3}, DType::f64, dev);
      c->broadcast(t, 1);
      EXPECT(max_abs_diff(t, rank_data(1, {2, 3}, DType::f64, Device::cpu())) == 0);
    }
    // All-gather: outputs[k] = rank k's input.
    {
      const std::vector<Tensor> got = c->all_gather(rank_data(r, {2, 2}, DType::f32, dev));
      EXPECT(got.size() == 2);
      for (int k = 0; k < world && k < static_cast<int>(got.size()); ++k) {
        EXPECT(got[k].device() == dev);
        EXPECT(max_abs_diff(got[k], rank_data(k, {2, 2}, DType::f64, Device::cpu())) == 0);
      }
    }
    c->barrier();
    // Several collectives in flight at once complete in order, each with its own result.
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 4; ++k) {
      ts.push_back(full({64}, k + r, {.dtype = DType::f32, .device = dev}));
      works.push_back(c->all_reduce_async(ts.back()));
    }
    for (int k = 0; k < 4; ++k) {
      works[k]->wait();
      EXPECT(ts[k].to_vector<float>() == std::vector<float>(64, static_cast<float>(2 * k + 1)));
    }
    EXPECT(c->failure().empty());
  })));
}

TEST_CASE("nccl: the comm stream waits for the caller's kernels (a result produced just before the call)",
          "[cuda][nccl][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  // The tensor is written by kernels on the caller's stream right before all_reduce_async: with
  // deferred streams (cuda-defer:) those kernels have not run when the comm thread issues the
  // collective unless the comm stream waits for the caller's event.
  REQUIRE(all_ok(run_nccl(2, [&](std::shared_ptr<Communicator> c) {
    const Device dev = Device::cuda(c->rank());
    for (int round = 0; round < 3; ++round) {
      Tensor t = zeros({1000}, {.dtype = DType::f32, .device = dev});
      t.add_(static_cast<double>(round + 1));
      t.mul_(static_cast<double>(c->rank() + 1));  // rank 0: round+1, rank 1: 2(round+1)
      c->all_reduce_async(t, ReduceOp::sum)->wait();
      EXPECT(t.to_vector<float>() == std::vector<float>(1000, 3.0f * static_cast<float>(round + 1)));
    }
  })));
}

TEST_CASE("nccl: mismatched collectives are an error on every rank naming both calls", "[cuda][nccl][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  const std::vector<std::string> errors = run_nccl(2, [&](std::shared_ptr<Communicator> c) {
    const Device dev = Device::cuda(c->rank());
    Tensor t = ones({c->rank() == 0 ? 4 : 5}, {.device = dev});
    c->all_reduce(t);
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK_THAT(errors[r], Catch::Contains("rank " + std::to_string(r) + "/2 (nccl)"));
    CHECK_THAT(errors[r], Catch::Contains("mismatched collective: rank 1 called all_reduce #0 (5 float32, sum) but "
                                          "rank 0 called all_reduce #0 (4 float32, sum)"));
  }
}

TEST_CASE("nccl: a rank that stops calling makes the other time out, then fail at once", "[cuda][nccl][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  std::string later;
  std::atomic<bool> rank0_done{false};
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> errors = run_nccl(
      2,
      [&](std::shared_ptr<Communicator> c) {
        const Device dev = Device::cuda(c->rank());
        Tensor t = ones({8}, {.device = dev});
        c->all_reduce(t);  // both ranks
        if (c->rank() == 1) {
          // Rank 1 stops calling but stays alive (its communicator too) until rank 0 gave up.
          for (int i = 0; i < 3000 && !rank0_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          return;
        }
        try {
          c->all_reduce(t);
        } catch (const Error& e) {
          rank0_done = true;
          // The next one fails at once with the first error.
          try {
            c->all_reduce(t);
          } catch (const Error& e2) {
            later = e2.what();
          }
          throw;
        }
      },
      std::chrono::milliseconds(400));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(errors[0] << " | " << errors[1] << " | " << later);
  CHECK(errors[1].empty());
  CHECK_THAT(errors[0],
             Catch::Contains("rank 0/2 (nccl): all_reduce #1 (8 float32, sum) failed: timed out after 0.4 s"));
  CHECK_THAT(later, Catch::Contains("not run: the communicator failed earlier"));
  CHECK(seconds < 30);
}

TEST_CASE("nccl: a tensor on another device is refused at issue time, the communicator stays usable", "[cuda][nccl][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  REQUIRE(all_ok(run_nccl(2, [&](std::shared_ptr<Communicator> c) {
    const int other = 1 - c->rank();
    Tensor wrong = ones({3}, {.device = Device::cuda(other)});
    EXPECT(contains(error_of([&] { c->all_reduce(wrong); }),
                    "this communicator's device is cuda:" + std::to_string(c->rank())));
    EXPECT(contains(
        error_of([&] { c->all_reduce(ones({3}, {.dtype = DType::boolean, .device = Device::cuda(c->rank())})); }),
        "dtype bool is not supported"));
    Tensor right = ones({3}, {.device = Device::cuda(c->rank())});
    c->all_reduce(right);
    EXPECT(right.to_vector<float>() == std::vector<float>{2, 2, 2});
  })));
}

TEST_CASE("nccl: joining times out when a rank never comes", "[cuda][nccl]") {
  REQUIRE(cuda_device_count() >= 1);
  // The join deadline is EMBER_DIST_TIMEOUT (the communicator's timeout before set_timeout).
  ::setenv("EMBER_DIST_TIMEOUT", "0.3", 1);
  const std::vector<uint8_t> id = nccl_unique_id();
  std::string error;
  try {
    make_nccl_communicator(0, 2, 0, id);
  } catch (const Error& e) {
    error = e.what();
  }
  ::unsetenv("EMBER_DIST_TIMEOUT");
  CHECK_THAT(error, Catch::Contains("rank 0/2 (nccl)") && Catch::Contains("timed out after 0.3 s waiting for every "
                                                                          "rank to join the NCCL communicator"));
  CHECK_THROWS_WITH(make_nccl_communicator(0, 1, cuda_device_count(), id), Catch::Contains("does not exist"));
  CHECK_THROWS_WITH(make_nccl_communicator(0, 1, 0, std::vector<uint8_t>(5)), Catch::Contains("128 bytes, got 5"));
}

TEST_CASE("cuda ddp: 2 ranks on cuda:0 and cuda:1, through NCCL and in-process, equal full-batch CPU training",
          "[cuda][nccl][ddp][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  const int steps = 3, world = 2;
  const int64_t n = 10;
  // The in-process communicator reduces device tensors with tensor ops; NCCL on its comm stream.
  for (const bool nccl : {true, false})
    for (DType dt : {DType::f64, DType::f32}) {
      const std::vector<Tensor> ref = train_reference(dt, steps, n, 7);
      std::vector<DdpRun> runs(world);
      const RankFn train = [&](std::shared_ptr<Communicator> c) {
        runs[c->rank()] = train_ddp(c, dt, steps, n, 7, int64_t{256}, Device::cuda(c->rank()));
      };
      REQUIRE(all_ok(nccl ? run_nccl(world, train) : run_ranks(world, train)));
      const double tol = dt == DType::f64 ? 1e-6 : 1e-5;
      for (int r = 0; r < world; ++r) {
        INFO((nccl ? "nccl" : "in-process") << ", dtype " << dtype_name(dt) << ", rank " << r);
        REQUIRE(runs[r].params.front().device() == Device::cuda(r));
        CHECK(max_rel_diff(runs[r].params, ref) < tol);
        CHECK(max_rel_diff(runs[r].params, runs[0].params) == 0);
        CHECK(runs[r].buckets == (dt == DType::f32 ? 4 : 6));  // 256-byte buckets
        CHECK(runs[r].stats.bytes_reduced == steps * (16 * 6 + 16 + 8 * 16 + 8 + 4 * 8 + 4) * dtype_size(dt));
      }
      // Overlap: bucket 0 was launched before the first layers' gradients were ready.
      for (const DdpRun& run : runs) CHECK(overlapped(run.events));
    }
}

TEST_CASE("nccl ddp: no_sync accumulation through NCCL equals the large-batch gradient", "[cuda][nccl][ddp][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  const int64_t n = 13;
  const std::vector<Tensor> ref = reference_grads(DType::f64, n, 5);
  std::vector<std::vector<Tensor>> got(2);
  REQUIRE(all_ok(run_nccl(2, [&](std::shared_ptr<Communicator> c) {
    got[c->rank()] = no_sync_grads(c, DType::f64, 3, n, 5, Device::cuda(c->rank()));
  })));
  for (int r = 0; r < 2; ++r) {
    REQUIRE(got[r].size() == ref.size());
    CHECK(got[r].front().device() == Device::cuda(r));
    CHECK(max_rel_diff(got[r], ref) < 1e-10);
  }
}

TEST_CASE("nccl: the unique id travels by the TCP rendezvous (torchrun-style) and the ranks join", "[cuda][nccl][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  // A free port: bind port 0 and read it back (the tiny race with other processes is acceptable).
  int port = 0;
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    socklen_t len = sizeof(a);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
    ::close(fd);
  }
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        const std::vector<uint8_t> id =
            tcp_broadcast_bytes("127.0.0.1", port, r, 2, "nccl-id", r == 0 ? nccl_unique_id() : std::vector<uint8_t>{},
                                std::chrono::seconds(20));
        auto c = make_nccl_communicator(r, 2, r, id);
        Tensor t = full({4}, r + 1, {.device = Device::cuda(r)});
        c->all_reduce(t);
        got[r] = t.to_vector<float>();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
    CHECK(got[r] == std::vector<float>(4, 3.0f));
  }
}

TEST_CASE("nccl: init_from_env picks the backend and explains what cannot work", "[cuda][nccl]") {
  // A torchrun-style rank 1 of 2 (set here, single-threaded; restored below).
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("EMBER_DIST_BACKEND", "nccl", 1);
  const std::string on_cpu = error_of([] { init_from_env(Device::cpu()); });
  const std::string on_cuda = error_of([] { init_from_env(Device::cuda(0)); });
  ::setenv("EMBER_DIST_BACKEND", "gloo", 1);
  const std::string bad = error_of([] { init_from_env(Device::cuda(0)); });
  ::unsetenv("EMBER_DIST_BACKEND");
  // auto on a CUDA device: NCCL where it is real; on the emulator MPI, which refuses torchrun.
  const std::string automatic = error_of([] { init_from_env(Device::cuda(0)); });
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  CHECK_THAT(on_cpu, Catch::Contains("NCCL reduces CUDA tensors, but this process trains on cpu"));
  CHECK_THAT(bad, Catch::Contains("EMBER_DIST_BACKEND must be mpi or nccl, got 'gloo'"));
  if (nccl_is_shim()) {
    CHECK_THAT(on_cuda, Catch::Contains("the SIMT flavour, whose NCCL shim joins threads of one process only"));
    CHECK_THAT(automatic, Catch::Contains("ember joins CPU processes through MPI"));
  } else {
    CHECK_THAT(on_cuda, Catch::Contains("no way to reach rank 0: MASTER_ADDR is not set"));
    CHECK_THAT(automatic, Catch::Contains("no way to reach rank 0: MASTER_ADDR is not set"));
  }
  // A world of one needs nothing.
  CHECK(init_from_env(Device::cuda(0))->world_size() == 1);
}
