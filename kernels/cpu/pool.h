#pragma once
// CPU 2-D pooling: max (with indices), average, adaptive average; forward and backward.
// Contracts: kernels/pool.h. Work is split across planes, so no two threads ever write the same
// plane (the backward scatters need no atomics).

#include <cstdint>

#include "../../core/dtype.h"
#include "../pool.h"

namespace ember::kernels::cpu {

#include "../pool_decls.h"

// The 2x2 stride-2 max pool (f32, and bf16 through its f32 planes) runs 16 outputs per step with
// AVX-512 where the CPU has AVX-512F, otherwise 4 with SSE2; both give the scalar loop's bits.
// set_max_pool_avx512(false) turns the AVX-512 rows off for the whole process (tests compare the
// two); asking for them on a CPU without AVX-512F returns false and changes nothing.
bool set_max_pool_avx512(bool on);

}  // namespace ember::kernels::cpu
