// Training throughput of the `cnn` model on Fashion-MNIST at batch 64 (Adam, no augmentation),
// with 1 and 2 threads: the CPU training benchmark. One JSON line per thread count,
// median of 3 runs of 150 steps each (after a 20-step warm-up).
//   ./build/bench/bench_train

#include <algorithm>
#include <cstdio>
#include <vector>

#include <ember/ember.h>
#include <ember/train/trainer.h>

#include "bench_util.h"

using namespace ember;

int main() {
  for (int threads : {1, 2}) {
    std::vector<double> ips;
    for (int rep = 0; rep < 4; ++rep) {
      train::TrainConfig c;
      c.model = "cnn";
      c.optimizer = "adam";
      c.lr = 1e-3;
      c.batch_size = 64;
      c.epochs = 1;
      c.augment = false;
      c.quiet = true;
      c.threads = threads;
      c.eval_every = 1000;  // no evaluation inside the timed epoch (the last one still runs)
      c.max_steps = rep == 0 ? 20 : 150;
      train::TrainSummary s = train::run_training(c);
      if (rep > 0) ips.push_back(s.images_per_sec);
    }
    std::sort(ips.begin(), ips.end());
    std::printf("{\"bench\":\"train_cnn\",\"data\":\"fashion-mnist\",\"batch\":64,\"threads\":%d,\"steps\":150,"
                "\"images_per_sec\":%.1f,\"min\":%.1f,\"max\":%.1f,%s}\n",
                threads, ips[ips.size() / 2], ips.front(), ips.back(), bench::machine_fields().c_str());
    std::fflush(stdout);
  }
}
