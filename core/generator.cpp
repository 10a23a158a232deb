// Random fills from Philox (layout in philox.h). The CPU loops below are the reference the
// CUDA kernels must reproduce bit for bit; the per-element math is kernels/random.h, shared
// with them.

#include "generator.h"

#include "cpu/parallel.h"
#include "../kernels/random.h"
#include "autograd.h"
#include "philox.h"

namespace ember {

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {

constexpr int64_t kRandomGrain = 16384;

// Fills a contiguous CPU f32/f64 buffer with U[lo, hi).
void uniform_cpu(Tensor& t, double lo, double hi, uint64_t seed, uint64_t base) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    float* p = t.data_ptr<float>();
    const float l = static_cast<float>(lo), w = static_cast<float>(hi - lo);
    parallel_for(0, n, kRandomGrain, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const Philox4 r = philox4x32_10(base + static_cast<uint64_t>(i / 4), seed);
        p[i] = kernels::random_uniform_f32(r.v[i % 4], l, w);
      }
    });
  } else {
    double* p = t.data_ptr<double>();
    parallel_for(0, n, kRandomGrain, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const Philox4 r = philox4x32_10(base + static_cast<uint64_t>(i / 2), seed);
        p[i] = kernels::random_uniform_f64(r, i, lo, hi - lo);
      }
    });
  }
}

void normal_cpu(Tensor& t, double mean, double std, uint64_t seed, uint64_t base) {
  const int64_t n = t.numel();
  if (t.dtype() == DType::f32) {
    float* p = t.data_ptr<float>();
    const float m = static_cast<float>(mean), s = static_cast<float>(std);
    parallel_for(0, n, kRandomGrain, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const Philox4 r = philox4x32_10(base + static_cast<uint64_t>(i / 2), seed);
        p[i] = kernels::random_normal_f32(r, i, m, s);
      }
    });
  } else {
    double* p = t.data_ptr<double>();
    parallel_for(0, n, kRandomGrain, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i)
        p[i] = kernels::random_normal_f64(philox4x32_10(base + static_cast<uint64_t>(i), seed), mean, std);
    });
  }
}

uint64_t blocks_for_uniform(const Tensor& t) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  return t.dtype() == DType::f32 ? (n + 3) / 4 : (n + 1) / 2;
}
uint64_t blocks_for_normal(const Tensor& t) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  return t.dtype() == DType::f32 ? (n + 1) / 2 : n;
}

// Generates into a contiguous tensor of t's dtype on the CPU, then copies into t.
template <typename F>
Tensor& fill_random(Tensor& t, const char* op, F gen_fn) {
  EMBER_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op,
              ": expected a float32 or float64 tensor, got ", describe(t));
  NoGradGuard g;
  EMBER_CHECK(!t.requires_grad() || !grad_mode_enabled(), op, ": in-place fill of a tensor that requires grad");
  if (t.device().is_cpu() && t.is_contiguous()) {
    gen_fn(t);
    t.bump_version();
    return t;
  }
  Tensor tmp = empty(t.shape(), {.dtype = t.dtype()});
  gen_fn(tmp);
  t.copy_(tmp);
  return t;
}

}  // namespace

Tensor& uniform_(Tensor& t, double lo, double hi, Generator& gen) {
  return fill_random(t, "uniform_", [&](Tensor& c) {
    const uint64_t base = gen.take(blocks_for_uniform(c));
    uniform_cpu(c, lo, hi, gen.seed(), base);
  });
}

Tensor& normal_(Tensor& t, double mean, double std, Generator& gen) {
  return fill_random(t, "normal_", [&](Tensor& c) {
    const uint64_t base = gen.take(blocks_for_normal(c));
    normal_cpu(c, mean, std, gen.seed(), base);
  });
}

namespace {

// A new tensor of `shape` and `opt`, filled by fill(t) before it is marked as requiring grad
// (when opt asks for that), so the fill is not an in-place op on a tensor that requires grad.
template <typename F>
Tensor new_random(const Shape& shape, TensorOptions opt, F fill) {
  const bool rg = opt.requires_grad;
  opt.requires_grad = false;
  Tensor t = empty(shape, opt);
  fill(t);
  if (rg) t.requires_grad_(true);
  return t;
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions opt, Generator& gen) {
  return new_random(shape, opt, [&](Tensor& t) { uniform_(t, 0.0, 1.0, gen); });
}

Tensor randn(const Shape& shape, TensorOptions opt, Generator& gen) {
  return new_random(shape, opt, [&](Tensor& t) { normal_(t, 0.0, 1.0, gen); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opt, Generator& gen) {
  EMBER_CHECK(high > low, "randint: empty range [", low, ", ", high, ")");
  const uint64_t range = static_cast<uint64_t>(high - low);
  EMBER_CHECK(range <= (1ULL << 32), "randint: range ", range, " is larger than 2^32");
  Tensor t = empty(shape, {.dtype = DType::i64});
  int64_t* p = t.data_ptr<int64_t>();
  const int64_t n = t.numel();
  const uint64_t base = gen.take(static_cast<uint64_t>((n + 3) / 4));
  const uint64_t seed = gen.seed();
  // Lemire's multiply-shift maps a 32-bit word onto [0, range) without a division.
  for (int64_t i = 0; i < n; ++i) {
    const Philox4 r = philox4x32_10(base + static_cast<uint64_t>(i / 4), seed);
    p[i] = kernels::random_int(r.v[i % 4], low, range);
  }
  return t.to(opt.device, opt.dtype);
}

Tensor bernoulli(const Shape& shape, double p, TensorOptions opt, Generator& gen) {
  EMBER_CHECK(p >= 0 && p <= 1, "bernoulli: probability ", p, " is not in [0, 1]");
  Tensor u = rand(shape, {.dtype = DType::f32}, gen);
  Tensor out = empty(shape, {.dtype = DType::f32});
  const float* up = u.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const auto pf = static_cast<float>(p);
  // The same test as kernels::random_bernoulli (u is the uniform of the element's word).
  for (int64_t i = 0; i < u.numel(); ++i) o[i] = up[i] < pf ? 1.0f : 0.0f;
  return out.to(opt.device, opt.dtype);
}

}  // namespace ember
