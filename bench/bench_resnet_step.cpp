// One ResNet-18 training step on the CPU (ImageNet layout, 1000 classes, random 224 x 224 images,
// SGD with momentum): float32 and under `AutocastGuard(cpu, bf16)` (what `ember train --amp bf16`
// runs), on 1 and 2 threads. One JSON line per configuration: the median step time of `steps`
// steps after one warm-up step, and the median of the calling thread's CPU time per step
// ("cpu_s": on one thread, the step's work without the time a loaded machine gave to others). bench/torch_resnet_step.py times the same step in PyTorch, and
// bench/compare_resnet_cpu.sh runs the two interleaved.
//   ./build/bench/bench_resnet_step [--batch 8] [--steps 5] [--amp off,bf16] [--threads 1,2] [--profile 1]
// --profile 1 also prints, on stderr, the profiler's table of two more steps of each configuration.

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/profiler.h>
#include <ember/ember.h>
#include <ember/models/zoo.h>

#include "bench_util.h"

using namespace ember;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 8;
  int steps = 5;
  std::string amps = "off,bf16", thread_list = "1,2";
  bool profile = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--batch") batch = std::atoll(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--amp") amps = argv[i + 1];
    else if (a == "--threads") thread_list = argv[i + 1];
    else if (a == "--profile") profile = std::string(argv[i + 1]) == "1";
    else {
      std::fprintf(stderr, "usage: %s [--batch N] [--steps N] [--amp off,bf16] [--threads 1,2] [--profile 1]\n", argv[0]);
      return 2;
    }
  }
  if (argc % 2 == 0 || batch < 1 || steps < 1) {
    std::fprintf(stderr, "usage: %s [--batch N] [--steps N] [--amp off,bf16] [--threads 1,2] [--profile 1]\n", argv[0]);
    return 2;
  }
  for (const std::string& t : split(thread_list)) {
    const int threads = std::atoi(t.c_str());
    set_num_threads(threads);
    for (const std::string& amp : split(amps)) {
      if (amp != "off" && amp != "bf16") {
        std::fprintf(stderr, "bench_resnet_step: --amp takes off and bf16, not '%s'\n", amp.c_str());
        return 2;
      }
      manual_seed(1);
      auto model = models::create_model({.name = "resnet18", .in_channels = 3, .image_size = 224, .num_classes = 1000});
      model->train();
      optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
      const Tensor x = randn({batch, 3, 224, 224});
      const Tensor y = randint(0, 1000, {batch}, {.dtype = DType::i64});
      auto step = [&] {
        opt.zero_grad();
        Tensor loss;
        {
          std::optional<AutocastGuard> guard;
          if (amp == "bf16") guard.emplace(DeviceType::CPU, DType::bf16);
          loss = cross_entropy((*model)(x), y);
        }
        loss.backward();
        opt.step();
      };
      step();  // warm-up: the optimizer's state, the allocator's blocks
      std::vector<double> t_s, cpu_s;
      for (int s = 0; s < steps; ++s) {
        const double c0 = bench::thread_cpu_s();
        t_s.push_back(bench::time_s(step));
        cpu_s.push_back(bench::thread_cpu_s() - c0);
      }
      std::printf("{\"bench\":\"resnet18_step\",\"side\":\"ember\",\"batch\":%lld,\"image_size\":224,\"amp\":\"%s\","
                  "\"threads\":%d,\"steps\":%d,\"step_s\":%.4f,\"cpu_s\":%.4f,%s}\n",
                  static_cast<long long>(batch), amp.c_str(), threads, steps, bench::median(t_s), bench::median(cpu_s),
                  bench::machine_fields().c_str());
      std::fflush(stdout);
      if (profile) {
        profiler::Profiler prof;
        for (int s = 0; s < 2; ++s) step();
        prof.stop();
        std::fprintf(stderr, "resnet18_step --amp %s, %d threads, 2 steps:\n%s\n", amp.c_str(), threads,
                     prof.table(25).c_str());
      }
    }
  }
  return 0;
}
