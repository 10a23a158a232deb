#pragma once
// Worker fibers for the block scheduler (fiber.cpp).
//
// A Fiber is a stack plus a suspended boost.context continuation. Fibers are created lazily, one
// OS thread at a time (each host thread that launches kernels owns a FiberPool, because a fiber
// suspended on one OS thread must not resume on another: its code may have cached that thread's
// thread-local addresses), and reused for every CUDA thread, block and launch after that.
// Switching is symmetric: any fiber — or the host thread's own "main" context — may switch
// directly to any other (one jump_fcontext, ~6 ns).

#include <boost/context/detail/fcontext.hpp>
#include <cstddef>
#include <memory>
#include <vector>

namespace ember::simt::detail {

struct Fiber {
  boost::context::detail::fcontext_t context = nullptr;  // where to resume it (null while running)
  char* stack = nullptr;                                 // lowest usable address (guard page below)
  size_t stack_size = 0;
  void* tsan_fiber = nullptr;
  unsigned assigned = 0;  // the CUDA thread (linear index in the block) it was started for
  bool is_main = false;
};

class FiberPool {
 public:
  // body runs on each new fiber and never returns.
  explicit FiberPool(void (*body)(Fiber* self));
  ~FiberPool();
  FiberPool(const FiberPool&) = delete;
  FiberPool& operator=(const FiberPool&) = delete;

  Fiber* main() { return &main_; }
  Fiber* current() { return current_; }
  // An idle fiber, or a new one.
  Fiber* acquire();
  void release(Fiber* f) { idle_.push_back(f); }
  // Fiber number i, created on demand (TSan builds: one fiber per thread index, never shared).
  Fiber* by_index(unsigned i);
  // Suspends the current fiber and resumes `to` (returns when something switches back).
  void switch_to(Fiber* to);

 private:
  Fiber* create();
  static void entry(boost::context::detail::transfer_t t);

  void (*body_)(Fiber*);
  Fiber main_;
  Fiber* current_;
  std::vector<std::unique_ptr<Fiber>> all_;
  std::vector<Fiber*> by_index_;
  std::vector<Fiber*> idle_;
};

}  // namespace ember::simt::detail
