// Peak memory of one ResNet-18 training step at 224x224, float32 against autocast bf16 (and f16):
// issue #12's "peak activation memory under bf16 <= 55% of f32", from the allocator's statistics.
//   ./build/bench/bench_amp_memory                               (CPU, batch 8)
//   ./build/bench/bench_amp_memory --device cuda --batch 2      (the CUDA device's caching allocator)
//   ./build/bench/bench_amp_memory --amp off,bf16,fp16 --threads 2
// One JSON line per configuration, then one line with the ratios to float32.
//
// What is measured. resnet18 (models/zoo.h, 1000 classes), SGD with momentum, one warm-up step
// (so the gradients' and the momentum buffers' first allocations are behind us), zero_grad (the
// gradients become undefined), a random batch; then `base` = the bytes the device's allocator has
// in use (parameters, momentum, the batch), its peak reset, and one step: the forward pass and the
// loss under AutocastGuard(device, dtype) (nothing for float32), backward, optimizer step.
//   saved_bytes      in use after the forward pass and the loss, minus base: what the graph holds
//                    for backward (activations, batch-norm and pooling state, the autocast casts of
//                    the weights), i.e. the activation memory;
//   forward_peak     peak during the forward pass, minus base;
//   step_peak        peak during the whole step (backward included: activations + gradients +
//                    backward temporaries), minus base;
//   weight_cast_bytes  16-bit copies of the conv/linear weights a region makes (part of saved_bytes).
// Byte counts are what the allocator was asked for (the CPU allocator counts requested bytes; the
// CUDA caching allocator the blocks it hands out, which can be up to 1 MiB larger than asked for;
// EMBER_CUDA_ALLOC=direct counts exact sizes), not the process's resident size.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/allocator.h>
#include <ember/core/build_info.h>
#include <ember/ember.h>

#include "bench_util.h"

using namespace ember;

namespace {

struct Result {
  std::string amp;
  int64_t base = 0, saved = 0, forward_peak = 0, step_peak = 0, weight_casts = 0;
  double seconds = 0;
};

Result measure(Device device, const std::string& amp, int64_t batch) {
  manual_seed(1);
  models::ModelSpec spec{.name = "resnet18", .in_channels = 3, .image_size = 224, .num_classes = 1000};
  std::shared_ptr<nn::Module> model = models::create_model(spec);
  model->to(device);
  model->train();
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = randn({batch, 3, 224, 224}).to(device);
  const Tensor y = randint(0, 1000, {batch}).to(device);
  const bool lower = amp != "off";
  const DType dt = amp == "fp16" ? DType::f16 : DType::bf16;
  Allocator& alloc = allocator_for(device);

  Result r;
  r.amp = amp;
  for (const Tensor& p : model->parameters())
    if (p.dim() >= 2 && lower) r.weight_casts += p.numel() * dtype_size(dt);

  auto sync = [&] {
    if (device.type == DeviceType::CUDA) (void)randn({1}).to(device).to(Device::cpu()).item();
  };
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    sync();
    const int64_t base = alloc.stats().bytes_in_use;
    alloc.reset_peak();
    const double s = bench::time_s([&] {
      Tensor loss;
      {
        std::optional<AutocastGuard> guard;
        if (lower) guard.emplace(device.type, dt);
        loss = cross_entropy(model->forward(x), y);
      }
      sync();
      r.saved = alloc.stats().bytes_in_use - base;
      r.forward_peak = alloc.stats().peak_bytes_in_use - base;
      loss.backward();
      opt.step();
      sync();
    });
    r.step_peak = alloc.stats().peak_bytes_in_use - base;
    r.base = base;
    r.seconds = s;
  }
  return r;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

double mib(int64_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  std::string device_spec = "cpu", amps = "off,bf16";
  int64_t batch = 8;
  int threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--device") device_spec = argv[i + 1];
    else if (a == "--amp") amps = argv[i + 1];
    else if (a == "--batch") batch = std::atoll(argv[i + 1]);
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda[:n]] [--amp off,bf16,fp16] [--batch N] [--threads N]\n",
                   argv[0]);
      return 2;
    }
  }
  set_num_threads(threads);
  const Device device(device_spec);
  const std::string dev = device.type == DeviceType::CPU ? "cpu" : "cuda:" + std::to_string(device.index);
  std::string device_name = "the CPU";  // a CUDA device's description: a GPU, or the SIMT emulator
  if (device.type == DeviceType::CUDA) {
    const std::vector<std::string> descriptions = cuda_device_descriptions();
    if (device.index < static_cast<int>(descriptions.size())) device_name = descriptions[device.index];
  }
  std::vector<Result> results;
  for (const std::string& amp : split(amps)) {
    const Result r = measure(device, amp, batch);
    results.push_back(r);
    std::printf("{\"bench\":\"amp_memory\",\"model\":\"resnet18\",\"image_size\":224,\"batch\":%lld,"
                "\"device\":\"%s\",\"device_name\":%s,\"amp\":\"%s\",\"base_mib\":%.1f,\"saved_mib\":%.1f,"
                "\"forward_peak_mib\":%.1f,\"step_peak_mib\":%.1f,\"weight_cast_mib\":%.1f,\"step_s\":%.2f,"
                "\"threads\":%d,%s}\n",
                static_cast<long long>(batch), dev.c_str(), bench::json_str(device_name).c_str(), amp.c_str(),
                mib(r.base), mib(r.saved), mib(r.forward_peak), mib(r.step_peak), mib(r.weight_casts), r.seconds,
                threads, bench::machine_fields().c_str());
    std::fflush(stdout);
  }
  if (results.size() > 1 && results[0].amp == "off") {
    for (size_t i = 1; i < results.size(); ++i) {
      const Result& f = results[0];
      const Result& r = results[i];
      std::printf("{\"bench\":\"amp_memory_ratio\",\"model\":\"resnet18\",\"batch\":%lld,\"device\":\"%s\","
                  "\"amp\":\"%s\",\"saved_vs_f32\":%.3f,\"saved_without_weight_casts_vs_f32\":%.3f,"
                  "\"forward_peak_vs_f32\":%.3f,\"step_peak_vs_f32\":%.3f,\"goal\":0.55}\n",
                  static_cast<long long>(batch), dev.c_str(), r.amp.c_str(),
                  static_cast<double>(r.saved) / static_cast<double>(f.saved),
                  static_cast<double>(r.saved - r.weight_casts) / static_cast<double>(f.saved),
                  static_cast<double>(r.forward_peak) / static_cast<double>(f.forward_peak),
                  static_cast<double>(r.step_peak) / static_cast<double>(f.step_peak));
    }
  }
  return 0;
}
