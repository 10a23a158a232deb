#pragma once
// CPU classification losses over class indices. Contracts: kernels/loss.h.

#include <cstdint>

#include "../../core/dtype.h"
#include "../loss.h"

namespace ember::kernels::cpu {

#include "../loss_decls.h"

}  // namespace ember::kernels::cpu
