#pragma once
// CUDA classification losses over class indices. Contracts: kernels/loss.h (device pointers,
// queued on cuda::current_stream()). No CUDA header. find_invalid_target returns a host value:
// it copies the answer back and waits for the current stream (a sync).

#include <cstdint>

#include "../../core/dtype.h"
#include "../loss.h"

namespace ember::kernels::gpu {

#include "../loss_decls.h"

}  // namespace ember::kernels::gpu
