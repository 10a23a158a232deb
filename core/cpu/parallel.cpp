#include "parallel.h"

#include <sched.h>

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

// Note [Threads from the affinity mask]
// The default thread count is the number of CPUs the process may run on, not the machine's: a
// process started under `taskset -c 0,1` on a 16-core machine (or in a container limited to 2
// CPUs) that started 16 threads would put 8 on each core, and every parallel loop would wait for
// the slowest. (Seen on a GPU machine's 16-core Xeon pinned to 2 cores: ember train ran at a
// fraction of its speed.) OpenMP's own default (libgomp) also counts the mask.

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

namespace {
int initial_threads() {
  if (const char* v = std::getenv("EMBER_NUM_THREADS")) {
    const int n = std::atoi(v);
    if (n > 0) return n;
  }
  return available_cpus();
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
