#pragma once
// What this build of ember is and what it runs on: the version, the build flavours and libraries,
// and the devices. `ember --version` and `ember info` print it; the benchmarks record it.

#include <string>
#include <vector>

namespace ember {

struct BuildInfo {
  std::string version;     // "0.1.0"
  std::string build_type;  // "Release", "Debug", ...
  std::string compiler;    // "GCC 12.2.0"
  std::string flavours;    // "CPU + SIMT (CUDA kernels on the CPU emulator)": CMake's summary line
  std::string libraries;   // "OpenBLAS, OpenMP 4.5, ...": likewise
};
const BuildInfo& build_info();

// One line per CUDA device: "cuda:0: NVIDIA H200, sm_90, 132 SMs, 139.8 GiB" (real devices) or
// "cuda:0: the SIMT emulator (...)" (the emulator); empty in a CPU-only build or without devices.
std::vector<std::string> cuda_device_descriptions();

}  // namespace ember
