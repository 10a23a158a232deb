// `ember info`: which code runs on this machine, and why (Note [BLAS kernels by CPU features]).

#include "info_command.h"

#include <cstdio>
#include <ember/core/build_info.h>
#include <ember/core/device.h>
#include <ember/core/cpu/parallel.h>
#include <ember/kernels/paths.h>
#include <ember/train/run_report.h>
#include <thread>

namespace ember::app {

std::string version_line() {
  const BuildInfo& b = build_info();
  return "ember " + b.version + " (" + b.build_type + ", " + b.flavours + ")";
}

void run_info(bool json) {
  const BuildInfo& b = build_info();
  const ember::CpuFeatures& cpu = ember::cpu_features();
  const ember::IsaLevel isa = ember::widest_isa(cpu);
  const kernels::CpuPaths paths = kernels::cpu_paths();
  const std::vector<std::string> gpus = cuda_device_descriptions();
  const char* env_threads = std::getenv("EMBER_NUM_THREADS");
  if (json) {
    std::printf("%s\n", train::environment_json(2).c_str());
    return;
  }
  std::printf("%s\n", version_line().c_str());
  std::printf("  compiler   %s\n", b.compiler.c_str());
  std::printf("  libraries  %s\n", b.libraries.c_str());
  std::printf("CPU          %s (%s family %d model %d stepping %d), %u logical cores\n", cpu.model_name.c_str(),
              cpu.vendor.c_str(), cpu.family, cpu.model, cpu.stepping, std::thread::hardware_concurrency());
  std::printf("  widest     %s\n", ember::isa_name(isa));
  std::printf("  features   %s\n", ember::feature_list(cpu).c_str());
  std::printf("GEMM / conv  %s kernels (%s), chosen by %s\n", paths.gemm_kernels.c_str(),
              ember::isa_name(paths.gemm_isa), paths.gemm_chosen_by.c_str());
  std::printf("  library    %s\n", paths.blas_library.c_str());
  std::printf("  bf16       %s\n", paths.bf16_gemm.c_str());
  std::printf("  amx        %s\n", paths.amx.c_str());
  std::printf("  conv 3x3   %s\n", paths.conv3x3.c_str());
  std::printf("  measured   %s\n", paths.measured.c_str());
  const int usable = available_cpus();
  const std::string why = env_threads ? std::string("EMBER_NUM_THREADS=") + env_threads
                          : usable == static_cast<int>(std::thread::hardware_concurrency())
                              ? std::string("all cores")
                              : "the " + std::to_string(usable) + (usable == 1 ? " CPU" : " CPUs") + " this process may run on, of " +
                                    std::to_string(std::thread::hardware_concurrency());
  std::printf("threads      %d (%s)\n", get_num_threads(), why.c_str());
  if (!cuda_built()) {
    std::printf("CUDA         not in this build\n");
  } else if (gpus.empty()) {
    std::printf("CUDA         built, no device visible\n");
  } else {
    std::printf("CUDA         %zu device%s\n", gpus.size(), gpus.size() == 1 ? "" : "s");
    for (const std::string& g : gpus) std::printf("  %s\n", g.c_str());
  }
}

}  // namespace ember::app
