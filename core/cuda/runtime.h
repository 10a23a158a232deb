#pragma once
// The CUDA runtime as ember uses it: devices, the current stream, launch checks, device contexts.
//
// This header includes no CUDA header, so any translation unit may use it in every build
// flavour that has a CUDA backend (a real GPU build, or the SIMT emulator). CUstream_st is the
// type cudaStream_t points to, so cuda::Stream and cudaStream_t are the same type.
//
// Note [Device context]
// Everything ember keeps per CUDA device lives in one DeviceContext, created on first use:
// the device's properties, its copy stream (host-to-device copies that overlap compute), and
// lazily created library handles (cuBLAS, cuDNN) and the shared cuDNN workspace. There is no
// global "current GPU" variable in ember: the current device is the CUDA runtime's own per-host-
// thread setting (cudaSetDevice), and the current stream is a per-host-thread, per-device value
// that StreamGuard changes for a scope. Kernels always run on current_stream(); by default that
// is the legacy default stream (stream 0), which orders every launch and synchronous copy on the
// device one after another — the simple, PyTorch-like default.

#include <cstddef>
#include <cstdint>
#include <string>

#include "caching_allocator.h"
#include "../device.h"

struct CUstream_st;
struct CUevent_st;

namespace ember::cuda {

using Stream = CUstream_st*;
using EventHandle = CUevent_st*;

// Number of CUDA devices (a real GPU build: what the driver reports; SIMT: EMBER_SIMT_DEVICES).
int device_count();
// The calling host thread's current device, and setting it (throws ember::Error on a bad index).
int current_device();
void set_device(int index);

// Makes `index` the current device for a scope (no-op when it already is).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// The stream kernels of the current device are launched on (see Note [Device context]).
Stream current_stream();
// Runs work of the current device on `s` for a scope.
class StreamGuard {
 public:
  explicit StreamGuard(Stream s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  Stream previous_;
};

// Call right after every kernel launch: turns a launch error (bad configuration, too much shared
// memory, ...) into an ember::Error naming `op`. With EMBER_SYNC_EVERY_OP=1 in the environment it
// also synchronizes the stream, so an asynchronous fault is reported at the op that caused it.
void check_launch(const char* op);
// Whether EMBER_SYNC_EVERY_OP=1 is set (read once).
bool sync_every_op();

// A two-way setting from the environment (EMBER_GEMM=cublas|tiled, ...): false when `name` is
// unset, empty or `off`, true when it is `on`; any other value throws ember::Error naming the
// variable, the value and both choices. Callers read it once and keep the answer.
bool env_switch(const char* name, const char* off, const char* on);

// Waits for all work on the current device.
void synchronize();
void synchronize_stream(Stream s);

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;
  int multiprocessor_count = 0;
  int max_threads_per_block = 0;
  int warp_size = 32;
  size_t total_memory = 0;
  size_t shared_memory_per_block = 0;
  size_t shared_memory_per_block_optin = 0;
};
const DeviceProperties& properties(int device);

// Copies `bytes` between any two of: host memory, CUDA device memory (on any device). Runs on the
// current stream of the CUDA device involved (the destination's when both are) and waits for it.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// cudaMemsetAsync of `bytes` at device pointer p on stream s, recorded in the launch ledger.
void memset_async(void* p, int value, size_t bytes, Stream s);
// Copies `bytes` from device memory to the host and waits for stream s: a host sync, recorded in
// the launch ledger with `why` (what the host needed to know).
void read_to_host(void* host, const void* device, size_t bytes, Stream s, const char* why);

// Pinned host memory (see Note [Pinned host memory] in pinned.cu): page-locked, cached, and
// reused only after the asynchronous copies that touched a block have finished.
void* pinned_allocate(size_t bytes);
void pinned_free(void* p);
bool is_pinned(const void* p);
// Starts a copy between pinned host memory and a CUDA device on the current stream and returns
// without waiting (the host side must be pinned: checked).
void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// An owned CUDA stream on one device (non-blocking with respect to the legacy default stream).
class StreamHandle {
 public:
  explicit StreamHandle(int device);
  ~StreamHandle();
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  Stream get() const { return stream_; }
  int device() const { return device_; }

 private:
  Stream stream_ = nullptr;
  int device_ = 0;
};

// An owned CUDA event (no timing) of one device: record on a stream of that device, make another
// stream (of any device) wait for it.
class Event {
 public:
  explicit Event(int device);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(Stream s);
  void wait_on(Stream s) const;  // work queued on s after this call waits for the event
  void synchronize() const;      // the host waits
  bool query() const;            // finished?

 private:
  EventHandle event_ = nullptr;
};

// The caching allocator of a device (core/cuda/caching_allocator.h): statistics, returning cached
// blocks to the device, a readable dump, and marking a block as used by another stream (its
// memory is not reused until the work queued on `s` at the time it is freed has finished).
CachingAllocatorStats memory_stats(int device);
void empty_cache(int device);
void reset_peak_memory_stats(int device);
std::string memory_summary(int device);
void record_stream(void* ptr, int device, Stream s);

// Temporary device memory for a kernel's workspace (im2col columns, partial sums, ...) on the
// current device, released at the end of the scope. Stream-ordered: it may be released right
// after launching the work that uses it on current_stream(): it comes from the device's caching
// allocator, which hands a block to later work on the same stream only.
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

// Throws ember::Error for a failed CUDA runtime call (code = the cudaError_t value), naming the
// call, the error and where it happened. Used by EMBER_CUDA_CHECK.
[[noreturn]] void throw_cuda_error(int code, const char* expr, const char* file, int line);

}  // namespace ember::cuda

// Wraps a CUDA runtime call: anything but cudaSuccess (0) throws ember::Error.
#define EMBER_CUDA_CHECK(expr)                                                                    \
  do {                                                                                            \
    const int ember_cuda_status_ = static_cast<int>(expr);                                        \
    if (ember_cuda_status_ != 0)                                                                  \
      ::ember::cuda::throw_cuda_error(ember_cuda_status_, #expr, __FILE__, __LINE__);             \
  } while (0)
