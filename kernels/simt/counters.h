#pragma once
// What the hardware would do, counted by the emulator: for every fiber launch between
// counters_start() and counters_stop(), the memory requests of each warp and how many 32-byte
// sectors they touch (coalescing), the shared-memory wavefronts of each request (bank conflicts),
// the barriers and the warp-collective operations with the lanes that took part, and the
// shared-memory races (two threads, one word, no synchronization between). The kernel labs
// (kernels/labs, docs/labs.md) print them next to a roofline estimate of the time on an H200.
//
// Barriers and warp operations are counted in every SIMT build. Loads and stores are seen only in
// translation units compiled with the access instrumentation (Note [Seeing every load and store]
// in counters.cpp): the labs are; libember's own kernels are not, so for them the memory counters
// stay zero.
//
//   ember::simt::counters_start();
//   my_kernel<<<grid, block>>>(...);            // any number of launches
//   for (const auto& k : ember::simt::counters_stop()) ... k.global_load_sectors ...

#include <cstdint>
#include <string>
#include <vector>

namespace ember::simt {

// One launch's counts. A "request" is what one warp-wide memory instruction asks of the memory
// system: the accesses of the lanes of one warp at the same instruction (the same program
// counter, the k-th time each lane executes it).
struct KernelCounters {
  std::string kernel;  // the kernel expression as written at the launch
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  uint64_t blocks = 0, threads = 0;
  // global memory: requests, and distinct 32-byte sectors summed over requests
  uint64_t global_load_requests = 0, global_load_sectors = 0;
  uint64_t global_store_requests = 0, global_store_sectors = 0;  // atomics count as stores
  uint64_t global_bytes_requested = 0;  // the bytes the lanes asked for (sectors * 32 >= this)
  uint64_t global_request_lanes = 0;    // lanes taking part, summed over requests (32 per full warp)
  // shared memory: requests, and wavefronts (passes through the 32 banks) summed over requests;
  // ideal_wavefronts is what conflict-free accesses of the same widths would need, so
  // shared_wavefronts - shared_ideal_wavefronts is the bank conflicts (extra replays)
  uint64_t shared_requests = 0, shared_wavefronts = 0, shared_ideal_wavefronts = 0;
  uint64_t shared_request_lanes = 0;  // lanes taking part, summed over requests (fewer than 32: divergence)
  uint64_t barriers = 0;       // completed __syncthreads, summed over blocks
  uint64_t warp_ops = 0;       // completed warp-collective operations (shuffles, votes, __syncwarp)
  uint64_t warp_op_lanes = 0;  // lanes taking part, summed over warp operations
  // Accesses that run past the end of a device allocation (into the 256-byte rounding the emulator
  // leaves there, where a GPU would not fault either), and the first one, described with its
  // thread, block and source line.
  uint64_t out_of_bounds = 0;
  std::string first_out_of_bounds;
  // Shared-memory words that two threads of a block access with no barrier or warp operation
  // between them, one of them writing (Note [Shared-memory races] in counters.cpp), counted per
  // block and word; the first one described with both threads and source lines.
  uint64_t shared_races = 0;
  std::string first_shared_race;

  uint64_t bank_conflicts() const { return shared_wavefronts - shared_ideal_wavefronts; }
  uint64_t global_sectors() const { return global_load_sectors + global_store_sectors; }
  uint64_t global_requests() const { return global_load_requests + global_store_requests; }
};

// Starts counting (clearing what was counted before) on every host thread.
void counters_start();
// Stops counting; one entry per fiber launch since counters_start, in launch order.
std::vector<KernelCounters> counters_stop();
// Whether this program's loads and stores reach the counters (a lab linked with the hooks).
bool counters_see_memory();

// The device-memory footprint of a launch: the distinct 32-byte sectors its threads read and
// wrote (an atomic read-modify-write counts as a write), each counted once however many threads
// and requests touched it — the DRAM traffic of a launch whose data a perfect cache would keep.
// Unlike the counters above, footprints are taken for every launch, fiber and flat alike, in
// launch order. What the launch ledger's declared bytes are checked against (Note [Launch
// ledger] in core/cuda/ledger.h; tests/ledger/footprint.cpp). Needs the access hooks like the
// counters: without them every footprint is zero.
struct Footprint {
  std::string kernel;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  uint64_t read_sectors = 0, written_sectors = 0;
  // Coalescing, for fiber and flat launches alike: the warp requests (the lanes of one warp at the
  // k-th execution of one instruction), the 32-byte sectors they touched summed over requests,
  // and what the same requests would need with their lanes' bytes packed and aligned.
  uint64_t requests = 0, request_sectors = 0, ideal_sectors = 0;
  uint64_t read_bytes() const { return read_sectors * 32; }
  uint64_t written_bytes() const { return written_sectors * 32; }
};
void footprint_start();
std::vector<Footprint> footprint_stop();

}  // namespace ember::simt
