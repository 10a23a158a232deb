#pragma once
// CUDA elementwise kernels: the contracts are in kernels/elementwise.h (device pointers, work
// queued on cuda::current_stream()). No CUDA header here.

#include "../../core/dtype.h"
#include "../elementwise.h"
#include "../strided.h"

namespace ember::kernels::gpu {

#include "../elementwise_decls.h"

}  // namespace ember::kernels::gpu
