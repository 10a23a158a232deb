// The CUDA runtime API over host memory: devices, errors, device and pinned memory, copies.
//
// Device memory is host memory (256-byte aligned, poisoned with 0xFF so that an uninitialised
// read is NaN / -1) recorded in one registry of allocations with their device. The registry is
// what makes the emulator strict: cudaMemcpy checks the direction and the range of each side,
// cudaFree refuses pointers it did not hand out, a kernel argument that is not device memory is a
// diagnosed error, and each device has a memory limit (EMBER_SIMT_DEVICE_MEMORY) so that
// out-of-memory paths run for real. All of it is thread-safe: in-process data-parallel ranks,
// one host thread per device, allocate and copy at the same time.

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "internal.h"
#include "shim_memory.h"

namespace ember::simt::detail {

namespace {

thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local int tls_device = 0;

struct Registry {
  std::shared_mutex mu;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  std::vector<size_t> used;                      // device memory in use, per device
};

Registry& registry() {
  // Never destroyed: static destructors elsewhere (device contexts, caching allocators) may still
  // free device memory while the process exits.
  static Registry* r = new Registry;
  return *r;
}

int device_count() { return config().devices; }

bool valid_device(int d) { return d >= 0 && d < device_count(); }

// The allocation containing [p, p + n) entirely, if p points into one. Caller holds the lock.
const Allocation* lookup(const void* p, bool one_past_end) {
  auto& m = registry().allocations;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return nullptr;
  --it;
  const Allocation& a = it->second;
  const bool inside = addr < a.base + a.size || (one_past_end && addr == a.base + a.size);
  return inside ? &a : nullptr;
}

void* allocate(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  if (p != nullptr && config().poison) std::memset(p, 0xFF, bytes);
  return p;
}

}  // namespace

cudaError_t fail(cudaError_t e) {
  tls_last_error = e;
  return e;
}

int current_device() { return tls_device; }

bool find_allocation(const void* p, bool one_past_end, Allocation* out) {
  std::shared_lock<std::shared_mutex> lock(registry().mu);
  const Allocation* a = lookup(p, one_past_end);
  if (a && out) *out = *a;
  return a != nullptr;
}

bool find_allocation_ending_before(const void* p, size_t slack, Allocation* out) {
  std::shared_lock<std::shared_mutex> lock(registry().mu);
  auto& m = registry().allocations;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = m.upper_bound(addr);
  if (it == m.begin()) return false;
  --it;
  const Allocation& a = it->second;
  if (addr < a.base + a.size || addr >= a.base + a.size + slack) return false;
  if (out) *out = a;
  return true;
}

namespace {

// Where one side of a copy lies: device memory (then the whole range must be inside one
// allocation), pinned host memory, or unregistered host memory (not checkable).
enum class Side : uint8_t { Device, Host, Bad };

Side classify(const void* p, size_t n) {
  std::shared_lock<std::shared_mutex> lock(registry().mu);
  const Allocation* a = lookup(p, false);
  if (a == nullptr) return Side::Host;
  if (reinterpret_cast<uintptr_t>(p) + n > a->base + a->size) return Side::Bad;  // runs off the end
  return a->kind == MemoryKind::Device ? Side::Device : Side::Host;
}

// dst_n / src_n: the bytes each side spans (they differ for pitched 2D copies).
cudaError_t check_copy(void* dst, size_t dst_n, const void* src, size_t src_n, cudaMemcpyKind kind) {
  if (dst_n == 0 || src_n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  const Side d = classify(dst, dst_n), s = classify(src, src_n);
  if (d == Side::Bad || s == Side::Bad) return cudaErrorInvalidValue;
  switch (kind) {
    case cudaMemcpyHostToHost: return cudaSuccess;
    case cudaMemcpyHostToDevice: return d == Side::Device && s == Side::Host ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return d == Side::Host && s == Side::Device ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice:
      return d == Side::Device && s == Side::Device ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;  // inferred from the pointers (unified addressing)
  }
  return cudaErrorInvalidMemcpyDirection;
}

cudaError_t check_copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return check_copy(dst, n, src, n, kind);
}

// The device whose streams a copy or memset waits for: the device that owns device memory on
// either side, else the current one.
int device_of(const void* a, const void* b) {
  Allocation x;
  if (find_allocation(a, false, &x) && x.kind == MemoryKind::Device) return x.device;
  if (b && find_allocation(b, false, &x) && x.kind == MemoryKind::Device) return x.device;
  return current_device();
}

cudaError_t check_memset(void* p, size_t n) {
  if (n == 0) return cudaSuccess;
  return classify(p, n) == Side::Device ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace

}  // namespace ember::simt::detail

using namespace ember::simt::detail;

extern "C" {

// ---- errors -----------------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = tls_last_error;
  tls_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return tls_last_error; }

#define EMBER_SIMT_ERRORS(X)                                                       \
  X(cudaSuccess, "no error")                                                       \
  X(cudaErrorInvalidValue, "invalid argument")                                     \
  X(cudaErrorMemoryAllocation, "out of memory")                                    \
  X(cudaErrorInitializationError, "initialization error")                          \
  X(cudaErrorInvalidConfiguration, "invalid configuration argument")               \
  X(cudaErrorInvalidDevice, "invalid device ordinal")                              \
  X(cudaErrorInvalidDevicePointer, "invalid device pointer")                       \
  X(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy")          \
  X(cudaErrorInvalidResourceHandle, "invalid resource handle")                     \
  X(cudaErrorInvalidDeviceFunction, "invalid device function")                     \
  X(cudaErrorNotReady, "device not ready")                                         \
  X(cudaErrorNoDevice, "no CUDA-capable device is detected")                       \
  X(cudaErrorNotSupported, "operation not supported")                              \
  X(cudaErrorLaunchFailure, "unspecified launch failure")                          \
  X(cudaErrorIllegalAddress, "an illegal memory access was encountered")           \
  X(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled")           \
  X(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped") \
  X(cudaErrorIllegalState, "the operation cannot be performed in the present state")               \
  X(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing")         \
  X(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture")  \
  X(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began")       \
  X(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream")    \
  X(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream") \
  X(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread") \
  X(cudaErrorUnknown, "unknown error")

const char* cudaGetErrorString(cudaError_t e) {
#define X(code, text) \
  if (e == code) return text;
  EMBER_SIMT_ERRORS(X)
#undef X
  return "unrecognized error code";
}

const char* cudaGetErrorName(cudaError_t e) {
#define X(code, text) \
  if (e == code) return #code;
  EMBER_SIMT_ERRORS(X)
#undef X
  return "cudaErrorUnknown";
}

// ---- devices ----------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  *count = device_count();
  return device_count() > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  tls_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  *device = tls_device;
  return cudaSuccess;
}

// An H200-like sm_90 device; memory is the emulator's per-device limit.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (p == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "ember SIMT emulated sm_90");
  p->totalGlobalMem = config().device_memory;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->reservedSharedMemPerBlock = 1024;
  p->regsPerBlock = 65536;
  p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxBlocksPerMultiProcessor = 32;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 6144;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->canMapHostMemory = 1;
  p->managedMemory = 1;
  p->streamPrioritiesSupported = 1;
  p->globalL1CacheSupported = 1;
  p->localL1CacheSupported = 1;
  p->cooperativeLaunch = 1;
  p->pciBusID = device + 1;
  p->memoryPoolsSupported = 0;
  p->clusterLaunch = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrTotalConstantMemory: *value = static_cast<int>(p.totalConstMem); break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrAsyncEngineCount: *value = p.asyncEngineCount; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrPciBusId: *value = p.pciBusID; break;
    case cudaDevAttrCooperativeLaunch: *value = 1; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

// ---- device memory ----------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  if (bytes == 0) return cudaSuccess;
  const int d = current_device();
  Registry& r = registry();
  {
    std::unique_lock<std::shared_mutex> lock(r.mu);
    if (r.used.empty()) r.used.assign(static_cast<size_t>(device_count()), 0);
    const size_t rounded = (bytes + 255) / 256 * 256;
    if (rounded > config().device_memory - r.used[static_cast<size_t>(d)]) return fail(cudaErrorMemoryAllocation);
    r.used[static_cast<size_t>(d)] += rounded;
  }
  void* p = allocate(bytes);
  std::unique_lock<std::shared_mutex> lock(r.mu);
  if (p == nullptr) {
    r.used[static_cast<size_t>(d)] -= (bytes + 255) / 256 * 256;
    return fail(cudaErrorMemoryAllocation);
  }
  r.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{reinterpret_cast<uintptr_t>(p), bytes, d, MemoryKind::Device};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Allocation a;
  if (!find_allocation(ptr, false, &a) || a.base != reinterpret_cast<uintptr_t>(ptr) || a.kind != MemoryKind::Device)
    return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  drain_device(a.device);  // cudaFree synchronizes the device
  Registry& r = registry();
  {
    std::unique_lock<std::shared_mutex> lock(r.mu);
    r.allocations.erase(a.base);
    r.used[static_cast<size_t>(a.device)] -= (a.size + 255) / 256 * 256;
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return fail(cudaErrorInvalidValue);
  Registry& r = registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  const size_t used = r.used.empty() ? 0 : r.used[static_cast<size_t>(current_device())];
  *total_bytes = config().device_memory;
  *free_bytes = config().device_memory - used;
  return cudaSuccess;
}

// ---- pinned host memory -----------------------------------------------------------------------

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  if (bytes == 0) return cudaSuccess;
  void* p = allocate(bytes);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  std::unique_lock<std::shared_mutex> lock(registry().mu);
  registry().allocations[reinterpret_cast<uintptr_t>(p)] =
      Allocation{reinterpret_cast<uintptr_t>(p), bytes, current_device(), MemoryKind::Pinned};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Allocation a;
  if (!find_allocation(ptr, false, &a) || a.base != reinterpret_cast<uintptr_t>(ptr) || a.kind != MemoryKind::Pinned)
    return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  drain_device(-1);  // pinned memory may be in flight in any queued copy
  {
    std::unique_lock<std::shared_mutex> lock(registry().mu);
    registry().allocations.erase(a.base);
  }
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int) {
  Allocation a;
  if (device_ptr == nullptr || !find_allocation(host_ptr, false, &a) || a.kind != MemoryKind::Pinned)
    return fail(cudaErrorInvalidValue);
  *device_ptr = host_ptr;  // unified addressing: the same address
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return fail(cudaErrorInvalidValue);
  *attr = cudaPointerAttributes{};
  Allocation a;
  if (!find_allocation(ptr, false, &a)) {
    attr->type = cudaMemoryTypeUnregistered;
    attr->device = -2;  // what CUDA reports for unregistered memory
    return cudaSuccess;
  }
  attr->device = a.device;
  attr->devicePointer = const_cast<void*>(ptr);
  if (a.kind == MemoryKind::Device) {
    attr->type = cudaMemoryTypeDevice;
  } else {
    attr->type = cudaMemoryTypeHost;
    attr->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

// ---- copies and memsets -------------------------------------------------------------------------

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (const cudaError_t e = check_copy(dst, src, n, kind)) return fail(e);
  // Legacy-stream work: refused only while a blocking stream captures (Note [Stream capture in the emulator]).
  if (const cudaError_t e = check_legacy_use(device_of(dst, src))) return fail(e);
  drain_device(device_of(dst, src));  // synchronous: waits for the device's queued work first
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}

// CUDA's rules for pageable (unregistered) host memory matter with EMBER_SIMT_DEFER=1: a copy
// from it returns once the data is staged (the caller may free the buffer right away), a copy to
// it returns once the copy is done. Only pinned memory is truly asynchronous. On a capturing
// stream neither happens: the copy, pageable or not, becomes a node that reads and writes the
// host memory when it runs, at each replay (Note [Stream capture in the emulator]).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
  cudaError_t e = check_copy(dst, src, n, kind);
  if (e) return fail(e);
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (n == 0) return cudaSuccess;
  Allocation a;
  const bool src_pageable = !find_allocation(src, false, &a);
  const bool dst_pageable = !find_allocation(dst, false, &a);
  if (s->capture) {
    e = capture_node(s, cudaGraphNodeTypeMemcpy, [=] { std::memmove(dst, src, n); });
    return e ? fail(e) : cudaSuccess;
  }
  if (config().defer && src_pageable) {
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    e = enqueue(s, cudaGraphNodeTypeMemcpy, [=] { std::memcpy(dst, staged->data(), n); });
  } else {
    e = enqueue(s, cudaGraphNodeTypeMemcpy, [=] { std::memmove(dst, src, n); });
  }
  if (e) return fail(e);
  if (dst_pageable) ember::simt::synchronize_stream(stream);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (width > dpitch || width > spitch) return fail(cudaErrorInvalidValue);
  if (height == 0 || width == 0) return cudaSuccess;
  const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  if (const cudaError_t e = check_copy(dst, dspan, src, sspan, kind)) return fail(e);
  cudaError_t e = cudaSuccess;
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  e = enqueue(s, cudaGraphNodeTypeMemcpy, [=] {
    for (size_t row = 0; row < height; ++row)
      std::memmove(static_cast<char*>(dst) + row * dpitch, static_cast<const char*>(src) + row * spitch, width);
  });
  return e ? fail(e) : cudaSuccess;
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
  drain_device(device_of(dst, src));
  const cudaError_t e = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, nullptr);
  drain_device(device_of(dst, src));
  return e;
}

cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t n) {
  return cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t n, cudaStream_t stream) {
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  if (const cudaError_t e = check_memset(p, n)) return fail(e);
  if (const cudaError_t e = check_legacy_use(device_of(p, nullptr))) return fail(e);
  drain_device(device_of(p, nullptr));
  if (n) std::memset(p, value, n);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t stream) {
  cudaError_t e = check_memset(p, n);
  if (e) return fail(e);
  CUstream_st* s = resolve_stream(stream, &e);
  if (s == nullptr) return fail(e);
  if (n == 0) return cudaSuccess;
  e = enqueue(s, cudaGraphNodeTypeMemset, [=] { std::memset(p, value, n); });
  return e ? fail(e) : cudaSuccess;
}

// ---- peer access (everything is one address space: recorded, always possible) ------------------

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (can == nullptr) return fail(cudaErrorInvalidValue);
  if (!valid_device(device) || !valid_device(peer)) return fail(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int) {
  return valid_device(peer) ? cudaSuccess : fail(cudaErrorInvalidDevice);
}

// ---- whole-device operations --------------------------------------------------------------------

cudaError_t cudaDeviceSynchronize(void) {
  if (const cudaError_t e = check_device_wait(current_device())) return fail(e);
  if (const cudaError_t e = check_unsafe_call()) return fail(e);
  drain_device(current_device());
  return cudaSuccess;
}

// Frees the current device's memory like CUDA, but says what it freed: a reset that releases live
// allocations usually hides a leak (or leaves dangling pointers in the program).
cudaError_t cudaDeviceReset(void) {
  const int d = current_device();
  drain_device(d);
  std::vector<void*> freed;
  size_t bytes = 0;
  {
    Registry& r = registry();
    std::unique_lock<std::shared_mutex> lock(r.mu);
    for (auto it = r.allocations.begin(); it != r.allocations.end();) {
      if (it->second.kind == MemoryKind::Device && it->second.device == d) {
        freed.push_back(reinterpret_cast<void*>(it->first));
        bytes += it->second.size;
        it = r.allocations.erase(it);
      } else {
        ++it;
      }
    }
    if (!r.used.empty()) r.used[static_cast<size_t>(d)] = 0;
  }
  for (void* p : freed) std::free(p);
  if (!freed.empty())
    warn("cudaDeviceReset on device %d freed %zu live allocation(s), %zu bytes: pointers to them now dangle", d,
         freed.size(), bytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(cudaLimit, size_t) { return cudaSuccess; }

cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  *value = limit == cudaLimitStackSize ? config().stack_bytes : 0;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (v == nullptr) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return fail(cudaErrorInvalidValue);
  *v = CUDART_VERSION;
  return cudaSuccess;
}

}  // extern "C"
