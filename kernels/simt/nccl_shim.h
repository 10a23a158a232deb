#pragma once
// What the NCCL shim's two files share: nccl_shim.cpp (communicators, rendezvous, argument
// checks) uses the arithmetic of nccl_reduce.cpp (NCCL's data types and reduction ops).

#include <nccl.h>

#include <cstddef>

namespace ember::simt::detail::nccl {

// Bytes per element, or 0 for a type the shim does not support (fp8, or not a type at all).
size_t type_size(ncclDataType_t type);
const char* type_name(ncclDataType_t type);  // "ncclFloat32"
const char* op_name(ncclRedOp_t op);         // "ncclSum"

// out[i] = send[0][i] op send[1][i] op ... op send[nranks - 1][i] for i < count, in rank order
// (deterministic: the same bits every run). f16 and bf16 are accumulated in float and rounded
// once; integer sums and products wrap around. ncclAvg is the sum divided once by nranks
// (integers: the wrapped sum, truncated toward zero). `out` may not overlap any input; type and op
// must be supported (type_size(type) != 0, op < ncclNumOps).
void reduce(ncclDataType_t type, ncclRedOp_t op, const void* const* send, int nranks, size_t count, void* out);

}  // namespace ember::simt::detail::nccl
