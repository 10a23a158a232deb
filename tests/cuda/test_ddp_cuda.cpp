// DistributedDataParallel with each in-process rank on its own CUDA device (cuda:0, cuda:1: the
// emulator exposes two): after K steps the replicas equal single-process full-batch training on
// the CPU. The in-process communicator reduces device tensors with tensor ops; test_nccl.cpp
// runs the same training through the NCCL communicator.

#include <catch2/catch.hpp>

#include <thread>

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/inprocess_communicator.h>

#include "../parallel/ddp_scenarios.h"

using namespace ember;
using namespace ember::parallel;
using namespace ddp_test;

TEST_CASE("cuda ddp: 2 in-process ranks on cuda:0 and cuda:1 equal full-batch CPU training", "[cuda][ddp][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  const int steps = 3, world = 2;
  const int64_t n = 10;
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> ref = train_reference(dt, steps, n, 7);
    InProcessGroup group(world);
    std::vector<DdpRun> runs(world);
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          std::shared_ptr<Communicator> c = group.communicator(r);
          c->set_timeout(std::chrono::seconds(60));
          runs[r] = train_ddp(c, dt, steps, n, 7, int64_t{256}, Device::cuda(r));
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    INFO("dtype " << dtype_name(dt) << ": " << errors[0] << " | " << errors[1]);
    REQUIRE(errors[0].empty());
    REQUIRE(errors[1].empty());
    const double tol = dt == DType::f64 ? 1e-6 : 1e-5;
    for (int r = 0; r < world; ++r) {
      REQUIRE(runs[r].params.front().device() == Device::cuda(r));
      CHECK(max_rel_diff(runs[r].params, ref) < tol);
      CHECK(max_rel_diff(runs[r].params, runs[0].params) == 0);
    }
  }
}
