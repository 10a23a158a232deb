#pragma once
// NCCL ranks as threads: run_nccl(world, fn) runs fn on `world` threads, rank r with an NCCL
// communicator on cuda:r (joined through one unique id). EXPECT, all_ok: tests/parallel/rank_threads.h.

#include <ember/parallel/nccl_communicator.h>

#include "../parallel/rank_threads.h"

namespace ember::testing::ranks {

// Returns each rank's error ("" for success). A rank's communicator is destroyed when its fn returns.
inline std::vector<std::string> run_nccl(int world, const RankFn& fn,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const std::vector<uint8_t> id = ember::parallel::nccl_unique_id();
  return run_ranks_with(
      world, [&](int r) { return ember::parallel::make_nccl_communicator(r, world, r, id); }, fn, timeout);
}

}  // namespace ember::testing::ranks
