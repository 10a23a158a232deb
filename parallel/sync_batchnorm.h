#pragma once
// Synchronized batch normalization (PyTorch's torch.nn.SyncBatchNorm): in training, every rank
// normalizes with the mean and variance of the *global* batch — the union of all ranks' batches —
// instead of its own, and backward gives each rank the gradient of that global-batch batch norm.
// With small per-rank batches (detection, segmentation, big models on many GPUs) per-rank
// statistics are noisy and training differs from the single-process run; synchronized, N ranks
// with b images each train like one process with N * b images.
//
//   auto comm = parallel::init_from_env();
//   models::ResNet net(config);  net.to(device);
//   parallel::convert_sync_batchnorm(net, comm);        // every BatchNorm2d in the tree
//   parallel::DistributedDataParallel ddp(net, comm);
//   ...                                                  // train as usual
//
// or, in a model of your own, a layer that is synchronized from the start:
//
//   parallel::SyncBatchNorm bn{64, comm};               // a BatchNorm2d, same names and buffers
//
// The math, and what each rank sends, is in Note [Synchronized batch norm] (sync_batchnorm.cpp).
// In eval mode, and on a world of one, it is exactly batch_norm / BatchNorm2d: no collective.
//
// Rules:
// * Collective: every rank must run the same synchronized layers, forward and backward, in the
//   same order (as DDP's rule for collectives); the local batch sizes may differ, and may be 0.
// * Weight and bias gradients stay per rank (each rank's contribution to the global-batch
//   gradient); DistributedDataParallel averages them with the other parameters' gradients. The
//   input gradient already includes every rank's terms (it needs the all-reduced sums).
// * The running statistics are updated from the global statistics, so they stay identical on
//   every rank: DistributedDataParallel's per-forward buffer broadcast becomes redundant
//   (harmless; DDPOptions::broadcast_buffers = false skips it).

#include <memory>
#include <string>

#include "../layers/modules.h"
#include "communicator.h"

namespace ember::parallel {

// batch_norm (layers/nn_functional.h) over the union of the batches of every rank of `comm`.
// x: (N, C, ...) on any device, float32 or float64; N may differ between ranks, C may not.
// weight, bias, running_mean, running_var: (C) or undefined, as batch_norm; in training the
// running statistics are updated in place with the global mean and unbiased variance.
// training == false or comm->world_size() == 1: batch_norm itself (no collective).
// Training: one all_reduce of 2C + 1 float64 values in forward, and one of 2C in backward when x
// requires grad (both blocking, on x's device).
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps,
                       const std::shared_ptr<Communicator>& comm);

// A BatchNorm2d whose training-mode forward is sync_batch_norm over `comm`: the same parameters
// and buffers with the same names (weight, bias, running_mean, running_var,
// num_batches_tracked), so state dicts move freely between the two.
class SyncBatchNorm : public nn::BatchNorm2d {
 public:
  SyncBatchNorm(int64_t num_features, std::shared_ptr<Communicator> comm, nn::BatchNormOptions opt = {});
  std::string type_name() const override { return "SyncBatchNorm"; }
  Communicator& communicator() { return *comm_; }

 private:
  std::shared_ptr<Communicator> comm_;
};

// Makes every BatchNorm2d in root's tree (root included) compute its training statistics with
// sync_batch_norm over `comm`, like torch.nn.SyncBatchNorm.convert_sync_batchnorm. The layers stay
// where they are, with their tensors: ember models hold BatchNorm2d layers as members, which
// cannot be replaced by another type, so each one gets sync_batch_norm as its training function
// (BatchNorm2d::set_training_function); str() shows "sync_batch_norm(world_size=N)" on each.
// SyncBatchNorm layers keep their own communicator; converting a converted layer again replaces
// its communicator. Call it on every rank, before or after DistributedDataParallel wraps the
// model. Returns the number of layers converted.
int64_t convert_sync_batchnorm(nn::Module& root, std::shared_ptr<Communicator> comm);

}  // namespace ember::parallel
