// SyncBatchNorm (parallel/sync_batchnorm.h) on in-process ranks: against BatchNorm2d on the full
// batch (outputs, running statistics, input and parameter gradients), a world of one, an empty
// shard, eval mode, finite differences across ranks, convert_sync_batchnorm, and training with
// DistributedDataParallel. tests/cuda/test_sync_batchnorm_cuda.cpp runs the training through NCCL
// on two CUDA devices.

#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/inprocess_communicator.h>
#include <ember/parallel/sync_batchnorm.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "gradcheck.h"
#include "parallel/ddp_scenarios.h"
#include "parallel/rank_threads.h"
#include "parallel/sync_bn_scenarios.h"

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing::ranks;
using ember::testing::ddp::max_rel_diff;
using ember::testing::ddp::shard;

namespace {

constexpr int64_t kC = 3;  // channels of the layer tests

// Step s's global batch (n, 3, 4, 4), mean 1 and std 2, and the weights G of its loss sum(y * G).
Tensor step_input(int s, int64_t n, DType dt) {
  Generator gen(100 + static_cast<uint64_t>(s));
  return randn({n, kC, 4, 4}, {.dtype = dt}, gen) * 2.0 + 1.0;
}
Tensor step_loss_weights(int s, int64_t n, DType dt) {
  Generator gen(200 + static_cast<uint64_t>(s));
  return randn({n, kC, 4, 4}, {.dtype = dt}, gen);
}

// Fixed, non-trivial parameters and running statistics.
void init_layer(nn::BatchNorm2d& bn, DType dt) {
  bn.to(dt);
  NoGradGuard g;
  bn.weight.copy_(from_vector<double>({1.5, -0.5, 2.0}));
  bn.bias.copy_(from_vector<double>({0.1, 0.2, -0.3}));
  bn.running_mean.copy_(from_vector<double>({0.5, -1.0, 0.0}));
  bn.running_var.copy_(from_vector<double>({2.0, 0.5, 1.0}));
}

struct StepResult {
  Tensor y, grad_x, grad_weight, grad_bias;
};
struct LayerRun {
  std::vector<StepResult> steps;
  Tensor running_mean, running_var;
  int64_t batches = 0;
};

// `steps` training steps of bn on rows [lo, hi) of each step's batch, the loss sum(y * G) over
// the same rows (the rows' share of the full batch's loss).
LayerRun run_layer(nn::BatchNorm2d& bn, int steps, int64_t n, int64_t lo, int64_t hi, DType dt) {
  LayerRun run;
  for (int s = 0; s < steps; ++s) {
    Tensor x = step_input(s, n, dt).narrow(0, lo, hi - lo).clone();
    x.requires_grad_(true);
    bn.zero_grad();
    Tensor y = bn(x);
    sum(y * step_loss_weights(s, n, dt).narrow(0, lo, hi - lo)).backward();
    run.steps.push_back({y.detach().clone(), x.grad().clone(), bn.weight.grad().clone(), bn.bias.grad().clone()});
  }
  run.running_mean = bn.running_mean.clone();
  run.running_var = bn.running_var.clone();
  run.batches = bn.num_batches_tracked.item<int64_t>();
  return run;
}

LayerRun reference_run(int steps, int64_t n, DType dt) {
  nn::BatchNorm2d bn(kC);
  init_layer(bn, dt);
  return run_layer(bn, steps, n, 0, n, dt);
}

// SyncBatchNorm on each of `world` in-process ranks; rank r takes rows bounds(r).
std::vector<LayerRun> sync_runs(int world, int steps, int64_t n, DType dt,
                                const std::function<std::pair<int64_t, int64_t>(int)>& bounds) {
  std::vector<LayerRun> runs(world);
  const std::vector<std::string> errors = run_ranks(world, [&](std::shared_ptr<Communicator> c) {
    SyncBatchNorm bn(kC, c);
    init_layer(bn, dt);
    const auto [lo, hi] = bounds(c->rank());
    runs[c->rank()] = run_layer(bn, steps, n, lo, hi, dt);
  });
  REQUIRE(all_ok(errors));
  return runs;
}

// The ranks' results of step s as one: outputs and input gradients concatenated in rank order,
// parameter gradients summed (what DDP's all-reduce does with them, up to its 1/world).
StepResult combine(const std::vector<LayerRun>& runs, int s) {
  std::vector<Tensor> ys, gxs;
  Tensor gw = zeros_like(runs[0].steps[s].grad_weight), gb = zeros_like(runs[0].steps[s].grad_bias);
  for (const LayerRun& r : runs) {
    ys.push_back(r.steps[s].y);
    gxs.push_back(r.steps[s].grad_x);
    gw = gw + r.steps[s].grad_weight;
    gb = gb + r.steps[s].grad_bias;
  }
  return {cat(ys), cat(gxs), gw, gb};
}

std::vector<Tensor> all_of(const StepResult& s) { return {s.y, s.grad_x, s.grad_weight, s.grad_bias}; }

// The largest of max |a - b| / max |b| over each pair of tensors: errors relative to each
// tensor's scale. (Elementwise relative errors would judge float32 outputs near 0, where
// (x - mean) * invstd cancels, by a rounding that happened at the tensor's magnitude.)
double max_scaled_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<double> va = a[i].to_vector<double>(), vb = b[i].to_vector<double>();
    if (va.size() != vb.size()) return INFINITY;
    double diff = 0, scale = 0;
    for (size_t k = 0; k < va.size(); ++k) {
      diff = std::max(diff, std::abs(va[k] - vb[k]));
      scale = std::max(scale, std::abs(vb[k]));
    }
    if (diff > 0) worst = std::max(worst, scale > 0 ? diff / scale : INFINITY);
  }
  return worst;
}

}  // namespace

TEST_CASE("sync batchnorm: 2 and 3 ranks with unequal shards equal BatchNorm2d on the full batch (f64 1e-10, f32 1e-5)",
          "[parallel][sync_bn]") {
  const int steps = 2;
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-10 : 1e-5;
    for (int64_t rows : {9, 10}) {  // 5 + 4 and 5 + 5 on 2 ranks; 3 + 3 + 3 and 4 + 3 + 3 on 3
      const LayerRun ref = reference_run(steps, rows, dt);
      for (int world : {2, 3}) {
        const std::vector<LayerRun> runs =
            sync_runs(world, steps, rows, dt, [&](int r) { return shard(rows, r, world); });
        INFO(dtype_name(dt) << ", " << rows << " rows on " << world << " ranks");
        for (int s = 0; s < steps; ++s) {
          INFO("step " << s);
          const StepResult got = combine(runs, s);
          CHECK(max_scaled_diff({got.y}, {ref.steps[s].y}) < tol);
          CHECK(max_scaled_diff({got.grad_x}, {ref.steps[s].grad_x}) < tol);
          CHECK(max_scaled_diff({got.grad_weight, got.grad_bias}, {ref.steps[s].grad_weight, ref.steps[s].grad_bias}) <
                tol);
        }
        for (const LayerRun& r : runs) {
          CHECK(max_scaled_diff({r.running_mean, r.running_var}, {ref.running_mean, ref.running_var}) < tol);
          // The same all-reduced numbers, the same arithmetic: identical on every rank.
          CHECK(max_scaled_diff({r.running_mean, r.running_var}, {runs[0].running_mean, runs[0].running_var}) == 0);
          CHECK(r.batches == steps);
        }
      }
    }
  }
}

namespace {

// One training step of a float32 bn under autocast (the CPU, `region`) on rows [lo, hi) of step
// 0's batch, rounded to the region's dtype: the loss sum(y * G) in float32.
LayerRun run_layer_amp(nn::BatchNorm2d& bn, int64_t n, int64_t lo, int64_t hi, DType region) {
  Tensor x = step_input(0, n, DType::f32).to(region).narrow(0, lo, hi - lo).clone();
  x.requires_grad_(true);
  Tensor y;
  {
    AutocastGuard amp(DeviceType::CPU, region);
    y = bn(x);
  }
  sum(y.to(DType::f32) * step_loss_weights(0, n, DType::f32).narrow(0, lo, hi - lo)).backward();
  LayerRun run;
  run.steps.push_back({y.detach().clone(), x.grad().clone(), bn.weight.grad().clone(), bn.bias.grad().clone()});
  run.running_mean = bn.running_mean.clone();
  run.running_var = bn.running_var.clone();
  return run;
}

}  // namespace

TEST_CASE("sync batchnorm under autocast: a 16-bit input on 2 ranks equals batch_norm under autocast on the full batch",
          "[parallel][sync_bn][autocast]") {
  const int64_t rows = 9;
  for (DType region : {DType::bf16, DType::f16}) {
    INFO(dtype_name(region));
    nn::BatchNorm2d ref_bn(kC);
    init_layer(ref_bn, DType::f32);
    const LayerRun ref = run_layer_amp(ref_bn, rows, 0, rows, region);
    std::vector<LayerRun> runs(2);
    const std::vector<std::string> errors = run_ranks(2, [&](std::shared_ptr<Communicator> c) {
      SyncBatchNorm bn(kC, c);
      init_layer(bn, DType::f32);
      const auto [lo, hi] = shard(rows, c->rank(), 2);
      runs[c->rank()] = run_layer_amp(bn, rows, lo, hi, region);
    });
    REQUIRE(all_ok(errors));
    const StepResult got = combine(runs, 0);
    // y and grad x are 16-bit (one rounding of float32 arithmetic: at most one ulp apart); the
    // parameter gradients and running statistics float32 (to float32 accuracy, far below an ulp).
    CHECK(got.y.dtype() == region);
    CHECK(got.grad_x.dtype() == region);
    CHECK(got.grad_weight.dtype() == DType::f32);
    CHECK(runs[0].running_mean.dtype() == DType::f32);
    const double ulp = region == DType::bf16 ? 0x1p-7 : 0x1p-10;
    CHECK(max_scaled_diff({got.y.to(DType::f32)}, {ref.steps[0].y.to(DType::f32)}) <= ulp);
    CHECK(max_scaled_diff({got.grad_x.to(DType::f32)}, {ref.steps[0].grad_x.to(DType::f32)}) <= ulp);
    CHECK(max_scaled_diff({got.grad_weight, got.grad_bias}, {ref.steps[0].grad_weight, ref.steps[0].grad_bias}) <
          1e-5);
    for (const LayerRun& r : runs)
      CHECK(max_scaled_diff({r.running_mean, r.running_var}, {ref.running_mean, ref.running_var}) < 1e-5);
  }
}

TEST_CASE("sync batchnorm: a world of one is BatchNorm2d bit for bit, all rows on one of two ranks nearly so",
          "[parallel][sync_bn]") {
  const int steps = 2;
  const int64_t n = 6;
  for (DType dt : {DType::f64, DType::f32}) {
    INFO(dtype_name(dt));
    const LayerRun ref = reference_run(steps, n, dt);
    const std::vector<LayerRun> one = sync_runs(1, steps, n, dt, [&](int) { return std::make_pair(int64_t{0}, n); });
    for (int s = 0; s < steps; ++s) CHECK(max_scaled_diff(all_of(one[0].steps[s]), all_of(ref.steps[s])) == 0);
    CHECK(max_scaled_diff({one[0].running_mean, one[0].running_var}, {ref.running_mean, ref.running_var}) == 0);

    // Rank 1 has no rows (a local batch of 0 is allowed): the global batch is rank 0's, through
    // the synchronized path (all-reduced sums) instead of batch_norm's kernels.
    const std::vector<LayerRun> two = sync_runs(
        2, steps, n, dt, [&](int r) { return r == 0 ? std::make_pair(int64_t{0}, n) : std::make_pair(n, n); });
    const double tol = dt == DType::f64 ? 1e-13 : 1e-6;
    for (int s = 0; s < steps; ++s) {
      CHECK(max_scaled_diff(all_of(two[0].steps[s]), all_of(ref.steps[s])) < tol);
      CHECK(two[1].steps[s].y.numel() == 0);
      CHECK(two[1].steps[s].grad_x.numel() == 0);
      CHECK(two[1].steps[s].grad_weight.to_vector<double>() == std::vector<double>(kC, 0.0));
    }
    CHECK(max_scaled_diff({two[1].running_mean, two[1].running_var}, {ref.running_mean, ref.running_var}) < tol);
  }
}

TEST_CASE("sync batchnorm: eval mode normalizes with the running statistics and issues no collective",
          "[parallel][sync_bn]") {
  const Tensor x = step_input(0, 4, DType::f64), g = step_loss_weights(0, 4, DType::f64);
  nn::BatchNorm2d ref(kC);
  init_layer(ref, DType::f64);
  ref.eval();
  Tensor xr = x.clone();
  xr.requires_grad_(true);
  const Tensor y_ref = ref(xr);
  sum(y_ref * g).backward();
  Tensor y_local_stats_ref;
  {
    nn::BatchNorm2d plain(kC, {.track_running_stats = false});
    plain.eval();
    y_local_stats_ref = plain(x);
  }

  Tensor y, gx, y_local_stats, running_mean;
  int64_t batches = -1;
  // Only rank 0 runs the layer; then both ranks all-reduce one number. Had rank 0's eval forward
  // or backward issued a collective, that would meet rank 1's all_reduce of 1 element and fail on
  // both ranks as a mismatched collective.
  REQUIRE(all_ok(run_ranks(
      2,
      [&](std::shared_ptr<Communicator> c) {
        if (c->rank() == 0) {
          SyncBatchNorm bn(kC, c);
          init_layer(bn, DType::f64);
          bn.eval();
          Tensor xs = x.clone();
          xs.requires_grad_(true);
          for (int k = 0; k < 3; ++k) y = bn(xs);
          sum(y * g).backward();
          gx = xs.grad();
          running_mean = bn.running_mean.clone();
          batches = bn.num_batches_tracked.item<int64_t>();
          // Without running statistics eval mode uses the local batch's own, like PyTorch.
          SyncBatchNorm no_stats(kC, c, {.track_running_stats = false});
          no_stats.eval();
          y_local_stats = no_stats(x);
        }
        Tensor t = full({1}, 1.0, {.dtype = DType::f64});
        c->all_reduce(t);
        EXPECT(t.item() == 2.0);
      },
      std::chrono::seconds(5))));
  CHECK(max_rel_diff({y, gx}, {y_ref, xr.grad()}) == 0);
  CHECK(running_mean.to_vector<double>() == std::vector<double>{0.5, -1.0, 0.0});
  CHECK(batches == 0);
  CHECK(max_rel_diff({y_local_stats}, {y_local_stats_ref}) == 0);
}

TEST_CASE("sync batchnorm: finite differences on a world of one (gradcheck) and across 2 ranks",
          "[parallel][sync_bn]") {
  SECTION("world of one") {
    InProcessGroup group(1);
    std::shared_ptr<Communicator> comm = group.communicator(0);
    testing::OpCase c{.name = "sync_batch_norm/world_of_one",
                      .inputs = {{4, 2, 3, 3}, {2}, {2}},
                      .fn =
                          [comm](const std::vector<Tensor>& in) {
                            Tensor rm = zeros({2}, {.dtype = DType::f64}), rv = ones({2}, {.dtype = DType::f64});
                            return sync_batch_norm(in[0], rm, rv, in[1], in[2], true, 0.1, 1e-5, comm);
                          },
                      .tol = 1e-6};
    const testing::GradcheckResult r = testing::gradcheck(c, testing::make_inputs(c));
    INFO(r.worst);
    CHECK(r.max_error < c.tol);
  }
  SECTION("2 ranks, 3 + 2 rows") {
    // The objective is the sum over ranks of sum(y_r * W_r). Every rank runs the same sequence of
    // forwards: for each element of every rank's input (and of the shared weight and bias), +eps
    // and -eps on the rank that owns it (every rank, for the parameters), the objective summed
    // over ranks by an all_reduce. The analytic gradient: each rank's input gradient; weight and
    // bias gradients summed over ranks.
    const double eps = 1e-6;
    const int64_t rows[2] = {3, 2};
    std::vector<double> worst(2, 0.0);
    std::vector<std::string> where(2);
    REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
      const int rank = c->rank();
      Generator gen(31 + static_cast<uint64_t>(rank));
      Tensor x = randn({rows[rank], 2, 2, 3}, {.dtype = DType::f64}, gen) + 0.3;
      Tensor wy = rand({rows[rank], 2, 2, 3}, {.dtype = DType::f64}, gen) + 0.5;
      Tensor w = from_vector<double>({1.3, -0.7}), b = from_vector<double>({0.2, -0.1});
      for (Tensor* t : {&x, &w, &b}) t->requires_grad_(true);
      auto forward = [&] { return sync_batch_norm(x, Tensor(), Tensor(), w, b, true, 0.1, 1e-5, c); };
      sum(forward() * wy).backward();
      std::vector<double> analytic_x = x.grad().to_vector<double>();
      Tensor gwb = cat({w.grad(), b.grad()});
      c->all_reduce(gwb);
      const std::vector<double> analytic_wb = gwb.to_vector<double>();
      auto objective = [&] {
        NoGradGuard no_grad;
        Tensor o = sum(forward() * wy).view({1});
        c->all_reduce(o);
        return o.item();
      };
      // The central difference of the objective in element i of t, perturbed on this rank when
      // `mine` (the other ranks run the same two forwards unperturbed).
      auto numeric = [&](Tensor& t, int64_t i, bool mine) {
        double* p = static_cast<double*>(t.data()) + i;
        const double orig = mine ? *p : 0.0;
        if (mine) *p = orig + eps;
        const double fp = objective();
        if (mine) *p = orig - eps;
        const double fm = objective();
        if (mine) *p = orig;
        return (fp - fm) / (2 * eps);
      };
      auto note = [&](double analytic, double num, const std::string& what) {
        const double err = std::abs(analytic - num) / std::max(1.0, std::abs(num));
        if (!(err <= worst[rank])) {
          worst[rank] = std::isnan(err) ? INFINITY : err;
          where[rank] = what + ": analytic " + std::to_string(analytic) + " numeric " + std::to_string(num);
        }
      };
      for (int owner = 0; owner < 2; ++owner) {
        const int64_t count = rows[owner] * 2 * 2 * 3;
        for (int64_t i = 0; i < count; ++i) {
          const double num = numeric(x, i, owner == rank);
          if (owner == rank) note(analytic_x[static_cast<size_t>(i)], num, "x element " + std::to_string(i));
        }
      }
      for (int64_t i = 0; i < 2; ++i) {
        note(analytic_wb[static_cast<size_t>(i)], numeric(w, i, true), "weight " + std::to_string(i));
        note(analytic_wb[static_cast<size_t>(2 + i)], numeric(b, i, true), "bias " + std::to_string(i));
      }
    })));
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << ": " << where[r]);
      CHECK(worst[r] < 1e-6);
    }
  }
}

TEST_CASE(
    "sync batchnorm: convert_sync_batchnorm reaches nested layers and keeps names and tensors, "
    "SyncBatchNorm's state dict is BatchNorm2d's",
    "[parallel][sync_bn]") {
  InProcessGroup group(2);  // communicators only: no collective runs here
  std::shared_ptr<Communicator> comm = group.communicator(0);
  auto m = ember::testing::sync_bn::make_bn_model(3, DType::f32);
  std::vector<std::string> names_before;
  for (const auto& [name, t] : m->state_dict()) names_before.push_back(name);
  const Tensor weight_before = m->bn1.weight;

  CHECK(convert_sync_batchnorm(*m, comm) == 2);  // bn1 (a member) and block.1 (inside a Sequential)
  std::vector<std::string> names_after;
  for (const auto& [name, t] : m->state_dict()) names_after.push_back(name);
  CHECK(names_after == names_before);
  CHECK(m->bn1.weight.is_same_storage(weight_before));
  auto* inner = dynamic_cast<nn::BatchNorm2d*>(&(*m->block)[1]);
  REQUIRE(inner != nullptr);
  CHECK(m->bn1.training_function_label() == "sync_batch_norm(world_size=2)");
  CHECK(inner->training_function_label() == "sync_batch_norm(world_size=2)");
  CHECK_THAT(m->str(), Catch::Contains("(bn1): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, "
                                       "sync_batch_norm(world_size=2))") &&
                           Catch::Contains("(1): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=True, "
                                           "sync_batch_norm(world_size=2))"));
  inner->set_training_function({}, "ignored");  // back to batch_norm
  CHECK(inner->training_function_label().empty());

  // SyncBatchNorm: BatchNorm2d's parameters and buffers, names and values both ways.
  SyncBatchNorm sync(4, comm);
  CHECK(sync.type_name() == "SyncBatchNorm");
  CHECK_THAT(sync.str(), Catch::Contains("SyncBatchNorm(4, eps=1e-05, momentum=0.1, affine=True, "
                                         "sync_batch_norm(world_size=2))"));
  sync.running_var.fill_(3.0);
  nn::BatchNorm2d plain(4);
  plain.load_state_dict(sync.state_dict());  // strict: every key matches
  CHECK(plain.running_var.to_vector<double>() == std::vector<double>(4, 3.0));
  plain.running_mean.fill_(7.0);
  sync.load_state_dict(plain.state_dict());
  CHECK(sync.running_mean.to_vector<double>() == std::vector<double>(4, 7.0));

  // A SyncBatchNorm keeps its communicator; a BatchNorm2d beside it is converted.
  nn::Sequential seq{std::make_shared<SyncBatchNorm>(4, comm), std::make_shared<nn::BatchNorm2d>(4)};
  CHECK(convert_sync_batchnorm(seq, group.communicator(1)) == 1);
}

TEST_CASE("sync batchnorm: DDP + convert_sync_batchnorm trains like one process with BatchNorm2d on the full batch",
          "[parallel][sync_bn][ddp]") {
  const int steps = 3;
  const int64_t n = 9;  // 5 + 4 on 2 ranks, 3 + 3 + 3 on 3
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> ref = ember::testing::sync_bn::train_bn_reference(dt, steps, n, 11);
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;  // measured: 1.2e-14, 1.7e-6
    for (int world : {2, 3}) {
      for (bool broadcast_buffers : {true, false}) {
        std::vector<std::vector<Tensor>> runs(world);
        REQUIRE(all_ok(run_ranks(world, [&](std::shared_ptr<Communicator> c) {
          runs[c->rank()] =
              ember::testing::sync_bn::train_sync_bn(c, dt, steps, n, 11, Device::cpu(), {.broadcast_buffers = broadcast_buffers});
        })));
        INFO(dtype_name(dt) << ", world " << world << ", broadcast_buffers " << broadcast_buffers);
        for (int r = 0; r < world; ++r) {
          CHECK(max_rel_diff(runs[r], ref) < tol);  // parameters and running statistics
          CHECK(max_rel_diff(runs[r], runs[0]) == 0);
        }
      }
    }
  }
  // Without synchronization the per-rank statistics make it a different training.
  const std::vector<Tensor> ref = ember::testing::sync_bn::train_bn_reference(DType::f64, steps, n, 11);
  std::vector<std::vector<Tensor>> local(2);
  REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
    local[c->rank()] = ember::testing::sync_bn::train_sync_bn(c, DType::f64, steps, n, 11, Device::cpu(), {.sync = false});
  })));
  CHECK(max_rel_diff(local[0], ref) > 1e-3);
}
