#pragma once
// CPU optimizer steps: one fused pass over the elements of one parameter. Contracts and math:
// kernels/optim.h (Note [Matching torch.optim bit for bit]). grad_norm sums fixed blocks
// of 4096 elements that are then added in order, so its result does not depend on the thread count.

#include <cstdint>

#include "../../core/dtype.h"
#include "../optim.h"

namespace ember::kernels::cpu {

#include "../optim_decls.h"

}  // namespace ember::kernels::cpu
