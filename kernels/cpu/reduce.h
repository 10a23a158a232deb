#pragma once
// CPU reductions over strided operands. Contracts: kernels/reduce.h.

#include <cstdint>

#include "../../core/dtype.h"
#include "../reduce.h"
#include "../strided.h"

namespace ember::kernels::cpu {

#include "../reduce_decls.h"

}  // namespace ember::kernels::cpu
