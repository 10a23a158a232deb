#pragma once
// CPU elementwise kernels: the contracts are in kernels/elementwise.h. Each maps its op enum to
// the functor once (a switch) and runs cpu_foreach (kernels/cpu/loops.h) over the operands.

#include "../../core/dtype.h"
#include "../elementwise.h"
#include "../strided.h"

namespace ember::kernels::cpu {

#include "../elementwise_decls.h"

}  // namespace ember::kernels::cpu
