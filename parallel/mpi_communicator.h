#pragma once
// MPI ranks: one process per rank, started by mpirun or srun (OpenMPI from Debian here).
//
// The CPU path of data-parallel training across processes and machines, and what CI uses to
// test it. MPI is initialized on first use (MPI_Init_thread; every MPI call is then made by the
// communicator's comm thread, one at a time) and finalized at exit unless a collective failed
// (see abort_job in communicator.h). Collectives use non-blocking MPI (MPI_Iallgather of the
// headers, then MPI_Iallreduce / MPI_Ibcast / MPI_Iallgather of the data) polled against the
// deadline, so a peer that died or stopped answering ends in an ember::Error after timeout()
// instead of a hang; OpenMPI's mpirun usually ends the job sooner, when it sees a rank die.
// Tensors that are not contiguous CPU tensors (CUDA tensors, views) go through a contiguous CPU
// copy. Supported dtypes: f32, f64, i32, i64, u8.
//
// This header is the same in every build; without MPI (EMBER_MPI off or not found),
// make_mpi_communicator throws.

#include <memory>

#include "communicator.h"

namespace ember::parallel {

// Joins MPI_COMM_WORLD (a duplicate of it). `expected` is what the launcher environment says;
// MPI's rank and size must match it. Throws ember::Error in a build without MPI.
std::shared_ptr<Communicator> make_mpi_communicator(const LaunchInfo& expected);

}  // namespace ember::parallel
