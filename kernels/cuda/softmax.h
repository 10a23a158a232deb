#pragma once
// CUDA softmax and log-softmax along one dim. Contracts: kernels/softmax.h (device pointers,
// queued on cuda::current_stream()). No CUDA header.

#include <cstdint>

#include "../../core/dtype.h"
#include "../softmax.h"

namespace ember::kernels::gpu {

#include "../softmax_decls.h"

}  // namespace ember::kernels::gpu
