#pragma once
// Scratch memory for the CPU kernels (internal to kernels/cpu): the convolutions' columns and
// partial sums, the Winograd tiles, the bf16 GEMM's packed blocks.
//
// Note [Kernel scratch from the CPU allocator]
// A training step asks for the same scratch blocks — megabytes each for a deep layer's columns
// and per-thread weight-gradient sums — at every convolution of every step. Straight from the
// system (new[]), blocks that large are fresh mmap'd pages: a page fault and the kernel's zeroing
// per 4 KiB, several milliseconds per call on ResNet-18's layer4. ember's CPU allocator keeps
// freed blocks for reuse (Note [CPU block cache] in core/allocator.h), so scratch comes from it;
// its statistics count scratch while a kernel holds it, as the CUDA allocator counts cuDNN's
// workspace. The memory is uninitialized (every user overwrites it before reading) and is
// allocated before a parallel region, so an allocation failure throws in the calling thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "../../core/allocator.h"

namespace ember::kernels::cpu {

template <typename T>
struct ScratchDeleter {
  size_t bytes = 0;
  void operator()(T* p) const noexcept { cpu_allocator().deallocate(p, bytes); }
};

template <typename T>
using Scratch = std::unique_ptr<T[], ScratchDeleter<T>>;

// `elems` uninitialized elements of a trivial type T (empty for elems <= 0).
template <typename T>
Scratch<T> scratch(int64_t elems) {
  static_assert(std::is_trivial_v<T> || std::is_trivially_copyable_v<T>, "scratch holds plain values");
  if (elems <= 0) return Scratch<T>(nullptr, ScratchDeleter<T>{0});
  const size_t bytes = static_cast<size_t>(elems) * sizeof(T);
  return Scratch<T>(static_cast<T*>(cpu_allocator().allocate(bytes)), ScratchDeleter<T>{bytes});
}

}  // namespace ember::kernels::cpu
