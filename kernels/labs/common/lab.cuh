// The kernel labs' harness: runs each version of a lab's kernel, checks it against the CPU
// reference, and prints one table row per version. Header-only and plain CUDA C++, so that a lab
// builds with one nvcc command on a GPU machine:
//
//   nvcc -O3 -arch=sm_90 -std=c++17 -o copy kernels/labs/copy/copy.cu && ./copy
//
// and on the SIMT emulator here (the lab_copy CMake target: ./build/labs/lab_copy; docs/labs.md).
//
// Options of every lab: --version N (one version, an exercise too), --broken (the exercise too),
// --size A,B,... (the problem size), --small (the emulator's size, also on a GPU), --json (one
// line per version), --list (the versions, nothing run), --no-timing (one run per version on a
// GPU, for a profiler).
//
// Per version, the columns are:
//   ok              the output equals the CPU reference (within the lab's tolerance), and the
//                   emulator saw no out-of-bounds access and no shared-memory race
//   ld/st sect/req  32-byte sectors per global load / store request: 4 is perfectly coalesced
//                   4-byte access (32 lanes x 4 B = 128 B), 32 means every lane its own sector
//   smem wf/req     shared-memory wavefronts per request: 1 is conflict-free, 32 a 32-way conflict
//   barriers        __syncthreads completed, summed over blocks
//   warp ops        warp-collective operations (shuffles, votes, warp matrix operations) and their
//                   average active lanes
//   DRAM MB         bytes the sectors move (global traffic, caches ignored)
//   est H200 us     a roofline estimate: max(bytes / 4.3 TB/s, FLOPs / peak) + 2 us of launch
//   GPU us          measured with CUDA events (median of 20) when running on a real GPU
// The counters come from the emulator (kernels/simt/counters.h); on a GPU, Nsight Compute gives the
// hardware's (docs/labs.md names the matching metrics).

#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#if defined(EMBER_SIMT)
#include <ember/kernels/simt/counters.h>
#endif

namespace lab {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "lab: %s failed: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define LAB_CHECK(call) ::lab::check((call), #call)

// The machine the estimate is for: an H200 (HBM3e bandwidth as measured with a large copy, the
// FP32 CUDA-core peak, and the dense bf16 tensor-core peak measured with PyTorch).
struct Roofline {
  double bytes_per_s = 4.3e12;
  double fp32_flops_per_s = 67e12;
  double bf16_tensor_flops_per_s = 790e12;
  double launch_s = 2e-6;
};

enum class Peak { fp32, bf16_tensor };

struct Row {
  int id = 0;
  std::string name, idea;
  bool ok = false, ran = false, broken = false;
  double max_error = 0;
  double flops = 0;
  Peak peak = Peak::fp32;
  double gpu_us = NAN;
  // from the emulator's counters, summed over the version's launches
  bool counted = false, memory_counted = false;
  int launches = 0;
  unsigned long long out_of_bounds = 0, shared_races = 0;
  std::string first_out_of_bounds, first_shared_race;
  unsigned long long ld_req = 0, ld_sect = 0, st_req = 0, st_sect = 0, sm_req = 0, sm_wf = 0, sm_ideal = 0,
                     sm_lanes = 0, barriers = 0, warp_ops = 0, warp_lanes = 0;
  double dram_bytes() const { return 32.0 * static_cast<double>(ld_sect + st_sect); }
};

class Lab {
 public:
  // sizes: the lab's default problem size on a GPU and on the emulator (which runs every CUDA
  // thread on the CPU: its sizes are small); --size a,b,c overrides them.
  Lab(const char* name, int argc, char** argv, std::vector<long> gpu_size, std::vector<long> emulator_size)
      : name_(name) {
#if defined(EMBER_SIMT)
    emulated_ = true;
#endif
    size_ = emulated_ ? emulator_size : gpu_size;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--version" && i + 1 < argc) {
        only_ = std::atoi(argv[++i]);
      } else if (a == "--size" && i + 1 < argc) {
        size_.clear();
        for (const char* p = argv[++i]; *p;) {
          char* end = nullptr;
          size_.push_back(std::strtol(p, &end, 10));
          if (end == p || size_.back() <= 0) usage("--size takes positive integers separated by commas");
          p = *end == ',' ? end + 1 : end;
        }
      } else if (a == "--json") {
        json_ = true;
      } else if (a == "--broken") {
        with_broken_ = true;
      } else if (a == "--list") {
        list_ = true;
      } else if (a == "--small") {  // the emulator's size on a GPU too (to compare counters)
        size_ = emulator_size;
      } else if (a == "--no-timing") {  // one run per version: what a profiler should see
        timing_ = false;
      } else {
        usage(("unknown argument " + a).c_str());
      }
    }
    if (list_) {  // naming the versions runs nothing: the small sizes keep the lab's setup quick
      size_ = emulator_size;
      return;
    }
    if (!json_) {
      cudaDeviceProp prop{};
      LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
      std::printf("lab %s on %s%s, size", name, prop.name, emulated_ ? " (the SIMT emulator: counters, no timing)" : "");
      for (long s : size_) std::printf(" %ld", s);
      std::printf("\n");
    }
  }

  long size(size_t i) const {
    if (i >= size_.size()) {
      std::fprintf(stderr, "lab %s: --size needs at least %zu numbers\n", name_.c_str(), i + 1);
      std::exit(2);
    }
    return size_[i];
  }
  bool emulated() const { return emulated_; }

  // One version: `run` launches its kernel(s) on the prepared inputs; `check` compares the output
  // with the reference and returns the largest error (negative: the output is wrong in a way that
  // has no size, like a NaN). `flops` is what the version computes (for the roofline).
  void version(int id, const char* vname, const char* idea, double flops, const std::function<void()>& run,
               const std::function<double()>& check, double tolerance, Peak peak = Peak::fp32) {
    add(id, vname, idea, flops, run, check, tolerance, peak, false);
  }
  // For a lab whose kernels update their inputs in place (adam): `restore` puts the inputs back
  // before each version's checked run, since the timed runs of the version before changed them.
  void restore_inputs_with(std::function<void()> restore) { restore_ = std::move(restore); }
  // An exercise: a version with a bug planted on purpose (docs/labs.md). Runs only with --broken or
  // --version N; its wrong result does not fail the lab.
  void broken_version(int id, const char* vname, const char* idea, double flops, const std::function<void()>& run,
                      const std::function<double()>& check, double tolerance) {
    add(id, vname, idea, flops, run, check, tolerance, Peak::fp32, true);
  }

  // Prints the table; the exit status: 0 when every version that ran (except exercises) is correct.
  // With --list: one line per version (number, name, idea; exercises marked) and nothing run.
  int finish() {
    if (list_) {
      for (const Row& r : rows_)
        std::printf("%d\t%s\t%s%s\n", r.id, r.name.c_str(), r.idea.c_str(), r.broken ? " (exercise)" : "");
      return 0;
    }
    bool all_ok = true;
    if (!json_) {
      std::printf("%-3s %-22s %-4s %9s %9s %9s %9s %11s %9s %11s %9s\n", "v", "version", "ok", "ld s/req", "st s/req",
                  "smem wf/r", "barriers", "warp ops", "DRAM MB", "est H200 us", "GPU us");
    }
    for (const Row& r : rows_) {
      if (!r.ran) continue;
      if (!r.ok && !r.broken) all_ok = false;
      if (json_) {
        print_json(r);
        continue;
      }
      auto ratio = [&](unsigned long long a, unsigned long long b, char* buf) {
        if (!r.memory_counted || b == 0) std::snprintf(buf, 16, "%9s", "-");
        else std::snprintf(buf, 16, "%9.2f", static_cast<double>(a) / static_cast<double>(b));
        return buf;
      };
      char b1[16], b2[16], b3[16], ops[32], est[16], gpu[16], mb[16];
      if (r.counted && r.warp_ops) std::snprintf(ops, sizeof ops, "%llu (%.0f)", r.warp_ops, double(r.warp_lanes) / double(r.warp_ops));
      else std::snprintf(ops, sizeof ops, "%s", r.counted ? "0" : "-");
      if (r.memory_counted) {
        std::snprintf(est, sizeof est, "%11.1f", estimate_us(r));
        std::snprintf(mb, sizeof mb, "%9.2f", r.dram_bytes() / 1e6);
      } else {
        std::snprintf(est, sizeof est, "%11s", "-");
        std::snprintf(mb, sizeof mb, "%9s", "-");
      }
      if (std::isnan(r.gpu_us)) std::snprintf(gpu, sizeof gpu, "%9s", "-");
      else std::snprintf(gpu, sizeof gpu, "%9.1f", r.gpu_us);
      std::printf("%-3d %-22s %-4s %s %s %s %9llu %11s %s %s %s\n", r.id, r.name.c_str(),
                  r.ok ? "yes" : (r.broken ? "BUG" : "NO"), ratio(r.ld_sect, r.ld_req, b1), ratio(r.st_sect, r.st_req, b2),
                  ratio(r.sm_wf, r.sm_req, b3), r.barriers, ops, mb, est, gpu);
      if (!r.ok) std::printf("    max error %g\n", r.max_error);
      if (r.out_of_bounds)
        std::printf("    emulator: %llu out-of-bounds accesses; the first: %s\n", r.out_of_bounds,
                    r.first_out_of_bounds.c_str());
      if (r.shared_races)
        std::printf("    emulator: %llu shared-memory races; the first: %s\n", r.shared_races, r.first_shared_race.c_str());
    }
    return all_ok ? 0 : 1;
  }

  // Helpers for the labs' checks.
  static double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; ++i) {
      const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
      if (std::isnan(d)) return INFINITY;
      m = std::max(m, d);
    }
    return m;
  }

 private:
  [[noreturn]] void usage(const char* what) {
    std::fprintf(stderr, "lab %s: %s\nusage: %s [--version N] [--size A,B,...] [--small] [--json] [--broken] [--list] [--no-timing]\n", name_.c_str(),
                 what, name_.c_str());
    std::exit(2);
  }

  void add(int id, const char* vname, const char* idea, double flops, const std::function<void()>& run,
           const std::function<double()>& check, double tolerance, Peak peak, bool broken) {
    Row r;
    r.id = id, r.name = vname, r.idea = idea, r.flops = flops, r.peak = peak, r.broken = broken;
    const bool selected = !list_ && (only_ == id || (only_ < 0 && (!broken || with_broken_)));
    if (selected) {
      r.ran = true;
      if (restore_) restore_();
#if defined(EMBER_SIMT)
      ember::simt::counters_start();
      run();
      LAB_CHECK(cudaDeviceSynchronize());
      for (const ember::simt::KernelCounters& k : ember::simt::counters_stop()) {
        r.launches += 1;
        r.ld_req += k.global_load_requests, r.ld_sect += k.global_load_sectors;
        r.st_req += k.global_store_requests, r.st_sect += k.global_store_sectors;
        r.sm_req += k.shared_requests, r.sm_wf += k.shared_wavefronts, r.sm_ideal += k.shared_ideal_wavefronts;
        r.sm_lanes += k.shared_request_lanes;
        r.barriers += k.barriers, r.warp_ops += k.warp_ops, r.warp_lanes += k.warp_op_lanes;
        if (k.out_of_bounds && r.first_out_of_bounds.empty()) r.first_out_of_bounds = k.kernel + ": " + k.first_out_of_bounds;
        r.out_of_bounds += k.out_of_bounds;
        if (k.shared_races && r.first_shared_race.empty()) r.first_shared_race = k.kernel + ": " + k.first_shared_race;
        r.shared_races += k.shared_races;
      }
      r.counted = true;
      r.memory_counted = ember::simt::counters_see_memory();
#else
      run();  // warm-up, and the output that is checked
      LAB_CHECK(cudaDeviceSynchronize());
#endif
      LAB_CHECK(cudaGetLastError());
      const double err = check();
      r.max_error = err;
      r.ok = err >= 0 && err <= tolerance && r.out_of_bounds == 0 && r.shared_races == 0;
#if !defined(EMBER_SIMT)
      if (timing_) r.gpu_us = time_us(run);
#endif
    }
    rows_.push_back(r);
  }

  static double time_us(const std::function<void()>& run) {
    cudaEvent_t a, b;
    LAB_CHECK(cudaEventCreate(&a));
    LAB_CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < 20; ++i) {
      LAB_CHECK(cudaEventRecord(a));
      run();
      LAB_CHECK(cudaEventRecord(b));
      LAB_CHECK(cudaEventSynchronize(b));
      float t = 0;
      LAB_CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return 1e3 * ms[ms.size() / 2];
  }

  double estimate_us(const Row& r) const {
    const Roofline m;
    const double peak = r.peak == Peak::bf16_tensor ? m.bf16_tensor_flops_per_s : m.fp32_flops_per_s;
    return 1e6 * (std::max(r.dram_bytes() / m.bytes_per_s, r.flops / peak) + m.launch_s * r.launches);
  }

  void print_json(const Row& r) const {
    std::printf(
        "{\"lab\":\"%s\",\"version\":%d,\"name\":\"%s\",\"ok\":%s,\"broken\":%s,\"max_error\":%g,\"emulated\":%s,"
        "\"launches\":%d,\"global_load_requests\":%llu,\"global_load_sectors\":%llu,\"global_store_requests\":%llu,"
        "\"global_store_sectors\":%llu,\"shared_requests\":%llu,\"shared_wavefronts\":%llu,"
        "\"shared_ideal_wavefronts\":%llu,\"shared_request_lanes\":%llu,\"barriers\":%llu,\"warp_ops\":%llu,\"warp_op_lanes\":%llu,"
        "\"out_of_bounds\":%llu,\"shared_races\":%llu,\"memory_counted\":%s,\"flops\":%.0f,\"est_h200_us\":%s,\"gpu_us\":%s}\n",
        name_.c_str(), r.id, r.name.c_str(), r.ok ? "true" : "false", r.broken ? "true" : "false",
        std::isfinite(r.max_error) ? r.max_error : -1.0, emulated_ ? "true" : "false", r.launches, r.ld_req, r.ld_sect,
        r.st_req, r.st_sect, r.sm_req, r.sm_wf, r.sm_ideal, r.sm_lanes, r.barriers, r.warp_ops, r.warp_lanes,
        r.out_of_bounds, r.shared_races, r.memory_counted ? "true" : "false", r.flops,
        r.memory_counted ? std::to_string(estimate_us(r)).c_str() : "null",
        std::isnan(r.gpu_us) ? "null" : std::to_string(r.gpu_us).c_str());
  }

  std::string name_;
  std::vector<long> size_;
  std::function<void()> restore_;
  bool emulated_ = false, json_ = false, with_broken_ = false, list_ = false, timing_ = true;
  int only_ = -1;
  std::vector<Row> rows_;
};

}  // namespace lab
