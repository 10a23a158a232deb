#pragma once
// NCCL ranks: one rank per CUDA device, collectives on the device itself, on a stream of their own.
//
//   std::vector<uint8_t> id = parallel::nccl_unique_id();   // on rank 0; shared with every rank
//   auto comm = parallel::make_nccl_communicator(rank, world, /*device=*/rank, id);
//   auto work = comm->all_reduce_async(bucket, parallel::ReduceOp::avg);  // overlaps compute
//   work->wait();
//
// Note [NCCL communicator: streams, order, timeouts]
// * Streams. Each communicator owns a non-blocking CUDA stream on its device (the comm stream).
//   all_reduce_async() records an event on the *caller's* current stream when it is called — the
//   point where the caller's kernels have produced the tensor — and the collective, issued later
//   by the comm thread, makes the comm stream wait for that event. So the all-reduce of a DDP
//   bucket starts on the GPU as soon as the bucket's last gradient is packed, while the compute
//   stream goes on with the rest of backward: communication and computation overlap on the device.
//   Work::wait() returns when the collective (and any copy back into the caller's tensor) has
//   finished on the device, so the caller may use the result on any stream.
// * Headers. Before the data moves, the ranks all-gather their CollectiveHeader (7 int64 words,
//   one tiny ncclAllGather on the comm stream) and compare them on the host, exactly as the MPI
//   and in-process transports do: a mismatched collective is an ember::Error on every rank naming
//   it, never the silent hang or garbage NCCL gives. The cost is one extra small collective per
//   call (tens of microseconds on a GPU; DDP makes one call per 25 MB bucket).
// * Timeouts. The NCCL communicator is created non-blocking (ncclConfig_t::blocking = 0), so no
//   NCCL call can block the comm thread: it polls (cudaEventQuery, ncclCommGetAsyncError) against
//   the deadline, and a collective that does not finish within timeout() — a rank that died or
//   stopped — ends in ncclCommAbort and an ember::Error naming the rank and the collective. The
//   communicator is then broken (Note [Collectives: order, headers, failure], communicator.h).
// * Tensors. CUDA tensors on the communicator's device that are contiguous go to NCCL as they are;
//   anything else (CPU tensors — e.g. metric counters —, views) is staged through a contiguous
//   copy on the device and copied back. Sums are NCCL's (ring or tree order: bitwise results may
//   differ from the in-process transport's rank-order sums by rounding). avg is ncclAvg.
//
// The SIMT flavour links kernels/simt/nccl_shim.cpp instead of libnccl: ranks are threads of one
// process, each on its own emulated device (tests, docs/simt.md). nccl_built() says whether this
// build has a communicator at all; nccl_is_shim() whether it is the emulator's.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "communicator.h"

namespace ember::parallel {

// Whether this build has the NCCL communicator (a CUDA build with NCCL, or the SIMT shim).
bool nccl_built();
// Whether that NCCL is the SIMT emulator's shim (ranks must be threads of one process).
bool nccl_is_shim();
// NCCL's version as "2.28.9", or "" without NCCL.
std::string nccl_version();

// The size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES), for code that ships it without nccl.h.
constexpr size_t kNcclUniqueIdBytes = 128;

// A fresh ncclUniqueId (kNcclUniqueIdBytes), made on rank 0 and given to every rank (MPI_Bcast, the
// rendezvous in parallel/rendezvous.h, or shared memory for in-process ranks).
std::vector<uint8_t> nccl_unique_id();

// Joins the NCCL communicator `id` as `rank` of `world_size`, on CUDA device `device`.
// Collective: every rank must call it (with the same id and world size) within timeout
// (EMBER_DIST_TIMEOUT, default 300 s), else ember::Error naming the rank.
std::shared_ptr<Communicator> make_nccl_communicator(int rank, int world_size, int device,
                                                     const std::vector<uint8_t>& id);

}  // namespace ember::parallel
