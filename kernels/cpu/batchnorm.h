#pragma once
// CPU batch normalization. Contracts: kernels/batchnorm.h, in (N, C, S) order only (a
// channels-last BatchNormShape is refused with an error). Every channel is reduced by one thread
// in a fixed order, so the results do not depend on the thread count.

#include <cstdint>

#include "../../core/dtype.h"
#include "../batchnorm.h"

namespace ember::kernels::cpu {

#include "../batchnorm_decls.h"

// The loops run as AVX-512 code where the CPU has AVX-512 F, BW, VL and DQ (Note [Batch norm's
// loops with AVX-512] in batchnorm.cpp), with the same bits as the plain build.
// set_batch_norm_avx512(false) turns that off for the whole process (tests compare the two);
// asking for it on a CPU without those extensions returns false and changes nothing.
bool set_batch_norm_avx512(bool on);

}  // namespace ember::kernels::cpu
