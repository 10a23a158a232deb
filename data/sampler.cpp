#include "sampler.h"

#include <numeric>
#include <utility>

#include "../core/error.h"
#include "../core/sample_rng.h"

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

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  EMBER_CHECK(n >= 0, "SequentialSampler: n = ", n, " is negative");
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> order(static_cast<size_t>(n_));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  EMBER_CHECK(n >= 0, "RandomSampler: n = ", n, " is negative");
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return epoch_permutation(n_, seed_, epoch); }

DistributedSampler::DistributedSampler(int64_t n, DistributedOptions options) : n_(n), options_(options) {
  const int64_t w = options_.world_size;
  EMBER_CHECK(n >= 0, "DistributedSampler: n = ", n, " is negative");
  EMBER_CHECK(w >= 1, "DistributedSampler: world_size ", w, " must be at least 1");
  EMBER_CHECK(options_.rank >= 0 && options_.rank < w, "DistributedSampler: rank ", options_.rank,
              " is outside [0, ", w, ")");
  // PyTorch: math.ceil((len - num_replicas) / num_replicas) when dropping an uneven tail, else
  // math.ceil(len / num_replicas). For n % w != 0 the first is floor(n / w).
  num_samples_ = options_.drop_last && n % w != 0 ? n / w : (n + w - 1) / w;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = epoch_permutation(n_, options_.seed, epoch);
  } else {
    EMBER_CHECK(epoch >= 0, "DistributedSampler: epoch ", epoch, " is negative");
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = total_size(), w = options_.world_size;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  // Position p of the padded (or cut) list is order[p % n]: padding repeats the order from its
  // start, as often as needed (PyTorch's `indices * ceil(padding / len)`); with drop_last, total <= n.
  for (int64_t p = options_.rank; p < total; p += w) mine.push_back(order[static_cast<size_t>(p % n_)]);
  return mine;
}

}  // namespace ember::data
