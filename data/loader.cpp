#include "loader.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <thread>

#include "../core/profiler.h"
#include "../core/cpu/parallel.h"
#include "../layers/index.h"
#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/augment.h"
#include "../core/cuda/runtime.h"
#endif

namespace ember::data {

namespace detail {

// The worker threads of one iteration over batches [first, end) of `epoch` (Note [Loader workers]).
class Prefetcher {
 public:
  // Starts `workers` threads at once. The loader must outlive the Prefetcher.
  Prefetcher(const DataLoader& loader, int64_t epoch, int64_t first, int64_t end, int workers, int prefetch)
      : loader_(loader), epoch_(epoch), end_(end), capacity_(static_cast<int64_t>(workers) * prefetch),
        next_issue_(first), next_take_(first) {
    threads_.reserve(static_cast<size_t>(workers));
    try {
      for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { work(); });
    } catch (...) {  // a thread failed to start: stop the ones that did before reporting it
      stop();
      throw;
    }
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  ~Prefetcher() { stop(); }

  // The batch the next take() returns.
  int64_t next_batch() const { return next_take_; }

  // Waits for batch next_batch() and returns it, adding the time waited to `waited`; rethrows the
  // exception its load threw (then every later call rethrows it again: the batch stays next).
  Batch take(double& waited) {
    std::unique_lock<std::mutex> lock(mu_);
    EMBER_CHECK(next_take_ < end_, "DataLoader: no batch left in this iteration");
    const auto t0 = std::chrono::steady_clock::now();
    ready_cv_.wait(lock, [&] { return done_.count(next_take_) > 0; });
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto it = done_.find(next_take_);
    if (it->second.error) std::rethrow_exception(it->second.error);
    Batch batch = std::move(it->second.batch);
    done_.erase(it);
    ++next_take_;
    lock.unlock();
    room_cv_.notify_all();  // a window slot opened
    return batch;
  }

 private:
  struct Result {
    Batch batch;
    std::exception_ptr error;
  };

  void work() {
    SerialThreadScope serial;  // kernels inside load_batch run single-threaded on this worker
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      room_cv_.wait(lock, [&] { return stop_ || next_issue_ >= end_ || next_issue_ < next_take_ + capacity_; });
      if (stop_ || next_issue_ >= end_) return;
      const int64_t b = next_issue_++;
      lock.unlock();
      Result r;
      try {
        r.batch = loader_.load_batch(epoch_, b);
      } catch (...) {
        r.error = std::current_exception();
      }
      lock.lock();
      done_.emplace(b, std::move(r));
      ready_cv_.notify_all();
    }
  }

  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    room_cv_.notify_all();
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

  const DataLoader& loader_;
  const int64_t epoch_, end_, capacity_;

  std::mutex mu_;                      // guards everything below
  std::condition_variable room_cv_;    // workers: a window slot opened, or stop
  std::condition_variable ready_cv_;   // consumer: a batch arrived in done_
  int64_t next_issue_;                 // next batch a worker takes
  int64_t next_take_;                  // next batch the consumer takes
  std::map<int64_t, Result> done_;     // the reorder buffer: loaded batches not yet taken
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace detail

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options)
    // A non-owning shared_ptr (aliasing constructor with no control block): the caller keeps the
    // dataset alive, as the header says.
    : DataLoader(std::shared_ptr<const Dataset>(std::shared_ptr<const Dataset>(), &dataset), std::move(options)) {}

namespace detail {

// Note [Data on the device] (loader.h).
struct Resident {
  Device device;
  Tensor images, labels, lut;  // on the device: u8 (N, C, H, W), int64 (N,), float32 (C * 256,)
#if EMBER_CUDA_BACKEND
  kernels::gpu::CropFlip geometry;
#endif
  std::mutex mu;
  int64_t epoch = -1;
  Tensor order;  // the epoch's order, on the device
};

std::shared_ptr<Resident> make_resident(const Dataset& dataset, const LoaderOptions& o) {
  const std::string what = "DataLoader: data_on_device";
  EMBER_CHECK(o.device.is_cuda(), what, " needs a CUDA device, got ", o.device);
  const auto* tensors = dynamic_cast<const TensorDataset*>(&dataset);
  EMBER_CHECK(tensors != nullptr && tensors->images().dtype() == DType::u8 && tensors->images().dim() == 4, what,
              " needs a dataset of u8 images (N, C, H, W) in memory (Fashion-MNIST, MNIST, CIFAR-10)",
              tensors ? ", got images " + describe(tensors->images()) : std::string());
  const std::optional<FusedPlan> plan = fused_plan(o.transform);
  EMBER_CHECK(plan.has_value(), what, ": the transform ", o.transform ? o.transform->name() : std::string("(none)"),
              " is not of the form [RandomCrop] [RandomHorizontalFlip] ToTensor [Normalize]");
  EMBER_CHECK(!o.mix.enabled(), what, ": Mixup and CutMix run on the host");
  EMBER_CHECK(o.pin_memory == PinMemory::off, what, ": nothing is copied per batch, so pin_memory has no use");
  const Tensor& images = tensors->images();
  const int64_t c = images.size(1), h = images.size(2), w = images.size(3);
  if (plan->normalize) {
    const size_t m = plan->normalize->mean().size();
    EMBER_CHECK(m == 1 || static_cast<int64_t>(m) == c, what, ": ", plan->normalize->name(), " has ", m,
                " means for ", c, " channels");
  }
  if (plan->crop)
    EMBER_CHECK(plan->crop->height() <= h + 2 * plan->crop->padding() && plan->crop->width() <= w + 2 * plan->crop->padding(),
                what, ": ", plan->crop->name(), " is larger than the padded image (", h, ", ", w, ")");
#if EMBER_CUDA_BACKEND
  auto r = std::make_shared<Resident>();
  r->device = o.device;
  r->images = images.contiguous().to(o.device);
  r->labels = tensors->labels().to(o.device);
  r->lut = from_vector(to_tensor_lut(plan->normalize, c)).to(o.device);
  kernels::gpu::CropFlip& g = r->geometry;
  g.channels = c, g.height = h, g.width = w;
  g.crop = plan->crop != nullptr;
  g.out_height = g.crop ? plan->crop->height() : h;
  g.out_width = g.crop ? plan->crop->width() : w;
  g.padding = g.crop ? plan->crop->padding() : 0;
  g.flip = plan->flip != nullptr;
  g.flip_p = g.flip ? plan->flip->p() : 0.0;
  return r;
#else
  EMBER_THROW(what, " needs a build with a CUDA backend");
#endif
}

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  const int64_t n = dataset_->size(), b = options_.batch_size;
  EMBER_CHECK(b >= 1, "DataLoader: batch_size ", b, " must be at least 1");
  EMBER_CHECK(n >= 1, "DataLoader: the dataset is empty");
  EMBER_CHECK(options_.num_workers >= 0, "DataLoader: num_workers ", options_.num_workers, " is negative");
  EMBER_CHECK(options_.prefetch >= 1, "DataLoader: prefetch ", options_.prefetch, " must be at least 1");
  EMBER_CHECK(std::isfinite(options_.mix.mixup_alpha) && std::isfinite(options_.mix.cutmix_alpha) &&
                  options_.mix.mixup_alpha >= 0 && options_.mix.cutmix_alpha >= 0,
              "DataLoader: Mixup and CutMix alphas (", options_.mix.mixup_alpha, ", ", options_.mix.cutmix_alpha,
              ") must be finite and non-negative");
  EMBER_CHECK(!options_.mix.enabled() || options_.mix.num_classes >= 1, "DataLoader: Mixup/CutMix needs num_classes");
  EMBER_CHECK(options_.pin_memory == PinMemory::off || cuda_built(),
              "DataLoader: pin_memory needs a build with a CUDA backend (page-locked host memory)");
  if (options_.device.is_cuda()) {
    EMBER_CHECK(cuda_built(), "DataLoader: device ", options_.device, " needs a build with a CUDA backend");
    EMBER_CHECK(options_.device.index < cuda_device_count(), "DataLoader: device ", options_.device,
                " does not exist (this machine has ", cuda_device_count(), " CUDA devices)");
  }
  if (options_.sampler) {
    EMBER_CHECK(!options_.shuffle, "DataLoader: shuffle must be off with a sampler (the sampler sets the order)");
    EMBER_CHECK(options_.sampler->dataset_size() == n, "DataLoader: the sampler indexes a dataset of ",
                options_.sampler->dataset_size(), " samples, the dataset has ", n);
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    sampler_ = std::make_shared<const RandomSampler>(n, options_.seed);
  } else {
    sampler_ = std::make_shared<const SequentialSampler>(n);
  }
  if (options_.data_on_device) resident_ = detail::make_resident(*dataset_, options_);
  const int64_t s = sampler_->size();
  EMBER_CHECK(s >= 1, "DataLoader: the sampler yields no indices from ", n, " samples");
  num_batches_ = options_.drop_last ? s / b : (s + b - 1) / b;
  EMBER_CHECK(num_batches_ >= 1, "DataLoader: drop_last with batch_size ", b, " and ", s,
              " samples leaves no batch");
}

void DataLoader::set_position(LoaderPosition position) {
  EMBER_CHECK(position.epoch >= 0 && position.epoch < (int64_t{1} << 32) && position.batch >= 0 &&
                  position.batch <= num_batches_,
              "DataLoader::set_position: (epoch ", position.epoch, ", batch ", position.batch,
              ") is outside epochs [0, 2^32) and batches [0, ", num_batches_, "]");
  position_ = position.batch == num_batches_ ? LoaderPosition{position.epoch + 1, 0} : position;
}

void DataLoader::check_batch(int64_t epoch, int64_t batch, const char* op) const {
  EMBER_CHECK(epoch >= 0 && epoch < (int64_t{1} << 32), "DataLoader::", op, ": epoch ", epoch,
              " is outside [0, 2^32)");
  EMBER_CHECK(batch >= 0 && batch < num_batches_, "DataLoader::", op, ": batch ", batch, " is outside [0, ",
              num_batches_, ")");
}

std::shared_ptr<const std::vector<int64_t>> DataLoader::order(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->epoch != epoch || !cache_->order) {
    auto indices = std::make_shared<const std::vector<int64_t>>(sampler_->indices(epoch));
    EMBER_CHECK(static_cast<int64_t>(indices->size()) == sampler_->size(), "DataLoader: the sampler gave ",
                indices->size(), " indices for epoch ", epoch, ", its size() is ", sampler_->size());
    cache_->order = std::move(indices);
    cache_->epoch = epoch;
  }
  return cache_->order;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  check_batch(epoch, batch, "batch_indices");
  const int64_t n = sampler_->size(), lo = batch * options_.batch_size;
  const int64_t hi = std::min(n, lo + options_.batch_size);
  std::vector<int64_t> indices(static_cast<size_t>(hi - lo));
  const std::shared_ptr<const std::vector<int64_t>> perm = order(epoch);
  std::copy(perm->begin() + lo, perm->begin() + hi, indices.begin());
  return indices;
}

Batch DataLoader::load_resident_batch(int64_t epoch, int64_t batch) const {
#if EMBER_CUDA_BACKEND
  detail::Resident& r = *resident_;
  const cuda::DeviceGuard guard(r.device.index);
  const int64_t lo = batch * options_.batch_size, hi = std::min(sampler_->size(), lo + options_.batch_size);
  Tensor order;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.epoch != epoch) {  // once per epoch: the order, 8 bytes a sample
      r.order = from_vector(*this->order(epoch)).to(r.device);
      r.epoch = epoch;
    }
    order = r.order;
  }
  const Tensor indices = order.slice(0, lo, hi);
  const kernels::gpu::CropFlip& g = r.geometry;
  Batch b;
  b.images = empty({hi - lo, g.channels, g.out_height, g.out_width}, {.dtype = DType::f32, .device = r.device});
  const Tensor draws = empty({3 * (hi - lo)}, {.dtype = DType::i32, .device = r.device});
  kernels::gpu::crop_flip_lut(r.images.data_ptr<uint8_t>(), indices.data_ptr<int64_t>(), hi - lo, g,
                              r.lut.data_ptr<float>(), options_.seed, epoch, draws.data_ptr<int32_t>(),
                              b.images.data_ptr<float>());
  b.labels = index_select(r.labels, 0, indices);
  return b;
#else
  (void)epoch, (void)batch;
  EMBER_THROW("DataLoader: data_on_device needs a build with a CUDA backend");
#endif
}

Batch DataLoader::load_batch(int64_t epoch, int64_t batch) const {
  if (resident_) {
    check_batch(epoch, batch, "load_batch");
    return load_resident_batch(epoch, batch);
  }
  const std::vector<int64_t> indices = batch_indices(epoch, batch);
  Batch b = dataset_->load_transformed(indices, options_.transform, options_.seed, epoch);
  if (options_.mix.enabled()) b = mix_batch(b, options_.mix, options_.seed, epoch, batch);
  return b;
}

DataLoader::Iterator DataLoader::begin() { return Iterator(this); }

namespace detail {

// Note [Batches on the device] (loader.h).
class DeviceCopier {
 public:
#if EMBER_CUDA_BACKEND
  explicit DeviceCopier(Device device) : device_(device), stream_(device.index), ready_(device.index) {}
  Batch copy(const Batch& host) {
    const cuda::DeviceGuard guard(device_.index);
    const cuda::Stream compute = cuda::current_stream();
    Batch out;
    {
      const cuda::StreamGuard on_copy(stream_.get());
      out.images = host.images.to(device_, /*non_blocking=*/true);
      out.labels = host.labels.to(device_, /*non_blocking=*/true);
      ready_.record(stream_.get());
    }
    ready_.wait_on(compute);
    for (const Tensor* t : {&out.images, &out.labels})
      if (t->numel() > 0) cuda::record_stream(t->storage()->data(), device_.index, compute);
    return out;
  }

 private:
  Device device_;
  cuda::StreamHandle stream_;
  cuda::Event ready_;
#else
  explicit DeviceCopier(Device device) { EMBER_THROW("DataLoader: device ", device, " needs a CUDA backend"); }
  Batch copy(const Batch& host) { return host; }
#endif
};

}  // namespace detail

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), epoch_(loader->position_.epoch) {
  const LoaderOptions& o = loader->options_;
  if (o.num_workers > 0 && !loader->resident_) {
    prefetcher_ = std::make_unique<detail::Prefetcher>(*loader, epoch_, loader->position_.batch, loader->num_batches_,
                                                       o.num_workers, o.prefetch);
  }
  if (o.device.is_cuda() && !loader->resident_) copier_ = std::make_unique<detail::DeviceCopier>(o.device);
  load();
}

DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;

void DataLoader::Iterator::load() {
  const profiler::Scope scope("next batch", profiler::Phase::data);
  const LoaderPosition at = loader_->position_;
  // The cursor moved under a running iteration: its batches would no longer be one epoch's.
  EMBER_CHECK(at.epoch == epoch_, "DataLoader: the position was changed to epoch ", at.epoch,
              " while iterating epoch ", epoch_);
  if (prefetcher_) {
    // The workers load the batches after the iteration's start in order; a moved cursor would skip.
    EMBER_CHECK(at.batch == prefetcher_->next_batch(), "DataLoader: the position was changed to batch ", at.batch,
                " while the workers load from batch ", prefetcher_->next_batch());
    double waited = 0;
    batch_ = prefetcher_->take(waited);
    loader_->stats_.wait_seconds += waited;
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    batch_ = loader_->load_batch(at.epoch, at.batch);
    loader_->stats_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  if (loader_->options_.pin_memory == PinMemory::on) {
    batch_.images = batch_.images.pin_memory();
    batch_.labels = batch_.labels.pin_memory();
  }
  if (copier_) batch_ = copier_->copy(batch_);
  ++loader_->stats_.batches;
  // Advance only after the batch loaded: a throwing load leaves the position on that batch.
  last_ = at.batch + 1 == loader_->num_batches_;
  loader_->position_ = last_ ? LoaderPosition{at.epoch + 1, 0} : LoaderPosition{at.epoch, at.batch + 1};
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (last_)
    done_ = true;
  else
    load();
  return *this;
}

}  // namespace ember::data
