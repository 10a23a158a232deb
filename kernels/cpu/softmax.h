#pragma once
// CPU softmax and log-softmax along one dim. Contracts: kernels/softmax.h.

#include <cstdint>

#include "../../core/dtype.h"
#include "../softmax.h"

namespace ember::kernels::cpu {

#include "../softmax_decls.h"

}  // namespace ember::kernels::cpu
