// bench_gemm: single-precision GEMM throughput of ember's BLAS path (kernels::cpu::gemm, i.e.
// OpenBLAS cblas_sgemm), square n x n x n at n = 256, 1024, 2048, on 1 and 2 threads.
//
//   ./build/bench/bench_gemm
//
// One JSON line per (n, threads):
//   {"bench":"sgemm","n":1024,"threads":2,"reps":5,"median_ms":...,"gflops":...,"peak_gflops":...,
//    "fraction_of_peak":...,"peak_assumption":"..."}
// gflops = 2 n^3 / median time (best_gflops: from the fastest rep, less sensitive to a shared
// machine). peak_gflops = threads x GHz x 32 FLOP/cycle: two AVX2 FMA pipes, 8 f32 lanes each,
// 2 FLOP per FMA; GHz is the highest "cpu MHz" in /proc/cpuinfo (the nominal clock; turbo can
// exceed it). On a CPU with AVX-512F, OpenBLAS runs 512-bit FMA kernels and the real peak can be
// twice that: avx512_peak_gflops (64 FLOP/cycle) is printed beside it, and gflops above
// peak_gflops means exactly that. machine_peak_gflops = logical CPUs x GHz x 32.
// One warm-up call per configuration (thread pool start, page faults), then the median of `reps`
// timed calls; reps shrink for large n to keep the whole run well under a minute.

#include <algorithm>
#include <cstdio>
#include <vector>

#include <ember/ember.h>
#include <ember/kernels/cpu/gemm.h>

#include "bench_util.h"

using namespace ember;

int main() {
  const bench::CpuInfo cpu = bench::read_cpuinfo();
  const bool avx512f = ember::cpu_features().avx512f;  // BLAS may run 512-bit FMAs: twice the AVX2 peak
  const double flop_per_cycle = 32;  // AVX2 FMA, f32
  const int saved_threads = get_num_threads();
  for (int64_t n : {256, 1024, 2048}) {
    Generator gen(1234);
    NoGradGuard no_grad;
    Tensor a = randn({n, n}, {}, gen), b = randn({n, n}, {}, gen), c = zeros({n, n});
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* pc = c.data_ptr<float>();
    auto run = [&] {
      kernels::cpu::gemm(kernels::Transpose::No, kernels::Transpose::No, n, n, n, 1.0f, pa, n, pb, n, 0.0f,
                         pc, n);
    };
    const int reps = n <= 256 ? 21 : n <= 1024 ? 9 : 5;
    for (int threads : {1, 2}) {
      set_num_threads(threads);  // ember's threads and OpenBLAS's
      run();                     // warm-up
      std::vector<double> times;
      for (int r = 0; r < reps; ++r) times.push_back(bench::time_s(run));
      const double t = bench::median(times);
      const double best = *std::min_element(times.begin(), times.end());
      const double flop = 2.0 * n * n * n;
      const double gflops = flop / t / 1e9;
      const double peak = threads * cpu.ghz * flop_per_cycle;
      char avx512[96] = "";
      if (avx512f) std::snprintf(avx512, sizeof avx512, "\"avx512_peak_gflops\":%.1f,", 2 * peak);
      std::printf(
          "{\"bench\":\"sgemm\",\"n\":%lld,\"threads\":%d,\"reps\":%d,\"median_ms\":%.3f,\"gflops\":%.1f,"
          "\"best_gflops\":%.1f,\"peak_gflops\":%.1f,\"fraction_of_peak\":%.3f,%s\"machine_peak_gflops\":%.1f,"
          "%s,"
          "\"peak_assumption\":\"threads x %.3f GHz (max cpu MHz in /proc/cpuinfo) x 32 FLOP/cycle (AVX2: 2 FMA "
          "units x 8 f32 lanes x 2 FLOP); machine peak: all %d logical CPUs%s\"}\n",
          static_cast<long long>(n), threads, reps, t * 1e3, gflops, flop / best / 1e9, peak,
          peak > 0 ? gflops / peak : 0.0, avx512, cpu.logical_cpus * cpu.ghz * flop_per_cycle,
          bench::machine_fields().c_str(), cpu.ghz, cpu.logical_cpus,
          avx512f ? "; this CPU has AVX-512F, so 64 FLOP/cycle (avx512_peak_gflops) may be the real bound" : "");
      std::fflush(stdout);
    }
  }
  set_num_threads(saved_threads);
  return 0;
}
