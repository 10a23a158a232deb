#include "transforms.h"

#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>

#include "../core/autograd.h"
#include "../core/cpu/parallel.h"

namespace ember::data {

namespace {

// A thread chunk holds at least ~256K output values (~0.3 ms of work): a 64-image MNIST batch
// (50K pixels) runs inline, since waking threads for it costs more than it saves on a busy
// machine; CIFAR-sized batches split. Batch-level parallelism is the threaded loader's job.
constexpr int64_t kSampleGrainElements = 1 << 18;

// parallel_for whose body may throw: an exception must not leave an OpenMP region (that is
// std::terminate), so the first one is carried out and rethrown on the calling thread.
template <typename F>
void parallel_for_rethrow(int64_t begin, int64_t end, int64_t grain, const F& f) {
  std::exception_ptr error;
  std::mutex mu;
  parallel_for(begin, end, grain, [&](int64_t lo, int64_t hi) {
    try {
      f(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
  });
  if (error) std::rethrow_exception(error);
}

// A contiguous CPU copy of a (C, H, W) image, after checking its rank.
Tensor image_chw(const Tensor& image, const std::string& op) {
  EMBER_CHECK(image.defined(), op, ": undefined image");
  EMBER_CHECK(image.dim() == 3, op, ": expected a (C, H, W) image, got ", describe(image));
  EMBER_CHECK(image.device().is_cpu(), op, ": transforms run on the CPU, got ", describe(image));
  return image.contiguous();
}

// Copies element i of `src` to element j of `dst` for every (j, i) in the flip of each row.
template <typename E>
void flip_rows(const E* src, E* dst, int64_t rows, int64_t w) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t x = 0; x < w; ++x) dst[r * w + x] = src[r * w + (w - 1 - x)];
}

}  // namespace

Tensor Transform::operator()(const Tensor& image) const {
  EMBER_CHECK(!is_random(), name(), " is random: call it with a SampleRng (sample_rng(seed, epoch, index))");
  SampleRng unused(0, 0, 0);
  return apply(image, unused);
}

// ---- ToTensor --------------------------------------------------------------------------------

Tensor ToTensor::apply(const Tensor& image, SampleRng&) const {
  EMBER_CHECK(image.defined() && image.device().is_cpu(), "ToTensor: expected a CPU image, got ",
              image.defined() ? describe(image) : std::string("an undefined tensor"));
  if (image.dtype() == DType::f32) return image;
  EMBER_CHECK(image.dtype() == DType::u8, "ToTensor: expected uint8 (or already float32) pixels, got ", describe(image));
  const Tensor in = image.contiguous();
  Tensor out = empty(in.shape(), {.dtype = DType::f32});
  const uint8_t* src = in.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  parallel_for(0, in.numel(), kSampleGrainElements, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) dst[i] = static_cast<float>(src[i]) / 255.0f;
  });
  return out;
}

// ---- Normalize -------------------------------------------------------------------------------

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) {
  EMBER_CHECK(!mean.empty() && mean.size() == std.size(), "Normalize: mean has ", mean.size(), " values and std ",
              std.size(), "; they need one per channel (or one for all)");
  for (size_t c = 0; c < mean.size(); ++c) {
    EMBER_CHECK(std::isfinite(std[c]) && std[c] > 0, "Normalize: std[", c, "] = ", std[c], " must be positive");
    EMBER_CHECK(std::isfinite(mean[c]), "Normalize: mean[", c, "] = ", mean[c], " must be finite");
    mean_.push_back(static_cast<float>(mean[c]));
    std_.push_back(static_cast<float>(std[c]));
  }
}

std::string Normalize::name() const {
  std::ostringstream os;
  os << "Normalize(mean=[";
  for (size_t c = 0; c < mean_.size(); ++c) os << (c ? ", " : "") << mean_[c];
  os << "], std=[";
  for (size_t c = 0; c < std_.size(); ++c) os << (c ? ", " : "") << std_[c];
  os << "])";
  return os.str();
}

Tensor Normalize::apply(const Tensor& image, SampleRng&) const {
  EMBER_CHECK(image.defined() && image.device().is_cpu() && image.dtype() == DType::f32 &&
                  (image.dim() == 3 || image.dim() == 4),
              name(), ": expected a float32 CPU image (C, H, W) or batch (N, C, H, W) (apply ToTensor first), got ",
              image.defined() ? describe(image) : std::string("an undefined tensor"));
  const Tensor in = image.contiguous();
  const int64_t channels = in.size(-3), plane = in.size(-1) * in.size(-2);
  const int64_t planes = in.numel() / std::max<int64_t>(plane, 1);
  EMBER_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == channels, name(), ": ", mean_.size(),
              " means for ", channels, " channels in ", describe(image));
  Tensor out = empty(in.shape(), {.dtype = DType::f32});
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  parallel_for(0, planes, std::max<int64_t>(1, kSampleGrainElements / std::max<int64_t>(plane, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p) {
                   const size_t c = mean_.size() == 1 ? 0 : static_cast<size_t>(p % channels);
                   const float m = mean_[c], s = std_[c];
                   // A division, not a multiply by 1/s: the same rounding as torchvision.
                   for (int64_t i = p * plane; i < (p + 1) * plane; ++i) dst[i] = (src[i] - m) / s;
                 }
               });
  return out;
}

// ---- RandomCrop ------------------------------------------------------------------------------

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  EMBER_CHECK(height > 0 && width > 0 && padding >= 0, "RandomCrop: size (", height, ", ", width, ") must be positive and padding ",
              padding, " non-negative");
}

std::string RandomCrop::name() const {
  std::ostringstream os;
  os << "RandomCrop(size=(" << height_ << ", " << width_ << "), padding=" << padding_ << ")";
  return os.str();
}

Tensor RandomCrop::apply(const Tensor& image, SampleRng& rng) const {
  const Tensor in = image_chw(image, name());
  const int64_t c = in.size(0), h = in.size(1), w = in.size(2), p = padding_;
  EMBER_CHECK(height_ <= h + 2 * p && width_ <= w + 2 * p, name(), ": the window is larger than the padded image (",
              h + 2 * p, ", ", w + 2 * p, ") of ", describe(image));
  const auto top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(h + 2 * p - height_ + 1)));
  const auto left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(w + 2 * p - width_ + 1)));
  Tensor out = zeros({c, height_, width_}, {.dtype = in.dtype()});
  const int64_t es = in.element_size();
  const auto* src = static_cast<const unsigned char*>(in.data());
  auto* dst = static_cast<unsigned char*>(out.data());
  // Output column x reads source column left + x - p; keep the x whose source is inside.
  const int64_t x_lo = std::max<int64_t>(0, p - left), x_hi = std::min<int64_t>(width_, w + p - left);
  if (x_lo >= x_hi) return out;
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < height_; ++y) {
      const int64_t sy = top + y - p;
      if (sy < 0 || sy >= h) continue;
      std::memcpy(dst + ((ch * height_ + y) * width_ + x_lo) * es, src + ((ch * h + sy) * w + left + x_lo - p) * es,
                  static_cast<size_t>((x_hi - x_lo) * es));
    }
  return out;
}

// ---- RandomHorizontalFlip --------------------------------------------------------------------

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: p = ", p, " must lie in [0, 1]");
}

std::string RandomHorizontalFlip::name() const {
  std::ostringstream os;
  os << "RandomHorizontalFlip(p=" << p_ << ")";
  return os.str();
}

Tensor RandomHorizontalFlip::apply(const Tensor& image, SampleRng& rng) const {
  const Tensor in = image_chw(image, name());
  if (!(rng.uniform() < p_)) return image;
  Tensor out = empty(in.shape(), {.dtype = in.dtype()});
  const int64_t rows = in.size(0) * in.size(1), w = in.size(2);
  switch (in.element_size()) {
    case 1: flip_rows(static_cast<const uint8_t*>(in.data()), static_cast<uint8_t*>(out.data()), rows, w); break;
    case 2: flip_rows(static_cast<const uint16_t*>(in.data()), static_cast<uint16_t*>(out.data()), rows, w); break;
    case 4: flip_rows(static_cast<const uint32_t*>(in.data()), static_cast<uint32_t*>(out.data()), rows, w); break;
    case 8: flip_rows(static_cast<const uint64_t*>(in.data()), static_cast<uint64_t*>(out.data()), rows, w); break;
    default: EMBER_THROW(name(), ": unsupported element size in ", describe(image));
  }
  return out;
}

// ---- Compose ---------------------------------------------------------------------------------

Compose::Compose(std::vector<AnyTransform> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i)
    EMBER_CHECK(static_cast<bool>(transforms_[i]), "Compose: transform ", i, " is empty");
}

Tensor Compose::apply(const Tensor& image, SampleRng& rng) const {
  Tensor x = image;
  for (const AnyTransform& t : transforms_) x = t->apply(x, rng);
  return x;
}

bool Compose::is_random() const {
  for (const AnyTransform& t : transforms_)
    if (t->is_random()) return true;
  return false;
}

std::string Compose::name() const {
  std::ostringstream os;
  os << "Compose(";
  for (size_t i = 0; i < transforms_.size(); ++i) os << (i ? ", " : "") << transforms_[i]->name();
  os << ")";
  return os.str();
}

// ---- apply_batch -----------------------------------------------------------------------------

std::vector<float> detail::to_tensor_lut(const Normalize* normalize, int64_t channels) {
  std::vector<float> lut(static_cast<size_t>(channels * 256));
  for (int64_t ch = 0; ch < channels; ++ch)
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v) / 255.0f;
      if (normalize) {
        const size_t k = normalize->mean().size() == 1 ? 0 : static_cast<size_t>(ch);
        x = (x - normalize->mean()[k]) / normalize->std()[k];
      }
      lut[static_cast<size_t>(ch * 256 + v)] = x;
    }
  return lut;
}

namespace {

void append_flattened(const Transform& t, std::vector<const Transform*>& out) {
  if (const auto* c = dynamic_cast<const Compose*>(&t)) {
    for (const AnyTransform& inner : c->transforms()) append_flattened(*inner, out);
    return;
  }
  out.push_back(&t);
}

}  // namespace

std::vector<const Transform*> detail::flatten(const Transform& transform) {
  std::vector<const Transform*> chain;
  append_flattened(transform, chain);
  return chain;
}

namespace {

using detail::FusedPlan;

std::optional<FusedPlan> plan_fused(const std::vector<const Transform*>& chain) {
  FusedPlan plan;
  size_t i = 0;
  if (i < chain.size() && (plan.crop = dynamic_cast<const RandomCrop*>(chain[i]))) ++i;
  if (i < chain.size() && (plan.flip = dynamic_cast<const RandomHorizontalFlip*>(chain[i]))) ++i;
  if (i >= chain.size() || !dynamic_cast<const ToTensor*>(chain[i])) return std::nullopt;
  ++i;
  if (i < chain.size() && (plan.normalize = dynamic_cast<const Normalize*>(chain[i]))) ++i;
  if (i != chain.size()) return std::nullopt;
  return plan;
}

// Note [Fused batch transforms]
// For u8 input every output value is a function of one source byte and its channel, so ToTensor
// and Normalize collapse into a 256-entry table per channel, filled with exactly the float
// operations of the step-by-step path (v / 255, then (x - mean) / std): the fused result is
// bit-identical. Crop and flip only change which byte is read; padding reads the value of 0.
Tensor apply_fused(const FusedPlan& plan, const Tensor& batch, std::span<const int64_t> indices, uint64_t seed,
                   int64_t epoch) {
  const Tensor in = batch.contiguous();
  const int64_t n = in.size(0), c = in.size(1), h = in.size(2), w = in.size(3);
  const int64_t pad = plan.crop ? plan.crop->padding() : 0;
  const int64_t oh = plan.crop ? plan.crop->height() : h, ow = plan.crop ? plan.crop->width() : w;
  if (plan.crop)
    EMBER_CHECK(oh <= h + 2 * pad && ow <= w + 2 * pad, plan.crop->name(),
                ": the window is larger than the padded image (", h + 2 * pad, ", ", w + 2 * pad, ") of batch ",
                describe(batch));
  if (plan.normalize) {
    const size_t m = plan.normalize->mean().size();
    EMBER_CHECK(m == 1 || static_cast<int64_t>(m) == c, plan.normalize->name(), ": ", m, " means for ", c,
                " channels in ", describe(batch));
  }
  const std::vector<float> lut = detail::to_tensor_lut(plan.normalize, c);

  Tensor out = empty({n, c, oh, ow}, {.dtype = DType::f32});
  const uint8_t* src = in.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const int64_t grain = std::max<int64_t>(1, kSampleGrainElements / std::max<int64_t>(c * oh * ow, 1));
  parallel_for(0, n, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s) {
      // The draws of RandomCrop::apply then RandomHorizontalFlip::apply, in that order.
      SampleRng rng = sample_rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(indices[static_cast<size_t>(s)]));
      int64_t top = pad, left = pad;
      if (plan.crop) {
        top = static_cast<int64_t>(rng.below(static_cast<uint64_t>(h + 2 * pad - oh + 1)));
        left = static_cast<int64_t>(rng.below(static_cast<uint64_t>(w + 2 * pad - ow + 1)));
      }
      const bool flip = plan.flip && rng.uniform() < plan.flip->p();
      const uint8_t* img = src + s * c * h * w;
      float* o = dst + s * c * oh * ow;
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* table = &lut[static_cast<size_t>(ch * 256)];
        for (int64_t y = 0; y < oh; ++y) {
          const int64_t sy = top + y - pad;
          float* row = o + (ch * oh + y) * ow;
          if (sy < 0 || sy >= h) {
            for (int64_t x = 0; x < ow; ++x) row[x] = table[0];
            continue;
          }
          const uint8_t* src_row = img + (ch * h + sy) * w;
          for (int64_t x = 0; x < ow; ++x) {
            const int64_t sx = left + (flip ? ow - 1 - x : x) - pad;
            row[x] = table[(sx >= 0 && sx < w) ? src_row[sx] : 0];
          }
        }
      }
    }
  });
  return out;
}

// Every sample through transform.apply, spread over threads; outputs must agree in shape and dtype.
Tensor apply_per_sample(const Transform& transform, const Tensor& batch, std::span<const int64_t> indices,
                        uint64_t seed, int64_t epoch) {
  const int64_t n = batch.size(0);
  auto run = [&](int64_t s) {
    SampleRng rng = sample_rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(indices[static_cast<size_t>(s)]));
    return transform.apply(batch[s], rng);
  };
  // Sample 0 fixes the output geometry.
  const Tensor first = run(0);
  Shape shape = first.shape();
  shape.insert(0, n);
  Tensor out = empty(shape, {.dtype = first.dtype()});
  out[0].copy_(first);
  const int64_t grain = std::max<int64_t>(1, kSampleGrainElements / std::max<int64_t>(first.numel(), 1));
  parallel_for_rethrow(1, n, grain, [&](int64_t lo, int64_t hi) {
    NoGradGuard no_grad;  // grad mode is per thread
    for (int64_t s = lo; s < hi; ++s) {
      const Tensor r = run(s);
      EMBER_CHECK(r.shape() == first.shape() && r.dtype() == first.dtype(), transform.name(), ": sample ",
                  indices[static_cast<size_t>(s)], " became ", describe(r), " but sample ", indices[0], " became ",
                  describe(first), "; a batch needs one shape and dtype");
      out[s].copy_(r);
    }
  });
  return out;
}

}  // namespace

std::optional<detail::FusedPlan> detail::fused_plan(const AnyTransform& transform) {
  static const ToTensor kToTensor;
  return plan_fused(transform ? flatten(*transform) : std::vector<const Transform*>{&kToTensor});
}

Tensor apply_batch(const AnyTransform& transform, const Tensor& batch, std::span<const int64_t> sample_indices,
                   uint64_t seed, int64_t epoch) {
  EMBER_CHECK(batch.defined() && batch.dim() == 4 && batch.device().is_cpu(),
              "apply_batch: expected a CPU batch (N, C, H, W), got ",
              batch.defined() ? describe(batch) : std::string("an undefined tensor"));
  EMBER_CHECK(static_cast<int64_t>(sample_indices.size()) == batch.size(0), "apply_batch: ", sample_indices.size(),
              " sample indices for a batch of ", batch.size(0));
  EMBER_CHECK(epoch >= 0, "apply_batch: epoch ", epoch, " is negative");
  NoGradGuard no_grad;
  if (batch.size(0) == 0) return batch;
  std::vector<const Transform*> chain;
  static const ToTensor kToTensor;
  if (transform) {
    chain = detail::flatten(*transform);
  } else if (batch.dtype() == DType::u8) {
    chain.push_back(&kToTensor);
  } else {
    return batch.contiguous();
  }
  if (batch.dtype() == DType::u8)
    if (const std::optional<FusedPlan> plan = plan_fused(chain)) return apply_fused(*plan, batch, sample_indices, seed, epoch);
  return transform ? apply_per_sample(*transform, batch, sample_indices, seed, epoch)
                   : apply_per_sample(kToTensor, batch, sample_indices, seed, epoch);
}

}  // namespace ember::data
