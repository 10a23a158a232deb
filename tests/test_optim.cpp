// optim: Adam, AdamW, SGD, gradient clipping, state save/load — against values computed
// independently from torch.optim's published update rules.
//
// The 10-digit constants were computed with a plain Python (double) transcription of
// torch.optim's single-tensor code; the reference loops below transcribe the same code again in
// C++. Neither calls ember's kernels. Schedulers: tests/test_optim_scheduler.cpp.

#include <catch2/catch.hpp>
#include <cmath>
#include <ember/ember.h>
#include <ember/optim/optim.h>

using namespace ember;

using VD = std::vector<double>;

namespace {

Tensor param(const VD& v, DType dtype = DType::f64) {
  return from_vector<double>(v, {.dtype = dtype, .requires_grad = true});
}
void set_grad(Tensor& p, const VD& g) { p.set_grad(from_vector<double>(g, {.dtype = p.dtype()}).view(p.shape())); }

// Deterministic, irregular test data.
VD wave(int64_t n, double scale, double phase) {
  VD v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * std::sin(0.37 * static_cast<double>(i) + phase);
  return v;
}

// torch.optim.Adam / AdamW (single tensor), one element, in T: each line is one ATen op, rounded.
template <typename T>
struct AdamRef {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, decoupled = false;
  T m = 0, v = 0, vmax = 0;
  int step = 0;
  T update(T p, T g) {
    ++step;
    if (decoupled) p = p * static_cast<T>(1 - lr * weight_decay);
    else if (weight_decay != 0) g = g + static_cast<T>(weight_decay) * p;
    const T w = static_cast<T>(1 - beta1);
    m = std::abs(w) < T(0.5) ? m + w * (g - m) : g - (g - m) * (T(1) - w);  // lerp_
    v = v * static_cast<T>(beta2);                                           // mul_
    v = v + static_cast<T>(1 - beta2) * g * g;                               // addcmul_
    if (amsgrad) vmax = std::max(vmax, v);
    const double bc1 = 1 - std::pow(beta1, step), bc2 = 1 - std::pow(beta2, step);
    const T denom = std::sqrt(amsgrad ? vmax : v) / static_cast<T>(std::sqrt(bc2)) + static_cast<T>(eps);
    return p + static_cast<T>(-(lr / bc1)) * m / denom;  // addcdiv_
  }
};

// Runs `opt` on a one-element f64 parameter with the given gradients; returns p after each step.
template <typename Opt, typename Options>
VD run_scalar(const Options& options, const VD& grads, double x0 = 1.0) {
  Tensor p = param({x0});
  Opt opt(std::vector<Tensor>{p}, options);
  VD out;
  for (double g : grads) {
    set_grad(p, {g});
    opt.step();
    out.push_back(p.item());
  }
  return out;
}

void check_values(const VD& got, const VD& expected, double tol = 1e-10) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(got[i] == Approx(expected[i]).epsilon(tol).margin(tol));
  }
}

const VD kGrads = {1, -2, 0.5};

}  // namespace

TEST_CASE("Adam: known values on a scalar parameter, grads [1, -2, 0.5]", "[optim]") {
  check_values(run_scalar<optim::Adam>(optim::AdamOptions{}, kGrads), {0.99900000001, 0.9993661035, 0.9995027942});
  const VD lr01 = run_scalar<optim::Adam>(optim::AdamOptions{.lr = 0.1}, kGrads);
  check_values(lr01, {0.900000001, 0.9366103535, 0.9502794197});
  // Same order of double operations as the reference transcription: equal to the last bit.
  AdamRef<double> ref{.lr = 0.1};
  double x = 1.0;
  for (size_t i = 0; i < kGrads.size(); ++i) {
    x = ref.update(x, kGrads[i]);
    CHECK(lr01[i] == x);
  }
}

TEST_CASE("AdamW: decoupled weight decay shrinks the parameter before the Adam step", "[optim]") {
  check_values(run_scalar<optim::AdamW>(optim::AdamWOptions{.lr = 0.1, .weight_decay = 0.1}, kGrads),
               {0.890000001, 0.9177103535, 0.9222023161});
  // Default weight_decay is 1e-2 (and lr 1e-3).
  optim::AdamW opt(std::vector<Tensor>{param({1.0})});
  CHECK(opt.options().weight_decay == 1e-2);
  CHECK(opt.get_weight_decay(0) == 1e-2);
  CHECK(opt.get_lr(0) == 1e-3);
}

TEST_CASE("Adam: L2 weight decay, amsgrad and maximize", "[optim]") {
  check_values(run_scalar<optim::Adam>(optim::AdamOptions{.lr = 0.1, .weight_decay = 0.1}, kGrads),
               {0.9000000009, 0.9310642948, 0.9376421549});
  // beta2 = 0.9 and a large first gradient make v shrink, so amsgrad's running max matters.
  const VD g = {3, 0.1, 0.1};
  check_values(run_scalar<optim::Adam>(optim::AdamOptions{.lr = 0.1, .betas = {0.9, 0.9}, .amsgrad = true}, g),
               {0.9000000003, 0.832288884, 0.7792376624});
  check_values(run_scalar<optim::Adam>(optim::AdamOptions{.lr = 0.1, .betas = {0.9, 0.9}}, g),
               {0.9000000003, 0.8286702339, 0.7698010979});
  // maximize is minimizing with the negated gradient.
  const VD neg = {-1, 2, -0.5};
  CHECK(run_scalar<optim::Adam>(optim::AdamOptions{.lr = 0.1, .maximize = true}, neg) ==
        run_scalar<optim::Adam>(optim::AdamOptions{.lr = 0.1}, kGrads));
}

TEST_CASE("Adam: float32 rounds like torch.optim's op-by-op sequence, across parallel chunks", "[optim]") {
  // 100k elements: several parallel_for chunks. Includes beta1 > 0.5 (lerp's other branch) and
  // amsgrad; every element must equal the float reference exactly.
  const int64_t n = 100003;
  for (const bool amsgrad : {false, true}) {
    for (const double beta1 : {0.9, 0.3}) {
      for (const bool decoupled : {false, true}) {
        INFO("amsgrad " << amsgrad << " beta1 " << beta1 << " decoupled " << decoupled);
        const VD x0 = wave(n, 1.5, 0.1);
        Tensor p = param(x0, DType::f32);
        std::unique_ptr<optim::Optimizer> opt;
        if (decoupled) {
          opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions{
              .lr = 0.01, .betas = {beta1, 0.99}, .weight_decay = 0.05, .amsgrad = amsgrad});
        } else {
          opt = std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{
              .lr = 0.01, .betas = {beta1, 0.99}, .weight_decay = 0.05, .amsgrad = amsgrad});
        }
        std::vector<AdamRef<float>> refs(static_cast<size_t>(n), AdamRef<float>{.lr = 0.01, .beta1 = beta1,
            .beta2 = 0.99, .weight_decay = 0.05, .amsgrad = amsgrad, .decoupled = decoupled});
        std::vector<float> expected(x0.begin(), x0.end());
        for (int step = 0; step < 4; ++step) {
          const VD g = wave(n, step % 2 ? 0.3 : 2.0, 0.5 * step);
          set_grad(p, g);
          opt->step();
          for (int64_t i = 0; i < n; ++i)
            expected[i] = refs[i].update(expected[i], static_cast<float>(g[i]));
        }
        const std::vector<float> got = p.to_vector<float>();
        int64_t mismatches = 0;
        for (int64_t i = 0; i < n; ++i) mismatches += got[i] != expected[i];
        CHECK(mismatches == 0);
      }
    }
  }
}

TEST_CASE("SGD: known values for plain, momentum, Nesterov, dampening and weight decay", "[optim]") {
  check_values(run_scalar<optim::SGD>(optim::SGDOptions{.lr = 0.1}, kGrads), {0.9, 1.1, 1.05}, 1e-15);
  check_values(run_scalar<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9}, kGrads), {0.9, 1.01, 1.059},
               1e-15);
  check_values(run_scalar<optim::SGD>(optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true}, kGrads),
               {0.81, 1.109, 1.1031}, 1e-15);
  check_values(run_scalar<optim::SGD>(
                   optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.1}, kGrads),
               {0.89, 0.88655, 0.85401225}, 1e-15);
  // The momentum buffer starts as a copy of the first gradient (no dampening on step 1).
  Tensor p = param({0, 0});
  optim::SGD opt(std::vector<Tensor>{p}, {.lr = 1, .momentum = 0.5, .dampening = 0.5});
  set_grad(p, {2, -4});
  opt.step();
  CHECK(p.to_vector<double>() == VD{-2, 4});
  CHECK(opt.state_dict().tensors.at(0).first == "state.0.momentum_buffer");
  CHECK(opt.state_dict().tensors.at(0).second.to_vector<double>() == VD{2, -4});
  set_grad(p, {2, -4});
  opt.step();  // buf = 0.5 * 2 + 0.5 * 2 = 2
  CHECK(p.to_vector<double>() == VD{-4, 8});
}

TEST_CASE("Optimizer: param groups have their own lr and weight decay", "[optim]") {
  Tensor a = param({1.0}), b = param({1.0}), c = param({1.0});
  optim::SGD opt({{.params = {a}}, {.params = {b, c}, .lr = 0.5, .weight_decay = 1.0}}, {.lr = 0.1});
  REQUIRE(opt.num_param_groups() == 2);
  CHECK(opt.num_parameters() == 3);
  CHECK(opt.get_lr(0) == 0.1);
  CHECK(opt.get_lr(1) == 0.5);
  CHECK(opt.get_weight_decay(0) == 0);
  CHECK(opt.get_weight_decay(1) == 1.0);
  for (Tensor* t : {&a, &b, &c}) set_grad(*t, {1});
  opt.step();
  CHECK(a.item() == 1.0 - 0.1);
  CHECK(b.item() == 1.0 - 0.5 * (1 + 1.0));
  opt.set_lr(0, 1.0);  // what a scheduler does
  a.set_grad(from_vector<double>({1}));
  b.set_grad(Tensor());
  c.set_grad(Tensor());
  opt.step();
  CHECK(a.item() == Approx(0.9 - 1.0));
  CHECK(b.item() == 0.0);  // no grad: untouched
  // Adam with groups: each group's lr scales its own step.
  Tensor x = param({0.0}), y = param({0.0});
  optim::Adam adam({{.params = {x}}, {.params = {y}, .lr = 0.01}}, {.lr = 0.1});
  set_grad(x, {1});
  set_grad(y, {1});
  adam.step();
  CHECK(x.item() == Approx(-0.1).epsilon(1e-7));
  CHECK(y.item() == Approx(-0.01).epsilon(1e-7));
  // add_param_group: new parameters with their own settings.
  Tensor z = param({0.0});
  adam.add_param_group({.params = {z}, .lr = 1.0});
  CHECK(adam.num_param_groups() == 3);
  CHECK_THROWS_AS(adam.add_param_group({.params = {x}}), Error);  // already optimized
}

TEST_CASE("Optimizer: zero_grad clears gradients and grad-less parameters are skipped", "[optim]") {
  Tensor a = param({1.0, 2.0}), b = param({3.0});
  optim::Adam opt(std::vector<Tensor>{a, b}, {.lr = 0.1});
  set_grad(a, {1, 1});
  opt.step();  // b has no grad: no state for it
  CHECK(b.item() == 3.0);
  const optim::OptimizerState s = opt.state_dict();
  CHECK(s.scalars.at("state.0.step") == 1);
  CHECK(s.scalars.count("state.1.step") == 0);
  CHECK(s.scalars.at("param_groups.0.lr") == 0.1);
  CHECK(s.scalars.at("param_groups.0.num_params") == 2);
  REQUIRE(s.tensors.size() == 2);
  CHECK(s.tensors[0].first == "state.0.exp_avg");
  CHECK(s.tensors[1].first == "state.0.exp_avg_sq");
  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!b.grad().defined());
  // A real backward after zero_grad starts from fresh gradients.
  (a * a).sum().backward();
  CHECK(a.grad().to_vector<double>() == VD{2 * a.to_vector<double>()[0], 2 * a.to_vector<double>()[1]});
  // step() runs under NoGradGuard: it records nothing and leaves grad mode as it was.
  opt.step();
  CHECK(grad_mode_enabled());
  CHECK(a.is_leaf());
}

TEST_CASE("Optimizer: non-contiguous parameters are updated through their view", "[optim]") {
  Tensor base = from_vector<double>(wave(6, 1, 0), {2, 3});
  Tensor p = base.t();  // (3, 2) view, strides (1, 3): a leaf that is not contiguous
  p.requires_grad_();
  REQUIRE(!p.is_contiguous());
  Tensor q = from_vector<double>(p.detach().contiguous().to_vector<double>(), {3, 2});
  q.requires_grad_();
  optim::Adam o1(std::vector<Tensor>{p}, {.lr = 0.1, .amsgrad = true});
  optim::Adam o2(std::vector<Tensor>{q}, {.lr = 0.1, .amsgrad = true});
  for (int s = 0; s < 3; ++s) {
    const Tensor g = from_vector<double>(wave(6, 1, s), {3, 2});
    p.set_grad(g);
    q.set_grad(g);
    o1.step();
    o2.step();
  }
  CHECK(p.contiguous().to_vector<double>() == q.to_vector<double>());
  CHECK(base.t().contiguous().to_vector<double>() == q.to_vector<double>());  // the base saw the writes
}

TEST_CASE("Optimizer: state_dict / load_state_dict resume bit-identically", "[optim]") {
  // Two groups, f32, several elements; parameter c gets no gradient until step 5, so the saved
  // state has a parameter without state.
  auto make_params = [] {
    return std::vector<Tensor>{param(wave(7, 1, 0), DType::f32), param(wave(5, 2, 1), DType::f32),
                               param(wave(3, 1, 2), DType::f32)};
  };
  auto grads_for = [](int step, size_t i, int64_t n) { return wave(n, 1 + 0.3 * step, 0.7 * step + i); };
  auto run = [&](optim::Optimizer& opt, std::vector<Tensor>& ps, int from, int to) {
    for (int s = from; s < to; ++s) {
      for (size_t i = 0; i < ps.size(); ++i) {
        if (i == 2 && s < 4) continue;
        set_grad(ps[i], grads_for(s, i, ps[i].numel()));
      }
      opt.step();
      opt.zero_grad();
    }
  };
  auto check_resume = [&](auto make_opt) {
    std::vector<Tensor> ps = make_params();
    auto opt = make_opt(ps);
    run(*opt, ps, 0, 6);  // uninterrupted

    std::vector<Tensor> qs = make_params();
    auto first = make_opt(qs);
    run(*first, qs, 0, 3);
    const optim::OptimizerState saved = first->state_dict();
    std::vector<VD> snapshot;
    for (const Tensor& q : qs) snapshot.push_back(q.to_vector<double>());
    run(*first, qs, 3, 4);  // the saved state is a copy: later steps do not change it
    std::vector<Tensor> rs;  // the parameters as they were when the state was saved
    for (const VD& v : snapshot) rs.push_back(param(v, DType::f32));
    auto second = make_opt(rs);
    second->load_state_dict(saved);
    run(*second, rs, 3, 6);
    for (size_t i = 0; i < ps.size(); ++i) CHECK(ps[i].to_vector<float>() == rs[i].to_vector<float>());
    CHECK(second->get_lr(1) == opt->get_lr(1));
  };
  SECTION("Adam with amsgrad") {
    check_resume([](std::vector<Tensor>& ps) {
      return std::make_unique<optim::Adam>(
          std::vector<optim::ParamGroup>{{.params = {ps[0], ps[1]}}, {.params = {ps[2]}, .lr = 0.05}},
          optim::AdamOptions{.lr = 0.01, .weight_decay = 0.01, .amsgrad = true});
    });
  }
  SECTION("AdamW") {
    check_resume([](std::vector<Tensor>& ps) {
      return std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup>{{.params = {ps[0]}}, {.params = {ps[1], ps[2]}, .weight_decay = 0.2}},
          optim::AdamWOptions{.lr = 0.01});
    });
  }
  SECTION("SGD with Nesterov momentum") {
    check_resume([](std::vector<Tensor>& ps) {
      return std::make_unique<optim::SGD>(
          std::vector<optim::ParamGroup>{{.params = {ps[0], ps[1]}}, {.params = {ps[2]}, .lr = 0.2}},
          optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
    });
  }
}

TEST_CASE("Optimizer: load_state_dict rejects mismatched state and changes nothing", "[optim]") {
  Tensor a = param({1, 2, 3}), b = param({4});
  optim::Adam opt(std::vector<Tensor>{a, b}, {.lr = 0.1});
  set_grad(a, {1, 1, 1});
  set_grad(b, {1});
  opt.step();
  const optim::OptimizerState good = opt.state_dict();

  SECTION("a state tensor of the wrong shape") {
    Tensor c = param({1, 2}), d = param({4});
    optim::Adam other(std::vector<Tensor>{c, d});
    CHECK_THROWS_WITH(other.load_state_dict(good),
                      Catch::Contains("state.0.exp_avg has shape (3,) but parameter 0 has shape (2,)"));
    CHECK(other.state_dict().tensors.empty());  // unchanged
    CHECK(other.get_lr(0) == 1e-3);
  }
  SECTION("a different number of parameters or groups") {
    Tensor c = param({1, 2, 3});
    optim::Adam fewer(std::vector<Tensor>{c});
    CHECK_THROWS_WITH(fewer.load_state_dict(good), Catch::Contains("has 2 parameters") &&
                                                       Catch::Contains("has 1"));
    Tensor e = param({1, 2, 3}), f = param({4});
    optim::Adam split({{.params = {e}}, {.params = {f}}});
    CHECK_THROWS_WITH(split.load_state_dict(good), Catch::Contains("param group"));
  }
  SECTION("state from a different optimizer or configuration") {
    Tensor c = param({1, 2, 3}), d = param({4});
    optim::Adam ams(std::vector<Tensor>{c, d}, {.amsgrad = true});
    CHECK_THROWS_WITH(ams.load_state_dict(good), Catch::Contains("lacks max_exp_avg_sq"));
    optim::SGD sgd(std::vector<Tensor>{c, d}, {.momentum = 0.9});
    CHECK_THROWS_WITH(sgd.load_state_dict(good), Catch::Contains("unexpected exp_avg"));
  }
  SECTION("unknown keys") {
    optim::OptimizerState bad = good;
    bad.scalars["param_groups.0.momentum"] = 0.9;
    CHECK_THROWS_WITH(opt.load_state_dict(bad), Catch::Contains("unexpected key param_groups.0.momentum"));
    bad = good;
    bad.tensors.emplace_back("state.7.exp_avg", zeros({1}, {.dtype = DType::f64}));
    CHECK_THROWS_WITH(opt.load_state_dict(bad), Catch::Contains("state.7.exp_avg"));
  }
  SECTION("a good state loads, converting dtype") {
    Tensor c = param({1, 2, 3}, DType::f32), d = param({4}, DType::f32);
    optim::Adam other(std::vector<Tensor>{c, d});
    other.load_state_dict(good);
    CHECK(other.get_lr(0) == 0.1);
    CHECK(other.state_dict().tensors[0].second.dtype() == DType::f32);
  }
}

TEST_CASE("Optimizer: invalid arguments throw ember::Error", "[optim]") {
  Tensor p = param({1});
  const std::vector<Tensor> ps{p};
  CHECK_THROWS_WITH(optim::Adam(ps, {.lr = -1}), Catch::Contains("invalid learning rate -1"));
  CHECK_THROWS_WITH(optim::Adam(ps, {.betas = {1.0, 0.999}}), Catch::Contains("beta parameter at index 0"));
  CHECK_THROWS_WITH(optim::AdamW(ps, {.betas = {0.9, -0.1}}), Catch::Contains("beta parameter at index 1"));
  CHECK_THROWS_WITH(optim::Adam(ps, {.eps = -1e-8}), Catch::Contains("epsilon"));
  CHECK_THROWS_WITH(optim::Adam(ps, {.weight_decay = -1}), Catch::Contains("weight_decay"));
  CHECK_THROWS_WITH(optim::SGD(ps, {.lr = -0.1}), Catch::Contains("invalid learning rate"));
  CHECK_THROWS_WITH(optim::SGD(ps, {.momentum = -0.5}), Catch::Contains("momentum"));
  CHECK_THROWS_WITH(optim::SGD(ps, {.nesterov = true}), Catch::Contains("Nesterov momentum requires"));
  CHECK_THROWS_WITH(optim::SGD(ps, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                    Catch::Contains("zero dampening"));
  CHECK_THROWS_WITH(optim::SGD(std::vector<Tensor>{}), Catch::Contains("empty parameter list"));
  CHECK_THROWS_WITH(optim::SGD(std::vector<Tensor>{p, p}), Catch::Contains("more than once"));
  CHECK_THROWS_WITH(optim::SGD(std::vector<Tensor>{p * 2.0}), Catch::Contains("non-leaf"));
  CHECK_THROWS_WITH(optim::SGD(std::vector<Tensor>{zeros({2}, {.dtype = DType::i64})}),
                    Catch::Contains("float32 or float64"));
  CHECK_THROWS_WITH(optim::Adam({{.params = {p}, .lr = -0.5}}), Catch::Contains("param group 0"));
  optim::SGD ok(ps);
  CHECK_THROWS_AS(ok.get_lr(1), Error);
}

TEST_CASE("Adam minimizes (x - 3)^2", "[optim]") {
  Tensor x = param({0.0});
  optim::Adam opt(std::vector<Tensor>{x}, {.lr = 0.1});
  optim::StepLR sched(opt, {.step_size = 300, .gamma = 0.1});
  for (int i = 0; i < 1000; ++i) {
    opt.zero_grad();
    Tensor d = x - 3.0;
    (d * d).sum().backward();
    opt.step();
    sched.step();
  }
  CHECK(std::abs(x.item() - 3.0) < 1e-3);
}

TEST_CASE("clip_grad_norm_: known values for the 2-norm and the inf-norm", "[optim]") {
  Tensor a = param({0, 0}), b = param({0}), c = param({0});
  set_grad(a, {3, 4});
  set_grad(b, {12});  // total 2-norm: sqrt(9 + 16 + 144) = 13; c has no grad (ignored)
  CHECK(optim::clip_grad_norm_({a, b, c}, 26.0) == 13.0);  // below max_norm: unchanged
  CHECK(a.grad().to_vector<double>() == VD{3, 4});
  const double total = optim::clip_grad_norm_({a, b, c}, 6.5);
  CHECK(total == 13.0);
  const double coef = (1.0 / (13.0 + 1e-6)) * 6.5;  // torch: max_norm / (total + 1e-6)
  CHECK(a.grad().to_vector<double>() == VD{3 * coef, 4 * coef});
  CHECK(b.grad().item() == 12 * coef);
  // inf-norm: the largest |g|.
  set_grad(a, {3, -20});
  set_grad(b, {12});
  CHECK(optim::clip_grad_norm_({a, b}, 10.0, INFINITY) == 20.0);
  CHECK(a.grad().to_vector<double>()[1] == Approx(-10.0).epsilon(1e-6));
  // 1-norm, and a float32 gradient whose norm and coefficient are float32.
  Tensor f = param({0, 0, 0}, DType::f32);
  f.set_grad(from_vector<float>({1.0f, -2.0f, 2.0f}));
  CHECK(optim::clip_grad_norm_({f}, 100.0, 1.0) == 5.0);
  CHECK(optim::clip_grad_norm_({f}, 1.0) == 3.0);
  const float fcoef = (1.0f / (3.0f + static_cast<float>(1e-6))) * 1.0f;
  CHECK(f.grad().to_vector<float>() == std::vector<float>{fcoef, -2 * fcoef, 2 * fcoef});
  // Nothing to clip: 0. Non-finite with error_if_nonfinite: error, grads untouched.
  CHECK(optim::clip_grad_norm_({c}, 1.0) == 0.0);
  set_grad(b, {NAN});
  CHECK_THROWS_WITH(optim::clip_grad_norm_({b}, 1.0, 2.0, true), Catch::Contains("non-finite"));
  CHECK(std::isnan(b.grad().item()));
  CHECK_THROWS_AS(optim::clip_grad_norm_({a}, 1.0, -1.0), Error);
  // A large gradient exercises the blocked, parallel sum.
  Tensor big = param(VD(100000, 0.0));
  set_grad(big, VD(100000, 0.5));
  CHECK(optim::clip_grad_norm_({big}, 1.0) == Approx(0.5 * std::sqrt(100000.0)).epsilon(1e-14));
}

TEST_CASE("clip_grad_value_: clamps each gradient element", "[optim]") {
  Tensor a = param({0, 0, 0, 0});
  set_grad(a, {-3, -0.5, 0.25, 7});
  optim::clip_grad_value_({a}, 1.0);
  CHECK(a.grad().to_vector<double>() == VD{-1, -0.5, 0.25, 1});
  CHECK_THROWS_AS(optim::clip_grad_value_({a}, -1.0), Error);
}

TEST_CASE("Optimizer: a channels-last parameter steps in its own layout, bit for bit as NCHW, without copies",
          "[optim][memory_format]") {
  // Note [Updates in the parameter's layout]: the gradient arrives channels-last (Note [A leaf's
  // gradient]), the state is created channels-last, and the kernel updates the weight in place.
  constexpr MemoryFormat kCL = MemoryFormat::channels_last;
  const auto weight = [](bool cl) {
    Tensor w = from_vector<double>(wave(6 * 4 * 3 * 3, 0.5, 0.1), {.dtype = DType::f32}).view({6, 4, 3, 3});
    if (cl) w = w.contiguous(kCL);
    return w.requires_grad_(true);
  };
  const Tensor x = from_vector<double>(wave(2 * 4 * 5 * 5, 1, 0.3), {.dtype = DType::f32}).view({2, 4, 5, 5});
  const auto run = [&](bool cl, auto make_opt) {
    Tensor w = weight(cl);
    auto opt = make_opt(w);
    const auto allocations = [] { return cpu_allocator().stats().allocation_count; };
    int64_t step_allocations = 0;
    for (int s = 0; s < 4; ++s) {
      opt->zero_grad();
      const Tensor xs = cl ? x.contiguous(kCL) : x;
      const Tensor y = conv2d(mul(xs, 1.0 + 0.25 * s), w, Tensor(), {.padding = {1, 1}});
      sum(mul(y, y)).backward();
      CHECK(w.grad().suggest_memory_format() == (cl ? kCL : MemoryFormat::contiguous));
      const int64_t before = allocations();
      opt->step();
      if (s > 0) step_allocations += allocations() - before;  // the first step creates the state
    }
    CHECK(w.suggest_memory_format() == (cl ? kCL : MemoryFormat::contiguous));
    for (const auto& [name, t] : opt->state_dict().tensors)
      CHECK(t.suggest_memory_format() == (cl ? kCL : MemoryFormat::contiguous));
    CHECK(step_allocations == 0);
    return w.contiguous().to_vector<float>();
  };
  const auto check = [&](auto make_opt) { CHECK(run(true, make_opt) == run(false, make_opt)); };
  SECTION("Adam with amsgrad") {
    check([](Tensor& w) { return std::make_unique<optim::Adam>(std::vector<Tensor>{w}, optim::AdamOptions{.lr = 0.01, .amsgrad = true}); });
  }
  SECTION("AdamW") {
    check([](Tensor& w) { return std::make_unique<optim::AdamW>(std::vector<Tensor>{w}, optim::AdamWOptions{.lr = 0.01}); });
  }
  SECTION("SGD with Nesterov momentum") {
    check([](Tensor& w) {
      return std::make_unique<optim::SGD>(std::vector<Tensor>{w},
                                          optim::SGDOptions{.lr = 0.01, .momentum = 0.9, .nesterov = true});
    });
  }
  SECTION("state saved from NCHW loads into a channels-last parameter") {
    Tensor a = weight(false), b = weight(true);
    optim::Adam oa(std::vector<Tensor>{a}, {.lr = 0.01}), ob(std::vector<Tensor>{b}, {.lr = 0.01});
    const Tensor g = from_vector<double>(wave(a.numel(), 1, 2), {.dtype = DType::f32}).view(a.shape());
    a.set_grad(g);
    oa.step();
    {
      NoGradGuard no_grad;
      b.copy_(a);
    }
    ob.load_state_dict(oa.state_dict());
    for (const auto& [name, t] : ob.state_dict().tensors) CHECK(t.suggest_memory_format() == kCL);
    a.set_grad(mul(g, -0.5));
    b.set_grad(mul(g, -0.5));
    oa.step();
    ob.step();
    CHECK(b.contiguous().to_vector<float>() == a.to_vector<float>());
  }
}
