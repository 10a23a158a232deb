// Mixup and CutMix (Note [Mixup and CutMix] in data/mix.h).

#include "mix.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

namespace ember::data {

namespace {

// A uniform in (0, 1]: never 0, so its logarithm is finite.
double open_uniform(SampleRng& rng) { return 1.0 - static_cast<double>(rng.uniform()); }

// A standard normal variate (Box-Muller, two words).
double normal(SampleRng& rng) {
  const double u1 = open_uniform(rng), u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// log of a Gamma(a, 1) variate: Marsaglia and Tsang's method for a >= 1; for a < 1,
// Gamma(a) = Gamma(a + 1) * U^(1/a), kept in logarithms so that tiny values do not underflow.
double log_gamma_variate(double a, SampleRng& rng) {
  if (a < 1.0) {
    const double boost = std::log(open_uniform(rng)) / a;
    return log_gamma_variate(a + 1.0, rng) + boost;
  }
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = normal(rng);
    double v = 1.0 + c * x;
    if (v <= 0.0) continue;
    v = v * v * v;
    const double u = open_uniform(rng);
    if (u < 1.0 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v)))
      return std::log(d * v);
  }
}

}  // namespace

double sample_beta(double a, SampleRng& rng) {
  EMBER_CHECK(std::isfinite(a) && a > 0.0, "sample_beta: alpha ", a, " must be positive and finite");
  // X / (X + Y) = 1 / (1 + exp(log Y - log X)).
  const double lx = log_gamma_variate(a, rng), ly = log_gamma_variate(a, rng);
  return 1.0 / (1.0 + std::exp(ly - lx));
}

MixParams mix_params(const MixOptions& o, int64_t height, int64_t width, SampleRng& rng) {
  EMBER_CHECK(o.enabled(), "mix_params: neither Mixup nor CutMix is on");
  EMBER_CHECK(o.mixup_alpha >= 0.0 && o.cutmix_alpha >= 0.0, "mix_params: negative alpha (mixup ", o.mixup_alpha,
              ", cutmix ", o.cutmix_alpha, ")");
  MixParams p;
  if (o.mixup_alpha > 0.0 && o.cutmix_alpha > 0.0)
    p.cutmix = rng.uniform() >= 0.5f;
  else
    p.cutmix = o.cutmix_alpha > 0.0;
  const double lam = sample_beta(p.cutmix ? o.cutmix_alpha : o.mixup_alpha, rng);
  p.drawn_lambda = lam;
  if (!p.cutmix) {
    p.lambda = lam;
    return p;
  }
  // torchvision v2 CutMix._get_params: the centre, x first; half sides truncated; clipped.
  const auto r_x = static_cast<int64_t>(rng.below(static_cast<uint64_t>(width)));
  const auto r_y = static_cast<int64_t>(rng.below(static_cast<uint64_t>(height)));
  p.center_y = r_y;
  p.center_x = r_x;
  const double r = 0.5 * std::sqrt(1.0 - lam);
  const auto r_w_half = static_cast<int64_t>(r * static_cast<double>(width));
  const auto r_h_half = static_cast<int64_t>(r * static_cast<double>(height));
  const int64_t x1 = std::max<int64_t>(r_x - r_w_half, 0), y1 = std::max<int64_t>(r_y - r_h_half, 0);
  const int64_t x2 = std::min<int64_t>(r_x + r_w_half, width), y2 = std::min<int64_t>(r_y + r_h_half, height);
  p.box = CropBox{y1, x1, y2 - y1, x2 - x1};
  p.lambda = 1.0 - static_cast<double>((x2 - x1) * (y2 - y1)) / static_cast<double>(width * height);
  return p;
}

Batch mix_batch(const Batch& batch, const MixParams& p, int64_t num_classes) {
  const Tensor& images = batch.images;
  EMBER_CHECK(images.defined() && images.dim() == 4 && images.dtype() == DType::f32 && images.device().is_cpu(),
              "Mixup/CutMix: expected a float32 (N, C, H, W) CPU batch, got ",
              images.defined() ? describe(images) : std::string("an undefined tensor"));
  EMBER_CHECK(batch.labels.defined() && batch.labels.dtype() == DType::i64 && batch.labels.dim() == 1 &&
                  batch.labels.size(0) == images.size(0),
              "Mixup/CutMix: expected (N,) int64 labels for ", describe(images), ", got ",
              batch.labels.defined() ? describe(batch.labels) : std::string("none"));
  EMBER_CHECK(num_classes >= 1, "Mixup/CutMix: num_classes ", num_classes, " must be positive");
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  const Tensor in = images.contiguous();
  const std::vector<int64_t> labels = batch.labels.contiguous().to_vector<int64_t>();
  for (const int64_t y : labels)
    EMBER_CHECK(y >= 0 && y < num_classes, "Mixup/CutMix: label ", y, " is outside [0, ", num_classes, ")");
  Batch out;
  out.images = in.clone();
  const float* src = in.data_ptr<float>();
  float* dst = out.images.data_ptr<float>();
  const int64_t sample = c * h * w;
  const auto lam = static_cast<float>(p.lambda), one_minus = static_cast<float>(1.0 - p.lambda);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = (i + n - 1) % n;  // roll(1, 0): row i receives row i - 1
    if (!p.cutmix) {
      for (int64_t k = 0; k < sample; ++k) {
        volatile float a = src[j * sample + k] * one_minus;  // torchvision: rolled * (1 - lam) + x * lam
        volatile float b = src[i * sample + k] * lam;
        dst[i * sample + k] = a + b;
      }
      continue;
    }
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = p.box.top; y < p.box.top + p.box.height; ++y) {
        const int64_t off = (ch * h + y) * w + p.box.left;
        std::memcpy(dst + i * sample + off, src + j * sample + off, static_cast<size_t>(p.box.width) * sizeof(float));
      }
  }
  out.labels = zeros({n, num_classes}, {.dtype = DType::f32});
  float* t = out.labels.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = (i + n - 1) % n;
    t[i * num_classes + labels[static_cast<size_t>(j)]] += one_minus;
    t[i * num_classes + labels[static_cast<size_t>(i)]] += lam;
  }
  return out;
}

Batch mix_batch(const Batch& batch, const MixOptions& options, uint64_t seed, int64_t epoch, int64_t batch_index) {
  if (!batch.images.defined() || batch.images.dim() != 4 || batch.images.size(0) == 0) return batch;
  SampleRng rng = sample_rng(seed, static_cast<uint64_t>(epoch), kMixStream | static_cast<uint64_t>(batch_index));
  const MixParams p = mix_params(options, batch.images.size(2), batch.images.size(3), rng);
  return mix_batch(batch, p, options.num_classes);
}

}  // namespace ember::data
