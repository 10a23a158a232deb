#include "device.h"

#include "error.h"

#if EMBER_CUDA_BACKEND
#include "cuda/runtime.h"
#endif

namespace ember {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    type = DeviceType::CPU;
    index = 0;
    return;
  }
  if (spec.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    index = 0;
    if (spec.size() == 4) return;
    if (spec[4] == ':' && spec.size() > 5) {
      size_t used = 0;
      int i = -1;
      try {
        i = std::stoi(spec.substr(5), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == spec.size() - 5 && i >= 0) {
        index = i;
        return;
      }
    }
  }
  EMBER_THROW("invalid device string '", spec, "' (expected cpu, cuda or cuda:N)");
}

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

// With a CUDA backend (nvcc, or the SIMT emulator: EMBER_CUDA_BACKEND is a private define of
// libember) core/cuda/allocator.cu answers; the CPU-only build answers here.
#if !EMBER_CUDA_BACKEND
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
bool cuda_emulated() { return false; }
namespace detail {
bool capturing_graph(Device) { return false; }
void check_not_capturing(Device, const char*, const char*) {}
}  // namespace detail
#endif

Device Device::best() { return cuda_device_count() > 0 && !cuda_emulated() ? Device::cuda(0) : Device::cpu(); }

}  // namespace ember
