#include "parallel.h"

#include <atomic>
#include <cstdlib>
#include <thread>

#include <cblas.h>

namespace ember {

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
    openblas_set_num_threads(t);
    return t;
  }()};
  return n;
}
}  // namespace

int get_num_threads() { return thread_count().load(std::memory_order_relaxed); }

void set_num_threads(int n) {
  thread_count();  // initialize first, so a later first use does not override n
  thread_count().store(n > 0 ? n : 1);
  openblas_set_num_threads(n > 0 ? n : 1);
}

}  // namespace ember
