#pragma once
// SyncBatchNorm scenarios shared by the in-process tests (tests/test_sync_batchnorm.cpp) and the
// NCCL test on two CUDA devices (tests/cuda/test_sync_batchnorm_cuda.cpp): a small conv + batch
// norm model trained on one process with the full batch, and the same training on the ranks of
// a communicator with DistributedDataParallel and synchronized batch norm.

#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/sync_batchnorm.h>

#include <memory>
#include <vector>

#include "ddp_scenarios.h"

namespace ember::testing::sync_bn {

using namespace ember;

// conv1 (2 -> 4, 3x3, pad 1) -> bn1 -> ReLU -> block [conv (4 -> 4, 3x3, pad 1, no bias),
// BatchNorm2d(4), ReLU] -> mean over H, W -> fc (4 -> 3). One BatchNorm2d is a member, the other
// sits inside a Sequential (held through a shared_ptr).
struct ConvBnNet : nn::Module {
  nn::Conv2d conv1{2, 4, 3, {.padding = 1}};
  nn::BatchNorm2d bn1{4};
  std::shared_ptr<nn::Sequential> block;
  nn::Linear fc{4, 3};
  ConvBnNet() {
    block = std::make_shared<nn::Sequential>();
    block->push_back(std::make_shared<nn::Conv2d>(4, 4, 3, nn::Conv2dOptions{.padding = 1, .bias = false}));
    block->push_back(std::make_shared<nn::BatchNorm2d>(4));
    block->push_back(std::make_shared<nn::ReLU>());
    register_module("conv1", conv1);
    register_module("bn1", bn1);
    register_module("block", block);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = block->forward(relu(bn1(conv1(x))));
    return fc(mean(h, {2, 3}));
  }
};

inline std::unique_ptr<ConvBnNet> make_bn_model(uint64_t seed, DType dt) {
  std::lock_guard<std::mutex> lock(ember::testing::ddp::init_mutex());
  manual_seed(seed);
  auto m = std::make_unique<ConvBnNet>();
  m->to(dt);
  return m;
}

// The global batch: n images of 2 x 5 x 5 (mean 0.5, std 1.5: batch norm has something to
// remove), labels in [0, 3).
inline ember::testing::ddp::Batch make_images(int64_t n, DType dt, uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({n, 2, 5, 5}, {.dtype = dt}, gen) * 1.5 + 0.5;
  return {x, randint(0, 3, {n}, {.dtype = DType::i64}, gen)};
}

// Parameters and buffers (running statistics, num_batches_tracked), in state_dict order.
inline std::vector<Tensor> state_of(nn::Module& m) {
  std::vector<Tensor> out;
  for (const auto& [name, t] : m.state_dict()) out.push_back(t.clone());
  return out;
}

// `steps` SGD-with-momentum steps on the full batch, one process, plain BatchNorm2d.
inline std::vector<Tensor> train_bn_reference(DType dt, int steps, int64_t n, uint64_t seed) {
  auto m = make_bn_model(seed, dt);
  ember::testing::ddp::train_full_batch(*m, make_images(n, dt, seed + 1000), steps);
  return state_of(*m);
}

struct SyncBnOptions {
  bool sync = true;               // convert_sync_batchnorm (false: per-rank statistics)
  bool broadcast_buffers = true;  // DDPOptions::broadcast_buffers
};

// The same training on this rank's shard (ember::testing::ddp::shard: 10 rows on 3 ranks are 4, 3, 3) with
// DistributedDataParallel: rank r starts from seed + r (the wrapper broadcasts rank 0's weights),
// and weights its loss by world * local / global, so that the averaged gradient is the gradient
// of the full batch's mean loss. Returns this rank's parameters and buffers.
inline std::vector<Tensor> train_sync_bn(std::shared_ptr<parallel::Communicator> comm, DType dt, int steps, int64_t n,
                                         uint64_t seed, Device device = Device::cpu(), SyncBnOptions opt = {}) {
  const int rank = comm->rank(), world = comm->world_size();
  auto m = make_bn_model(seed + static_cast<uint64_t>(rank), dt);
  m->to(device);
  if (opt.sync) parallel::convert_sync_batchnorm(*m, comm);
  const ember::testing::ddp::Batch b = make_images(n, dt, seed + 1000);
  const auto [lo, hi] = ember::testing::ddp::shard(n, rank, world);
  const Tensor x = b.x.narrow(0, lo, hi - lo).to(device), y = b.y.narrow(0, lo, hi - lo).to(device);
  parallel::DistributedDataParallel ddp(*m, comm, {.broadcast_buffers = opt.broadcast_buffers});
  optim::SGD sgd(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  const double scale = static_cast<double>(world) * static_cast<double>(hi - lo) / static_cast<double>(n);
  for (int s = 0; s < steps; ++s) {
    sgd.zero_grad();
    (cross_entropy(ddp(x), y) * scale).backward();
    sgd.step();
  }
  return state_of(*m);
}

}  // namespace ember::testing::sync_bn
