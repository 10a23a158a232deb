// bench_dispatch: the fixed cost of one op call — argument checks, output allocation, the device
// switch, the kernel call on one element, and (with autograd) recording a node on the tape.
//
//   ./build/bench/bench_dispatch [--ops N] [--runs R] [--autograd off|on|both]
//
// Times N calls of add() on two 1-element float32 tensors, R times, and prints the median (and
// min/max) in nanoseconds per op as one JSON line per configuration:
//   {"bench":"dispatch","op":"add_1elem","autograd":false,"ns_per_op":...,...}
// "autograd":true makes one operand a leaf that requires grad, so every call also records an
// AddBackward node (the graph is dropped with the result: no backward is run). --autograd picks one
// configuration (both by default), e.g. to profile one of them alone.
// Threads: a 1-element op never leaves the calling thread (parallel_for runs inline below its grain).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "bench_util.h"

using namespace ember;

namespace {

// ns per call of add(a, b), for each of `runs` runs of `ops` calls.
std::vector<double> time_add(const Tensor& a, const Tensor& b, int64_t ops, int runs) {
  std::vector<double> ns;
  // Warm-up: the allocator, the first tape node, instruction caches.
  for (int64_t i = 0; i < std::min<int64_t>(ops, 10000); ++i) (void)add(a, b);
  double sink = 0;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < ops; ++i) {
      Tensor c = add(a, b);
      // Read the result so that the call cannot be optimized away.
      sink += static_cast<const float*>(c.data())[0];
    }
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(ops));
  }
  if (sink == -1.0) std::printf("#\n");  // never true; keeps `sink` alive
  return ns;
}

int64_t parse_positive(const char* flag, const char* value) {
  char* end = nullptr;
  const long long v = value ? std::strtoll(value, &end, 10) : 0;
  if (!value || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "bench_dispatch: %s needs a positive integer\n", flag);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t ops = 200000;
  int runs = 7;
  std::vector<bool> configs{false, true};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ops") == 0) {
      ops = parse_positive("--ops", i + 1 < argc ? argv[++i] : nullptr);
    } else if (std::strcmp(argv[i], "--runs") == 0) {
      runs = static_cast<int>(parse_positive("--runs", i + 1 < argc ? argv[++i] : nullptr));
    } else if (std::strcmp(argv[i], "--autograd") == 0 && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v == "off") configs = {false};
      else if (v == "on") configs = {true};
      else if (v == "both") configs = {false, true};
      else {
        std::fprintf(stderr, "bench_dispatch: --autograd takes off, on or both, got '%s'\n", v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--ops N] [--runs R] [--autograd off|on|both]\n", argv[0]);
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }

  try {
    for (const bool autograd : configs) {
      Tensor a = full({1}, 1.5f);
      Tensor b = full({1}, 2.0f);
      if (autograd) a.requires_grad_(true);
      const std::vector<double> ns = time_add(a, b, ops, runs);
      const auto [lo, hi] = std::minmax_element(ns.begin(), ns.end());
      std::printf(
          "{\"bench\":\"dispatch\",\"op\":\"add_1elem\",\"autograd\":%s,\"ns_per_op\":%.1f,"
          "\"min_ns\":%.1f,\"max_ns\":%.1f,\"ops\":%lld,\"runs\":%d,\"threads\":%d,%s}\n",
          autograd ? "true" : "false", bench::median(ns), *lo, *hi, static_cast<long long>(ops), runs, get_num_threads(),
          bench::machine_fields().c_str());
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_dispatch: ember::Error: %s\n", e.what());
    return 1;
  }
  return 0;
}
