#pragma once
// DDP scenarios shared by the in-process tests (tests/test_ddp.cpp) and the MPI tests
// (tests/parallel/mpi_tests.cpp): each runs on one rank's Communicator and returns what the
// test checks, so the same equivalence is asserted for every transport.

#include <ember/ember.h>
#include <ember/parallel/communicator.h>
#include <ember/parallel/ddp.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

namespace ember::testing::ddp {

using namespace ember;

// Linear(6, 16) → ReLU → Linear(16, 8) → ReLU → Linear(8, 4), optionally with a side branch
// `extra` (registered with_extra) that forward uses only when use_extra is set (for
// unused-parameter tests).
struct Mlp : nn::Module {
  nn::Linear fc1{6, 16}, fc2{16, 8}, fc3{8, 4}, extra{6, 4};
  bool use_extra = false;
  explicit Mlp(bool with_extra = false) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    if (with_extra) register_module("extra", extra);
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = fc3(relu(fc2(relu(fc1(x)))));
    return use_extra ? y + extra(x) : y;
  }
};

// Model construction draws from the global generator: one at a time, so a seed means one init
// even when in-process ranks build their replicas concurrently.
inline std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}

inline std::unique_ptr<Mlp> make_model(uint64_t seed, DType dt, bool with_extra = false) {
  std::lock_guard<std::mutex> lock(init_mutex());
  manual_seed(seed);
  auto m = std::make_unique<Mlp>(with_extra);
  m->to(dt);
  return m;
}

// The global batch: n samples of 6 features, labels in [0, 4).
struct Batch {
  Tensor x, y;
};
inline Batch make_batch(int64_t n, DType dt, uint64_t seed) {
  Generator gen(seed);
  return {randn({n, 6}, {.dtype = dt}, gen), randint(0, 4, {n}, {.dtype = DType::i64}, gen)};
}

// Rows [begin, end) of the global batch that `rank` of `world` trains on: as even as possible
// (10 rows on 3 ranks: 4, 3, 3).
inline std::pair<int64_t, int64_t> shard(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

inline std::vector<Tensor> snapshot(nn::Module& m) {
  std::vector<Tensor> out;
  for (const Tensor& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// `steps` steps of SGD with momentum (lr 0.1, momentum 0.9) of `model` on the full batch `b`, in
// one process: what the distributed runs are compared with.
template <typename Model>
void train_full_batch(Model& model, const Batch& b, int steps) {
  optim::SGD opt(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    cross_entropy(model.forward(b.x), b.y).backward();
    opt.step();
  }
}

// `steps` SGD-with-momentum steps on the full batch, one process.
inline std::vector<Tensor> train_reference(DType dt, int steps, int64_t n, uint64_t seed) {
  auto m = make_model(seed, dt);
  train_full_batch(*m, make_batch(n, dt, seed + 1000), steps);
  return snapshot(*m);
}

struct DdpRun {
  std::vector<Tensor> params;
  std::vector<parallel::DDPEvent> events;  // of the last step
  parallel::DDPStats stats;
  size_t buckets = 0;
};

// The same training with DDP: rank r starts from seed + r (the wrapper must broadcast rank 0's
// weights), trains on its shard, and weights its loss by world * local / global so the averaged
// gradient is the full-batch mean gradient even for uneven shards.
// `device`: where this rank's replica and shard live (the CPU, or e.g. cuda:rank).
inline DdpRun train_ddp(std::shared_ptr<parallel::Communicator> comm, DType dt, int steps, int64_t n, uint64_t seed,
                        int64_t bucket_cap_bytes, Device device = Device::cpu()) {
  const int rank = comm->rank(), world = comm->world_size();
  auto m = make_model(seed + static_cast<uint64_t>(rank), dt);
  m->to(device);
  const Batch b = make_batch(n, dt, seed + 1000);
  const auto [lo, hi] = shard(n, rank, world);
  const Tensor x = b.x.narrow(0, lo, hi - lo).to(device), y = b.y.narrow(0, lo, hi - lo).to(device);
  DdpRun run;
  parallel::DistributedDataParallel ddp(*m, comm, {.bucket_cap_bytes = bucket_cap_bytes,
                                                   .on_event = [&](const parallel::DDPEvent& e) { run.events.push_back(e); }});
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  const double scale = static_cast<double>(world) * static_cast<double>(hi - lo) / static_cast<double>(n);
  for (int s = 0; s < steps; ++s) {
    run.events.clear();
    opt.zero_grad();
    (cross_entropy(ddp(x), y) * scale).backward();  // returns with averaged gradients
    opt.step();
  }
  run.params = snapshot(*m);
  run.stats = ddp.stats();
  run.buckets = ddp.bucket_assignment().size();
  return run;
}

// max |a - b| / max(|b|, 1e-3) over all elements of all tensors.
inline double max_rel_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    for (size_t k = 0; k < va.size(); ++k)
      worst = std::max(worst, std::abs(va[k] - vb[k]) / std::max(std::abs(vb[k]), 1e-3));
  }
  return worst;
}

// Index of the first event of `kind` (or events.size()).
inline size_t first_of(const std::vector<parallel::DDPEvent>& ev, parallel::DDPEventKind kind) {
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i].kind == kind) return i;
  return ev.size();
}
inline size_t last_of(const std::vector<parallel::DDPEvent>& ev, parallel::DDPEventKind kind) {
  size_t at = ev.size();
  for (size_t i = 0; i < ev.size(); ++i)
    if (ev[i].kind == kind) at = i;
  return at;
}

// The overlap DDP promises (Note [DDP buckets and overlap]): a bucket's all-reduce was launched
// before the last gradient of the backward pass was ready, and the pass ended with
// backward_finished. What each transport's overlap test asserts.
inline bool overlapped(const std::vector<parallel::DDPEvent>& ev) {
  const size_t first_launch = first_of(ev, parallel::DDPEventKind::bucket_launched);
  const size_t last_ready = last_of(ev, parallel::DDPEventKind::grad_ready);
  return last_ready < ev.size() && first_launch < last_ready &&
         ev.back().kind == parallel::DDPEventKind::backward_finished;
}

// no_sync accumulation over `micro` micro-batches, then one synchronized backward; returns the
// gradients (which must equal the full-batch gradient of the sum of the micro-batch losses).
inline std::vector<Tensor> no_sync_grads(std::shared_ptr<parallel::Communicator> comm, DType dt, int micro, int64_t n,
                                         uint64_t seed, Device device = Device::cpu()) {
  const int rank = comm->rank(), world = comm->world_size();
  auto m = make_model(seed, dt, /*with_extra=*/true);  // extra: unused on every rank
  m->to(device);
  Batch b = make_batch(n, dt, seed + 1000);
  b.x = b.x.to(device);
  b.y = b.y.to(device);
  parallel::DistributedDataParallel ddp(*m, comm);
  // Rank r's micro-batch k: rows of shard(n, k * world + r, micro * world); each loss weighted so
  // the total is the mean over all n rows (times world, undone by DDP's average).
  auto loss_of = [&](int k) {
    const auto [lo, hi] = shard(n, k * world + rank, micro * world);
    return cross_entropy(ddp(b.x.narrow(0, lo, hi - lo)), b.y.narrow(0, lo, hi - lo),
                         {.reduction = Reduction::Sum}) *
           (static_cast<double>(world) / static_cast<double>(n));
  };
  {
    auto guard = ddp.no_sync();
    for (int k = 0; k + 1 < micro; ++k) loss_of(k).backward();
  }
  loss_of(micro - 1).backward();
  std::vector<Tensor> g;
  for (const Tensor& p : m->parameters())
    if (p.grad().defined()) g.push_back(p.grad().clone());
  return g;
}

// The full-batch gradient of the mean loss (the reference for no_sync_grads).
inline std::vector<Tensor> reference_grads(DType dt, int64_t n, uint64_t seed) {
  auto m = make_model(seed, dt, /*with_extra=*/true);
  const Batch b = make_batch(n, dt, seed + 1000);
  cross_entropy(m->forward(b.x), b.y).backward();
  std::vector<Tensor> g;
  for (const Tensor& p : m->parameters())
    if (p.grad().defined()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace ember::testing::ddp
