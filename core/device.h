#pragma once
// Where a tensor's memory lives: the CPU or CUDA device n.

#include <cstdint>
#include <ostream>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  // Parses "cpu", "cuda", "cuda:1". Throws ember::Error on anything else.
  explicit Device(const std::string& spec);

  static constexpr Device cpu() { return Device(DeviceType::CPU); }
  static constexpr Device cuda(int i = 0) { return Device(DeviceType::CUDA, i); }
  // A GPU if this build has CUDA and one is present, else the CPU. The SIMT flavour's emulated
  // devices are never "best": they exist to run the CUDA code for correctness, slowly.
  static Device best();

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  friend bool operator==(const Device& a, const Device& b) { return a.type == b.type && a.index == b.index; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

// Whether this build of ember includes the CUDA backend (a real GPU or the SIMT emulator).
bool cuda_built();
// Number of CUDA devices visible (0 in a CPU-only build).
int cuda_device_count();
// Whether the CUDA devices are the SIMT emulator's (host memory, kernels run as fibers).
bool cuda_emulated();

}  // namespace ember
