#pragma once
// DataLoader: batches of a Dataset, shuffled per epoch, transformed per sample, resumable.
//
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1,
//                                   .transform = data::Compose{data::ToTensor(), data::Normalize({0.286}, {0.353})}});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto& [images, labels] : loader) { ... }   // images (N, C, H, W) f32, labels (N,) i64
//   // The same batches, loaded ahead by 2 worker threads (Note [Loader workers]):
//   data::DataLoader fast(train, {.batch_size = 64, .shuffle = true, .seed = 1, .num_workers = 2});
//
// Note [Loader determinism and positions]
// Batch b of epoch e is a pure function of (dataset, options, e, b): the epoch's order is a
// Fisher-Yates shuffle driven by the stream sample_rng(seed, e, kShuffleStream), and every
// sample is transformed with sample_rng(seed, e, dataset index) (core/sample_rng.h). With a sampler
// (data/sampler.h) the order is sampler.indices(e) instead. Nothing depends on what was loaded
// before, on threads, or on the worker count: load_batch(e, b) is the unit of work a worker
// runs, and batches are handed out in b order (Note [Loader workers]).
//
// The loader is also a cursor: position() is the next batch the iteration hands out. Handing out
// batch b of epoch e moves it to (e, b + 1), or to (e + 1, 0) after the epoch's last batch, so a
// plain epoch loop gets a fresh order each epoch without set_epoch, a loop left early resumes
// where it stopped, and a checkpoint that saves position() inside the loop body (after the step
// on that batch) resumes with exactly the batches not yet trained on: set_position(saved).
//
// The trainer needs only the constructor, range-for, size() and position()/set_position(); the
// threaded loader keeps those, adding options (num_workers, prefetch) whose defaults are the
// single-threaded behaviour.
//
// Note [Loader workers]
// With num_workers = N > 0, each iteration (begin() up to the iterator's destruction) runs N
// std::threads. They take batch indices in order from a shared counter, run load_batch(e, b),
// and put the result (or the exception it threw) into a reorder buffer keyed by b; the iterator
// takes b, b + 1, ... from it, so the consumer sees exactly the batches of num_workers = 0. A
// worker may take batch b only while b < (next batch the consumer takes) + N * prefetch: at most
// N * prefetch batches are loaded ahead, ready or in flight. An exception from batch b is
// rethrown, unchanged, by the iterator when it reaches b (the position stays on b, as without
// workers). Destroying the iterator (the end of a range-for, a break, an exception) stops the
// workers: none takes a new batch, each finishes the one it is loading, all are joined; so
// abandoning an epoch costs at most one batch's load time. Workers load inside a
// SerialThreadScope (core/cpu/parallel.h): their kernels run single-threaded, rather than N
// OpenMP teams of all cores fighting the training step for the same cores.
//
// Note [Batches on the device]
// With `device` a CUDA device, the iterator hands out batches already on it. Each host batch is
// copied on the loader's own copy stream (pinned first when pin_memory is on, so the copy is a
// true asynchronous DMA); an event recorded after the copy makes the consumer's current stream
// wait for it, and the device tensors are marked as used by that stream (record_stream), so the
// caching allocator does not hand their memory to the copy stream again while compute still
// reads it. The host never waits: the copy of batch b+1 overlaps the kernels of step b still
// running on the GPU. A CPU-only build refuses a CUDA device or pin_memory with a clear error.
//
// Note [Data on the device]
// A dataset that fits in device memory (Fashion-MNIST's 47 MB, CIFAR-10's 150 MB, as u8) need
// not cross the bus every step. With data_on_device the loader copies the dataset's u8 images
// and labels to `device` once, at construction, and each epoch's order once per epoch (8 bytes a
// sample); a batch is then a slice of that order, gathered, cropped, flipped and normalized by
// kernels (kernels/cuda/augment.h) from the same per-sample Philox streams the host uses, so the
// batches are bit-identical to the host loader's. It needs a TensorDataset of u8 (N, C, H, W)
// images, a transform of the fused form [RandomCrop] [RandomHorizontalFlip] ToTensor [Normalize]
// (Note [Fused batch transforms]), no Mixup/CutMix and no pinned memory; num_workers is unused
// (there is no host work left to spread).

#include <concepts>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include "dataset.h"
#include "mix.h"
#include "sampler.h"
#include "transforms.h"

namespace ember::data {

enum class PinMemory { off, on };

struct LoaderOptions {
  int64_t batch_size = 1;  // >= 1
  bool shuffle = false;    // a new order each epoch; off: dataset order
  bool drop_last = false;  // drop the final batch when it would be smaller than batch_size
  uint64_t seed = 0;       // keys the shuffle and the per-sample transform streams
  // Applied to every sample (see apply_batch). Empty: u8 images become float32 as ToTensor makes them.
  AnyTransform transform;
  // Mixup / CutMix on each batch after the transform (Note [Mixup and CutMix] in data/mix.h): the
  // batch's labels become (N, num_classes) float32 class probabilities. Off by default.
  MixOptions mix;
  // Worker threads per iteration (Note [Loader workers]); 0 loads in the iterating thread. >= 0.
  int num_workers = 0;
  // Batches loaded ahead per worker (ready or in flight), with num_workers > 0. >= 1.
  int prefetch = 2;
  // Which indices each epoch visits, in which order (data/sampler.h); its dataset_size() must be
  // the dataset's size, and shuffle must be off (the sampler decides the order, as in PyTorch).
  // Null: RandomSampler(N, seed) when shuffle is on, else SequentialSampler(N).
  std::shared_ptr<const Sampler> sampler = nullptr;
  // Page-locked batches for asynchronous host-to-device copies: needs the CUDA backend (a later
  // issue); PinMemory::on throws ember::Error until then.
  PinMemory pin_memory = PinMemory::off;
  Device device = Device::cpu();  // where batches are delivered (Note [Batches on the device])
  // Keep the whole dataset on `device` and transform batches there (Note [Data on the device]).
  bool data_on_device = false;
};

// How long the iterating thread waited for batches: with workers, the time a batch was not yet
// ready when asked for; without, the whole load. Accumulated over every iteration of a loader.
struct LoaderStats {
  int64_t batches = 0;       // batches handed out by iterations
  double wait_seconds = 0;   // total seconds the consumer waited for them, >= 0
};

// Where the loader is: the next batch to hand out is batch `batch` of epoch `epoch`.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

namespace detail {
class Prefetcher;   // the worker threads of one iteration (loader.cpp)
class DeviceCopier;  // the copy stream and event of one iteration (loader.cpp)
struct Resident;     // the dataset on the device, with data_on_device (loader.cpp)
}

class DataLoader {
 public:
  class Iterator;

  // Reads `dataset`, which must outlive the loader. Throws ember::Error when batch_size < 1, the
  // dataset is empty, drop_last leaves no batch at all, num_workers < 0, prefetch < 1, the
  // sampler doesn't match the dataset or comes with shuffle, or pin_memory is requested.
  DataLoader(const Dataset& dataset, LoaderOptions options);
  // Shares ownership of the dataset.
  DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  // Takes a temporary dataset over (DataLoader(data::fashion_mnist(dir, Split::train), {...})),
  // which the reference constructor would leave dangling.
  template <typename D>
    requires std::derived_from<std::remove_cvref_t<D>, Dataset> && (!std::is_lvalue_reference_v<D>)
  DataLoader(D&& dataset, LoaderOptions options)
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<const std::remove_cvref_t<D>>(std::move(dataset))),
                   std::move(options)) {}

  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;
  DataLoader(DataLoader&&) = default;
  DataLoader& operator=(DataLoader&&) = default;

  // Batches per epoch: ceil(S / batch_size), or floor with drop_last, for S the sampler's size()
  // (the dataset's size N without a sampler).
  int64_t size() const { return num_batches_; }
  const Dataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return options_; }

  // The next batch the iteration hands out (Note [Loader determinism and positions]).
  LoaderPosition position() const { return position_; }
  // Moves the cursor: 0 <= epoch < 2^32, 0 <= batch <= size(); batch == size() means the epoch
  // is done and is stored as (epoch + 1, 0). Throws ember::Error outside those ranges.
  void set_position(LoaderPosition position);
  // set_position({epoch, 0}), as PyTorch's sampler.set_epoch: the next iteration runs epoch `epoch`
  // from its first batch.
  void set_epoch(int64_t epoch) { set_position({epoch, 0}); }
  int64_t epoch() const { return position_.epoch; }

  // Batches handed out and time waited for them, over all iterations so far. Read it from the
  // iterating thread (between batches or after an iteration); reset_stats() zeroes it.
  LoaderStats stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

  // The dataset indices in batch `batch` of epoch `epoch` (in batch order).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;
  // Loads batch `batch` of epoch `epoch` without moving the cursor: the dataset's
  // load_transformed(batch_indices(...), transform, seed, epoch), then mix_batch when mix is on. Thread-safe. A dataset that skips
  // unreadable files (data/image_dataset.h, BadImages::skip) returns fewer rows, possibly none.
  Batch load_batch(int64_t epoch, int64_t batch) const;

  // Iteration from position() to the end of its epoch; each batch handed out advances position().
  // One iteration at a time per loader; don't move the cursor, or move or destroy the loader,
  // while iterating. With workers, begin() starts them and the iterator's destruction stops them.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

 private:
  void check_batch(int64_t epoch, int64_t batch, const char* op) const;
  // The epoch's order, cached for the most recent epoch.
  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) const;
  // With data_on_device: batch `batch` of epoch `epoch` made on the device.
  Batch load_resident_batch(int64_t epoch, int64_t batch) const;

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;  // never null after construction
  int64_t num_batches_ = 0;
  LoaderPosition position_;
  LoaderStats stats_;

  struct OrderCache {
    std::mutex mu;
    int64_t epoch = -1;
    std::shared_ptr<const std::vector<int64_t>> order;
  };
  std::unique_ptr<OrderCache> cache_ = std::make_unique<OrderCache>();
  std::shared_ptr<detail::Resident> resident_;  // null without data_on_device
};

class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;

  Batch& operator*() { return batch_; }
  Batch* operator->() { return &batch_; }
  Iterator& operator++();
  bool operator==(std::default_sentinel_t) const { return done_; }

  // Move-only: it may own worker threads. Destruction stops and joins them (never throws).
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

 private:
  friend class DataLoader;
  explicit Iterator(DataLoader* loader);
  void load();  // loads the batch at the loader's position and advances it

  DataLoader* loader_ = nullptr;
  std::unique_ptr<detail::Prefetcher> prefetcher_;  // null without workers
  std::unique_ptr<detail::DeviceCopier> copier_;    // null for CPU batches
  int64_t epoch_ = 0;
  Batch batch_;
  bool last_ = false;  // batch_ is the epoch's last batch
  bool done_ = false;
};

}  // namespace ember::data
