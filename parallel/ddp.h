#pragma once
// DistributedDataParallel: data-parallel training of one nn::Module replica per rank.
//
//   auto comm = parallel::init_from_env();                 // mpirun -np 2 ... → rank 0 and 1
//   models::Cnn net;  net.to(device);                      // place the model before wrapping it
//   parallel::DistributedDataParallel ddp(net, comm);      // rank 0's weights and buffers everywhere
//   optim::AdamW opt(net.parameters(), {...});
//   for (auto& [x, y] : loader) {                          // each rank: its own shard (DistributedSampler)
//     opt.zero_grad();
//     Tensor loss = criterion(ddp(x), y);
//     loss.backward();                                     // returns with averaged gradients
//     opt.step();                                          // identical on every rank
//   }
//
// Note [DDP buckets and overlap]
// At construction the parameters that require grad are packed, in *reverse* registration order
// (the last layers' gradients are computed first by backward), into buckets of at most
// bucket_cap_bytes (25 MB by default, PyTorch's), one dtype and device per bucket. Each
// parameter gets a post-accumulate-grad hook (Tensor::register_post_accumulate_grad_hook): when
// backward has accumulated its gradient, the hook copies it into its bucket's flat buffer, and
// when a bucket's last gradient arrived the bucket's all_reduce(avg) is *launched* — queued on
// the communicator's comm thread — while backward goes on computing earlier layers' gradients.
// Buckets launch strictly in bucket order (a bucket that fills early waits for the ones before
// it), so every rank issues the same collectives in the same order. The first hook of a
// backward pass queues an end-of-backward callback (queue_backward_callback, core/autograd.h):
// it launches whatever is left, waits for every bucket, and copies the averaged gradients back
// into each parameter's .grad — so when loss.backward() returns the gradients are the same on
// every rank and optimizer.step() needs no extra call. finish() does the same explicitly (a
// no-op when backward already did it).
//
// Bigger buckets mean fewer, more efficient collectives but less overlap (the first all-reduce
// starts later); smaller buckets overlap more but pay per-collective latency. docs/distributed.md
// has the numbers.
//
// Rules and how they are enforced:
// * Every rank wraps the same model: at construction the ranks compare parameter and buffer
//   names, shapes and dtypes (a hash and counts); a mismatch is an ember::Error on every rank.
// * Gradients are averaged over ranks (PyTorch's rule): with equal per-rank batches the result is
//   the gradient of the mean loss over the global batch. With unequal shards, scale each rank's
//   loss by world_size * local_batch / global_batch to get exactly the global mean.
// * Unused parameters (no gradient this step): their slices of the bucket are zero and their
//   .grad stays as it was. The ranks must agree on which parameters are unused: each bucket's
//   collective carries a tag derived from its unused parameters, and a disagreement is an
//   ember::Error on every rank naming this rank's unused parameters — not a deadlock.
// * no_sync(): inside the guard, backward only accumulates local gradients; the first backward
//   after it all-reduces the accumulated sums (gradient accumulation, as in PyTorch).
// * Buffers (BatchNorm running stats) are broadcast from rank 0 at construction and at every
//   forward in training mode (broadcast_buffers), so every rank evaluates with rank 0's. With
//   SyncBatchNorm (parallel/sync_batchnorm.h) the running statistics are computed from the
//   global batch and are already the same on every rank: the per-forward broadcast is redundant
//   but harmless, and broadcast_buffers = false skips it. The construction-time broadcast always
//   runs (replicas must start equal). SyncBatchNorm's own all-reduces share the communicator's
//   queue with the buckets; every rank issues both in the same order, as the graph is the same.
// * A backward must follow a forward of this wrapper in training mode; a parameter receiving its
//   gradient twice in one iteration (two backward calls without no_sync) is an ember::Error.
// * Place the model on its device before wrapping (Module::to replaces the parameter tensors,
//   and with them the hooks).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../layers/module.h"
#include "../optim/grad_scaler.h"
#include "communicator.h"

namespace ember::parallel {

enum class DDPEventKind { grad_ready, bucket_launched, bucket_reduced, backward_finished };

// What the reducer did, in order, for tests and tracing. index: the parameter (grad_ready, in
// parameters() order) or bucket (bucket_*); -1 for backward_finished.
struct DDPEvent {
  DDPEventKind kind;
  int64_t index;
};

struct DDPOptions {
  int64_t bucket_cap_bytes = 25 * 1024 * 1024;  // >= 1; a parameter bigger than this gets its own bucket
  bool broadcast_buffers = true;
  // Called on the thread running backward, as events happen. Empty: not recorded.
  std::function<void(const DDPEvent&)> on_event;
};

struct DDPStats {
  int64_t steps = 0;                 // iterations whose gradients were all-reduced
  int64_t bytes_reduced = 0;         // bucket bytes all-reduced, over all steps
  double comm_wait_seconds = 0;      // time the end of backward waited for all-reduces to finish
};

class DistributedDataParallel : public nn::Module {
 public:
  // `module` must outlive the wrapper; it is registered as the child "module" (state_dict names
  // get the prefix "module.", as in PyTorch; save module().state_dict() for plain names).
  // Collective: every rank of `comm` must construct its wrapper at the same point.
  DistributedDataParallel(nn::Module& module, std::shared_ptr<Communicator> comm, DDPOptions options = {});
  ~DistributedDataParallel() override;

  // Broadcasts buffers (training mode), arms the reducer for the next backward, runs module.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "DistributedDataParallel"; }

  nn::Module& module() { return module_; }
  Communicator& communicator() { return *comm_; }

  // Waits for this iteration's all-reduces and unpacks the averaged gradients. backward() calls
  // it at its end; calling it again (or without a pending backward) does nothing.
  void finish();

  // While alive, backward accumulates gradients locally without communicating.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Which parameters (indices into module().parameters() of those requiring grad) each bucket
  // holds, in bucket (= launch) order.
  std::vector<std::vector<int64_t>> bucket_assignment() const;
  DDPStats stats() const;

  struct Reducer;  // the per-iteration state (ddp.cpp)

 private:
  nn::Module& module_;
  std::shared_ptr<Communicator> comm_;
  DDPOptions options_;
  std::shared_ptr<Reducer> reducer_;
  bool sync_ = true;
};

// Packs tensors into a flat, contiguous 1-D buffer at the given element offsets (each tensor's
// elements in row-major order), and the inverse: what a DDP bucket does with gradients.
// buffer: 1-D, same dtype; offsets[i] + tensors[i].numel() <= buffer.numel().
void pack_into(const Tensor& buffer, const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets);
void unpack_from(const Tensor& buffer, const std::vector<Tensor>& tensors, const std::vector<int64_t>& offsets);

// Mixed precision with gradients that were not all-reduced first (no_sync, hand-rolled
// reductions): sums `scaler`'s found-inf flag of `opt` over the ranks of `comm`, so that every rank
// skips the step when any rank saw an inf or NaN. Call it between scaler.unscale_(opt) and
// scaler.step(opt), on every rank. (With DDP's reduced gradients every rank already finds the same
// flag: Note in optim/grad_scaler.h.)
void all_reduce_found_inf(optim::GradScaler& scaler, const optim::Optimizer& opt, Communicator& comm);

}  // namespace ember::parallel
