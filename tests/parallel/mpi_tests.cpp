// The communicator and DDP tests under MPI: ctest runs this executable as
// `mpirun -np 2 ember_mpi_tests` and `mpirun -np 3 ember_mpi_tests` (tests/CMakeLists.txt).
// Every rank runs every test case in the same order; each case joins MPI through its own
// communicator (init_from_env), as `ember train` does.

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/ddp.h>

#include "ddp_scenarios.h"
#include "sync_bn_scenarios.h"

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing::ddp;

TEST_CASE("mpi: the launcher environment and MPI agree", "[mpi]") {
  const LaunchInfo li = detect_launch();
  auto comm = init_from_env();
  CHECK(comm->backend() == "mpi");
  CHECK(li.launcher == "mpirun");
  CHECK(comm->rank() == li.rank);
  CHECK(comm->world_size() == li.world_size);
  CHECK(comm->world_size() >= 2);
}

TEST_CASE("mpi: all_reduce, broadcast, all_gather, barrier, non-contiguous and integer tensors", "[mpi]") {
  auto comm = init_from_env();
  const int r = comm->rank();
  const double n = comm->world_size();
  Tensor a = from_vector<double>({1.0 + r, 10.0 * r});
  comm->all_reduce(a);
  CHECK(a.to_vector<double>() == std::vector<double>{n + n * (n - 1) / 2, 10 * n * (n - 1) / 2});
  Tensor f = from_vector<float>({2.0f * r, 1.0f});
  comm->all_reduce(f, ReduceOp::avg);
  CHECK(f.to_vector<double>()[0] == Approx(n - 1));
  Tensor m = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mt = m.t();  // staged through a contiguous copy, written back into m
  comm->all_reduce(mt);
  CHECK(m.to_vector<double>() == std::vector<double>{n, 2 * n, 3 * n, 4 * n, 5 * n, 6 * n});
  Tensor i = from_vector<int64_t>({r, 1});
  comm->all_reduce(i);
  CHECK(i.to_vector<int64_t>()[1] == comm->world_size());
  Tensor b = full({3}, r == 1 ? 7.0 : -1.0);
  comm->broadcast(b, 1);
  CHECK(b.to_vector<double>() == std::vector<double>{7, 7, 7});
  const std::vector<Tensor> g = comm->all_gather(from_vector<float>({100.0f * r, 1.0f}));
  REQUIRE(static_cast<int>(g.size()) == comm->world_size());
  for (int q = 0; q < comm->world_size(); ++q) CHECK(g[q].to_vector<double>() == std::vector<double>{100.0 * q, 1.0});
  comm->barrier();
}

TEST_CASE("mpi: a mismatched collective is an error on every rank", "[mpi]") {
  auto comm = init_from_env();
  Tensor t = zeros({comm->rank() == 1 ? 5 : 4});
  CHECK_THROWS_WITH(comm->all_reduce(t), Catch::Contains("mismatched collective: rank 1 called all_reduce #0 (5 float32, "
                                                         "sum) but rank 0 called all_reduce #0 (4 float32, sum)") &&
                                             Catch::Contains("rank " + std::to_string(comm->rank()) + "/"));
}

TEST_CASE("mpi: DDP after K steps equals full-batch training (f64 1e-6, f32 1e-5, 10 samples)", "[mpi][ddp]") {
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> ref = train_reference(dt, 3, 10, 7);
    for (int64_t cap : {int64_t{256}, int64_t{25} << 20}) {
      auto comm = init_from_env();
      const DdpRun run = train_ddp(comm, dt, 3, 10, 7, cap);
      INFO("dtype " << dtype_name(dt) << ", bucket cap " << cap << ", rank " << comm->rank());
      CHECK(max_rel_diff(run.params, ref) < (dt == DType::f64 ? 1e-6 : 1e-5));
      // Every rank holds the same weights, bit for bit.
      for (const Tensor& p : run.params) {
        const std::vector<Tensor> all = comm->all_gather(p);
        for (const Tensor& q : all) CHECK(max_rel_diff({q}, {all[0]}) == 0);
      }
    }
  }
}

TEST_CASE("mpi: DDP + SyncBatchNorm after K steps equals full-batch BatchNorm2d training (9 samples)", "[mpi][ddp]") {
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> ref = ember::testing::sync_bn::train_bn_reference(dt, 3, 9, 11);
    // Without the per-forward buffer broadcast the running statistics stay the same on every
    // rank only if MPI's all-reduce gives every rank the same sums, bit for bit: checked below.
    auto comm = init_from_env();
    const std::vector<Tensor> state =
        ember::testing::sync_bn::train_sync_bn(comm, dt, 3, 9, 11, Device::cpu(), {.broadcast_buffers = false});
    INFO("dtype " << dtype_name(dt) << ", rank " << comm->rank());
    CHECK(max_rel_diff(state, ref) < (dt == DType::f64 ? 1e-12 : 1e-5));
    for (const Tensor& t : state) {
      const std::vector<Tensor> all = comm->all_gather(t);
      for (const Tensor& q : all) CHECK(max_rel_diff({q}, {all[0]}) == 0);
    }
  }
}

TEST_CASE("mpi: DDP launches a bucket's all-reduce before backward finishes", "[mpi][ddp]") {
  auto comm = init_from_env();
  const DdpRun run = train_ddp(comm, DType::f32, 1, 8, 3, 256);
  CHECK(overlapped(run.events));
}

TEST_CASE("mpi: DDP no_sync accumulation equals the large-batch gradient", "[mpi][ddp]") {
  auto comm = init_from_env();
  const std::vector<Tensor> ref = reference_grads(DType::f64, 13, 5);
  const std::vector<Tensor> got = no_sync_grads(comm, DType::f64, 3, 13, 5);
  REQUIRE(got.size() == ref.size());
  CHECK(max_rel_diff(got, ref) < 1e-10);
}

TEST_CASE("mpi: DDP errors on every rank: different models, disagreeing unused parameters", "[mpi][ddp]") {
  {
    auto comm = init_from_env();
    auto m = make_model(1, DType::f32, /*with_extra=*/comm->rank() == 1);
    CHECK_THROWS_WITH(DistributedDataParallel(*m, comm), Catch::Contains("the ranks wrap different models") &&
                                                              Catch::Contains("rank 1 has 8 parameters"));
  }
  {
    auto comm = init_from_env();
    auto m = make_model(1, DType::f64, /*with_extra=*/true);
    m->use_extra = comm->rank() == 1;
    DistributedDataParallel ddp(*m, comm);
    const Batch b = make_batch(6, DType::f64, 2);
    CHECK_THROWS_WITH(cross_entropy(ddp(b.x), b.y).backward(),
                      Catch::Contains("every rank must leave the same parameters unused"));
  }
}

int main(int argc, char** argv) {
  set_num_threads(1);  // ranks share the machine's cores
  const int rc = Catch::Session().run(argc, argv);
  // A rank that failed an assertion may have left its peers waiting in a collective: end the
  // job rather than let them run into the timeout.
  if (rc != 0) abort_job(rc);
  return rc;
}
