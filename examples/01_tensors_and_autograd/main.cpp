// 01_tensors_and_autograd: a tour of ember's core — tensors, views, broadcasting, autograd with
// hooks — that ends by training a small classifier from scratch with nothing but tensor ops,
// autograd and a hand-written Adam step.
//
//   ./build/examples/01_tensors_and_autograd            # the full run (a second or two)
//   ./build/examples/01_tensors_and_autograd --quick    # the short setting ctest runs
//
// Each section checks what it shows. The program prints PASS and exits 0 only when every check
// holds and the classifier learned: final loss below a quarter of the initial loss and training
// accuracy above 90%. Otherwise it prints FAIL and exits 1.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <ember/ember.h>

using namespace ember;

namespace {

int g_failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("  [%s] %s\n", ok ? "ok" : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

bool close(double a, double b, double tol = 1e-5) { return std::abs(a - b) <= tol * (1.0 + std::abs(b)); }

bool all_close(const std::vector<float>& a, const std::vector<float>& b, double tol = 1e-5) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!close(a[i], b[i], tol)) return false;
  return true;
}

void section(const char* title) { std::printf("\n== %s\n", title); }

// ---- 1. tensors ---------------------------------------------------------------------------------
void tour_tensors() {
  section("1. Tensors: a strided view onto shared storage, with a dtype and a device");
  Tensor a = arange(6).view({2, 3});  // float32 [0, 6), viewed as 2 x 3
  std::cout << "a = " << a << "\n";
  check(a.shape() == Shape{2, 3} && a.dtype() == DType::f32 && a.device() == Device::cpu(),
        "arange(6).view({2, 3}) is a (2, 3) float32 tensor on the cpu");
  check(a.strides() == Strides{3, 1} && a.is_contiguous(), "row-major strides (3, 1)");

  Tensor d = ones({2, 2}, {.dtype = DType::f64});
  Tensor h = full({4}, 1.0 / 3.0).to(DType::f16);  // 16-bit storage type: round-to-nearest-even
  std::cout << "d = " << d << "\nh = " << h << "\n";
  check(d.dtype() == DType::f64 && h.element_size() == 2, "factories take {.dtype = ...}; f16 uses 2 bytes");

  manual_seed(0);  // Philox: the same seed gives the same numbers on every device
  Tensor r1 = randn({3});
  manual_seed(0);
  Tensor r2 = randn({3});
  check(r1.to_vector<float>() == r2.to_vector<float>(), "manual_seed makes randn reproducible");
}

// ---- 2. views -----------------------------------------------------------------------------------
void tour_views() {
  section("2. Views share storage; contiguous() copies");
  Tensor a = arange(6).view({2, 3});
  Tensor at = a.t();  // (3, 2), strides (1, 3): no data moved
  std::cout << "a.t() = " << at << "  strides " << at.strides() << "\n";
  check(at.is_same_storage(a) && !at.is_contiguous(), "a.t() is a non-contiguous view of a's storage");

  a.select(1, 0).fill_(42);  // column 0 of a, written through a view
  std::cout << "after a.select(1, 0).fill_(42): a = " << a << "\n";
  check(a.to_vector<float>() == std::vector<float>{42, 1, 2, 42, 4, 5}, "a write through a view is seen by the base");
  check(at[0][1].item() == 42, "... and by every other view (a.t()[0][1])");

  Tensor c = at.contiguous();
  check(c.is_contiguous() && !c.is_same_storage(a), "contiguous() of a transposed view is a fresh copy");
  check(a.slice(1, 0, 3, 2).shape() == Shape{2, 2}, "slice(dim, start, end, step) keeps every other column");
}

// ---- 3. broadcasting ----------------------------------------------------------------------------
void tour_broadcasting() {
  section("3. Broadcasting: size-1 and missing dims stretch, without copies");
  Tensor col = from_vector<float>({0, 10, 20}).view({3, 1});
  Tensor row = from_vector<float>({1, 2, 3, 4});
  Tensor grid = col + row;  // (3, 1) + (4,) -> (3, 4)
  std::cout << "col + row = " << grid << "\n";
  check(grid.shape() == Shape{3, 4} && grid[2][3].item() == 24, "(3, 1) + (4,) gives (3, 4)");
  Tensor e = row.expand({3, 4});
  check(e.strides() == Strides{0, 1} && e.is_same_storage(row), "expand() is a view with stride 0");
}

// ---- 4. autograd --------------------------------------------------------------------------------
void tour_autograd() {
  section("4. Autograd: a tape of ops, run backwards; hooks see and can change gradients");
  Tensor x = from_vector<float>({1, 2, 3}, {.requires_grad = true});  // a leaf
  Tensor h = x * x;                                                    // recorded: MulBackward
  std::cout << "h = " << h << "\n";
  check(!h.is_leaf() && h.grad_fn() != nullptr, "h = x * x is a non-leaf with a grad_fn");

  // A hook on the non-leaf h runs during backward with dL/dh; here it prints and doubles it.
  h.register_hook([](const Tensor& g) {
    std::cout << "  hook on h: dL/dh = " << g << "\n";
    return g * 2.0;
  });
  // A post-accumulate hook on a leaf fires once its .grad is complete ("gradient ready").
  int ready = 0;
  x.register_post_accumulate_grad_hook([&ready](Tensor&) { ++ready; });

  Tensor s = (h * 3.0);
  s.retain_grad();  // keep .grad of a non-leaf
  Tensor loss = s.sum();
  loss.backward();  // dL/ds = 1, dL/dh = 3 (doubled by the hook to 6), dL/dx = 6 * 2x = 12x
  std::cout << "x.grad() = " << x.grad() << "\n";
  check(all_close(x.grad().to_vector<float>(), {12, 24, 36}), "x.grad() = 12 x (the hook doubled dL/dh)");
  check(all_close(s.grad().to_vector<float>(), {1, 1, 1}), "retain_grad() kept s.grad() = 1");
  check(ready == 1, "the leaf's gradient-ready hook fired once");

  {
    NoGradGuard no_grad;  // inside: ops record nothing (optimizer updates, evaluation)
    Tensor y = x * 2.0;
    check(!y.requires_grad(), "under NoGradGuard, x * 2 does not require grad");
  }
  // Gradients accumulate across backward calls until you reset them.
  (x * x).sum().backward();
  check(all_close(x.grad().to_vector<float>(), {14, 28, 42}), "a second backward adds 2x into x.grad()");
  x.set_grad(Tensor());
  check(!x.grad().defined(), "set_grad(Tensor()) clears it");
}

// ---- 5. a classifier from scratch -----------------------------------------------------------------

// Three Gaussian blobs in the plane (unit variance, centres 2.5 from the origin): n points per
// class; they overlap a little, so about 97% is the best any classifier can do.
struct Dataset {
  Tensor x;  // (3n, 2) float32
  Tensor y;  // (3n) int64 labels 0, 1, 2
};

Dataset make_blobs(int64_t n) {
  Tensor centres = from_vector<float>({0.0f, 2.5f, -2.2f, -1.25f, 2.2f, -1.25f}, {3, 2});
  // (3, n, 2) noise + (3, 1, 2) centres broadcasts each centre over its n points.
  Tensor x = (randn({3, n, 2}) + centres.view({3, 1, 2})).reshape({3 * n, 2});
  // Labels: (3, 1) expanded to (3, n) is a stride-0 view; reshape copies it out row-major.
  Tensor y = arange(3, {.dtype = DType::i64}).view({3, 1}).expand({3, n}).reshape({3 * n});
  return {x, y};
}

// A 2-layer MLP: linear -> relu -> linear, weights as plain leaf tensors.
struct Mlp {
  Tensor w1, b1, w2, b2;
  Mlp(int64_t in, int64_t hidden, int64_t out) {
    // He initialization for the relu layer; small output weights, so that the first logits are
    // near 0 and the first loss near ln(3) = 1.0986 (every class equally likely).
    w1 = (randn({hidden, in}) * std::sqrt(2.0 / static_cast<double>(in))).requires_grad_();
    b1 = zeros({hidden}, {.requires_grad = true});
    w2 = (randn({out, hidden}) * 0.01).requires_grad_();
    b2 = zeros({out}, {.requires_grad = true});
  }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
};

// Adam (Kingma & Ba), written out to show what an optimizer step is: tensor updates under
// NoGradGuard. Plain SGD would be the single line p.add_(p.grad(), -lr). The library's
// optim::Adam (optim/adam.h) does the same, with torch.optim's options and a fused kernel.
struct Adam {
  std::vector<Tensor> params, m, v;
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int t = 0;
  Adam(std::vector<Tensor> p, double lr_) : params(std::move(p)), lr(lr_) {
    for (const Tensor& q : params) {
      m.push_back(zeros_like(q));
      v.push_back(zeros_like(q));
    }
  }
  void step() {
    NoGradGuard no_grad;  // the update itself must not be recorded
    ++t;
    const double c1 = 1.0 - std::pow(beta1, t), c2 = 1.0 - std::pow(beta2, t);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor g = params[i].grad();
      m[i].mul_(beta1).add_(g, 1.0 - beta1);      // m = b1 m + (1 - b1) g
      v[i].mul_(beta2).add_(g * g, 1.0 - beta2);  // v = b2 v + (1 - b2) g^2
      // p -= lr * (m / c1) / (sqrt(v / c2) + eps)
      params[i].add_(m[i] / ((v[i] / c2).sqrt() + eps), -lr / c1);
      params[i].set_grad(Tensor());  // zero the gradient for the next step
    }
  }
};

double accuracy(const Tensor& logits, const Tensor& labels) {
  NoGradGuard no_grad;
  return eq(argmax(logits, 1), labels).to(DType::f32).mean().item();
}

void train_classifier(bool quick) {
  section("5. A 3-class MLP classifier, trained with cross_entropy and Adam");
  manual_seed(1234);
  const int64_t per_class = quick ? 100 : 300;
  const int steps = quick ? 120 : 400;
  const int print_every = quick ? 20 : 50;
  const Dataset data = make_blobs(per_class);
  std::printf("  data: x %s, y %s; model 2 -> 32 -> 3\n", describe(data.x).c_str(), describe(data.y).c_str());

  Mlp model(2, 32, 3);
  Adam opt(model.parameters(), 0.01);
  double first_loss = 0, last_loss = 0;
  for (int step = 0; step <= steps; ++step) {
    Tensor logits = model.forward(data.x);          // (3n, 3)
    Tensor loss = cross_entropy(logits, data.y);    // mean over the batch
    if (step == 0) first_loss = loss.item();
    last_loss = loss.item();
    // Most of the progress is in the first few dozen steps: print those closer together.
    const bool early = step <= 40 && step % 10 == 0;
    if (early || step % print_every == 0 || step == steps)
      std::printf("  step %4d  loss %.4f  accuracy %5.1f%%\n", step, last_loss, 100.0 * accuracy(logits, data.y));
    if (step == steps) break;
    loss.backward();
    opt.step();
  }
  const double acc = accuracy(model.forward(data.x), data.y);
  char msg[160];
  std::snprintf(msg, sizeof msg, "loss went down: %.4f -> %.4f (must end below 0.25x the start)", first_loss, last_loss);
  check(std::isfinite(last_loss) && last_loss < 0.25 * first_loss, msg);
  std::snprintf(msg, sizeof msg, "train accuracy %.1f%% (must be above 90%%)", 100.0 * acc);
  check(acc > 0.90, msg);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
      return std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ? 0 : 2;
    }
  }
  try {
    tour_tensors();
    tour_views();
    tour_broadcasting();
    tour_autograd();
    train_classifier(quick);
  } catch (const Error& e) {
    std::printf("\nFAIL: ember::Error: %s\n", e.what());
    return 1;
  }
  if (g_failures > 0) {
    std::printf("\nFAIL: %d check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("\nPASS\n");
  return 0;
}
