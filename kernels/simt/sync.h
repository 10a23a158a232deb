#pragma once
// Block barriers and warp intrinsics for the emulator (included by simt.h).
//
// Every function here is a *scheduling point*: the calling CUDA thread (a fiber) records what it
// is waiting for and where it was called, then yields. The block scheduler (block.cpp) completes
// the barrier when every live thread has arrived — checking that they all arrived at the same
// call site — and the warp op when every live lane of the mask has arrived, computing each lane's
// result with PTX's exact rules. Called from an EMBER_LAUNCH_FLAT kernel they are an error: flat
// kernels run as plain loops, where a barrier cannot work.

#include <cstring>
#include <type_traits>

namespace ember::simt::detail {

enum class BarrierKind : uint8_t { Sync, Count, And, Or };
enum class WarpKind : uint8_t { Shfl, Ballot, Sync, ReduceAdd };
enum class ShflMode : uint8_t { Idx, Up, Down, Xor };

// Both return after the barrier/warp op completed (block.cpp).
int block_barrier(BarrierKind kind, int predicate, Site site);
struct WarpResult {
  uint64_t value;
  bool valid;  // false: the source lane did not take part (CUDA: undefined value)
};
WarpResult warp_op(WarpKind kind, unsigned mask, ShflMode mode, int operand, int width, uint64_t value, Site site);

inline void require_fiber(const char* what, Site site) {
  const Mode m = tls_exec.mode;
  if (m == Mode::Fiber) return;
  if (m == Mode::Flat) fatal_in_flat_kernel(what, site);
  fatal_outside_kernel(what, site);
}

template <class T>
inline uint64_t to_bits(const T& v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffle of a type larger than 8 bytes");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(static_cast<void*>(&v), &b, sizeof(T));
  return v;
}
// The value a shuffle from a lane that did not participate returns: all bits set (NaN for floats,
// -1 for integers), so that the undefined value is visible rather than plausible.
template <class T>
inline T poison_value() {
  T v;
  std::memset(static_cast<void*>(&v), 0xFF, sizeof(T));
  return v;
}

template <class T>
inline T shuffle(unsigned mask, T v, ShflMode mode, int operand, int width, Site site) {
  require_fiber("warp shuffle", site);
  const WarpResult r = warp_op(WarpKind::Shfl, mask, mode, operand, width, to_bits(v), site);
  return r.valid ? from_bits<T>(r.value) : poison_value<T>();
}

}  // namespace ember::simt::detail

// ---- block barriers ----------------------------------------------------------------------------
inline void __syncthreads(EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__syncthreads", EMBER_SIMT_HERE);
  block_barrier(BarrierKind::Sync, 1, EMBER_SIMT_HERE);
}
inline int __syncthreads_count(int predicate, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__syncthreads_count", EMBER_SIMT_HERE);
  return block_barrier(BarrierKind::Count, predicate != 0, EMBER_SIMT_HERE);
}
inline int __syncthreads_and(int predicate, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__syncthreads_and", EMBER_SIMT_HERE);
  return block_barrier(BarrierKind::And, predicate != 0, EMBER_SIMT_HERE);
}
inline int __syncthreads_or(int predicate, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__syncthreads_or", EMBER_SIMT_HERE);
  return block_barrier(BarrierKind::Or, predicate != 0, EMBER_SIMT_HERE);
}

// ---- warp intrinsics (PTX shfl.sync / vote.sync / bar.warp.sync / redux.sync) -------------------
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = warpSize, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  return shuffle(mask, v, ShflMode::Idx, src_lane, width, EMBER_SIMT_HERE);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  return shuffle(mask, v, ShflMode::Up, static_cast<int>(delta), width, EMBER_SIMT_HERE);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  return shuffle(mask, v, ShflMode::Down, static_cast<int>(delta), width, EMBER_SIMT_HERE);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  return shuffle(mask, v, ShflMode::Xor, lane_mask, width, EMBER_SIMT_HERE);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__ballot_sync", EMBER_SIMT_HERE);
  return static_cast<unsigned>(
      warp_op(WarpKind::Ballot, mask, ShflMode::Idx, 0, 32, predicate != 0, EMBER_SIMT_HERE).value);
}
inline int __any_sync(unsigned mask, int predicate, EMBER_SIMT_HERE_ARGS) {
  return __ballot_sync(mask, predicate, ember_simt_file_, ember_simt_line_) != 0;
}
// All participating lanes voted 1. A ballot's result carries the vote in its low 32 bits and the
// lanes that took part (the mask minus lanes that already exited) in its high 32 bits.
inline int __all_sync(unsigned mask, int predicate, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__all_sync", EMBER_SIMT_HERE);
  const uint64_t v = warp_op(WarpKind::Ballot, mask, ShflMode::Idx, 0, 32, predicate != 0, EMBER_SIMT_HERE).value;
  return static_cast<unsigned>(v) == static_cast<unsigned>(v >> 32);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__syncwarp", EMBER_SIMT_HERE);
  warp_op(WarpKind::Sync, mask, ShflMode::Idx, 0, 32, 0, EMBER_SIMT_HERE);
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned value, EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__reduce_add_sync", EMBER_SIMT_HERE);
  return static_cast<unsigned>(warp_op(WarpKind::ReduceAdd, mask, ShflMode::Idx, 0, 32, value, EMBER_SIMT_HERE).value);
}
inline int __reduce_add_sync(unsigned mask, int value, EMBER_SIMT_HERE_ARGS) {
  return static_cast<int>(
      __reduce_add_sync(mask, static_cast<unsigned>(value), ember_simt_file_, ember_simt_line_));
}
namespace ember::simt::detail {
unsigned active_mask(Site site);
}
// Without lock-step execution there is no "currently converged" set: the lanes of the warp that
// were alive at its last warp op or barrier (block.cpp).
inline unsigned __activemask(EMBER_SIMT_HERE_ARGS) {
  using namespace ::ember::simt::detail;
  require_fiber("__activemask", EMBER_SIMT_HERE);
  return active_mask(EMBER_SIMT_HERE);
}
