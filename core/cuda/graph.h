#pragma once
// CUDA graphs: capture the CUDA work of a function once, replay it with one launch.
//
// Like runtime.h this header includes no CUDA header and is the same in every flavour with a
// CUDA backend (a GPU build, or the SIMT emulator).
//
//   cuda::Graph graph;                                  // on the current device
//   graph.capture([&] { step(static_x, static_y); });   // records the kernels; runs nothing
//   for (...) {
//     static_x.copy_(next_x);                           // new inputs into the same memory
//     graph.replay();                                    // the captured kernels, in order
//   }
//
// Note [CUDA graphs in ember]
// ===========================
// What a capture is. Between cudaStreamBeginCapture and cudaStreamEndCapture, CUDA records the
// kernels, copies and memsets issued to the capturing stream as the nodes of a graph instead of
// running them; cudaGraphLaunch then runs all of them with one call. The nodes keep everything
// they were given: kernel arguments by value (so a host scalar such as a learning rate is frozen),
// and device pointers (so every tensor the captured work touches must be at the same address at
// each replay). What a captured function computes therefore has to live in device memory that
// stays put: inputs are copied into static tensors before each replay, and outputs are read from
// the tensors the capture produced. On a GPU the point is speed (one launch instead of hundreds,
// no per-kernel CPU overhead); on the SIMT emulator (Note [Stream capture in the emulator]) the
// same code runs, so capture and replay are tested in CI against eager execution, bit for bit.
//
// How Graph::capture works. It makes a stream of its own current (capture is refused on the
// legacy default stream, and the legacy stream's implicit synchronization would break it), waits
// there for the work already queued on the previous current stream, begins a global-mode capture
// and calls the function. Memory the function allocates comes from a private pool of the caching
// allocator (Note [Caching allocator], "Private pools"), reserved for the graph until the Graph
// is destroyed, so replays can write it while eager code never gets it. Memory the function only
// uses — tensors made before the capture: the static inputs, the parameters, the optimizer's state
// — is not the graph's: it must stay alive, and must not be freed and reallocated, while the graph
// may be replayed. replay() launches the graph on the current stream, ordered after everything
// queued there before.
//
// What cannot be captured. Anything that needs the host to wait for the device: reading a value
// (Tensor::item, a copy to the CPU), a result whose shape depends on device data, the host-side
// checks a few ops make (they say so at their declaration), cudaMalloc outside the caching
// allocator, a synchronize. ember checks where it knows: such an op calls check_not_capturing()
// and throws an ember::Error that names it. It has to for host reads: CUDA 13 records a copy to
// pageable host memory on the capturing stream without complaint (Note [Stream capture in the
// emulator]), so only the wait after it would fail. Anything else fails the CUDA call with
// cudaErrorStreamCaptureUnsupported, which EMBER_CUDA_CHECK reports with a hint. Either way the
// capture is abandoned, the stream is usable again, and capture() rethrows.
//
// Host state that changes every step. Some ops compute scalars on the host from state that
// advances each step (Adam's step count and bias corrections, a scheduled learning rate). A
// captured kernel would see the capture-time values forever. Such ops keep the scalars in a small
// device buffer that the kernel reads, and register the host computation with
// before_each_replay(): during a capture it runs before every replay (and not at capture, which
// runs nothing), outside a capture it simply runs now. So an eager step and a replayed step do the
// same host work and the same device work, and give the same bits. The buffer comes from the
// ordinary cache (replay_input), not from the private pool: the hook writes it before the whole
// graph runs, and a pool block may also hold one of the graph's earlier temporaries, whose
// kernels would overwrite the values before the optimizer reads them.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime.h"

namespace ember::cuda {

// Whether the current stream of the current device is capturing.
bool is_capturing();

// Throws ember::Error naming `op` and `why` ("waits for the device to read a value on the host")
// when the current stream is capturing, and abandons the capture; does nothing otherwise. For ops
// whose work cannot be recorded in a graph.
void check_not_capturing(const char* op, const char* why);

// Runs `fn` now, or, while a Graph on this thread captures, registers it to run on the host before
// every replay of that graph (Note [CUDA graphs in ember], "Host state that changes every step").
void before_each_replay(std::function<void()> fn);

// While alive, this host thread is in cudaStreamCaptureModeRelaxed (cudaThreadExchangeStreamCaptureMode;
// the previous mode comes back at destruction): CUDA no longer refuses it the calls it deems
// "potentially unsafe" during a capture (cudaMalloc, synchronizing or querying a stream that does
// not capture, or an event). For work a capture deliberately leaves outside the graph; waiting for
// the capturing stream itself is still refused.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();  // never throws
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  int previous_;  // cudaStreamCaptureMode
};

// Calls `allocate` (which makes and returns a tensor, or any value owning device memory, and may
// fill it from the host) with the legacy default stream of `device` current, so that its memory
// comes from the ordinary cache, not from the capture's private pool, and in relaxed capture mode,
// so that an upload that waits for the legacy stream is not refused: a thread with a global-mode
// capture may not synchronize even a stream that does not capture (Note [Stream capture in the
// emulator], as CUDA 13.0 did on an H200). For the device buffers a before_each_replay hook
// writes: the hook runs before the whole graph, and the pool's blocks are reused by the graph's
// own temporaries, whose kernels would overwrite the hook's values before the graph reads them.
template <typename F>
auto replay_input(int device, F allocate) {
  const DeviceGuard device_guard(device);
  const StreamGuard outside(nullptr);
  const RelaxedCaptureMode relaxed;
  return allocate();
}

// While a Graph on this thread captures, keeps `resource` alive as long as that graph (for device
// memory its kernels read that was filled once, at capture time: a batched GEMM's pointer lists);
// otherwise lets it go.
void hold_for_replays(std::shared_ptr<void> resource);

// The caching allocator's private pools of `device` (Note [Caching allocator], "Private pools"),
// as Graph uses them: allocations on `s` come from `pool` between begin and end.
uint64_t create_memory_pool(int device);
void begin_allocate_to_pool(int device, uint64_t pool, Stream s);
void end_allocate_to_pool(int device, Stream s);
void release_memory_pool(int device, uint64_t pool);

class Graph {
 public:
  // A graph of `device` (the current device by default); nothing captured yet.
  explicit Graph(int device = current_device());
  // Destroys the graph and releases its private memory pool to the ordinary cache. Never throws.
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Records the CUDA work `fn` issues on the current stream (a stream of the graph's own, made
  // current for the call) and instantiates it. Runs none of it. Throws ember::Error, leaving the
  // graph empty, when something in `fn` cannot be captured; a graph captures once.
  void capture(const std::function<void()>& fn);
  // Runs the before_each_replay hooks, then the captured work on the current stream.
  void replay();

  bool captured() const { return exec_ != nullptr; }
  int device() const { return device_; }
  // Nodes of the captured graph (kernels, copies, memsets, library calls).
  size_t node_count() const { return nodes_; }

 private:
  int device_;
  uint64_t pool_ = 0;       // the caching allocator's private pool (0 until capture)
  void* exec_ = nullptr;    // cudaGraphExec_t
  size_t nodes_ = 0;
  std::vector<std::function<void()>> hooks_;
  std::vector<std::shared_ptr<void>> held_;  // hold_for_replays
};

}  // namespace ember::cuda
