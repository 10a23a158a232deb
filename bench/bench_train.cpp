// Training throughput of the `cnn` model on Fashion-MNIST at batch 64 (Adam, no augmentation),
// with 1 and 2 threads: the CPU training benchmark. One JSON line per thread count,
// median of 3 runs of 150 steps each (after a 20-step warm-up).
//   ./build/bench/bench_train
// With --amp: float32 against `--amp bf16` on each bf16 GEMM path (compare_amp below).
//   ./build/bench/bench_train --amp

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/kernels/cpu/bf16/gemm_bf16.h>
#include <ember/train/config.h>
#include <ember/train/trainer.h>

#include "bench_util.h"

using namespace ember;

namespace {

// images/s of one run: the cnn recipe above, `steps` steps.
double run_once(int threads, const std::string& amp, int steps) {
  train::TrainConfig c;
  c.model = "cnn";
  c.optimizer = "adam";
  c.lr = 1e-3;
  c.batch_size = 64;
  c.epochs = 1;
  c.augment = false;
  c.quiet = true;
  c.threads = threads;
  c.device = "cpu";  // the CPU benchmark also in a CUDA build on a machine with a GPU
  c.amp = amp;
  c.eval_every = 1000;  // no evaluation inside the timed epoch (the last one still runs)
  c.max_steps = steps;
  return train::run_training(c).images_per_sec;
}

// --amp: float32, --amp bf16 on the AVX512_BF16 GEMM (where the CPU has it) and --amp bf16 on the
// f32 fallback, one run of each per round (interleaved, so a shared machine's noise hits all
// alike), 3 rounds after a warm-up round; the median per configuration, and its speedup over f32.
void compare_amp() {
  namespace kc = kernels::cpu;
  const kc::Bf16GemmPath saved = kc::bf16_gemm_path();
  struct Config {
    const char* name;
    const char* amp;
    kc::Bf16GemmPath path;
    std::vector<double> ips;
  };
  std::vector<Config> configs = {{"f32", "off", saved, {}},
                                 {"bf16", "bf16", kc::Bf16GemmPath::avx512_bf16, {}},
                                 {"bf16_fallback", "bf16", kc::Bf16GemmPath::f32_fallback, {}}};
  if (!kc::bf16_gemm_native_available()) configs.erase(configs.begin() + 1);
  for (int threads : {1, 2}) {
    for (Config& cf : configs) cf.ips.clear();
    for (int round = 0; round < 4; ++round)
      for (Config& cf : configs) {
        kc::set_bf16_gemm_path(cf.path);
        const double ips = run_once(threads, cf.amp, round == 0 ? 20 : 150);
        if (round > 0) cf.ips.push_back(ips);
      }
    const double f32 = bench::median(configs[0].ips);
    for (Config& cf : configs) {
      kc::set_bf16_gemm_path(cf.path);
      const double med = bench::median(cf.ips);
      std::printf("{\"bench\":\"train_cnn_amp\",\"data\":\"fashion-mnist\",\"batch\":64,\"threads\":%d,"
                  "\"steps\":150,\"config\":\"%s\",\"amp\":\"%s\",\"runs\":%zu,\"images_per_sec\":%.1f,"
                  "\"min\":%.1f,\"max\":%.1f,\"speedup_vs_f32\":%.2f,%s}\n",
                  threads, cf.name, cf.amp, cf.ips.size(), med, *std::min_element(cf.ips.begin(), cf.ips.end()),
                  *std::max_element(cf.ips.begin(), cf.ips.end()), med / f32, bench::machine_fields().c_str());
    }
    std::fflush(stdout);
  }
  kc::set_bf16_gemm_path(saved);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--amp") {
    compare_amp();
    return 0;
  }
  for (int threads : {1, 2}) {
    std::vector<double> ips;
    for (int rep = 0; rep < 4; ++rep) {
      const double v = run_once(threads, "off", rep == 0 ? 20 : 150);
      if (rep > 0) ips.push_back(v);
    }
    std::sort(ips.begin(), ips.end());
    std::printf("{\"bench\":\"train_cnn\",\"data\":\"fashion-mnist\",\"batch\":64,\"threads\":%d,\"steps\":150,"
                "\"images_per_sec\":%.1f,\"min\":%.1f,\"max\":%.1f,%s}\n",
                threads, ips[ips.size() / 2], ips.front(), ips.back(), bench::machine_fields().c_str());
    std::fflush(stdout);
  }
  return 0;
}
