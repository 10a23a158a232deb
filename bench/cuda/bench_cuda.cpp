// The CUDA benchmark of scripts/gpu-check.sh: one JSON line per measurement, medians of 5.
//   elementwise (ReLU) and reduction (sum) GB/s next to a device-to-device copy;
//   SGEMM: the hand-written tiled kernel next to cuBLAS, GFLOP/s;
//   a 3x3 convolution forward + backward (cuDNN when present, else the im2col fallback);
//   training steps of the `cnn` model on Fashion-MNIST (images/s).
// On the SIMT flavour it runs with small sizes (the emulator is for correctness, not speed) and
// says so in every line ("emulated": true).
//   ./build/bench/bench_cuda [--quick]

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/kernels/cuda/cudnn.h>
#include <ember/kernels/cuda/gemm.h>
#include <ember/kernels/cuda/runtime.h>
#include <ember/train/trainer.h>

#include "../bench_util.h"

using namespace ember;
using bench::median;
using bench::time_s;

namespace {

bool g_emulated = false;

template <typename F>
double timed(int reps, const F& f) {
  f();  // warm-up (first-use allocations, cuDNN algorithm choice, cuBLAS handle)
  cuda::synchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r)
    t.push_back(time_s([&] {
      f();
      cuda::synchronize();
    }));
  return median(t);
}

void line(const std::string& body) {
  std::printf("{%s,\"emulated\":%s,\"device\":%s}\n", body.c_str(), g_emulated ? "true" : "false",
              bench::json_str(cuda::properties(0).name).c_str());
  std::fflush(stdout);
}

void bandwidth(int64_t n) {
  const Device dev = Device::cuda(0);
  NoGradGuard g;
  Tensor x = randn({n}, {.device = dev});
  Tensor y = empty({n}, {.device = dev});
  const double bytes2 = 2.0 * static_cast<double>(n) * 4;  // read + write
  const double t_copy = timed(5, [&] {
    cuda::copy_bytes(y.data(), dev, x.data(), dev, static_cast<size_t>(n) * 4);
  });
  const double t_relu = timed(5, [&] { y = relu(x); });
  const double t_sum = timed(5, [&] { y = sum(x); });
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"bandwidth\",\"elements\":%lld,\"d2d_copy_gbs\":%.1f,\"relu_gbs\":%.1f,"
                "\"sum_gbs\":%.1f",
                static_cast<long long>(n), bytes2 / t_copy / 1e9, bytes2 / t_relu / 1e9,
                static_cast<double>(n) * 4 / t_sum / 1e9);
  line(buf);
}

void sgemm(int64_t s) {
  const Device dev = Device::cuda(0);
  NoGradGuard g;
  Tensor a = randn({s, s}, {.device = dev}), b = randn({s, s}, {.device = dev}), c = empty({s, s}, {.device = dev});
  using kernels::Transpose;
  const auto* pa = static_cast<const float*>(a.data());
  const auto* pb = static_cast<const float*>(b.data());
  auto* pc = static_cast<float*>(c.data());
  const double t_lib = timed(5, [&] {
    kernels::gpu::gemm(Transpose::No, Transpose::No, s, s, s, 1.0f, pa, s, pb, s, 0.0f, pc, s);
  });
  const double t_tiled = timed(5, [&] {
    kernels::gpu::gemm_tiled(Transpose::No, Transpose::No, s, s, s, 1.0f, pa, s, pb, s, 0.0f, pc, s);
  });
  const double flop = 2.0 * static_cast<double>(s) * s * s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "\"bench\":\"sgemm\",\"size\":%lld,\"library_gflops\":%.1f,\"tiled_gflops\":%.1f",
                static_cast<long long>(s), flop / t_lib / 1e9, flop / t_tiled / 1e9);
  line(buf);
}

void conv(int64_t n, int64_t c, int64_t hw) {
  const Device dev = Device::cuda(0);
  Tensor x = randn({n, c, hw, hw}, {.device = dev});
  Tensor w = randn({c, c, 3, 3}, {.device = dev, .requires_grad = true});
  const double t = timed(5, [&] {
    Tensor y = conv2d(x, w, Tensor(), {.padding = {1, 1}});
    sum(y).backward();
  });
  const double flop = 3 * 2.0 * n * c * c * 9 * hw * hw;  // forward + two backward passes
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"conv3x3_fwd_bwd\",\"shape\":[%lld,%lld,%lld,%lld],\"cudnn\":%s,\"ms\":%.3f,"
                "\"tflops\":%.2f",
                static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(hw),
                static_cast<long long>(hw), kernels::gpu::cudnn::use_for_conv() ? "true" : "false", t * 1e3,
                flop / t / 1e12);
  line(buf);
}

void train_steps(int steps) {
  train::TrainConfig cfg;
  cfg.model = "cnn";
  cfg.optimizer = "adam";
  cfg.lr = 1e-3;
  cfg.batch_size = 64;
  cfg.epochs = 1;
  cfg.augment = false;
  cfg.quiet = true;
  cfg.device = "cuda";
  cfg.eval_every = 1000;
  cfg.max_steps = steps;
  const train::TrainSummary s = train::run_training(cfg);
  char buf[512];
  std::snprintf(buf, sizeof buf, "\"bench\":\"train_cnn\",\"batch\":64,\"steps\":%d,\"images_per_sec\":%.1f",
                steps, s.images_per_sec);
  line(buf);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_cuda: no CUDA device\n");
    return 1;
  }
  g_emulated = cuda_emulated();
  const bool small = g_emulated || quick;
  bandwidth(small ? (1 << 16) : (int64_t{1} << 26));
  sgemm(small ? 128 : 4096);
  conv(small ? 2 : 64, small ? 8 : 64, small ? 16 : 56);
  train_steps(small ? 5 : 200);
  return 0;
}
