// bench_gemm_bf16: the CPU bf16 GEMM (kernels/cpu/bf16/gemm_bf16.h) against OpenBLAS sgemm on the same
// values, at the cnn model's im2col/linear shapes (batch 64, 28 x 28), ResNet-18's and square
// sizes, on 1 and 2 threads. The kernels per shape, timed interleaved (one call of each per round)
// so a shared machine's noise hits them alike:
//   bf16_amx       the AMX kernel on the hardware's tiles (only where the CPU has them)
//   bf16_native    the AVX512_BF16 kernel, bf16 A and B, f32 C (only on a CPU that has it)
//   bf16_fallback  the same call through the f32 fallback (widen A and B, OpenBLAS sgemm)
//   bf16_measured  the default: the kernel measured fastest for the shape on its first call
//   sgemm          OpenBLAS sgemm on f32 copies of the operands (what an f32 model runs)
// bf16_measured's line names the kernel it chose ("chosen").
//
//   ./build/bench/bench_gemm_bf16 [NAME]      # NAME: only the shapes whose name contains it ("layer4")
//
// One JSON line per (shape, threads, kernel):
//   {"bench":"gemm_bf16","shape":"conv2 forward","m":64,"n":2156,"k":288,"ta":0,"tb":0,"threads":1,
//    "kernel":"bf16_native","reps":..,"median_ms":..,"gflops":..,"speedup_vs_sgemm":..,<machine fields>}

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/kernels/cpu/gemm.h>
#include <ember/kernels/cpu/bf16/amx_tiles.h>
#include <ember/kernels/cpu/bf16/gemm_bf16.h>
#include <ember/kernels/cpu/measured_choice.h>

#include "bench_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;
using kernels::Transpose;

namespace {

struct Case {
  const char* name;
  int64_t m, n, k;
  Transpose ta, tb;
};

}  // namespace

int main(int argc, char** argv) {
  const std::string only = argc > 1 ? argv[1] : "";
  const Transpose N = Transpose::No, T = Transpose::Yes;
  // cnn at batch 64 on 28 x 28 images: the im2col GEMMs of a chunk of images (Note [Chunks of
  // images] in kernels/cpu/conv.cpp) and fc1; then square products.
  const std::vector<Case> cases = {
      {"conv1 forward", 32, 2352, 9, N, N},          {"conv2 forward", 64, 2156, 288, N, N},
      {"conv2 backward-data", 288, 2156, 64, T, N},  {"conv2 backward-weight", 64, 288, 2156, N, T},
      {"fc1 forward", 64, 128, 3136, N, T},          {"square 256", 256, 256, 256, N, N},
      {"square 1024", 1024, 1024, 1024, N, N},       {"square 2048", 2048, 2048, 2048, N, N},
      // ResNet-18 at batch 8: the stem (7 x 7 / 2, 3 -> 64, 224^2: chunks of one image), a strided
      // 3 x 3 (64 -> 128, 56^2 -> 28^2: chunks of two images), the layer4 3 x 3 (512 channels, 7 x 7).
      {"stem forward", 64, 12544, 147, N, N},         {"stem backward-weight", 64, 147, 12544, N, T},
      {"layer2 down forward", 128, 1568, 576, N, N}, {"layer2 down backward-data", 576, 1568, 128, T, N},
      {"layer2 down backward-weight", 128, 576, 1568, N, T},
      {"layer4 forward", 512, 392, 4608, N, N},      {"layer4 backward-data", 4608, 392, 512, T, N},
      {"layer4 backward-weight", 512, 4608, 392, N, T}};
  const bool native = kc::bf16_gemm_native_available();
  const bool amx = kc::amx_tiles() == kc::AmxTiles::hardware;
  const kc::Bf16GemmPath saved_path = kc::bf16_gemm_path();
  const int saved_threads = get_num_threads();
  for (const Case& cs : cases) {
    if (std::string(cs.name).find(only) == std::string::npos) continue;
    const int64_t ar = cs.ta == N ? cs.m : cs.k, ac = cs.ta == N ? cs.k : cs.m;
    const int64_t br = cs.tb == N ? cs.k : cs.n, bc = cs.tb == N ? cs.n : cs.k;
    std::vector<BFloat16> a(ar * ac), b(br * bc);
    std::vector<float> af(a.size()), bf(b.size()), c(cs.m * cs.n);
    Generator gen(1234);
    const std::vector<float> ra = randn({ar * ac}, {}, gen).to_vector<float>();
    const std::vector<float> rb = randn({br * bc}, {}, gen).to_vector<float>();
    for (size_t i = 0; i < a.size(); ++i) af[i] = static_cast<float>(a[i] = BFloat16(ra[i]));
    for (size_t i = 0; i < b.size(); ++i) bf[i] = static_cast<float>(b[i] = BFloat16(rb[i]));
    const double flop = 2.0 * static_cast<double>(cs.m * cs.n) * static_cast<double>(cs.k);
    struct Kernel {
      const char* name;
      kc::Bf16GemmPath path;  // f32_fallback for sgemm (unused)
      bool runs;
      std::vector<double> times;
    };
    std::vector<Kernel> kernels = {{"bf16_amx", kc::Bf16GemmPath::amx, amx, {}},
                                   {"bf16_native", kc::Bf16GemmPath::avx512_bf16, native, {}},
                                   {"bf16_fallback", kc::Bf16GemmPath::f32_fallback, true, {}},
                                   {"bf16_measured", kc::Bf16GemmPath::measured, amx || native, {}},
                                   {"sgemm", kc::Bf16GemmPath::f32_fallback, true, {}}};
    const size_t sgemm = kernels.size() - 1;
    auto run = [&](size_t which) {
      if (which == sgemm) {
        kc::gemm(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f, af.data(), ac, bf.data(), bc, 0.0f, c.data(), cs.n);
        return;
      }
      kc::set_bf16_gemm_path(kernels[which].path);
      kc::gemm_bf16(cs.ta, cs.tb, cs.m, cs.n, cs.k, 1.0f, a.data(), ac, b.data(), bc, 0.0f, c.data(), cs.n);
    };
    // ~0.3 s per kernel and thread count at most.
    const int reps = std::clamp(static_cast<int>(3e10 / std::max(flop, 1.0) / 100), 5, 51);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (Kernel& kr : kernels) kr.times.clear();
      for (size_t w = 0; w < kernels.size(); ++w)  // warm-up (and the measured path's choice)
        if (kernels[w].runs) run(w);
      for (int r = 0; r < reps; ++r)
        for (size_t w = 0; w < kernels.size(); ++w)
          if (kernels[w].runs) kernels[w].times.push_back(bench::time_s([&] { run(w); }));
      const double t_sgemm = bench::median(kernels[sgemm].times);
      std::string chosen;  // the measured path's choice for this shape and thread count
      for (const kc::MeasuredChoice& mc : kc::measured_choices())
        if (mc.family == "gemm_bf16" && mc.shape.rfind(std::string(cs.ta == T ? "T" : "N") + (cs.tb == T ? "T" : "N") +
                                                           " " + std::to_string(cs.m) + "x" + std::to_string(cs.n) +
                                                           "x" + std::to_string(cs.k) + ", " + std::to_string(threads) + " ",
                                                       0) == 0)
          chosen = mc.candidates[mc.chosen];
      for (size_t w = 0; w < kernels.size(); ++w) {
        if (!kernels[w].runs) continue;
        const double t = bench::median(kernels[w].times);
        std::printf(
            "{\"bench\":\"gemm_bf16\",\"shape\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"ta\":%d,\"tb\":%d,"
            "\"threads\":%d,\"kernel\":\"%s\",%s\"reps\":%d,\"median_ms\":%.3f,\"gflops\":%.1f,"
            "\"speedup_vs_sgemm\":%.2f,%s}\n",
            cs.name, static_cast<long long>(cs.m), static_cast<long long>(cs.n), static_cast<long long>(cs.k),
            cs.ta == T, cs.tb == T, threads, kernels[w].name,
            kernels[w].path == kc::Bf16GemmPath::measured && w != sgemm ? ("\"chosen\":\"" + chosen + "\",").c_str() : "",
            reps, t * 1e3, flop / t / 1e9, t_sgemm / t, bench::machine_fields().c_str());
      }
      std::fflush(stdout);
    }
  }
  kc::set_bf16_gemm_path(saved_path);
  set_num_threads(saved_threads);
  return 0;
}
