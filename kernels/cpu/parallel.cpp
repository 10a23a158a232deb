#include "parallel.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include <cblas.h>

namespace ember {

// Note [One thread pool]
// ember's CPU kernels parallelize with OpenMP; OpenBLAS (Debian's pthread build) has a thread
// pool of its own. Two pools on the same cores fight: idle OpenMP threads spin while BLAS runs,
// and BLAS's threads spin (sched_yield) while ember's loops run. On a 2-core machine that cost a
// fifth of a training step. So OpenBLAS always runs single-threaded, and ember splits large GEMMs
// across its own threads (gemm_split in gemm.cpp) — one pool, sized by set_num_threads().

namespace {
int initial_threads() {
  if (const char* v = std::getenv("EMBER_NUM_THREADS")) {
    const int n = std::atoi(v);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}
std::atomic<int>& thread_count() {
  // The first use also tells OpenBLAS, so EMBER_NUM_THREADS governs BLAS calls too.
  static std::atomic<int> n{[] {
    const int t = initial_threads();
    openblas_set_num_threads(1);
    return t;
  }()};
  return n;
}
thread_local int serial_depth = 0;  // open SerialThreadScopes on this thread
}  // namespace

SerialThreadScope::SerialThreadScope() { ++serial_depth; }
SerialThreadScope::~SerialThreadScope() { --serial_depth; }

int get_num_threads() { return serial_depth > 0 ? 1 : thread_count().load(std::memory_order_relaxed); }

void set_num_threads(int n) {
  thread_count();  // initialize first, so a later first use does not override n
  thread_count().store(n > 0 ? n : 1);
  openblas_set_num_threads(1);
}

}  // namespace ember
