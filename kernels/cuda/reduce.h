#pragma once
// CUDA reductions over strided operands. Contracts: kernels/reduce.h (device pointers, queued on
// cuda::current_stream(), asynchronous). No CUDA header. Block trees sum in another order than
// the CPU's loop, so float sums may differ from it in the last bits (deterministic run to run).

#include <cstdint>

#include "../../core/dtype.h"
#include "../reduce.h"
#include "../strided.h"

namespace ember::kernels::gpu {

#include "../reduce_decls.h"

}  // namespace ember::kernels::gpu
