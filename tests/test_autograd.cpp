// The autograd tape: accumulation, NoGradGuard, detach, retain_grad, hooks, graph freeing,
// and the errors PyTorch users expect.

#include <catch2/catch.hpp>
#include <ember/ember.h>

using namespace ember;

using VD = std::vector<double>;

namespace {
Tensor leaf(const VD& v) { return from_vector<double>(v, {.dtype = DType::f64, .requires_grad = true}); }
}  // namespace

TEST_CASE("autograd: gradients accumulate into leaves across backward calls", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  (x * x).sum().backward();
  CHECK(x.grad().to_vector<double>() == VD{2, 4, 6});
  (x * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == VD{5, 7, 9});
  x.set_grad(Tensor());
  CHECK(!x.grad().defined());
  // A leaf used on several paths gets the sum of the paths.
  Tensor y = x * x + exp(x) + x;
  y.sum().backward();
  const VD g = x.grad().to_vector<double>();
  for (int i = 0; i < 3; ++i) CHECK(g[i] == Approx(2 * (i + 1) + std::exp(i + 1.0) + 1));
}

TEST_CASE("autograd: diamond graph runs each node once, in dependency order", "[autograd]") {
  Tensor x = leaf({0.5});
  Tensor a = x * 2.0;
  Tensor b = sigmoid(a);
  Tensor c = tanh(a);
  Tensor d = b * c;  // d = s(2x) t(2x)
  d.backward();
  const double s = 1 / (1 + std::exp(-1.0)), t = std::tanh(1.0);
  const double expected = 2 * (s * (1 - s) * t + s * (1 - t * t));
  CHECK(x.grad().item() == Approx(expected).epsilon(1e-12));
}

TEST_CASE("autograd: backward with an explicit gradient, and the non-scalar error", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor y = x * x;
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("grad can be implicitly created only for scalar outputs") &&
                                      Catch::Contains("(2,)"));
  y.backward(from_vector<double>({1, 10}));
  CHECK(x.grad().to_vector<double>() == VD{2, 40});
  CHECK_THROWS_WITH((x * 1.0).backward(ones({3}, {.dtype = DType::f64})), Catch::Contains("gradient has shape (3,)"));
}

TEST_CASE("autograd: second backward through a freed graph is an error, retain_graph keeps it", "[autograd]") {
  Tensor x = leaf({2});
  Tensor y = exp(x * x);
  y.backward();
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("backward through the graph a second time"));
  Tensor z = exp(x * x);
  x.set_grad(Tensor());
  z.backward(Tensor(), /*retain_graph=*/true);
  z.backward();
  CHECK(x.grad().item() == Approx(2 * (2 * 2 * std::exp(4.0))));  // two backward calls, d/dx = 2x e^{x^2}
}

TEST_CASE("autograd: NoGradGuard records nothing, detach cuts the graph", "[autograd]") {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK(!y.requires_grad());
    CHECK(!y.grad_fn());
    CHECK(!grad_mode_enabled());
    {
      EnableGradGuard e;
      CHECK((x * 2.0).requires_grad());
    }
  }
  CHECK(grad_mode_enabled());
  Tensor d = (x * 2.0).detach();
  CHECK(!d.requires_grad());
  CHECK(d.is_same_storage(d));
  Tensor y = x * d;  // d is a constant here
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == VD{2, 4});
  CHECK_THROWS_WITH(ones({2}, {.dtype = DType::i64}).requires_grad_(), Catch::Contains("only floating-point"));
  CHECK_THROWS_WITH(y.requires_grad_(false), Catch::Contains("only leaf tensors"));
  CHECK_THROWS_WITH(ones({1}).backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("autograd: retain_grad keeps a non-leaf's gradient", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor h = x * 3.0;
  h.retain_grad();
  Tensor y = (h * h).sum();
  y.backward();
  CHECK(h.grad().to_vector<double>() == VD{6, 12});
  CHECK(x.grad().to_vector<double>() == VD{18, 36});
  Tensor h2 = x * 1.0;
  (h2 * 2.0).sum().backward();
  CHECK(!h2.grad().defined());  // not retained
}

TEST_CASE("autograd: tensor hooks see and may replace gradients, post-accumulate hooks fire", "[autograd]") {
  Tensor x = leaf({1, 2});
  Tensor h = x * 2.0;
  VD seen;
  h.register_hook([&](const Tensor& g) {
    seen = g.to_vector<double>();
    return mul(g, 10.0);  // replaces the gradient flowing on
  });
  int ready = 0;
  x.register_post_accumulate_grad_hook([&](Tensor& p) {
    ++ready;
    CHECK(p.grad().defined());
  });
  VD leaf_hook_seen;
  x.register_hook([&](const Tensor& g) {
    leaf_hook_seen = g.to_vector<double>();
    return Tensor();  // keep it
  });
  (h * h).sum().backward();
  CHECK(seen == VD{4, 8});
  CHECK(leaf_hook_seen == VD{80, 160});
  CHECK(x.grad().to_vector<double>() == VD{80, 160});
  CHECK(ready == 1);
  CHECK_THROWS_WITH(h.register_post_accumulate_grad_hook([](Tensor&) {}), Catch::Contains("only leaf tensors"));
}

TEST_CASE("autograd: in-place change of a saved tensor is detected (version counter)", "[autograd]") {
  // x * w saves x for w's gradient; x changes before backward.
  Tensor x = from_vector<double>({1, 2});
  Tensor w = leaf({3, 4});
  Tensor y = (x * w).sum();
  x.add_(1.0);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified by an in-place operation") &&
                                      Catch::Contains("version is 2, expected 1"));
  // sigmoid saves its output; modifying the output through a view is caught too.
  Tensor a = leaf({0.5, 1.0});
  Tensor s = sigmoid(a);
  {
    NoGradGuard g;
    s.select(0, 0).fill_(0);
  }
  CHECK_THROWS_AS(s.sum().backward(), Error);
  // The process goes on: a fresh graph works.
  Tensor ok = (w * w).sum();
  ok.backward();
  CHECK(w.grad().to_vector<double>() == VD{6, 8});
}

TEST_CASE("autograd: grad() computes gradients without touching .grad", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  Tensor w = leaf({2});
  Tensor y = (x * x * w).sum();
  std::vector<Tensor> g = grad({y}, {x, w});
  CHECK(g[0].to_vector<double>() == VD{4, 8, 12});
  CHECK(g[1].item() == 14);
  CHECK(!x.grad().defined());
  CHECK(!w.grad().defined());
}

TEST_CASE("autograd: graph is freed with the tensors (no leak through leaves)", "[autograd]") {
  Tensor x = leaf({1, 2, 3});
  std::weak_ptr<Node> node;
  {
    Tensor y = exp(x);
    node = y.grad_fn();
    CHECK(!node.expired());
  }
  CHECK(node.expired());
}

TEST_CASE("autograd: gradients flow through views and dtype conversion", "[autograd]") {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor y = x.t().select(0, 1) * 2.0;  // column 1 of x
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == VD{0, 2, 0, 0, 2, 0});
  Tensor z = leaf({1.5});
  (z.to(DType::f32) * 2.0).sum().backward();
  CHECK(z.grad().dtype() == DType::f64);
  CHECK(z.grad().item() == 2.0);
}

TEST_CASE("autograd: a leaf adopts a gradient nothing else holds, and copies a shared one", "[autograd]") {
  // Note [A leaf's gradient]: (x * x) * 3's gradient for x is a fresh tensor that only the engine
  // holds, so backward allocates no more than grad() does for the same graph (which returns it).
  Tensor x = from_vector<float>(std::vector<float>(4096, 0.5f), {.requires_grad = true});
  const auto allocations = [] { return cpu_allocator().stats().allocation_count; };
  int64_t before = allocations();
  const std::vector<Tensor> g = grad({((x * x) * 3.0).sum()}, {x});
  const int64_t by_grad = allocations() - before;
  before = allocations();
  ((x * x) * 3.0).sum().backward();
  CHECK(allocations() - before == by_grad);
  CHECK(x.grad().to_vector<float>() == g[0].to_vector<float>());
  CHECK(x.grad().to_vector<float>()[0] == 3.0f);

  // add's backward hands one gradient tensor to both inputs: each leaf gets a copy of its own,
  // so accumulating into one leaves the other alone.
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  add(a, b).backward(from_vector<double>({1, 1}));
  CHECK(!a.grad().is_same_storage(b.grad()));
  (a * 2.0).sum().backward();
  CHECK(a.grad().to_vector<double>() == VD{3, 3});
  CHECK(b.grad().to_vector<double>() == VD{1, 1});
}
