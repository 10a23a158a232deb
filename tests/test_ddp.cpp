// DistributedDataParallel on in-process ranks: equivalence with full-batch training, buckets,
// overlap, no_sync, unused parameters, buffers, and the errors. The same scenarios run under
// mpirun in tests/parallel/mpi_tests.cpp.

#include <catch2/catch.hpp>
#include <ember/ember.h>
#include <ember/parallel/ddp.h>
#include <ember/parallel/inprocess_communicator.h>

#include "parallel/ddp_scenarios.h"
#include "parallel/rank_threads.h"
#include "test_util.h"

using namespace ember;
using namespace ember::parallel;
using namespace ember::testing::ddp;
using namespace ember::testing::ranks;

TEST_CASE("ddp: K steps on 2 and 3 in-process ranks equal full-batch training (f64 1e-6, f32 1e-5)", "[parallel][ddp]") {
  const int steps = 3;
  const int64_t n = 10;  // 5 + 5 on 2 ranks; 4 + 3 + 3 on 3
  for (DType dt : {DType::f64, DType::f32}) {
    const std::vector<Tensor> ref = train_reference(dt, steps, n, 7);
    for (int world : {2, 3}) {
      for (int64_t cap : {int64_t{256}, int64_t{25} << 20}) {  // several buckets; one bucket
        std::vector<DdpRun> runs(world);
        REQUIRE(all_ok(run_ranks(world, [&](std::shared_ptr<Communicator> c) {
          runs[c->rank()] = train_ddp(c, dt, steps, n, 7, cap);
        })));
        INFO("dtype " << dtype_name(dt) << ", world " << world << ", bucket cap " << cap);
        const double tol = dt == DType::f64 ? 1e-6 : 1e-5;
        for (int r = 0; r < world; ++r) {
          CHECK(max_rel_diff(runs[r].params, ref) < tol);
          CHECK(max_rel_diff(runs[r].params, runs[0].params) == 0);  // bit-identical replicas
          CHECK(runs[r].stats.steps == steps);
        }
        if (dt == DType::f32) CHECK(runs[0].buckets == (cap == 256 ? 4u : 1u));
      }
    }
  }
}

TEST_CASE("ddp: buckets hold parameters in reverse registration order, within the cap", "[parallel][ddp]") {
  REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
    auto m = make_model(1, DType::f32);  // fc1.w 16x6, fc1.b 16, fc2.w 8x16, fc2.b 8, fc3.w 4x8, fc3.b 4
    // 256 bytes = 64 floats: fc3.b + fc3.w + fc2.b (44) | fc2.w (128: alone, over the cap) |
    // fc1.b (16; fc1.w would overflow it) | fc1.w (96: alone)
    DistributedDataParallel ddp(*m, c, {.bucket_cap_bytes = 256});
    const auto got = ddp.bucket_assignment();
    EXPECT(got == std::vector<std::vector<int64_t>>{{5, 4, 3}, {2}, {1}, {0}});
    DistributedDataParallel one(*m, c);  // the default 25 MB: one bucket, last parameter first
    EXPECT(one.bucket_assignment() == std::vector<std::vector<int64_t>>{{5, 4, 3, 2, 1, 0}});
  })));
}

TEST_CASE("ddp: pack_into / unpack_from round-trip tensors through a flat buffer", "[parallel][ddp]") {
  Tensor a = arange(6, {.dtype = DType::f64}).view({2, 3});
  Tensor b = arange(10, 14, 1, {.dtype = DType::f64});
  Tensor at = a.t();  // non-contiguous: packed in its own row-major order
  Tensor buf = zeros({12}, {.dtype = DType::f64});
  pack_into(buf, {at, b}, {1, 7});
  CHECK(buf.to_vector<double>() == std::vector<double>{0, 0, 3, 1, 4, 2, 5, 10, 11, 12, 13, 0});
  buf.mul_(2.0);
  Tensor a2 = zeros({3, 2}, {.dtype = DType::f64}), b2 = zeros({4}, {.dtype = DType::f64});
  unpack_from(buf, {a2, b2}, {1, 7});
  CHECK(a2.to_vector<double>() == std::vector<double>{0, 6, 2, 8, 4, 10});
  CHECK(b2.to_vector<double>() == std::vector<double>{20, 22, 24, 26});
  CHECK_THROWS_WITH(pack_into(buf.view({3, 4}), {b}, {0}), Catch::Contains("1-D buffer"));
}

TEST_CASE("ddp: a bucket's all-reduce is launched before backward finishes (overlap)", "[parallel][ddp]") {
  std::vector<DdpRun> runs(2);
  REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
    runs[c->rank()] = train_ddp(c, DType::f32, 1, 8, 3, 256);
  })));
  for (const DdpRun& run : runs) {
    const auto& ev = run.events;
    const size_t first_launch = first_of(ev, DDPEventKind::bucket_launched);
    const size_t last_ready = last_of(ev, DDPEventKind::grad_ready);
    REQUIRE(first_launch < ev.size());
    REQUIRE(last_ready < ev.size());
    // Bucket 0 (fc3) went out while fc2 and fc1 gradients were still being computed.
    CHECK(first_launch < last_ready);
    CHECK(ev[first_launch].index == 0);
    // The first gradients ready are the last layer's (parameters 5 and 4: fc3.bias, fc3.weight).
    CHECK((ev[0].kind == DDPEventKind::grad_ready && ev[0].index >= 4));
    // Buckets launch in order; every bucket reduced; backward_finished last.
    int64_t expect = 0;
    for (const DDPEvent& e : ev)
      if (e.kind == DDPEventKind::bucket_launched) CHECK(e.index == expect++);
    CHECK(expect == 4);
    CHECK(ev.back().kind == DDPEventKind::backward_finished);
    CHECK(run.stats.bytes_reduced == (16 * 6 + 16 + 8 * 16 + 8 + 4 * 8 + 4) * 4);
  }
}

TEST_CASE("ddp: no_sync accumulation equals the large-batch gradient", "[parallel][ddp]") {
  for (int world : {2, 3}) {
    const int64_t n = 13;
    const std::vector<Tensor> ref = reference_grads(DType::f64, n, 5);
    std::vector<std::vector<Tensor>> got(world);
    REQUIRE(all_ok(run_ranks(world, [&](std::shared_ptr<Communicator> c) {
      got[c->rank()] = no_sync_grads(c, DType::f64, 3, n, 5);
    })));
    for (int r = 0; r < world; ++r) {
      REQUIRE(got[r].size() == ref.size());  // `extra` is unused everywhere: no gradient
      CHECK(max_rel_diff(got[r], ref) < 1e-10);
    }
  }
}

TEST_CASE("ddp: unused parameters: fine when every rank agrees, an error on every rank when not", "[parallel][ddp]") {
  SECTION("agree") {
    REQUIRE(all_ok(run_ranks(3, [&](std::shared_ptr<Communicator> c) {
      auto m = make_model(1, DType::f64, /*with_extra=*/true);
      DistributedDataParallel ddp(*m, c, {.bucket_cap_bytes = 256});
      const Batch b = make_batch(6, DType::f64, 2);
      for (int step = 0; step < 2; ++step) {
        m->zero_grad();
        cross_entropy(ddp(b.x), b.y).backward();
        EXPECT(!m->extra.weight.grad().defined());
        EXPECT(m->fc1.weight.grad().defined());
      }
    })));
  }
  SECTION("disagree") {
    const auto errors = run_ranks(2, [&](std::shared_ptr<Communicator> c) {
      auto m = make_model(1, DType::f64, /*with_extra=*/true);
      m->use_extra = c->rank() == 1;
      DistributedDataParallel ddp(*m, c);
      const Batch b = make_batch(6, DType::f64, 2);
      cross_entropy(ddp(b.x), b.y).backward();
    });
    for (const std::string& e : errors) {
      CHECK_THAT(e, Catch::Contains("DistributedDataParallel") && Catch::Contains("every rank must leave the same "
                                                                                  "parameters unused"));
      CHECK_THAT(e, Catch::Contains("disagree on all_reduce"));
    }
    CHECK_THAT(errors[0], Catch::Contains("'extra.bias', 'extra.weight'"));
    CHECK_THAT(errors[1], Catch::Contains("on this rank: none"));
  }
}

TEST_CASE("ddp: ranks wrapping different models fail at construction on every rank", "[parallel][ddp]") {
  const auto errors = run_ranks(3, [&](std::shared_ptr<Communicator> c) {
    auto m = make_model(1, DType::f32, /*with_extra=*/c->rank() == 2);
    DistributedDataParallel ddp(*m, c);
  });
  for (const std::string& e : errors) {
    CHECK_THAT(e, Catch::Contains("the ranks wrap different models: rank 0 has 6 parameters (284 elements)") &&
                      Catch::Contains("rank 2 has 8 parameters (312 elements)"));
  }
  // Same counts, different dtype: caught by the hash.
  const auto errors2 = run_ranks(2, [&](std::shared_ptr<Communicator> c) {
    auto m = make_model(1, c->rank() == 0 ? DType::f32 : DType::f64);
    DistributedDataParallel ddp(*m, c);
  });
  for (const std::string& e : errors2) CHECK_THAT(e, Catch::Contains("different names, shapes or dtypes"));
}

namespace {
// A module with a buffer that records, at every forward, the buffer's value on entry, then
// changes it by a rank-specific amount (as BatchNorm's running stats drift apart per rank).
struct Drifting : nn::Module {
  nn::Linear fc{2, 2};
  Tensor counter = zeros({1}, {.dtype = DType::f64});
  double drift;
  std::vector<double> seen;
  explicit Drifting(double d) : drift(d) {
    register_module("fc", fc);
    register_buffer("counter", counter);
  }
  Tensor forward(const Tensor& x) override {
    seen.push_back(counter.item());
    counter.add_(drift);
    return fc(x);
  }
};
}  // namespace

TEST_CASE("ddp: parameters and buffers come from rank 0 at construction, buffers again every training forward",
          "[parallel][ddp]") {
  std::vector<std::vector<double>> seen(2);
  std::vector<std::vector<double>> weights(2);
  REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
    std::unique_ptr<Drifting> m;
    {
      std::lock_guard<std::mutex> lock(init_mutex());
      manual_seed(100 + c->rank());
      m = std::make_unique<Drifting>(c->rank() == 0 ? 1.0 : 10.0);
    }
    m->counter.fill_(c->rank() == 0 ? 5.0 : -5.0);
    DistributedDataParallel ddp(*m, c);
    weights[c->rank()] = m->fc.weight.to_vector<double>();
    const Tensor x = ones({1, 2});
    for (int s = 0; s < 3; ++s) ddp(x).sum().backward();
    ddp.eval();
    ddp(x);  // eval: no broadcast, rank 1's own value
    seen[c->rank()] = m->seen;
  })));
  CHECK(weights[0] == weights[1]);
  CHECK(seen[0] == std::vector<double>{5, 6, 7, 8});
  CHECK(seen[1] == std::vector<double>{5, 6, 7, 17});
}

TEST_CASE("ddp: a backward without a new forward stays local, as in PyTorch", "[parallel][ddp]") {
  std::vector<std::vector<double>> g(2);
  REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
    auto m = make_model(1, DType::f64);
    DistributedDataParallel ddp(*m, c);
    const Batch b = make_batch(4, DType::f64, 2 + c->rank());  // different data per rank
    Tensor loss = cross_entropy(ddp(b.x), b.y);
    loss.backward(Tensor(), /*retain_graph=*/true);  // averaged: the same on both ranks
    const Tensor synced = m->fc3.bias.grad().clone();
    loss.backward();  // un-armed: adds this rank's own gradient
    ddp.finish();     // nothing pending: a no-op
    g[c->rank()] = (m->fc3.bias.grad() - synced).to_vector<double>();
    EXPECT(ddp.stats().steps == 1);
  })));
  CHECK(g[0] != g[1]);
}

TEST_CASE("ddp: a channels-last model trains as the NCHW one, bit for bit, its gradients channels-last",
          "[parallel][ddp][memory_format]") {
  // conv → batch norm + ReLU → linear. The buckets carry gradients in logical order and write the
  // averages back through the gradients' strides (Note [A leaf's gradient] in core/autograd.cpp),
  // so the format changes where the bytes lie, not the numbers.
  struct Net : nn::Module {
    nn::Conv2d conv{3, 4, 3};
    nn::BatchNorm2d bn{4};
    nn::Linear fc{64, 3};
    Net() {
      register_module("conv", conv);
      register_module("bn", bn);
      register_module("fc", fc);
    }
    Tensor forward(const Tensor& x) override { return fc(bn.forward_relu(conv(x)).flatten(1)); }
  };
  const int64_t n = 8;
  const Tensor images = from_vector<float>(ember::testing::random_vector<float>(static_cast<size_t>(n * 3 * 6 * 6), 21), {n, 3, 6, 6});
  const Tensor labels = from_vector<int64_t>({0, 1, 2, 0, 1, 2, 2, 1});
  const auto train = [&](bool cl) {
    std::vector<std::vector<Tensor>> params(2);
    std::vector<MemoryFormat> grad_format(2);
    REQUIRE(all_ok(run_ranks(2, [&](std::shared_ptr<Communicator> c) {
      std::unique_ptr<Net> m;
      {
        std::lock_guard<std::mutex> lock(init_mutex());
        manual_seed(4 + static_cast<uint64_t>(c->rank()));  // rank 0's weights are broadcast
        m = std::make_unique<Net>();
      }
      if (cl) m->to(MemoryFormat::channels_last);
      DistributedDataParallel ddp(*m, c, {.bucket_cap_bytes = 256});
      optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
      const int64_t lo = c->rank() * n / 2;
      Tensor x = images.narrow(0, lo, n / 2);
      if (cl) x = x.contiguous(MemoryFormat::channels_last);
      const Tensor y = labels.narrow(0, lo, n / 2);
      for (int s = 0; s < 3; ++s) {
        opt.zero_grad();
        cross_entropy(ddp(x), y).backward();
        opt.step();
      }
      grad_format[c->rank()] = m->conv.weight.grad().suggest_memory_format();
      params[c->rank()] = snapshot(*m);
    })));
    CHECK(grad_format[0] == (cl ? MemoryFormat::channels_last : MemoryFormat::contiguous));
    for (size_t i = 0; i < params[0].size(); ++i) CHECK(params[0][i].to_vector<float>() == params[1][i].to_vector<float>());
    return params[0];
  };
  const std::vector<Tensor> nchw = train(false), nhwc = train(true);
  for (size_t i = 0; i < nchw.size(); ++i) CHECK(nhwc[i].to_vector<float>() == nchw[i].to_vector<float>());
}
