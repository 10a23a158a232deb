// Gradcheck cases for elementwise ops.

#include "../op_cases.h"

namespace ember::testing {

namespace {
using V = std::vector<Tensor>;

// Moves values at least `gap` away from `point` (for ops with a kink there).
std::function<void(V&)> away_from(double point, double gap) {
  return [=](V& in) {
    for (Tensor& t : in) {
      double* p = t.data_ptr<double>();
      for (int64_t i = 0; i < t.numel(); ++i)
        if (std::abs(p[i] - point) < gap) p[i] = point + (p[i] < point ? -gap : gap);
    }
  };
}

// Makes inputs 0 and 1 differ by at least `gap` everywhere (ties of maximum/minimum).
void separate_pair(V& in) {
  Tensor a = in[0], b = in[1].expand(in[0].shape()).contiguous();
  double* pa = a.data_ptr<double>();
  const double* pb = b.data_ptr<double>();
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::abs(pa[i] - pb[i]) < 0.1) pa[i] = pb[i] + 0.1;
}
}  // namespace

void add_elementwise_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "add/same", .inputs = {{3, 4}, {3, 4}}, .fn = [](const V& x) { return add(x[0], x[1]); }});
  c.push_back({.name = "add/broadcast", .inputs = {{2, 3, 4}, {3, 1}}, .fn = [](const V& x) { return add(x[0], x[1], 2.5); }});
  c.push_back({.name = "sub/broadcast", .inputs = {{4}, {3, 4}}, .fn = [](const V& x) { return sub(x[0], x[1]); }});
  c.push_back({.name = "mul/broadcast", .inputs = {{2, 1, 4}, {3, 1}}, .fn = [](const V& x) { return mul(x[0], x[1]); }});
  c.push_back({.name = "div/broadcast", .inputs = {{3, 4}, {4}}, .fn = [](const V& x) { return div(x[0], x[1]); },
               .lo = 0.5, .hi = 2.0});
  c.push_back({.name = "pow/tensor", .inputs = {{3, 4}, {3, 4}}, .fn = [](const V& x) { return pow(x[0], x[1]); },
               .lo = 0.5, .hi = 2.0});
  c.push_back({.name = "maximum/broadcast", .inputs = {{3, 4}, {4}}, .fn = [](const V& x) { return maximum(x[0], x[1]); },
               .prepare = separate_pair});
  c.push_back({.name = "minimum/broadcast", .inputs = {{3, 4}, {4}}, .fn = [](const V& x) { return minimum(x[0], x[1]); },
               .prepare = separate_pair});
  c.push_back({.name = "scalar/add_sub_mul_div", .inputs = {{3, 4}},
               .fn = [](const V& x) { return div(mul(sub(add(x[0], 1.5), 0.25), 3.0), 2.0); }});
  c.push_back({.name = "scalar/rsub_rdiv", .inputs = {{3, 4}}, .fn = [](const V& x) { return (2.0 - x[0]) + 1.0 / x[0]; },
               .lo = 0.5, .hi = 2.0});
  c.push_back({.name = "pow/scalar", .inputs = {{3, 4}}, .fn = [](const V& x) { return pow(x[0], 2.5); }, .lo = 0.2, .hi = 2.0});
  c.push_back({.name = "pow/square", .inputs = {{3, 4}}, .fn = [](const V& x) { return pow(x[0], 2.0); }});
  c.push_back({.name = "neg", .inputs = {{3, 4}}, .fn = [](const V& x) { return neg(x[0]); }});
  c.push_back({.name = "exp", .inputs = {{3, 4}}, .fn = [](const V& x) { return exp(x[0]); }});
  c.push_back({.name = "log", .inputs = {{3, 4}}, .fn = [](const V& x) { return log(x[0]); }, .lo = 0.2, .hi = 3.0});
  c.push_back({.name = "sqrt", .inputs = {{3, 4}}, .fn = [](const V& x) { return sqrt(x[0]); }, .lo = 0.2, .hi = 3.0});
  c.push_back({.name = "rsqrt", .inputs = {{3, 4}}, .fn = [](const V& x) { return rsqrt(x[0]); }, .lo = 0.2, .hi = 3.0});
  c.push_back({.name = "abs", .inputs = {{3, 4}}, .fn = [](const V& x) { return abs(x[0]); }, .prepare = away_from(0, 0.05)});
  c.push_back({.name = "relu", .inputs = {{3, 4}}, .fn = [](const V& x) { return relu(x[0]); }, .prepare = away_from(0, 0.05)});
  c.push_back({.name = "leaky_relu", .inputs = {{3, 4}}, .fn = [](const V& x) { return leaky_relu(x[0], 0.2); },
               .prepare = away_from(0, 0.05)});
  c.push_back({.name = "sigmoid", .inputs = {{3, 4}}, .fn = [](const V& x) { return sigmoid(x[0]); }, .lo = -4, .hi = 4});
  c.push_back({.name = "tanh", .inputs = {{3, 4}}, .fn = [](const V& x) { return tanh(x[0]); }, .lo = -3, .hi = 3});
  c.push_back({.name = "gelu/exact", .inputs = {{3, 4}}, .fn = [](const V& x) { return gelu(x[0]); }, .lo = -3, .hi = 3});
  c.push_back({.name = "gelu/tanh", .inputs = {{3, 4}}, .fn = [](const V& x) { return gelu(x[0], GeluApproximation::Tanh); },
               .lo = -3, .hi = 3});
  c.push_back({.name = "silu", .inputs = {{3, 4}}, .fn = [](const V& x) { return silu(x[0]); }, .lo = -3, .hi = 3});
  c.push_back({.name = "clamp/both", .inputs = {{3, 4}}, .fn = [](const V& x) { return clamp(x[0], -0.5, 0.5); },
               .prepare = [](V& in) { away_from(-0.5, 0.05)(in); away_from(0.5, 0.05)(in); }});
  c.push_back({.name = "clamp/lower", .inputs = {{3, 4}}, .fn = [](const V& x) { return clamp(x[0], 0.0, std::nullopt); },
               .prepare = away_from(0, 0.05)});
  c.push_back({.name = "where", .inputs = {{3, 4}, {4}}, .fn = [](const V& x) {
                 Tensor cond = from_vector<bool>({true, false, true, true, false, false, true, false, true, true, false, true}, {3, 4})
                                   .to(case_device());
                 return where(cond, x[0], x[1]);
               }});
  c.push_back({.name = "chain/mixed", .inputs = {{2, 3}, {3}},
               .fn = [](const V& x) { return tanh(x[0] * x[1] + exp(x[1])) / (1.0 + sigmoid(x[0])); }});
  c.push_back({.name = "reuse/same_input_twice", .inputs = {{2, 3}}, .fn = [](const V& x) { return x[0] * x[0] + x[0]; }});
}

void add_view_cases(std::vector<OpCase>& c) {
  c.push_back({.name = "view/reshape", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return exp(x[0].reshape({4, 6})); }});
  c.push_back({.name = "view/permute", .inputs = {{2, 3, 4}}, .fn = [](const V& x) { return x[0].permute({2, 0, 1}) * 2.0; }});
  c.push_back({.name = "view/transpose_mul", .inputs = {{3, 4}, {4, 3}},
               .fn = [](const V& x) { return x[0].transpose(0, 1) * x[1]; }});
  c.push_back({.name = "view/slice_step", .inputs = {{5, 4}}, .fn = [](const V& x) { return exp(x[0].slice(0, 1, 5, 2)); }});
  c.push_back({.name = "view/narrow", .inputs = {{3, 6}}, .fn = [](const V& x) { return x[0].narrow(1, 2, 3) * 3.0; }});
  c.push_back({.name = "view/select", .inputs = {{3, 4}}, .fn = [](const V& x) { return exp(x[0].select(1, -1)); }});
  c.push_back({.name = "view/expand", .inputs = {{3, 1}}, .fn = [](const V& x) { return x[0].expand({2, 3, 4}) * 1.5; }});
  c.push_back({.name = "view/squeeze_unsqueeze", .inputs = {{3, 1, 4}},
               .fn = [](const V& x) { return x[0].squeeze(1).unsqueeze(0).exp(); }});
  c.push_back({.name = "view/flatten_unflatten", .inputs = {{2, 3, 4}},
               .fn = [](const V& x) { return x[0].flatten(1).unflatten(1, {4, 3}).sigmoid(); }});
  c.push_back({.name = "view/clone_contiguous", .inputs = {{3, 4}},
               .fn = [](const V& x) { return x[0].t().contiguous().clone() * 2.0; }});
  c.push_back({.name = "view/to_float32_and_back", .inputs = {{3, 4}},
               .fn = [](const V& x) { return x[0].to(DType::f32).to(DType::f64) * 0.0 + x[0]; }});
}

}  // namespace ember::testing
