#pragma once
// Small helpers shared by the benchmarks: wall-clock timing, medians, the machine's nominal clock
// and core count as /proc/cpuinfo reports them, and the CPU and kernel fields every result carries.

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <ember/kernels/paths.h>

namespace ember::bench {

// Seconds taken by f().
template <typename F>
double time_s(const F& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID). On a machine shared with
// other work, a single-threaded run's CPU time leaves out the time the scheduler gave to others;
// the benchmarks print it beside the wall-clock time.
inline double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The clock and core count (the model and the instruction sets come from CPUID: machine_fields()).
struct CpuInfo {
  int logical_cpus = 1;  // "processor" entries (hardware_concurrency when /proc/cpuinfo is missing)
  double ghz = 0;        // the highest "cpu MHz" listed / 1000: the nominal clock, not a turbo clock
};

inline CpuInfo read_cpuinfo() {
  CpuInfo info;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  int processors = 0;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    key.erase(key.find_last_not_of(" \t") + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "processor") ++processors;
    if (key == "cpu MHz") info.ghz = std::max(info.ghz, std::atof(value.c_str()) / 1000.0);
  }
  const unsigned hc = std::thread::hardware_concurrency();
  info.logical_cpus = processors > 0 ? processors : (hc > 0 ? static_cast<int>(hc) : 1);
  return info;
}

// Escapes a string for a JSON value (quotes and backslashes; cpuinfo has nothing else).
inline std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    r += c;
  }
  return r + "\"";
}

// The machine and the code path a result was measured with, as JSON fields (no braces, no
// comma at either end): the CPU model, its widest instruction set, the GEMM kernels running
// (Note [BLAS kernels by CPU features]), the bf16 GEMM path (Note [bf16 GEMM on the CPU]), the AMX
// tiles (Note [AMX tiles and their emulator]) and the 3x3 convolutions' path.
// Every benchmark's line carries them.
inline std::string machine_fields() {
  const ember::CpuFeatures& f = ember::cpu_features();
  const kernels::CpuPaths p = kernels::cpu_paths();
  return "\"cpu\":" + json_str(f.model_name) + ",\"cpu_isa\":" + json_str(ember::isa_name(ember::widest_isa(f))) +
         ",\"gemm_kernels\":" + json_str(p.gemm_kernels + " (" + ember::isa_name(p.gemm_isa) + ")") +
         ",\"gemm_chosen_by\":" + json_str(p.gemm_chosen_by) + ",\"bf16_gemm\":" + json_str(p.bf16_gemm) + ",\"amx\":" + json_str(p.amx) +
         ",\"conv3x3\":" + json_str(p.conv3x3);
}

}  // namespace ember::bench
