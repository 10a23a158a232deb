// SyncBatchNorm through NCCL with each in-process rank on its own CUDA device (cuda:0, cuda:1: the
// emulator exposes two): DistributedDataParallel + convert_sync_batchnorm for K steps on unequal
// shards equals one process training the same model with BatchNorm2d on the full batch, on the
// CPU. The statistics and gradient sums are all-reduced on the devices (float64, NCCL).
// tests/test_sync_batchnorm.cpp has the layer-level cases on in-process ranks.

#include <ember/ember.h>
#include <ember/parallel/sync_batchnorm.h>

#include <catch2/catch.hpp>

#include "../parallel/sync_bn_scenarios.h"
#include "nccl_ranks.h"

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing::ranks;

TEST_CASE("sync batchnorm: DDP + SyncBatchNorm on cuda:0 and cuda:1 through NCCL equals full-batch CPU training",
          "[cuda][nccl][ddp][multi-gpu]") {
  REQUIRE(cuda_device_count() >= 2);
  const int steps = 2, world = 2;
  const int64_t n = 9;  // 5 + 4
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> ref = ember::testing::sync_bn::train_bn_reference(dt, steps, n, 11);
    std::vector<std::vector<Tensor>> runs(world);
    REQUIRE(all_ok(run_nccl(world, [&](std::shared_ptr<Communicator> c) {
      runs[c->rank()] = ember::testing::sync_bn::train_sync_bn(c, dt, steps, n, 11, Device::cuda(c->rank()));
    })));
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (int r = 0; r < world; ++r) {
      INFO("dtype " << dtype_name(dt) << " rank " << r);
      REQUIRE(runs[r].front().device() == Device::cuda(r));
      CHECK(ember::testing::ddp::max_rel_diff(runs[r], ref) < tol);  // parameters and running statistics
      CHECK(ember::testing::ddp::max_rel_diff(runs[r], runs[0]) == 0);
    }
  }
}
