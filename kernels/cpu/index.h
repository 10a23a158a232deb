#pragma once
// CPU indexing kernels. Contracts: kernels/index.h (Note [Index kernels]).

#include <cstdint>

#include "../../core/dtype.h"
#include "../index.h"
#include "../strided.h"

namespace ember::kernels::cpu {

#include "../index_decls.h"

}  // namespace ember::kernels::cpu
