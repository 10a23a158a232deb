#include "gradcheck.h"

#include <cmath>
#include <sstream>

namespace ember::testing {

namespace {
uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}
}  // namespace

std::vector<Tensor> make_inputs(const OpCase& c) {
  Generator gen(hash_name(c.name));
  std::vector<Tensor> inputs;
  for (const Shape& s : c.inputs) {
    Tensor t = rand(s, {.dtype = DType::f64}, gen);
    NoGradGuard g;
    inputs.push_back(add(mul(t, c.hi - c.lo), c.lo));
  }
  if (c.prepare) c.prepare(inputs);
  return inputs;
}

Tensor make_strided(const Tensor& t) {
  NoGradGuard g;
  if (t.dim() == 0) return t.clone();
  // Buffer twice as wide in the last dim; take every other element.
  Shape wide = t.shape();
  wide[wide.size() - 1] *= 2;
  Tensor base = zeros(wide, {.dtype = t.dtype()});
  Tensor v = base.slice(-1, 0, wide.back(), 2);
  if (t.dim() >= 2) {
    // Also swap the last two dims in memory: view of a transposed buffer.
    Shape sw = t.shape();
    std::swap(sw[sw.size() - 1], sw[sw.size() - 2]);
    Shape wide2 = sw;
    wide2[wide2.size() - 1] *= 2;
    Tensor base2 = zeros(wide2, {.dtype = t.dtype()});
    v = base2.slice(-1, 0, wide2.back(), 2).transpose(-1, -2);
  }
  Tensor leaf = v.detach();
  leaf.copy_(t);
  return leaf;
}

GradcheckResult gradcheck(const OpCase& c, const std::vector<Tensor>& inputs0) {
  std::vector<Tensor> inputs;
  for (const Tensor& t : inputs0) {
    Tensor leaf = t.detach();
    leaf.requires_grad_(true);
    inputs.push_back(leaf);
  }
  // Fixed weights for the output elements.
  Tensor out = c.fn(inputs);
  Generator wgen(hash_name(c.name) ^ 0x9e3779b97f4a7c15ULL);
  Tensor w = rand(out.shape(), {.dtype = DType::f64}, wgen);
  {
    NoGradGuard g;
    w = add(w, 0.5);  // weights in [0.5, 1.5)
  }
  Tensor loss = sum(mul(out.to(DType::f64), w));
  loss.backward();

  auto objective = [&]() {
    NoGradGuard g;
    return sum(mul(c.fn(inputs).to(DType::f64), w)).item();
  };

  GradcheckResult r;
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor x = inputs[k];
    Tensor analytic = x.grad();
    std::vector<double> an = analytic.defined() ? analytic.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    // Perturb element i of the (possibly strided) leaf through a flat index over its shape.
    const int64_t n = x.numel();
    const Strides contiguous = contiguous_strides(x.shape());
    for (int64_t i = 0; i < n; ++i) {
      int64_t rem = i, off = x.offset();
      for (int d = 0; d < x.dim(); ++d) {
        const int64_t idx = rem / contiguous[d];
        rem %= contiguous[d];
        off += idx * x.strides()[d];
      }
      double* p = static_cast<double*>(x.storage()->data()) + off;
      const double orig = *p;
      *p = orig + c.eps;
      const double fp = objective();
      *p = orig - c.eps;
      const double fm = objective();
      *p = orig;
      const double numeric = (fp - fm) / (2 * c.eps);
      const double err = std::abs(an[i] - numeric) / std::max(1.0, std::abs(numeric));
      if (err > r.max_error || std::isnan(err)) {
        r.max_error = std::isnan(err) ? INFINITY : err;
        std::ostringstream os;
        os << "input " << k << " element " << i << ": analytic " << an[i] << " numeric " << numeric;
        r.worst = os.str();
      }
    }
  }
  return r;
}

std::string compare_tensors(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  if (actual.shape() != expected.shape()) {
    return "shape " + shape_str(actual.shape()) + " != expected " + shape_str(expected.shape());
  }
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    if (both_nan) continue;
    if (!(std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]))) {
      std::ostringstream os;
      os << "element " << i << ": " << a[i] << " != expected " << e[i];
      return os.str();
    }
  }
  return "";
}

std::vector<OpCase> all_op_cases() {
  std::vector<OpCase> cases;
  for (auto add : {add_elementwise_cases, add_view_cases, add_reduce_cases, add_gemm_cases, add_conv_cases,
                   add_pool_cases, add_batchnorm_cases, add_dropout_cases, add_index_cases, add_softmax_cases,
                   add_loss_cases})
    add(cases);
  return cases;
}

}  // namespace ember::testing
