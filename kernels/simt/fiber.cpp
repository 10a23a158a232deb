// Worker fibers: mmap'ed stacks with a guard page, boost.context switches, and the sanitizer
// annotations that make ASan and TSan understand them (fiber.h).
//
// ASan: every switch is bracketed by __sanitizer_start_switch_fiber (naming the target stack)
// and __sanitizer_finish_switch_fiber, so ASan never mistakes a fiber stack for a stack overflow.
// TSan (EMBER_SIMT_WITH_TSAN): each fiber is a TSan fiber, and switches say
// __tsan_switch_to_fiber_no_sync, so the scheduling itself implies no happens-before between
// CUDA threads; block.cpp adds exactly the orderings CUDA guarantees.

#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif
#if EMBER_SIMT_WITH_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace ember::simt::detail {

namespace bc = boost::context::detail;

namespace {
thread_local FiberPool* tls_pool = nullptr;  // the pool whose fiber is entering
#if defined(__SANITIZE_ADDRESS__)
thread_local const void* tls_main_stack = nullptr;
thread_local size_t tls_main_stack_size = 0;
#endif
}  // namespace

FiberPool::FiberPool(void (*body)(Fiber* self)) : body_(body), current_(&main_) {
  main_.is_main = true;
#if EMBER_SIMT_WITH_TSAN
  main_.tsan_fiber = __tsan_get_current_fiber();
#endif
}

FiberPool::~FiberPool() {
  // Fibers are suspended inside body_; their stacks simply go away.
  for (auto& f : all_) {
#if EMBER_SIMT_WITH_TSAN
    __tsan_destroy_fiber(f->tsan_fiber);
#endif
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    munmap(f->stack - page, f->stack_size + page);
  }
}

Fiber* FiberPool::create() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto f = std::make_unique<Fiber>();
  f->stack_size = (config().stack_bytes + page - 1) / page * page;
  void* m = mmap(nullptr, f->stack_size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) fatal("mmap of a %zu-byte fiber stack failed", f->stack_size);
  // Guard page below the stack: an overflow (deep recursion, a big local array in a kernel) is a
  // SIGSEGV at the guard, never a silent overwrite of a neighbour. EMBER_SIMT_STACK_KB raises it.
  mprotect(m, page, PROT_NONE);
  f->stack = static_cast<char*>(m) + page;
  f->context = bc::make_fcontext(f->stack + f->stack_size, f->stack_size, &FiberPool::entry);
#if EMBER_SIMT_WITH_TSAN
  f->tsan_fiber = __tsan_create_fiber(0);
#endif
  all_.push_back(std::move(f));
  return all_.back().get();
}

Fiber* FiberPool::acquire() {
  if (!idle_.empty()) {
    Fiber* f = idle_.back();
    idle_.pop_back();
    return f;
  }
  return create();
}

Fiber* FiberPool::by_index(unsigned i) {
  while (by_index_.size() <= i) by_index_.push_back(create());
  return by_index_[i];
}

void FiberPool::entry(bc::transfer_t t) {
  Fiber* from = static_cast<Fiber*>(t.data);
#if defined(__SANITIZE_ADDRESS__)
  const void* from_stack = nullptr;
  size_t from_size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &from_stack, &from_size);
  if (from->is_main) {  // the host thread's own stack, needed to switch back to it
    tls_main_stack = from_stack;
    tls_main_stack_size = from_size;
  }
#endif
  from->context = t.fctx;  // the fiber that started us, now suspended
  FiberPool* pool = tls_pool;
  pool->body_(pool->current_);
  fatal("a worker fiber returned");  // body_ never returns
}

void FiberPool::switch_to(Fiber* to) {
  Fiber* from = current_;
  if (to == from) return;
  current_ = to;
  tls_pool = this;
#if EMBER_SIMT_WITH_TSAN
  __tsan_switch_to_fiber(to->tsan_fiber, __tsan_switch_to_fiber_no_sync);
#endif
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  if (to->is_main)
    __sanitizer_start_switch_fiber(&fake_stack, tls_main_stack, tls_main_stack_size);
  else
    __sanitizer_start_switch_fiber(&fake_stack, to->stack, to->stack_size);
#endif
  bc::fcontext_t target = to->context;
  to->context = nullptr;
  const bc::transfer_t back = bc::jump_fcontext(target, from);
  // Resumed: `back.data` is the fiber that switched to us; remember where it stopped.
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
  static_cast<Fiber*>(back.data)->context = back.fctx;
}

}  // namespace ember::simt::detail
