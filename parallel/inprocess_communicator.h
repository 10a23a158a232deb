#pragma once
// In-process ranks: N communicators in one process, one per thread, sharing memory.
//
//   parallel::InProcessGroup group(3);
//   std::vector<std::string> errors = group.run([&](parallel::Communicator& comm) {
//     Tensor g = ...;                        // this rank's gradient
//     comm.all_reduce(g, parallel::ReduceOp::avg);
//   });                                      // one thread per rank; "" where a rank succeeded
//
// For tests of everything distributed without MPI or GPUs, and for the SIMT flavour (where the
// NCCL shim runs on it). Collectives rendezvous in shared state: every rank posts its header and
// tensor; the last to arrive checks the headers and computes the result with Tensor ops (so
// tensors on any device work, each rank's on its own); then every rank copies the result into
// its own tensor. A rank whose communicator is destroyed "leaves": a peer waiting for it fails at
// once ("rank 2 left the group ..."), and a peer that merely stops calling fails after timeout().

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "communicator.h"

namespace ember::parallel {

namespace detail {
struct InProcessState;
}

class InProcessGroup {
 public:
  explicit InProcessGroup(int world_size);  // >= 1
  int world_size() const;
  // The communicator of `rank`, created once per rank (a second request throws). It keeps the
  // group's shared state alive, so the InProcessGroup object itself may go away.
  std::shared_ptr<Communicator> communicator(int rank);
  // Runs fn on world_size threads, rank r with communicator(r), and joins them. Returns each
  // rank's error message ("" for success); a rank's communicator is destroyed when its fn
  // returns or throws, so its peers never hang on it.
  std::vector<std::string> run(const std::function<void(Communicator&)>& fn);

 private:
  std::shared_ptr<detail::InProcessState> state_;
};

}  // namespace ember::parallel
