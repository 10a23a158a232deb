// Autocast on the CPU (Note [Autocast] in core/autocast.h): the dtype table of every op a CNN uses
// (tests/cases/autocast_cases.cpp) in float16 and bfloat16 regions, gradients of float32
// parameters, guards that nest and stay on their thread and device type, and the cast cache: one
// cast per weight per region. The same table on cuda:0: tests/cuda/test_autocast.cpp.

#include <catch2/catch.hpp>
#include <ember/core/autocast.h>
#include <ember/ember.h>
#include <set>
#include <thread>

#include "autocast_table.h"
#include "test_util.h"

using namespace ember;
using ember::testing::error_of;

namespace {

Tensor param(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  Tensor t = sub(rand(shape, {}, gen), 0.5);
  t.requires_grad_();
  return t;
}

// The node of out's graph that hands w its gradient: w's cast, a ToCopyBackward (found by walking
// the graph to the node with an edge into w's gradient accumulator).
std::shared_ptr<Node> cast_of(const Tensor& out, const Tensor& w) {
  const std::shared_ptr<Node> accumulator = gradient_edge(w).fn;
  std::vector<std::shared_ptr<Node>> todo{out.grad_fn()};
  std::set<const Node*> seen;
  while (!todo.empty()) {
    const std::shared_ptr<Node> n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n.get()).second) continue;
    for (const Edge& e : n->next) {
      if (e.fn == accumulator) return n;
      todo.push_back(e.fn);
    }
  }
  return nullptr;
}

}  // namespace

TEST_CASE("autocast: the dtype of every op, bfloat16 and float16 on the CPU", "[autocast]") {
  for (const DType region : {DType::bf16, DType::f16}) ember::testing::check_autocast_table(Device::cpu(), region);
}

TEST_CASE("autocast: gradients of float32 parameters are float32 and close to the float32 run's", "[autocast]") {
  for (const DType region : {DType::bf16, DType::f16})
    ember::testing::check_autocast_gradients(Device::cpu(), region);
}

TEST_CASE("autocast: batch_norm keeps its 16-bit input for backward, float32 statistics and parameter gradients",
          "[autocast]") {
  for (const DType region : {DType::f16, DType::bf16}) ember::testing::check_autocast_batch_norm(Device::cpu(), region);
}

TEST_CASE("autocast: guards nest, restore the outer state, and can turn autocast off", "[autocast]") {
  const Tensor x = ones({2, 4}), w = ones({3, 4});
  REQUIRE_FALSE(autocast_enabled(DeviceType::CPU));
  REQUIRE(autocast_dtype(DeviceType::CPU) == DType::bf16);   // PyTorch's defaults
  REQUIRE(autocast_dtype(DeviceType::CUDA) == DType::f16);
  {
    AutocastGuard outer(DeviceType::CPU, DType::bf16);
    CHECK(linear(x, w).dtype() == DType::bf16);
    {
      AutocastGuard inner(DeviceType::CPU, DType::f16);
      CHECK(autocast_dtype(DeviceType::CPU) == DType::f16);
      CHECK(linear(x, w).dtype() == DType::f16);
      {
        AutocastGuard off(DeviceType::CPU, AutocastMode::off);
        CHECK_FALSE(autocast_enabled(DeviceType::CPU));
        CHECK(linear(x, w).dtype() == DType::f32);
        {
          AutocastGuard on_again(DeviceType::CPU, AutocastMode::on);  // with the dtype in force: f16
          CHECK(linear(x, w).dtype() == DType::f16);
        }
      }
      CHECK(linear(x, w).dtype() == DType::f16);
    }
    CHECK(autocast_dtype(DeviceType::CPU) == DType::bf16);
    CHECK(linear(x, w).dtype() == DType::bf16);
  }
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));
  CHECK(autocast_dtype(DeviceType::CPU) == DType::bf16);
  CHECK(linear(x, w).dtype() == DType::f32);
}

TEST_CASE("autocast: a guard is per device type and per thread", "[autocast]") {
  const Tensor x = ones({2, 4}), w = ones({3, 4});
  {
    AutocastGuard cuda_only(DeviceType::CUDA, DType::bf16);
    CHECK(autocast_enabled(DeviceType::CUDA));
    CHECK_FALSE(autocast_enabled(DeviceType::CPU));
    CHECK(linear(x, w).dtype() == DType::f32);  // CPU tensors: untouched
  }
  AutocastGuard amp(DeviceType::CPU, DType::bf16);
  DType other_thread = DType::f64;
  bool other_enabled = true;
  std::thread t([&] {
    other_enabled = autocast_enabled(DeviceType::CPU);
    other_thread = linear(x, w).dtype();
  });
  t.join();
  CHECK_FALSE(other_enabled);
  CHECK(other_thread == DType::f32);
  CHECK(linear(x, w).dtype() == DType::bf16);
}

TEST_CASE("autocast: only float16 and bfloat16 regions, and float64 tensors are left alone", "[autocast]") {
  CHECK(error_of([] { AutocastGuard g(DeviceType::CPU, DType::f32); }) ==
        "AutocastGuard: autocast computes in float16 or bfloat16, got float32 for cpu");
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));  // the failed guard changed nothing
  AutocastGuard amp(DeviceType::CPU, DType::f16);
  const Tensor x = ones({2, 4}, {.dtype = DType::f64}), w = ones({3, 4}, {.dtype = DType::f64});
  CHECK(linear(x, w).dtype() == DType::f64);
  CHECK(softmax(x, 1).dtype() == DType::f64);
  CHECK(sum(x).dtype() == DType::f64);
}

TEST_CASE("autocast: one cast per weight per region, dropped when the region ends", "[autocast]") {
  Tensor w = param({3, 4}, 1), b = param({3}, 2);
  const Tensor x1 = ones({2, 4}), x2 = full({5, 4}, 2.0);
  std::shared_ptr<Node> first_region_cast;
  {
    AutocastGuard amp(DeviceType::CPU, DType::bf16);
    const Tensor y1 = linear(x1, w, b), y2 = linear(x2, w, b);
    CHECK(autocast::cache_size() == 2);  // w and b, once each
    REQUIRE(cast_of(y1, w) != nullptr);
    CHECK(cast_of(y1, w)->name == "ToCopyBackward");
    CHECK(cast_of(y1, w) == cast_of(y2, w));  // the same cast, one node
    first_region_cast = cast_of(y1, w);
    {
      AutocastGuard nested(DeviceType::CPU, DType::bf16);  // a nested guard shares the region's cache
      CHECK(cast_of(linear(x1, w, b), w) == first_region_cast);
    }
    CHECK(autocast::cache_size() == 2);
    // Activations (non-leaves) and tensors that need no gradient are never kept.
    (void)linear(linear(x1, w, b), ones({2, 3}));
    CHECK(autocast::cache_size() == 2);
    // The weight's gradient sums both uses, in float32.
    add(sum(y1), sum(y2)).backward();
  }
  CHECK(autocast::cache_size() == 0);
  REQUIRE(w.grad().dtype() == DType::f32);
  // d/dw of sum(x1 w^T) + sum(x2 w^T) is, per row of w, the column sums of x1 and x2: 2 + 10.
  ember::testing::check_close(ember::testing::vec(w.grad()), std::vector<double>(12, 12.0));
  ember::testing::check_close(ember::testing::vec(b.grad()), std::vector<double>(3, 7.0));  // 2 + 5 rows
  AutocastGuard next(DeviceType::CPU, DType::bf16);
  const std::shared_ptr<Node> second_region_cast = cast_of(linear(x1, w, b), w);
  CHECK(second_region_cast != first_region_cast);
}

TEST_CASE("autocast: a kept cast is made again after an in-place update or a backward pass", "[autocast]") {
  Tensor w = param({3, 4}, 1);
  const Tensor x = ones({2, 4});
  AutocastGuard amp(DeviceType::CPU, DType::f16);
  Tensor y = linear(x, w);
  const std::shared_ptr<Node> cast1 = cast_of(y, w);
  const double before = sum(y.to(DType::f32)).item();
  {
    NoGradGuard no_grad;
    w.add_(1.0);  // an optimizer step inside the region
  }
  Tensor y2 = linear(x, w);
  CHECK(cast_of(y2, w) != cast1);
  // Every output element grew by the 4 inputs of 1 times the +1 on each weight: 6 elements, +24.
  CHECK(sum(y2.to(DType::f32)).item() == Approx(before + 24.0).margin(0.05));
  sum(y2).backward();
  ember::testing::check_close(ember::testing::vec(w.grad()), std::vector<double>(12, 2.0));
  // The backward pass released y2's graph, the kept cast's ToCopyBackward with it: a new forward
  // in the same region casts again and its backward works.
  Tensor y3 = linear(x, w);
  CHECK(cast_of(y3, w) != cast_of(y2, w));
  sum(y3).backward();
  ember::testing::check_close(ember::testing::vec(w.grad()), std::vector<double>(12, 4.0));
}

TEST_CASE("autocast: a cast kept under NoGradGuard is not handed to a forward that needs gradients",
          "[autocast]") {
  Tensor w = param({3, 4}, 1);
  const Tensor x = ones({2, 4});
  AutocastGuard amp(DeviceType::CPU, DType::bf16);
  {
    NoGradGuard no_grad;
    CHECK_FALSE(linear(x, w).requires_grad());
  }
  const Tensor y = linear(x, w);
  REQUIRE(y.requires_grad());
  sum(y).backward();
  REQUIRE(w.grad().defined());
  ember::testing::check_close(ember::testing::vec(w.grad()), std::vector<double>(12, 2.0));
}

TEST_CASE("autocast: backward runs with autocast off, in the dtypes the forward chose", "[autocast]") {
  Tensor w = param({3, 4}, 1);
  const Tensor x = ones({2, 4});
  AutocastGuard amp(DeviceType::CPU, DType::bf16);
  const Tensor h = linear(x, w);
  bool enabled_in_backward = true;
  DType grad_dtype = DType::f64;
  h.register_hook([&](const Tensor& g) {
    enabled_in_backward = autocast_enabled(DeviceType::CPU);
    grad_dtype = g.dtype();
    return g;
  });
  sum(mul(h, h)).backward();  // sum is f32 under autocast: the gradient reaching h is cast back to bf16
  CHECK_FALSE(enabled_in_backward);
  CHECK(grad_dtype == DType::bf16);
  CHECK(autocast_enabled(DeviceType::CPU));  // and on again after it
  CHECK(w.grad().dtype() == DType::f32);
}
