// The CUDA runtime layer (see Note [Device context] in runtime.h). Host code only; compiled by
// nvcc in the CUDA flavour and by g++ over the emulator in the SIMT flavour.

#include "cuda_api.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "../allocator.h"
#include "../error.h"
#include "ledger.h"
#include "runtime.h"

namespace ember::cuda {

[[noreturn]] void throw_cuda_error(int code, const char* expr, const char* file, int line) {
  const auto err = static_cast<cudaError_t>(code);
  const bool capture = err >= cudaErrorStreamCaptureUnsupported && err <= cudaErrorStreamCaptureWrongThread;
  EMBER_THROW("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") from ", expr, " at ", file,
              ":", line,
              capture ? ": a call that cannot be recorded in a CUDA graph ran while one was being captured "
                        "(Note [CUDA graphs in ember] in core/cuda/graph.h)"
                      : "");
}

int device_count() {
  // Asked once: the answer cannot change while the process runs. A machine without a driver or
  // without a GPU answers with an error code, which means "no devices".
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the error so that it does not surface at a later launch
      n = 0;
    }
    return n;
  }();
  return count;
}

int current_device() {
  int d = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  EMBER_CHECK(index >= 0 && index < device_count(), "cuda:", index, " does not exist (this machine has ",
              device_count(), " CUDA device", device_count() == 1 ? "" : "s", ")");
  EMBER_CUDA_CHECK(cudaSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) : previous_(current_device()) {
  if (index != previous_) set_device(index);
}

DeviceGuard::~DeviceGuard() {
  if (current_device() != previous_) (void)cudaSetDevice(previous_);  // destructors never throw
}

namespace {

// The per-host-thread current stream of each device (nullptr = the legacy default stream).
constexpr int kMaxDevices = 64;
thread_local Stream tls_current_stream[kMaxDevices] = {};

}  // namespace

Stream current_stream() {
  const int d = current_device();
  return d < kMaxDevices ? tls_current_stream[d] : nullptr;
}

StreamGuard::StreamGuard(Stream s) : device_(current_device()), previous_(current_stream()) {
  EMBER_CHECK(device_ < kMaxDevices, "StreamGuard: device index ", device_, " out of range");
  tls_current_stream[device_] = s;
}

StreamGuard::~StreamGuard() { tls_current_stream[device_] = previous_; }

bool sync_every_op() {
  static const bool on = [] {
    const char* v = std::getenv("EMBER_SYNC_EVERY_OP");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

bool env_switch(const char* name, const char* off, const char* on) {
  const char* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0' || std::strcmp(v, off) == 0) return false;
  if (std::strcmp(v, on) == 0) return true;
  EMBER_THROW(name, "=", v, " is not understood (expected '", off, "' or '", on, "')");
}

void check_launch(const char* op) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    EMBER_THROW(op, ": CUDA kernel launch failed on cuda:", current_device(), ": ", cudaGetErrorName(err), " (",
                cudaGetErrorString(err), ")",
                err == cudaErrorStreamCaptureInvalidated
                    ? ": an earlier call invalidated the CUDA graph being captured (Note [CUDA graphs in ember] in "
                      "core/cuda/graph.h)"
                    : "");
  if (!sync_every_op()) return;
  // A capturing stream only records: there is nothing to wait for (the replay synchronizes).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(current_stream(), &capture) == cudaSuccess && capture != cudaStreamCaptureStatusNone)
    return;
  err = cudaStreamSynchronize(current_stream());
  if (err != cudaSuccess)
    EMBER_THROW(op, ": CUDA error while running on cuda:", current_device(), " (caught by EMBER_SYNC_EVERY_OP=1): ",
                cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
}

void synchronize() {
  ledger_host_sync("cudaDeviceSynchronize");
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
}

void synchronize_stream(Stream s) {
  ledger_host_sync("cudaStreamSynchronize");
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
}

const DeviceProperties& properties(int device) {
  static std::mutex mu;
  static std::vector<std::unique_ptr<DeviceProperties>> cache;
  EMBER_CHECK(device >= 0 && device < device_count(), "cuda:", device, " does not exist");
  std::lock_guard<std::mutex> lock(mu);
  if (cache.empty()) cache.resize(static_cast<size_t>(device_count()));
  auto& slot = cache[static_cast<size_t>(device)];
  if (!slot) {
    cudaDeviceProp p{};
    EMBER_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    slot = std::make_unique<DeviceProperties>();
    slot->name = p.name;
    slot->major = p.major;
    slot->minor = p.minor;
    slot->multiprocessor_count = p.multiProcessorCount;
    slot->max_threads_per_block = p.maxThreadsPerBlock;
    slot->warp_size = p.warpSize;
    slot->total_memory = p.totalGlobalMem;
    slot->shared_memory_per_block = p.sharedMemPerBlock;
    slot->shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
  }
  return *slot;
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  cudaMemcpyKind kind = cudaMemcpyDefault;  // device to device, possibly across devices (unified addressing)
  if (dst_device.is_cpu() && src_device.is_cpu()) kind = cudaMemcpyHostToHost;
  else if (dst_device.is_cpu()) kind = cudaMemcpyDeviceToHost;
  else if (src_device.is_cpu()) kind = cudaMemcpyHostToDevice;
  const DeviceGuard guard(dst_device.is_cuda() ? dst_device.index : src_device.index);
  if (kind == cudaMemcpyDefault && src_device != dst_device) {
    // Work queued on the source device must be finished before its bytes are read.
    const DeviceGuard src_guard(src_device.index);
    synchronize_stream(current_stream());
  }
  const Stream s = current_stream();
  const char* what = kind == cudaMemcpyHostToDevice   ? "cudaMemcpy HtoD"
                     : kind == cudaMemcpyDeviceToHost ? "cudaMemcpy DtoH"
                     : kind == cudaMemcpyHostToHost   ? "cudaMemcpy HtoH"
                                                      : "cudaMemcpy DtoD";
  recorded_call(
      CallKind::copy, what, s,
      [&] {
        const double b = static_cast<double>(bytes);
        return cost(src_device.is_cuda() ? b : 0, dst_device.is_cuda() ? b : 0);
      },
      [&] { EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s)); });
  ledger_host_sync(what);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
}

void memset_async(void* p, int value, size_t bytes, Stream s) {
  recorded_call(
      CallKind::memset, "cudaMemsetAsync", s, [&] { return cost(0, static_cast<double>(bytes)); },
      [&] { EMBER_CUDA_CHECK(cudaMemsetAsync(p, value, bytes, s)); });
}

void read_to_host(void* host, const void* device, size_t bytes, Stream s, const char* why) {
  recorded_call(
      CallKind::copy, "cudaMemcpy DtoH", s, [&] { return cost(static_cast<double>(bytes), 0); },
      [&] { EMBER_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s)); });
  ledger_host_sync(why);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
}

Scratch::Scratch(size_t bytes) : bytes_(bytes), device_(current_device()) {
  if (bytes_ > 0) ptr_ = allocator_for(Device::cuda(device_)).allocate(bytes_);
}

Scratch::~Scratch() {
  if (ptr_) allocator_for(Device::cuda(device_)).deallocate(ptr_, bytes_);
}

}  // namespace ember::cuda
