// Per-sample loading of image datasets (contract in image_dataset.h).
//
// Note [Bad image files]
// A sample whose load_image throws is, with BadImages::error, an error: the first such sample of
// the batch (in batch order, whatever thread met it) is rethrown as a BadImageError, and the
// message names the file. With BadImages::skip it is left out of the batch, counted in stats().skipped and listed
// for take_skipped(). Only load_image failures (reading and decoding) are skipped: an error in a
// transform is a bug or a bad setting, never a bad file, and is always rethrown.

#include "image_dataset.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <map>

#include "../core/autograd.h"
#include "../io/atomic_file.h"
#include "../core/cpu/parallel.h"
#include "image_pipeline.h"
#include "../core/sample_rng.h"
#include "transforms.h"

namespace ember::data {

namespace {

using Clock = std::chrono::steady_clock;

int64_t nanos_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// The stream that shuffles class `label` for stratified_split (apart from every sample stream,
// whose third key is a dataset index < 2^62).
constexpr uint64_t kSplitStream = uint64_t{0x5B11} << 48;

// The rows `kept` of a batch whose first dimension is the sample (the slots of skipped images
// left out).
Tensor keep_rows(const Tensor& batch, const std::vector<int64_t>& kept) {
  Shape shape = batch.shape();
  const int64_t slot = batch.numel() / shape[0];
  shape[0] = static_cast<int64_t>(kept.size());
  Tensor out = empty(shape);
  for (size_t j = 0; j < kept.size(); ++j)
    std::memcpy(out.data_ptr<float>() + static_cast<int64_t>(j) * slot, batch.data_ptr<float>() + kept[j] * slot,
                static_cast<size_t>(slot) * sizeof(float));
  return out;
}

// The per-sample results `kept` stacked into one batch; they must agree in shape and dtype.
Tensor stack_samples(const std::vector<Tensor>& results, const std::vector<int64_t>& kept,
                     std::span<const int64_t> indices, const ImageDataset& ds) {
  const Tensor& first = results[static_cast<size_t>(kept[0])];
  Shape shape = first.shape();
  shape.insert(0, static_cast<int64_t>(kept.size()));
  Tensor stacked = empty(shape, {.dtype = first.dtype()});
  for (size_t j = 0; j < kept.size(); ++j) {
    const auto s = static_cast<size_t>(kept[j]);
    const Tensor& r = results[s];
    EMBER_CHECK(r.shape() == first.shape() && r.dtype() == first.dtype(), "DataLoader: sample ", indices[s], " (",
                ds.path(indices[s]), ") is ", describe(r), " after the transform but sample ",
                indices[static_cast<size_t>(kept[0])], " is ", describe(first),
                "; images of different sizes need a transform that makes them one size (Resize + CenterCrop, "
                "RandomResizedCrop)");
    stacked[static_cast<int64_t>(j)].copy_(r);
  }
  return stacked;
}

}  // namespace

Example ImageDataset::get(int64_t index) const { return {load_image(index, {}), label(index)}; }

Tensor ImageDataset::decode_file(const std::string& path, DecodeOptions decode, JpegDraft draft,
                                 const DecodeHint& hint, ImageLayout layout) const {
  decode.layout = layout;
  if (draft == JpegDraft::on && (hint.min_height > 0 || hint.min_width > 0)) {
    decode.min_height = hint.min_height;
    decode.min_width = hint.min_width;
  }
  const auto t0 = Clock::now();
  const std::vector<uint8_t> bytes = read_image_file(path, decode);
  const auto t1 = Clock::now();
  Tensor img = decode_image_bytes(bytes, path, decode);
  count_decode(std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(Clock::now() - t1).count());
  return img;
}

void ImageDataset::count_decode(double read_s, double decode_s) const {
  shared_->decoded.fetch_add(1, std::memory_order_relaxed);
  shared_->read_ns.fetch_add(static_cast<int64_t>(read_s * 1e9), std::memory_order_relaxed);
  shared_->decode_ns.fetch_add(static_cast<int64_t>(decode_s * 1e9), std::memory_order_relaxed);
}

void ImageDataset::count_cache_read(double read_s) const {
  shared_->cache_reads.fetch_add(1, std::memory_order_relaxed);
  shared_->read_ns.fetch_add(static_cast<int64_t>(read_s * 1e9), std::memory_order_relaxed);
}

void ImageDataset::record_skip(int64_t index, const std::string& reason) const {
  shared_->skipped.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->skipped_list.push_back({index, path(index), reason});
}

ImageLoadStats ImageDataset::stats() const {
  const Shared& s = *shared_;
  return {s.decoded.load(), s.cache_reads.load(), s.skipped.load(), static_cast<double>(s.read_ns.load()) * 1e-9,
          static_cast<double>(s.decode_ns.load()) * 1e-9, static_cast<double>(s.transform_ns.load()) * 1e-9};
}

std::vector<SkippedImage> ImageDataset::take_skipped() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  std::vector<SkippedImage> out;
  out.swap(shared_->skipped_list);
  return out;
}

Batch ImageDataset::load_transformed(std::span<const int64_t> indices, const AnyTransform& transform, uint64_t seed,
                                     int64_t epoch) const {
  EMBER_CHECK(!indices.empty(), "ImageDataset: no indices");
  EMBER_CHECK(epoch >= 0, "ImageDataset: epoch ", epoch, " is negative");
  NoGradGuard no_grad;
  const ImagePipeline plan = plan_image_pipeline(transform);
  const auto n = static_cast<int64_t>(indices.size());
  const int64_t c = channels();
  if (plan.fused && plan.normalize) {
    const size_t m = plan.normalize->mean().size();
    EMBER_CHECK(m == 1 || static_cast<int64_t>(m) == c, plan.normalize->name(), ": ", m, " means for ", c,
                "-channel images");
  }
  const std::vector<float> lut = plan.fused ? detail::to_tensor_lut(plan.normalize, c) : std::vector<float>{};
  // Fused with a fixed output size: every sample goes straight into its slot of the batch.
  Tensor direct;
  int64_t slot = 0;
  if (plan.fused && plan.output_size) {
    const auto [oh, ow] = *plan.output_size;
    direct = empty({n, c, oh, ow});
    slot = c * oh * ow;
  }
  std::vector<Tensor> results(static_cast<size_t>(n));
  std::vector<char> ok(static_cast<size_t>(n), 0);
  std::vector<std::string> bad(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  const bool skip = bad_images() == BadImages::skip;
  // With nothing before the fused part, the image goes to it in the dataset's native layout.
  const bool native = plan.fused && plan.prefix.empty();
  const ImageLayout layout = native ? native_layout() : ImageLayout::CHW;

  // One sample per task: decode and transform are per image (the loader's workers, when there are
  // any, run this serially, each on its own batch).
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s) {
      const auto k = static_cast<size_t>(s);
      const int64_t index = indices[k];
      try {
        Tensor img;
        try {
          img = native ? load_native(index, plan.hint) : load_image(index, plan.hint);
        } catch (const Error& e) {
          if (!skip) throw BadImageError(path(index), e.what());
          bad[k] = e.what();
          continue;
        }
        const auto t0 = Clock::now();
        SampleRng rng = sample_rng(seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
        for (const Transform* t : plan.prefix) img = t->apply(img, rng);
        if (plan.fused) {
          const int64_t ci = layout == ImageLayout::HWC ? 2 : 0;
          EMBER_CHECK(img.dim() == 3 && img.size(ci) == c && img.dtype() == DType::u8, "ImageDataset: sample ", index,
                      " (", path(index), ") is ", describe(img), " before the fused transforms; expected u8 with ", c,
                      " channels");
          img = img.contiguous();
          if (direct.defined()) {
            run_fused_pipeline(plan, img, rng, lut, direct.data_ptr<float>() + s * slot, layout);
          } else {
            const int64_t hi = layout == ImageLayout::HWC ? 0 : 1;
            const auto [oh, ow] = fused_output_size(plan, img.size(hi), img.size(hi + 1));
            Tensor o = empty({c, oh, ow});
            run_fused_pipeline(plan, img, rng, lut, o.data_ptr<float>(), layout);
            results[k] = o;
          }
        } else {
          results[k] = img;
        }
        shared_->transform_ns.fetch_add(nanos_since(t0), std::memory_order_relaxed);
        ok[k] = 1;
      } catch (...) {
        errors[k] = std::current_exception();
      }
    }
  });
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<int64_t> kept, labels;
  for (int64_t s = 0; s < n; ++s) {
    const auto k = static_cast<size_t>(s);
    if (ok[k]) {
      kept.push_back(s);
      labels.push_back(label(indices[k]));
    } else {
      record_skip(indices[k], bad[k]);
    }
  }
  const auto m = static_cast<int64_t>(kept.size());
  Tensor label_tensor = m > 0 ? from_vector(labels) : empty({0}, {.dtype = DType::i64});
  if (direct.defined()) return {m == n ? direct : keep_rows(direct, kept), label_tensor};
  if (m == 0) return {empty({0, c, 0, 0}), label_tensor};
  const Tensor stacked = stack_samples(results, kept, indices, *this);
  // Without a transform, u8 images become float32 as ToTensor makes them (the Dataset default).
  if (!transform) {
    std::vector<int64_t> kept_indices;
    for (int64_t s : kept) kept_indices.push_back(indices[static_cast<size_t>(s)]);
    return {apply_batch(transform, stacked, kept_indices, seed, epoch), label_tensor};
  }
  return {stacked, label_tensor};
}

// ---- ImageSubset -------------------------------------------------------------------------------

ImageSubset::ImageSubset(std::shared_ptr<const ImageDataset> parent, std::vector<int64_t> indices)
    : ImageDataset(*parent), parent_(std::move(parent)), indices_(std::move(indices)) {
  for (int64_t i : indices_)
    EMBER_CHECK(i >= 0 && i < parent_->size(), "ImageSubset: index ", i, " is outside the dataset's ", parent_->size(),
                " samples");
}

int64_t ImageSubset::at(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "ImageSubset: index ", index, " is out of range for ", size(), " samples");
  return indices_[static_cast<size_t>(index)];
}

Tensor ImageSubset::load_image(int64_t index, const DecodeHint& hint) const { return parent_->load_image(at(index), hint); }
int64_t ImageSubset::label(int64_t index) const { return parent_->label(at(index)); }
std::string ImageSubset::path(int64_t index) const { return parent_->path(at(index)); }

// ---- stratified_split --------------------------------------------------------------------------

SplitIndices stratified_split(std::span<const int64_t> labels, double fraction, uint64_t seed) {
  EMBER_CHECK(fraction > 0.0 && fraction < 1.0, "stratified_split: fraction ", fraction, " must be in (0, 1)");
  std::map<int64_t, std::vector<int64_t>> by_class;
  for (size_t i = 0; i < labels.size(); ++i) by_class[labels[i]].push_back(static_cast<int64_t>(i));
  SplitIndices out;
  for (auto& [label, members] : by_class) {
    // Fisher-Yates on this class's stream, then the first `take` go to validation.
    SampleRng rng = sample_rng(seed, static_cast<uint64_t>(label), kSplitStream);
    for (size_t i = members.size(); i > 1; --i) std::swap(members[i - 1], members[rng.below(i)]);
    const auto count = static_cast<int64_t>(members.size());
    int64_t take = std::llround(fraction * static_cast<double>(count));
    if (count >= 2) take = std::clamp<int64_t>(take, 1, count - 1);
    for (int64_t i = 0; i < count; ++i) (i < take ? out.val : out.train).push_back(members[static_cast<size_t>(i)]);
  }
  std::sort(out.train.begin(), out.train.end());
  std::sort(out.val.begin(), out.val.end());
  return out;
}

}  // namespace ember::data
