#pragma once
// CUDA indexing kernels. Contracts: kernels/index.h (Note [Index kernels]; device pointers,
// queued on cuda::current_stream()). No CUDA header.

#include <cstdint>

#include "../../core/dtype.h"
#include "../index.h"
#include "../strided.h"

namespace ember::kernels::gpu {

#include "../index_decls.h"

}  // namespace ember::kernels::gpu
