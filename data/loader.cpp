#include "loader.h"

#include <numeric>

namespace ember::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  EMBER_CHECK(n >= 0, "epoch_permutation: n = ", n, " is negative");
  EMBER_CHECK(epoch >= 0, "epoch_permutation: epoch ", epoch, " is negative");
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  SampleRng rng = sample_rng(seed, static_cast<uint64_t>(epoch), kShuffleStream);
  // Sequential by nature (each swap depends on the ones before); ~10 ns per element, a few ms
  // for a million samples, once per epoch.
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  return order;
}

DataLoader::DataLoader(const Dataset& dataset, LoaderOptions options)
    // A non-owning shared_ptr (aliasing constructor with no control block): the caller keeps the
    // dataset alive, as the header says.
    : DataLoader(std::shared_ptr<const Dataset>(std::shared_ptr<const Dataset>(), &dataset), std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  const int64_t n = dataset_->size(), b = options_.batch_size;
  EMBER_CHECK(b >= 1, "DataLoader: batch_size ", b, " must be at least 1");
  EMBER_CHECK(n >= 1, "DataLoader: the dataset is empty");
  num_batches_ = options_.drop_last ? n / b : (n + b - 1) / b;
  EMBER_CHECK(num_batches_ >= 1, "DataLoader: drop_last with batch_size ", b, " and ", n,
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
    cache_->order = std::make_shared<const std::vector<int64_t>>(epoch_permutation(dataset_->size(), options_.seed, epoch));
    cache_->epoch = epoch;
  }
  return cache_->order;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  check_batch(epoch, batch, "batch_indices");
  const int64_t n = dataset_->size(), lo = batch * options_.batch_size;
  const int64_t hi = std::min(n, lo + options_.batch_size);
  std::vector<int64_t> indices(static_cast<size_t>(hi - lo));
  if (!options_.shuffle) {
    std::iota(indices.begin(), indices.end(), lo);
    return indices;
  }
  const std::shared_ptr<const std::vector<int64_t>> perm = order(epoch);
  std::copy(perm->begin() + lo, perm->begin() + hi, indices.begin());
  return indices;
}

Batch DataLoader::load_batch(int64_t epoch, int64_t batch) const {
  const std::vector<int64_t> indices = batch_indices(epoch, batch);
  Batch raw = dataset_->get_batch(indices);
  EMBER_CHECK(raw.images.defined() && raw.images.dim() == 4 && raw.labels.defined() && raw.labels.dim() == 1 &&
                  raw.labels.size(0) == static_cast<int64_t>(indices.size()) && raw.labels.dtype() == DType::i64,
              "DataLoader: the dataset's get_batch returned images ",
              raw.images.defined() ? describe(raw.images) : std::string("(undefined)"), " and labels ",
              raw.labels.defined() ? describe(raw.labels) : std::string("(undefined)"), " for ", indices.size(),
              " indices; expected (", indices.size(), ", C, H, W) and (", indices.size(), ",) int64");
  return {apply_batch(options_.transform, raw.images, indices, options_.seed, epoch), raw.labels};
}

DataLoader::Iterator DataLoader::begin() { return Iterator(this); }

DataLoader::Iterator::Iterator(DataLoader* loader) : loader_(loader), epoch_(loader->position_.epoch) { load(); }

void DataLoader::Iterator::load() {
  const LoaderPosition at = loader_->position_;
  // The cursor moved under a running iteration: its batches would no longer be one epoch's.
  EMBER_CHECK(at.epoch == epoch_, "DataLoader: the position was changed to epoch ", at.epoch,
              " while iterating epoch ", epoch_);
  batch_ = loader_->load_batch(at.epoch, at.batch);
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
