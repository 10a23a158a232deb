// bench_conv: conv2d forward and backward on the CPU (the path conv.cpp picks: Winograd for 3x3
// stride 1 with >= 16 channels, im2col + GEMM otherwise) on an airbench/ResNet-like layer: input
// (64, 32, 28, 28), 64 output channels, 3x3 kernel, padding 1, with bias.
//
//   ./build/bench/bench_conv                      # the layer above, float32
//   ./build/bench/bench_conv N C_IN H W C_OUT K PAD [STRIDE]  # another layer (e.g. the cnn model's:
//                                                   # 64 1 28 28 32 3 1 and 64 32 14 14 64 3 1; ResNet-18's
//                                                   # stem: 8 3 224 224 64 7 3 2)
//   ./build/bench/bench_conv --dtype bfloat16 [N C_IN H W C_OUT K PAD]   # bf16 tensors (--amp bf16's convolutions)
//   ./build/bench/bench_conv --dtype both [...]   # float32 and bfloat16 interleaved rep by rep
//   --threads N (one thread count instead of 1 and 2), --reps N (default 7), --products bf16|f32
//   (one of the two bfloat16 configurations below): one configuration alone, e.g. under perf.
//
// bfloat16 on a CPU with AVX512_BF16 runs two configurations, interleaved rep by rep:
// "winograd_products":"bf16" (the Winograd path may run its products on bf16 pairs: AMX tiles or
// VDPBF16PS) and "f32" (float32 planes and sgemm): Note [bf16 Winograd products] in
// kernels/cpu/winograd/conv_winograd.cpp. Every configuration runs the default paths: Winograd,
// the direct AMX convolution (bf16, where the CPU has AMX) or im2col measured per pass on the first
// (warm-up) call (Note [When bf16 Winograd pays]), the bf16 GEMM's kernel per product shape;
// "choices" names what each pass took.
//
// One JSON line per thread count (1 and 2) and configuration:
//   {"bench":"conv2d","n":64,"c_in":32,"h":28,"w":28,"c_out":64,"k":3,"padding":1,"dtype":"float32",
//    "winograd_products":"f32","threads":1,"reps":7,"forward_ms":...,"backward_ms":...,"total_ms":...,"gflops":...,
//    "choices":"forward: winograd; backward-data: im2col; backward-weight: winograd",...}
// forward_ms: conv2d with autograd recording; backward_ms: y.backward(dy) computing dx, dw and db.
// Medians over `reps` iterations after one warm-up. gflops counts 3 x 2 N C_out OH OW C_in k^2
// (forward, backward data, backward weight) over total_ms. cpu_ms: the calling thread's CPU time
// for forward and backward (bench_util.h's thread_cpu_s): with one thread, the time a loaded
// machine's scheduler gave to other work left out.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ember/kernels/cpu/measured_choice.h>
#include <ember/kernels/cpu/winograd/conv_winograd.h>

#include <ember/ember.h>

#include "bench_util.h"

using namespace ember;

int main(int argc, char** argv) {
  namespace kc = kernels::cpu;
  int64_t n = 64, c_in = 32, h = 28, w = 28, c_out = 64, k = 3, pad = 1, stride = 1;
  std::vector<DType> dtypes = {DType::f32};
  std::vector<int> thread_counts = {1, 2};
  int reps = 7;
  std::string products;  // "" (every mode that applies), "bf16" or "f32"
  const char* usage =
      "usage: %s [--dtype float32|bfloat16|both] [--threads N] [--reps N] [--products bf16|f32] "
      "[N C_IN H W C_OUT K PAD [STRIDE]]\n";
  int first = 1;
  for (; first + 1 < argc && std::string(argv[first]).rfind("--", 0) == 0; first += 2) {
    const std::string flag = argv[first], value = argv[first + 1];
    if (flag == "--dtype" && (value == "float32" || value == "bfloat16" || value == "both")) {
      dtypes = value == "both" ? std::vector<DType>{DType::f32, DType::bf16}
                               : std::vector<DType>{value == "bfloat16" ? DType::bf16 : DType::f32};
    } else if (flag == "--threads" && std::atoi(value.c_str()) > 0) {
      thread_counts = {std::atoi(value.c_str())};
    } else if (flag == "--reps" && std::atoi(value.c_str()) > 0) {
      reps = std::atoi(value.c_str());
    } else if (flag == "--products" && (value == "bf16" || value == "f32")) {
      products = value;
    } else {
      std::fprintf(stderr, "bench_conv: bad option %s %s\n", flag.c_str(), value.c_str());
      std::fprintf(stderr, usage, argv[0]);
      return 2;
    }
  }
  if (argc - first == 7 || argc - first == 8) {
    int64_t* dims[] = {&n, &c_in, &h, &w, &c_out, &k, &pad, &stride};
    for (int i = 0; i < argc - first; ++i) *dims[i] = std::atoll(argv[first + i]);
  } else if (argc != first) {
    std::fprintf(stderr, usage, argv[0]);
    return 2;
  }
  const int64_t oh = (h + 2 * pad - k) / stride + 1, ow = (w + 2 * pad - k) / stride + 1;
  Generator gen(42);
  const Tensor x32 = randn({n, c_in, h, w}, {}, gen), w32 = randn({c_out, c_in, k, k}, {}, gen) * 0.05;
  const Tensor dy32 = randn({n, c_out, oh, ow}, {}, gen);
  const double flops = 3.0 * 2.0 * n * c_out * oh * ow * c_in * k * k;
  // The configurations: float32 has one; bfloat16 both Winograd product modes where it can.
  struct Config {
    DType dtype;
    bool bf16_products;
    Tensor x, weight, bias, dy;
  };
  const bool saved_products = kc::winograd_bf16_products();
  std::vector<Config> configs;
  for (DType dtype : dtypes) {
    std::vector<bool> modes = {false};
    if (dtype == DType::bf16 && kc::set_winograd_bf16_products(true)) modes = {true, false};
    if (products == "bf16" && modes.size() == 2) modes = {true};
    if (products == "f32") modes = {false};
    for (bool mode : modes)
      configs.push_back({dtype, mode, x32.to(dtype).detach().requires_grad_(), w32.to(dtype).detach().requires_grad_(),
                         zeros({c_out}).to(dtype).detach().requires_grad_(), dy32.to(dtype)});
  }
  const int saved_threads = get_num_threads();
  for (int threads : thread_counts) {
    set_num_threads(threads);
    std::vector<std::vector<double>> fwd(configs.size()), bwd(configs.size()), total(configs.size()),
        cpu(configs.size());
    kc::forget_measured_choices();  // each thread count measures its own
    for (int r = 0; r <= reps; ++r) {  // r == 0 is the warm-up (and the measured choices)
      for (size_t c = 0; c < configs.size(); ++c) {
        Config& cf = configs[c];
        kc::set_winograd_bf16_products(cf.bf16_products);
        cf.x.set_grad(Tensor());
        cf.weight.set_grad(Tensor());
        cf.bias.set_grad(Tensor());
        Tensor y;
        const double cpu0 = bench::thread_cpu_s();
        const double tf = bench::time_s(
            [&] { y = conv2d(cf.x, cf.weight, cf.bias, {.stride = {stride, stride}, .padding = {pad, pad}}); });
        const double tb = bench::time_s([&] { y.backward(cf.dy); });
        if (r == 0) continue;
        fwd[c].push_back(tf);
        bwd[c].push_back(tb);
        total[c].push_back(tf + tb);
        cpu[c].push_back(bench::thread_cpu_s() - cpu0);
      }
    }
    // What each configuration's passes took: its dtype's choices, with or without the pairs candidate.
    std::vector<std::string> choices(configs.size());
    for (size_t c = 0; c < configs.size(); ++c)
      for (const kc::MeasuredChoice& mc : kc::measured_choices()) {
        bool pairs = false;
        for (const std::string& cand : mc.candidates) pairs = pairs || cand.find("bf16 pairs") != std::string::npos;
        if (mc.family != "conv2d" || mc.shape.find(dtype_name(configs[c].dtype)) == std::string::npos ||
            pairs != configs[c].bf16_products)
          continue;
        choices[c] += (choices[c].empty() ? "" : "; ") + mc.shape.substr(0, mc.shape.find(' ')) + ": " +
                      mc.candidates[mc.chosen];
      }
    for (size_t c = 0; c < configs.size(); ++c) {
      const double t = bench::median(total[c]);
      std::printf(
          "{\"bench\":\"conv2d\",\"n\":%lld,\"c_in\":%lld,\"h\":%lld,\"w\":%lld,\"c_out\":%lld,\"k\":%lld,"
          "\"padding\":%lld,\"stride\":%lld,\"dtype\":\"%s\",\"winograd_products\":\"%s\",\"threads\":%d,\"reps\":%d,"
          "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"total_ms\":%.2f,\"gflops\":%.1f,\"cpu_ms\":%.2f,\"choices\":%s,%s}\n",
          static_cast<long long>(n), static_cast<long long>(c_in), static_cast<long long>(h),
          static_cast<long long>(w), static_cast<long long>(c_out), static_cast<long long>(k),
          static_cast<long long>(pad), static_cast<long long>(stride),
          configs[c].dtype == DType::bf16 ? "bfloat16" : "float32", configs[c].bf16_products ? "bf16" : "f32",
          threads, reps, bench::median(fwd[c]) * 1e3, bench::median(bwd[c]) * 1e3, t * 1e3, flops / t / 1e9,
          bench::median(cpu[c]) * 1e3,
          bench::json_str(choices[c].empty() ? "im2col (Winograd does not apply)" : choices[c]).c_str(),
          bench::machine_fields().c_str());
      std::fflush(stdout);
    }
  }
  kc::set_winograd_bf16_products(saved_products);
  set_num_threads(saved_threads);
  return 0;
}
