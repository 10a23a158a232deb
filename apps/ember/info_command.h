#pragma once
// `ember info` and `ember --version`.

#include <string>

namespace ember::app {

// "ember 0.1.0 (Release, CPU + SIMT (CUDA kernels on the CPU emulator))"
std::string version_line();
// What runs where: version and build, the CPU and its instruction sets, the GEMM/convolution
// kernels (and a warning when they are below the CPU), threads, CUDA devices. json: one object.
void run_info(bool json);

}  // namespace ember::app
