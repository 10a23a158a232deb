// build_info(): the strings CMake hands this one file (CMakeLists.txt, "one line that says what
// is in"), so that changing them recompiles nothing else.

#include "build_info.h"

#include <cstdio>

#include "device.h"
#if EMBER_CUDA_BACKEND
#include "cuda/runtime.h"
#endif

#ifndef EMBER_VERSION_STRING
#define EMBER_VERSION_STRING "unknown"
#endif
#ifndef EMBER_BUILD_TYPE
#define EMBER_BUILD_TYPE "unknown"
#endif
#ifndef EMBER_BUILD_FLAVOURS
#define EMBER_BUILD_FLAVOURS "unknown"
#endif
#ifndef EMBER_BUILD_LIBRARIES
#define EMBER_BUILD_LIBRARIES "unknown"
#endif

namespace ember {

const BuildInfo& build_info() {
  static const BuildInfo info{
      .version = EMBER_VERSION_STRING,
      .build_type = EMBER_BUILD_TYPE,
#if defined(__clang__)
      .compiler = "Clang " __clang_version__,
#elif defined(__GNUC__)
      .compiler = "GCC " __VERSION__,
#else
      .compiler = "unknown",
#endif
      .flavours = EMBER_BUILD_FLAVOURS,
      .libraries = EMBER_BUILD_LIBRARIES,
  };
  return info;
}

std::vector<std::string> cuda_device_descriptions() {
  std::vector<std::string> out;
#if EMBER_CUDA_BACKEND
  for (int i = 0; i < cuda_device_count(); ++i) {
    const cuda::DeviceProperties& p = cuda::properties(i);
    char line[256];
    const double gib = static_cast<double>(p.total_memory) / (1024.0 * 1024.0 * 1024.0);
    if (cuda_emulated())
      std::snprintf(line, sizeof line, "cuda:%d: the SIMT emulator (sm_%d%d limits, %.1f GiB of host memory; kernels "
                    "run on the CPU)", i, p.major, p.minor, gib);
    else
      std::snprintf(line, sizeof line, "cuda:%d: %s, sm_%d%d, %d SMs, %.1f GiB", i, p.name.c_str(), p.major, p.minor,
                    p.multiprocessor_count, gib);
    out.emplace_back(line);
  }
#endif
  return out;
}

}  // namespace ember
