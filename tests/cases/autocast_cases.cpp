// The autocast table and its two checks (tests/autocast_table.h; Note [Autocast] in
// core/autocast.h).

#include "../autocast_table.h"

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>

#include <ember/core/allocator.h>
#include <ember/core/autocast.h>

namespace ember::testing {

namespace {

using P = Precision;

// Labels 0..classes-1, repeating, for n samples, on `device`.
Tensor labels(int64_t n, int64_t classes, Device device) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i % classes;
  return from_vector<int64_t>(v).to(device);
}

// Training-mode batch norm with fresh float32 running statistics (a module's buffers).
Tensor batch_norm_f32_buffers(const Tensor& x, const Tensor& w, const Tensor& b, Device device) {
  const int64_t c = x.size(1);
  Tensor rm = zeros({c}, {.device = device}), rv = ones({c}, {.device = device});
  return batch_norm(x, rm, rv, w, b, /*training=*/true);
}

std::vector<AutocastCase> make_cases() {
  using In = std::vector<AutocastInput>;
  const Shape image{2, 3, 6, 6}, act{2, 4, 6, 6}, logits{4, 5};
  std::vector<AutocastCase> c;
  // Lower precision: f32 in, the region's dtype out.
  c.push_back({"conv2d", In{{image}, {{4, 3, 3, 3}}, {{4}}},
               [](const auto& t, Device) { return conv2d(t[0], t[1], t[2], {.padding = {1, 1}}); }, P::region});
  c.push_back({"conv2d(region input, f32 weight)", In{{act, P::region}, {{4, 4, 3, 3}}},
               [](const auto& t, Device) { return conv2d(t[0], t[1], Tensor(), {.stride = {2, 2}}); }, P::region});
  c.push_back({"linear", In{{{4, 8}}, {{5, 8}}, {{5}}},
               [](const auto& t, Device) { return linear(t[0], t[1], t[2]); }, P::region});
  c.push_back({"linear(region input)", In{{{4, 8}, P::region}, {{5, 8}}},
               [](const auto& t, Device) { return linear(t[0], t[1]); }, P::region});
  c.push_back({"mm", In{{{4, 8}}, {{8, 5}}}, [](const auto& t, Device) { return mm(t[0], t[1]); }, P::region});
  c.push_back({"bmm", In{{{2, 3, 4}}, {{2, 4, 5}}}, [](const auto& t, Device) { return bmm(t[0], t[1]); },
               P::region});
  c.push_back({"matmul", In{{{2, 3, 4}}, {{4, 5}}}, [](const auto& t, Device) { return matmul(t[0], t[1]); },
               P::region});
  // f32: 16-bit in, f32 out (batch norm: f32 statistics, the input's dtype out).
  c.push_back({"batch_norm(region input)", In{{act, P::region}, {{4}}, {{4}}},
               [](const auto& t, Device d) { return batch_norm_f32_buffers(t[0], t[1], t[2], d); }, P::region});
  c.push_back({"batch_norm(f32 input)", In{{act}, {{4}}, {{4}}},
               [](const auto& t, Device d) { return batch_norm_f32_buffers(t[0], t[1], t[2], d); }, P::f32});
  c.push_back({"softmax", In{{logits, P::region}}, [](const auto& t, Device) { return softmax(t[0], 1); }, P::f32});
  c.push_back({"log_softmax", In{{logits, P::region}}, [](const auto& t, Device) { return log_softmax(t[0], 1); },
               P::f32});
  c.push_back({"cross_entropy", In{{logits, P::region}},
               [](const auto& t, Device d) { return cross_entropy(t[0], labels(4, 5, d), {.label_smoothing = 0.1}); },
               P::f32});
  c.push_back({"cross_entropy(probabilities)", In{{logits, P::region}, {logits, P::f32, 0.0, 1.0}},
               [](const auto& t, Device) { return cross_entropy(t[0], t[1]); }, P::f32});
  c.push_back({"nll_loss", In{{logits, P::region, -3.0, -0.1}},
               [](const auto& t, Device d) { return nll_loss(t[0], labels(4, 5, d)); }, P::f32});
  c.push_back({"mse_loss", In{{logits, P::region}, {logits}},
               [](const auto& t, Device) { return mse_loss(t[0], t[1]); }, P::f32});
  c.push_back({"sum", In{{act, P::region}}, [](const auto& t, Device) { return sum(t[0], {0, 2, 3}); }, P::f32});
  c.push_back({"mean", In{{act, P::region}}, [](const auto& t, Device) { return mean(t[0]); }, P::f32});
  c.push_back({"exp", In{{logits, P::region}}, [](const auto& t, Device) { return exp(t[0]); }, P::f32});
  c.push_back({"log", In{{logits, P::region, 0.1, 2.0}}, [](const auto& t, Device) { return log(t[0]); }, P::f32});
  c.push_back({"pow(region, 2)", In{{logits, P::region}}, [](const auto& t, Device) { return pow(t[0], 2.0); },
               P::f32});
  c.push_back({"pow(region, region)", In{{logits, P::region, 0.1, 2.0}, {logits, P::region}},
               [](const auto& t, Device) { return pow(t[0], t[1]); }, P::f32});
  c.push_back({"rsqrt", In{{logits, P::region, 0.1, 2.0}}, [](const auto& t, Device) { return rsqrt(t[0]); },
               P::f32});
  // Promote: the widest input dtype (built into the elementwise ops, cat and where; autocast's
  // own cast for scatter_add).
  c.push_back({"add(region, region)", In{{act, P::region}, {act, P::region}},
               [](const auto& t, Device) { return add(t[0], t[1]); }, P::region});
  c.push_back({"add(region, f32)", In{{act, P::region}, {{4, 1, 1}}},
               [](const auto& t, Device) { return add(t[0], t[1]); }, P::f32});
  c.push_back({"mul(region, f32)", In{{act, P::region}, {act}}, [](const auto& t, Device) { return mul(t[0], t[1]); },
               P::f32});
  c.push_back({"where(cond, region, f32)", In{{logits, P::region}, {logits}},
               [](const auto& t, Device) { return where(gt(t[0], 0.0), t[0], t[1]); }, P::f32});
  c.push_back({"cat(region, f32)", In{{logits, P::region}, {logits}},
               [](const auto& t, Device) { return cat({t[0], t[1]}, 1); }, P::f32});
  c.push_back({"scatter_add(f32, region)", In{{{3, 5}}, {{2, 5}, P::region}},
               [](const auto& t, Device d) {
                 const Tensor index = from_vector<int64_t>({0, 2, 1, 0, 2, 1, 1, 0, 2, 2}, {2, 5}).to(d);
                 return scatter_add(t[0], 0, index, t[1]);
               },
               P::f32});
  // The rest: the input's dtype.
  c.push_back({"relu", In{{act, P::region}}, [](const auto& t, Device) { return relu(t[0]); }, P::region});
  c.push_back({"sigmoid", In{{act, P::region}}, [](const auto& t, Device) { return sigmoid(t[0]); }, P::region});
  c.push_back({"max_pool2d", In{{act, P::region}},
               [](const auto& t, Device) { return max_pool2d(t[0], {.kernel = {2, 2}}); }, P::region});
  c.push_back({"avg_pool2d", In{{act, P::region}},
               [](const auto& t, Device) { return avg_pool2d(t[0], {.kernel = {2, 2}}); }, P::region});
  c.push_back({"adaptive_avg_pool2d", In{{act, P::region}},
               [](const auto& t, Device) { return adaptive_avg_pool2d(t[0], {1, 1}); }, P::region});
  c.push_back({"dropout", In{{act, P::region}},
               [](const auto& t, Device) {
                 Generator g(7);  // the same mask in the autocast run and the float64 reference
                 return dropout(t[0], 0.5, /*training=*/true, g);
               },
               P::region});
  c.push_back({"flatten", In{{act, P::region}}, [](const auto& t, Device) { return t[0].flatten(1); }, P::region});
  c.push_back({"var", In{{act, P::region}}, [](const auto& t, Device) { return var(t[0], {0, 2, 3}); }, P::region});
  c.push_back({"amax", In{{act, P::region}}, [](const auto& t, Device) { return amax(t[0], {1}); }, P::region});
  return c;
}

// The inputs of case `i` on `device`: float32 values from a seeded generator, rounded to the
// region's dtype where the table says so.
std::vector<Tensor> case_inputs(const AutocastCase& c, size_t i, Device device, DType region) {
  Generator gen(1000 + i);
  std::vector<Tensor> in;
  for (const AutocastInput& spec : c.inputs) {
    Tensor t = rand(spec.shape, {}, gen);
    t = add(mul(t, spec.hi - spec.lo), spec.lo);
    if (spec.dtype == P::region) t = t.to(region);
    in.push_back(t.to(device));
  }
  return in;
}

DType dtype_of(Precision p, DType region) { return p == P::region ? region : DType::f32; }

// max |a - b| / max(1, max |b|): the error of a against the reference b, scaled to b's size.
double scaled_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> y = b.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  REQUIRE(x.size() == y.size());
  double err = 0, scale = 1;
  for (size_t k = 0; k < x.size(); ++k) {
    err = std::max(err, std::abs(x[k] - y[k]));
    scale = std::max(scale, std::abs(y[k]));
  }
  return err / scale;
}

std::string name_of(Device d) { return d.str(); }

// Half the unit roundoff of a 16-bit dtype, the unit the tolerances below count in: a quarter of
// the distance from 1 to the next value (bf16 keeps 8 significant bits: 2^-7 / 4; f16 11: 2^-10 / 4).
double unit_roundoff(DType region) { return region == DType::bf16 ? 0x1p-9 : 0x1p-12; }

}  // namespace

const std::vector<AutocastCase>& autocast_cases() {
  static const std::vector<AutocastCase> cases = make_cases();
  return cases;
}

void check_autocast_table(Device device, DType region) {
  // A 16-bit result is rounded once, and its inputs were: a few unit roundoffs (measured on the
  // CPU: at most 2.1 for bf16, 2.5 for f16, both in the products).
  const double tol = 6 * unit_roundoff(region);
  const auto& cases = autocast_cases();
  for (size_t i = 0; i < cases.size(); ++i) {
    const AutocastCase& c = cases[i];
    INFO(c.op << " on " << name_of(device) << " under autocast " << region);
    const std::vector<Tensor> in = case_inputs(c, i, device, region);
    Tensor out;
    {
      AutocastGuard amp(device.type, region);
      out = c.fn(in, device);
    }
    CHECK(out.dtype() == dtype_of(c.out, region));
    CHECK(out.device() == device);
    // The reference: the same values in float64, autocast off.
    std::vector<Tensor> in64;
    for (const Tensor& t : in) in64.push_back(t.to(DType::f64));
    const Tensor ref = c.fn(in64, device);
    REQUIRE(ref.dtype() == DType::f64);
    REQUIRE(out.shape() == ref.shape());
    const double err = scaled_error(out, ref);
    INFO("scaled error " << err << ", tolerance " << tol);
    CHECK(err <= tol);
  }
}

namespace {

struct SmallCnn {
  Tensor conv_w, bn_w, bn_b, fc_w, fc_b;  // no conv bias: batch norm would cancel it

  std::vector<Tensor> parameters() const { return {conv_w, bn_w, bn_b, fc_w, fc_b}; }

  // x: (N, 1, 8, 8) -> (N, 3) logits.
  Tensor forward(const Tensor& x) const {
    const int64_t c = conv_w.size(0);
    Tensor rm = zeros({c}, {.device = x.device()}), rv = ones({c}, {.device = x.device()});
    Tensor h = conv2d(x, conv_w, Tensor(), {.padding = {1, 1}});
    h = relu(batch_norm(h, rm, rv, bn_w, bn_b, /*training=*/true));
    h = max_pool2d(h, {.kernel = {2, 2}});
    return linear(h.flatten(1), fc_w, fc_b);
  }
};

SmallCnn make_cnn(Device device) {
  Generator gen(42);
  auto param = [&](const Shape& s, double scale) {
    Tensor t = mul(sub(rand(s, {}, gen), 0.5), 2 * scale).to(device);
    t.requires_grad_();
    return t;
  };
  return {param({4, 1, 3, 3}, 0.5), param({4}, 1.0), param({4}, 0.1), param({3, 64}, 0.2), param({3}, 0.1)};
}

// The relative distance ||a - b|| / ||b|| of two gradients.
double relative_distance(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> y = b.to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  double d = 0, n = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    d += (x[k] - y[k]) * (x[k] - y[k]);
    n += y[k] * y[k];
  }
  return std::sqrt(d) / std::sqrt(n);
}

}  // namespace

void check_autocast_gradients(Device device, DType region) {
  Generator gen(3);
  const Tensor x = mul(sub(rand({6, 1, 8, 8}, {}, gen), 0.5), 2.0).to(device);
  const Tensor y = labels(6, 3, device);

  const SmallCnn f32_model = make_cnn(device);
  cross_entropy(f32_model.forward(x), y).backward();

  const SmallCnn model = make_cnn(device);  // the same values, new leaves
  Tensor logits, loss;
  {
    AutocastGuard amp(device.type, region);
    logits = model.forward(x);
    loss = cross_entropy(logits, y);
  }
  CHECK(logits.dtype() == region);
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  // Rounded operands in the forward and backward products: within 20 unit roundoffs of float32's
  // gradients (measured on the CPU: 6.4 for bf16, 4.6 for f16).
  const double tol = 20 * unit_roundoff(region);
  const std::vector<Tensor> p = model.parameters(), p32 = f32_model.parameters();
  const char* names[] = {"conv.weight", "bn.weight", "bn.bias", "fc.weight", "fc.bias"};
  for (size_t k = 0; k < p.size(); ++k) {
    INFO(names[k] << " on " << name_of(device) << " under autocast " << region);
    REQUIRE(p[k].grad().defined());
    CHECK(p[k].grad().dtype() == DType::f32);
    CHECK(p[k].grad().device() == device);
    const double d = relative_distance(p[k].grad(), p32[k].grad());
    INFO("relative distance to the float32 gradient " << d << ", tolerance " << tol);
    CHECK(d <= tol);
    CHECK(d > 0);  // the region really computed in 16 bits
  }
}

void check_autocast_batch_norm(Device device, DType region) {
  INFO("batch_norm on " << name_of(device) << " under autocast " << region);
  Generator gen(11);
  const Shape shape{4, 3, 32, 32};
  const int64_t numel = 4 * 3 * 32 * 32;
  Tensor x = mul(sub(rand(shape, {}, gen), 0.3), 4.0).to(region).to(device);  // off-centre: mean != 0
  x.requires_grad_();
  const Tensor gy = sub(rand(shape, {}, gen), 0.5).to(region).to(device);
  Tensor w = add(rand({3}, {}, gen), 0.5).to(device), b = sub(rand({3}, {}, gen), 0.5).to(device);
  w.requires_grad_();
  b.requires_grad_();
  Tensor rm = zeros({3}, {.device = device}), rv = ones({3}, {.device = device});

  Allocator& alloc = allocator_for(device);
  const int64_t before = alloc.stats().bytes_in_use;
  Tensor y;
  {
    AutocastGuard amp(device.type, region);
    y = batch_norm(x, rm, rv, w, b, /*training=*/true);
  }
  const int64_t held = alloc.stats().bytes_in_use - before;
  REQUIRE(y.dtype() == region);
  // y (2 bytes an element) and a few per-channel vectors; a float32 copy of x would add 4 bytes an
  // element.
  INFO("bytes held after the forward pass: " << held << " for " << numel << " elements");
  CHECK(held >= 2 * numel);
  CHECK(held < 2 * numel + 16384);
  y.backward(gy);
  REQUIRE(x.grad().dtype() == region);
  REQUIRE(w.grad().dtype() == DType::f32);
  REQUIRE(b.grad().dtype() == DType::f32);
  CHECK(rm.dtype() == DType::f32);

  // The float64 reference on the same (16-bit) values, without autocast.
  auto f64 = [](const Tensor& t) { return t.detach().to(Device::cpu()).to(DType::f64); };
  Tensor x64 = f64(x), w64 = f64(w), b64 = f64(b);
  x64.requires_grad_();
  w64.requires_grad_();
  b64.requires_grad_();
  Tensor rm64 = zeros({3}, {.dtype = DType::f64}), rv64 = ones({3}, {.dtype = DType::f64});
  const Tensor y64 = batch_norm(x64, rm64, rv64, w64, b64, /*training=*/true);
  y64.backward(f64(gy));

  auto require_close = [](const char* what, const Tensor& got, const Tensor& want, double rtol) {
    const std::vector<double> g = got.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
    const std::vector<double> r = want.detach().contiguous().to_vector<double>();
    REQUIRE(g.size() == r.size());
    for (size_t k = 0; k < g.size(); ++k) {
      INFO(what << "[" << k << "]: got " << g[k] << ", want " << r[k]);
      REQUIRE(std::fabs(g[k] - r[k]) <= rtol * std::max(1.0, std::fabs(r[k])));
    }
  };
  // One rounding to 16 bits (at most 2 u relative, u as defined above) of a float32 result, whose
  // own error is ~1e-6.
  const double u = unit_roundoff(region);
  require_close("y", y, y64, 2.5 * u);
  require_close("grad x", x.grad(), x64.grad(), 2.5 * u);
  // Float32 sums of 4096 terms: within 2e-5 of float64, where a 16-bit rounding would be 2^-11
  // (f16) or 2^-8 (bf16) of the value.
  require_close("grad weight", w.grad(), w64.grad(), 2e-5);
  require_close("grad bias", b.grad(), b64.grad(), 2e-5);
  require_close("running_mean", rm, rm64, 2e-6);
  require_close("running_var", rv, rv64, 2e-6);
}

}  // namespace ember::testing
