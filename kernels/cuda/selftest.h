#pragma once
// Backend self-test kernels: the smallest kernels that exercise each kind of launch, used by
// tests/cuda to prove that a CUDA backend (a GPU, or the SIMT emulator) runs kernels correctly.
// Raw device pointers on the current device and current_stream(); no CUDA header needed.

#include <cstdint>

namespace ember::cuda {

// y[i] = a * x[i] + y[i] for i < n (a flat launch: no shared memory, no barriers).
// x, y: n floats of device memory; may not alias.
void selftest_axpy(int64_t n, float a, const float* x, float* y);

// out[b] = sum of x[b * block_size .. (b + 1) * block_size) for b < n / block_size, through
// shared memory, __syncthreads and warp shuffles; block_size is 32, 64, ..., 1024 and divides n.
// x: n floats, out: n / block_size floats of device memory.
void selftest_block_sum(int64_t n, int block_size, const float* x, float* out);

}  // namespace ember::cuda
