#pragma once
// Samplers: which dataset indices an epoch visits, in which order. A pure function of the epoch,
// like everything in the loader (Note [Loader determinism and positions] in data/loader.h).
//
//   // Rank 1 of 4 (e.g. one process per GPU) reads its quarter of the data, reshuffled each epoch:
//   data::DataLoader loader(train, {.batch_size = 64,
//                                   .sampler = std::make_shared<data::DistributedSampler>(
//                                       train.size(), data::DistributedOptions{.rank = 1, .world_size = 4, .seed = 7})});
//   loader.set_epoch(e);  // as PyTorch's sampler.set_epoch(e): the loader passes its epoch to the sampler
//
// A loader without a sampler uses RandomSampler(N, seed) when shuffle is on, else SequentialSampler(N).

#include <cstdint>
#include <vector>

namespace ember::data {

// The order of epoch `epoch`: a permutation of [0, n) by Fisher-Yates (i from n-1 down to 1 swaps
// i with below(i + 1)) drawing from sample_rng(seed, epoch, kShuffleStream) (core/sample_rng.h).
// Throws ember::Error when n or epoch is negative.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// The interface. Implementations are immutable after construction, so a loader's worker threads
// may call indices() concurrently.
class Sampler {
 public:
  virtual ~Sampler() = default;
  // The size of the dataset the sampler indexes; the loader checks it against its dataset.
  virtual int64_t dataset_size() const = 0;
  // Indices per epoch (the length of indices(e) for every e).
  virtual int64_t size() const = 0;
  // The epoch's indices, each in [0, dataset_size()); a pure function of `epoch` (>= 0).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

// 0, 1, ..., n - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);  // n >= 0
  int64_t dataset_size() const override { return n_; }
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
};

// epoch_permutation(n, seed, epoch): a new order each epoch, every index once.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);  // n >= 0
  int64_t dataset_size() const override { return n_; }
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

struct DistributedOptions {
  int64_t rank = 0;        // 0 <= rank < world_size
  int64_t world_size = 1;  // >= 1
  bool shuffle = true;     // a new order each epoch (the same on every rank); off: dataset order
  uint64_t seed = 0;       // keys the shuffle; must be the same on every rank
  bool drop_last = false;  // drop the tail so every rank gets floor(N / world) instead of padding to ceil
};

// PyTorch's torch.utils.data.DistributedSampler, rule for rule:
//   order      = shuffle ? epoch_permutation(N, seed, epoch) : 0..N-1
//   num_samples = drop_last && N % world != 0 ? ceil((N - world) / world) : ceil(N / world)
//   total      = num_samples * world
//   !drop_last: order is padded to `total` by repeating it from its start (as often as needed)
//    drop_last: order is cut to `total`
//   indices    = order[rank : total : world]
// The one difference is the shuffle: PyTorch draws torch.randperm from a generator seeded with
// seed + epoch; ember uses its own epoch_permutation (counter-based, see core/sample_rng.h). So the
// shuffled orders differ from PyTorch's, while the sharding and padding are PyTorch's exactly.
// Over all ranks the indices cover the dataset (padding repeats some) unless drop_last drops the
// tail; without padding they partition it.
class DistributedSampler : public Sampler {
 public:
  // Throws ember::Error on a negative n, world_size < 1, or a rank outside [0, world_size).
  DistributedSampler(int64_t n, DistributedOptions options);
  int64_t dataset_size() const override { return n_; }
  int64_t size() const override { return num_samples_; }
  // Indices of this rank in `epoch`.
  std::vector<int64_t> indices(int64_t epoch) const override;
  // num_samples * world_size: the padded (or cut) length before sharding.
  int64_t total_size() const { return num_samples_ * options_.world_size; }
  const DistributedOptions& options() const { return options_; }

 private:
  int64_t n_;
  DistributedOptions options_;
  int64_t num_samples_ = 0;
};

}  // namespace ember::data
