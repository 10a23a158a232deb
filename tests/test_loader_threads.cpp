// The threaded DataLoader (Note [Loader workers] in data/loader.h) and the samplers
// (data/sampler.h): the same batches whatever the worker count, strict batch order, worker
// exceptions rethrown in the consumer, prompt shutdown on an abandoned epoch, resume with
// workers, wait statistics, and DistributedSampler's PyTorch sharding rule.

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <ember/data/loader.h>
#include <ember/data/sampler.h>
#include <ember/ember.h>
#include <ember/core/cpu/parallel.h>

#include "test_util.h"

using namespace ember;
using testing::position_at_crash;
using testing::run_epochs;

namespace {

// Sample i: a (1, 3, 3) u8 image filled with i % 256, label i. Optionally slow (sleeps `delay`
// per sample, or a delay that shrinks with the index so later batches finish first), and
// optionally corrupt at one index, which throws as a broken image file would.
class ProbeDataset : public data::Dataset {
 public:
  struct Options {
    int64_t n = 10;
    std::chrono::microseconds delay{0};
    bool shrinking_delay = false;  // delay * (n - i) / n: later samples load faster
    int64_t bad_index = -1;
  };
  explicit ProbeDataset(Options o) : o_(o) {}

  int64_t size() const override { return o_.n; }
  data::Example get(int64_t i) const override {
    EMBER_CHECK(i >= 0 && i < o_.n, "ProbeDataset: index ", i, " out of range");
    if (i == o_.bad_index) throw Error("bad.png: truncated");
    auto d = o_.delay;
    if (o_.shrinking_delay) d = d * (o_.n - i) / o_.n;
    if (d.count() > 0) std::this_thread::sleep_for(d);
    std::vector<uint8_t> px(9, static_cast<uint8_t>(i % 256));
    return {from_vector(px, {1, 3, 3}), i};
  }

 private:
  Options o_;
};

double seconds_of(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

data::AnyTransform augment() {
  return data::Compose{data::RandomCrop(3, 1), data::RandomHorizontalFlip(), data::ToTensor()};
}

void check_same(const std::vector<data::Batch>& a, const std::vector<data::Batch>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].labels.to_vector<int64_t>() == b[i].labels.to_vector<int64_t>());
    CHECK(a[i].images.shape() == b[i].images.shape());
    CHECK(a[i].images.to_vector<float>() == b[i].images.to_vector<float>());  // bit-identical
  }
}

}  // namespace

TEST_CASE("loader threads: the same batches with 0, 1 and 3 workers", "[data]") {
  const ProbeDataset ds({.n = 37});
  data::LoaderOptions opt{.batch_size = 4, .shuffle = true, .seed = 5, .transform = augment()};
  data::DataLoader serial(ds, opt);
  const std::vector<data::Batch> ref = run_epochs(serial, 3);
  REQUIRE(ref.size() == 30);
  for (int workers : {1, 3}) {
    for (int prefetch : {1, 2, 5}) {
      INFO("num_workers " << workers << ", prefetch " << prefetch);
      opt.num_workers = workers;
      opt.prefetch = prefetch;
      data::DataLoader threaded(ds, opt);
      check_same(run_epochs(threaded, 3), ref);
      CHECK(threaded.position() == data::LoaderPosition{3, 0});
    }
  }
}

TEST_CASE("loader threads: batches arrive in batch order when workers finish out of order", "[data]") {
  // Early samples are the slowest, so later batches are ready first: the reorder buffer must hold them.
  const ProbeDataset ds({.n = 24, .delay = std::chrono::microseconds(2000), .shrinking_delay = true});
  data::DataLoader loader(ds, {.batch_size = 2, .num_workers = 3, .prefetch = 3});
  std::vector<int64_t> seen;
  for (auto& [images, labels] : loader) {
    const std::vector<int64_t> l = labels.to_vector<int64_t>();
    seen.insert(seen.end(), l.begin(), l.end());
  }
  std::vector<int64_t> expect(24);
  std::iota(expect.begin(), expect.end(), 0);
  CHECK(seen == expect);
}

TEST_CASE("loader threads: a worker's exception is rethrown at its batch, message intact", "[data]") {
  const ProbeDataset ds({.n = 30, .bad_index = 13});  // batch 3 with batch_size 4
  for (int workers : {0, 2}) {
    INFO("num_workers " << workers);
    data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    int64_t handed = 0;
    const std::string msg = testing::error_of([&] {
      for (auto& batch : loader) {
        (void)batch;
        ++handed;
      }
    });
    CHECK(msg == "bad.png: truncated");
    CHECK(handed == 3);
    // The position stays on the failing batch; a new iteration fails there again, not later.
    CHECK(loader.position() == data::LoaderPosition{0, 3});
    CHECK(testing::error_of([&] {
            for (auto& batch : loader) (void)batch;
          }) == "bad.png: truncated");
    // Skipping the batch (as a caller that logs and moves on would) continues after it.
    loader.set_position({0, 4});
    int64_t rest = 0;
    for (auto& batch : loader) rest += batch.labels.numel();
    CHECK(rest == 30 - 16);
  }
}

TEST_CASE("loader threads: abandoning an epoch or destroying the loader stops the workers promptly", "[data]") {
  // 4 ms per sample, 16 ms per batch, 250 batches (4 s) per epoch: joining must not wait for the epoch.
  const ProbeDataset ds({.n = 1000, .delay = std::chrono::microseconds(4000)});
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round);
    auto t0 = std::chrono::steady_clock::now();
    {
      data::DataLoader loader(ds, {.batch_size = 4, .num_workers = 3, .prefetch = 2});
      int64_t taken = 0;
      for (auto& batch : loader) {
        (void)batch;
        if (++taken == 2) {
          t0 = std::chrono::steady_clock::now();
          break;  // the iterator's destruction stops the workers
        }
      }
      CHECK(loader.position() == data::LoaderPosition{0, 2});
      CHECK(seconds_of(t0) < 1.0);
      // An iteration begun and dropped at once, then the loader destroyed.
      { auto it = loader.begin(); }
      t0 = std::chrono::steady_clock::now();
    }
    CHECK(seconds_of(t0) < 1.0);
  }
}

TEST_CASE("loader threads: resume from a saved position with workers", "[data]") {
  const ProbeDataset ds({.n = 23});
  data::LoaderOptions opt{.batch_size = 4, .shuffle = true, .seed = 77, .transform = augment()};
  data::DataLoader ref(ds, opt);
  const std::vector<data::Batch> all = run_epochs(ref, 3);
  REQUIRE(all.size() == 18);

  opt.num_workers = 2;
  const data::LoaderPosition saved = position_at_crash(ds, opt, {1, 3});
  REQUIRE(saved == data::LoaderPosition{1, 3});
  opt.num_workers = 3;
  data::DataLoader resumed(ds, opt);
  resumed.set_position(saved);
  check_same(run_epochs(resumed, 2), std::vector<data::Batch>(all.begin() + 9, all.end()));

  // An early break leaves the cursor on the next batch: the next loop continues the epoch.
  data::DataLoader cursor(ds, opt);
  std::vector<data::Batch> pieces;
  for (auto& batch : cursor) {
    pieces.push_back(batch);
    if (cursor.position().batch == 2) break;
  }
  for (auto& batch : cursor) pieces.push_back(batch);
  check_same(pieces, std::vector<data::Batch>(all.begin(), all.begin() + 6));
}

TEST_CASE("loader threads: stats count batches and the time waited for them", "[data]") {
  const ProbeDataset ds({.n = 20, .delay = std::chrono::microseconds(1000)});
  for (int workers : {0, 2}) {
    INFO("num_workers " << workers);
    data::DataLoader loader(ds, {.batch_size = 4, .num_workers = workers});
    CHECK(loader.stats().batches == 0);
    CHECK(loader.stats().wait_seconds == 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto& batch : loader) (void)batch;
    const double elapsed = seconds_of(t0);
    const data::LoaderStats s = loader.stats();
    CHECK(s.batches == 5);
    // At least the first batch (4 samples of >= 1 ms) is waited for; never more than the loop took.
    CHECK(s.wait_seconds >= 0.003);
    CHECK(s.wait_seconds <= elapsed);
    for (auto& batch : loader) (void)batch;
    CHECK(loader.stats().batches == 10);
    CHECK(loader.stats().wait_seconds >= s.wait_seconds);
    loader.reset_stats();
    CHECK(loader.stats().batches == 0);
  }
}

TEST_CASE("loader threads: options are checked, pin_memory and device batches need a CUDA backend", "[data]") {
  const ProbeDataset ds({.n = 10});
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .num_workers = -1}), Catch::Contains("num_workers -1"));
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .prefetch = 0}), Catch::Contains("prefetch 0"));
  if (!cuda_built()) {
    CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .pin_memory = data::PinMemory::on}),
                      Catch::Contains("needs a build with a CUDA backend"));
    CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .device = Device::cuda(0)}),
                      Catch::Contains("needs a build with a CUDA backend"));
  } else {
    // With a backend (tests/cuda checks the batches themselves): a device that does not exist.
    CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .device = Device::cuda(cuda_device_count())}),
                      Catch::Contains("does not exist"));
  }
  auto sampler = std::make_shared<data::SequentialSampler>(10);
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .shuffle = true, .sampler = sampler}),
                    Catch::Contains("shuffle must be off"));
  CHECK_THROWS_WITH(data::DataLoader(ds, {.batch_size = 2, .sampler = std::make_shared<data::SequentialSampler>(9)}),
                    Catch::Contains("dataset of 9 samples"));
}

TEST_CASE("loader threads: workers' kernels run single-threaded (SerialThreadScope)", "[data]") {
  testing::ThreadsGuard guard;
  set_num_threads(4);
  CHECK(get_num_threads() == 4);
  {
    SerialThreadScope serial;
    CHECK(get_num_threads() == 1);
    int other = 0;
    std::thread([&] { other = get_num_threads(); }).join();
    CHECK(other == 4);  // other threads unaffected
    {
      SerialThreadScope nested;
      CHECK(get_num_threads() == 1);
    }
    CHECK(get_num_threads() == 1);
  }
  CHECK(get_num_threads() == 4);
}

// ---- samplers ----------------------------------------------------------------------------------

TEST_CASE("samplers: sequential and random", "[data]") {
  CHECK(data::SequentialSampler(4).indices(7) == std::vector<int64_t>{0, 1, 2, 3});
  const data::RandomSampler r(50, 123);
  CHECK(r.size() == 50);
  for (int64_t e = 0; e < 3; ++e) CHECK(r.indices(e) == data::epoch_permutation(50, 123, e));
  CHECK(r.indices(0) != r.indices(1));
  // The loader's default with shuffle is RandomSampler(N, seed).
  const ProbeDataset ds({.n = 50});
  data::DataLoader loader(ds, {.batch_size = 50, .shuffle = true, .seed = 123});
  loader.set_epoch(2);
  CHECK(loader.batch_indices(2, 0) == r.indices(2));
}

TEST_CASE("samplers: DistributedSampler, PyTorch's sharding by hand (N = 10, world 3)", "[data]") {
  using V = std::vector<int64_t>;
  // Padded to 12 by repeating 0, 1; rank r takes positions r, r + 3, ...
  const std::vector<V> pad = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  // drop_last: cut to 9.
  const std::vector<V> cut = {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
  for (int64_t r = 0; r < 3; ++r) {
    const data::DistributedSampler s(10, {.rank = r, .world_size = 3, .shuffle = false});
    CHECK(s.size() == 4);
    CHECK(s.total_size() == 12);
    CHECK(s.indices(0) == pad[static_cast<size_t>(r)]);
    CHECK(s.indices(5) == pad[static_cast<size_t>(r)]);
    const data::DistributedSampler d(10, {.rank = r, .world_size = 3, .shuffle = false, .drop_last = true});
    CHECK(d.size() == 3);
    CHECK(d.indices(0) == cut[static_cast<size_t>(r)]);
  }
  // Padding longer than the dataset repeats it whole (PyTorch's indices * ceil(pad / len)):
  // N = 2, world 5 pads 0 1 to 0 1 0 1 0.
  for (int64_t r = 0; r < 5; ++r)
    CHECK(data::DistributedSampler(2, {.rank = r, .world_size = 5, .shuffle = false}).indices(0) == V{r % 2});
  // Divisible sizes: no padding either way.
  CHECK(data::DistributedSampler(9, {.rank = 1, .world_size = 3, .shuffle = false, .drop_last = true}).indices(0) ==
        V{1, 4, 7});
  CHECK_THROWS_WITH(data::DistributedSampler(10, {.rank = 3, .world_size = 3}), Catch::Contains("rank 3"));
  CHECK_THROWS_WITH(data::DistributedSampler(10, {.rank = 0, .world_size = 0}), Catch::Contains("world_size 0"));
}

TEST_CASE("samplers: DistributedSampler with shuffle covers the dataset, ranks agree per epoch", "[data]") {
  const int64_t n = 10, world = 3;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    INFO("epoch " << epoch);
    const std::vector<int64_t> perm = data::epoch_permutation(n, 42, epoch);
    std::map<int64_t, int> count;
    std::vector<std::vector<int64_t>> ranks;
    for (int64_t r = 0; r < world; ++r) {
      const data::DistributedSampler s(n, {.rank = r, .world_size = world, .seed = 42});
      ranks.push_back(s.indices(epoch));
      CHECK(static_cast<int64_t>(ranks.back().size()) == (n + world - 1) / world);  // ceil(N / 3) each
      for (int64_t i : ranks.back()) ++count[i];
    }
    // The union is the dataset; padding repeats exactly perm[0] and perm[1] (12 - 10 = 2 extra).
    CHECK(static_cast<int64_t>(count.size()) == n);
    int total = 0;
    for (auto [i, c] : count) {
      total += c;
      CHECK(c == (i == perm[0] || i == perm[1] ? 2 : 1));
    }
    CHECK(total == 12);
    // Interleaving the ranks gives the padded permutation back.
    for (int64_t p = 0; p < 12; ++p)
      CHECK(ranks[static_cast<size_t>(p % world)][static_cast<size_t>(p / world)] == perm[static_cast<size_t>(p % n)]);

    // drop_last: each rank floor(N / 3) = 3, pairwise disjoint, 9 distinct indices.
    std::set<int64_t> kept;
    for (int64_t r = 0; r < world; ++r) {
      const std::vector<int64_t> mine =
          data::DistributedSampler(n, {.rank = r, .world_size = world, .seed = 42, .drop_last = true}).indices(epoch);
      CHECK(mine.size() == 3);
      kept.insert(mine.begin(), mine.end());
    }
    CHECK(kept.size() == 9);
    CHECK(kept == std::set<int64_t>(perm.begin(), perm.begin() + 9));
  }
  const data::DistributedSampler s(n, {.rank = 0, .world_size = world, .seed = 42});
  CHECK(s.indices(0) != s.indices(1));  // reshuffled per epoch
}

TEST_CASE("samplers: a loader per rank reads its shard, epoch from the loader's position", "[data]") {
  const ProbeDataset ds({.n = 10});
  std::multiset<int64_t> all;
  for (int64_t r = 0; r < 3; ++r) {
    auto sampler = std::make_shared<data::DistributedSampler>(
        ds.size(), data::DistributedOptions{.rank = r, .world_size = 3, .shuffle = true, .seed = 9});
    data::DataLoader loader(ds, {.batch_size = 3, .num_workers = static_cast<int>(r), .sampler = sampler});
    CHECK(loader.size() == 2);  // 4 indices per rank: batches of 3 and 1
    loader.set_epoch(3);
    std::vector<int64_t> got;
    for (auto& [images, labels] : loader) {
      const std::vector<int64_t> l = labels.to_vector<int64_t>();
      got.insert(got.end(), l.begin(), l.end());
    }
    CHECK(got == sampler->indices(3));
    CHECK(loader.position() == data::LoaderPosition{4, 0});
    all.insert(got.begin(), got.end());
  }
  CHECK(all.size() == 12);
  CHECK(std::set<int64_t>(all.begin(), all.end()).size() == 10);
}
