#pragma once
// DataLoader: batches of a Dataset, shuffled per epoch, transformed per sample, resumable.
//
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1,
//                                   .transform = data::Compose{data::ToTensor(), data::Normalize({0.286}, {0.353})}});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (auto& [images, labels] : loader) { ... }   // images (N, C, H, W) f32, labels (N,) i64
//
// Note [Loader determinism and positions]
// Batch b of epoch e is a pure function of (dataset, options, e, b): the epoch's order is a
// Fisher-Yates shuffle driven by the stream sample_rng(seed, e, kShuffleStream), and every
// sample is transformed with sample_rng(seed, e, dataset index) (data/random.h). Nothing
// depends on what was loaded before, on threads, or (for the threaded loader of a later issue)
// on the worker count: load_batch(e, b) is the unit of work a worker runs, and batches are
// handed out in b order.
//
// The loader is also a cursor: position() is the next batch the iteration hands out. Handing out
// batch b of epoch e moves it to (e, b + 1), or to (e + 1, 0) after the epoch's last batch, so a
// plain epoch loop gets a fresh order each epoch without set_epoch, a loop left early resumes
// where it stopped, and a checkpoint that saves position() inside the loop body (after the step
// on that batch) resumes with exactly the batches not yet trained on: set_position(saved).
//
// The trainer needs only the constructor, range-for, size() and position()/set_position(); a
// threaded loader keeps those, adding options (num_workers, prefetch) that default to today's
// behaviour.

#include <concepts>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include "dataset.h"
#include "transforms.h"

namespace ember::data {

struct LoaderOptions {
  int64_t batch_size = 1;  // >= 1
  bool shuffle = false;    // a new order each epoch; off: dataset order
  bool drop_last = false;  // drop the final batch when it would be smaller than batch_size
  uint64_t seed = 0;       // keys the shuffle and the per-sample transform streams
  // Applied to every sample (see apply_batch). Empty: u8 images become float32 as ToTensor makes them.
  AnyTransform transform;
};

// Where the loader is: the next batch to hand out is batch `batch` of epoch `epoch`.
struct LoaderPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

// The order of epoch `epoch`: a permutation of [0, n) by Fisher-Yates (i from n-1 down to 1 swaps
// i with below(i + 1)) drawing from sample_rng(seed, epoch, kShuffleStream).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

class DataLoader {
 public:
  class Iterator;

  // Reads `dataset`, which must outlive the loader. Throws ember::Error when batch_size < 1, the
  // dataset is empty, or drop_last leaves no batch at all.
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

  // Batches per epoch: ceil(N / batch_size), or floor with drop_last.
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

  // The dataset indices in batch `batch` of epoch `epoch` (in batch order).
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;
  // Loads batch `batch` of epoch `epoch` without moving the cursor. Thread-safe.
  Batch load_batch(int64_t epoch, int64_t batch) const;

  // Iteration from position() to the end of its epoch; each batch handed out advances position().
  // One iteration at a time per loader; don't move the cursor while iterating.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

 private:
  void check_batch(int64_t epoch, int64_t batch, const char* op) const;
  // The epoch's order, cached for the most recent epoch.
  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) const;

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  int64_t num_batches_ = 0;
  LoaderPosition position_;

  struct OrderCache {
    std::mutex mu;
    int64_t epoch = -1;
    std::shared_ptr<const std::vector<int64_t>> order;
  };
  std::unique_ptr<OrderCache> cache_ = std::make_unique<OrderCache>();
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

 private:
  friend class DataLoader;
  explicit Iterator(DataLoader* loader);
  void load();  // loads the batch at the loader's position and advances it

  DataLoader* loader_ = nullptr;
  int64_t epoch_ = 0;
  Batch batch_;
  bool last_ = false;  // batch_ is the epoch's last batch
  bool done_ = false;
};

}  // namespace ember::data
