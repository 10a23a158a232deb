#pragma once
// Splitting loops across the CPU's cores (OpenMP underneath).
//
// parallel_for(begin, end, grain, f) calls f(lo, hi) on disjoint chunks covering [begin, end);
// it runs inline when the range is smaller than `grain` (threads cost ~µs to wake) or when
// already inside a parallel region.

#include <algorithm>
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace ember {

// Threads used by ember's CPU kernels (and OpenBLAS). Default: EMBER_NUM_THREADS, else
// available_cpus(). Returns 1 on a thread inside a SerialThreadScope.
int get_num_threads();
void set_num_threads(int n);
// The CPUs this process may run on: its affinity mask (taskset, a container's cpuset, an MPI
// launcher's binding), which can be fewer than the machine's cores; the machine's logical CPUs
// where the mask cannot be read.
int available_cpus();

// While alive, the kernels called on this thread run single-threaded (get_num_threads() is 1 here):
// the data loader's worker threads hold one, so N workers don't each start an OpenMP team of all
// cores (N x cores threads on the cores). Nests; other threads are unaffected. Copy deleted.
class SerialThreadScope {
 public:
  SerialThreadScope();
  ~SerialThreadScope();
  SerialThreadScope(const SerialThreadScope&) = delete;
  SerialThreadScope& operator=(const SerialThreadScope&) = delete;
};

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, const F& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
#ifdef _OPENMP
  const int threads = get_num_threads();
  if (n > grain && threads > 1 && !omp_in_parallel()) {
    const int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel num_threads(static_cast<int>(chunks))
    {
      const int64_t t = omp_get_thread_num();
      const int64_t per = (n + chunks - 1) / chunks;
      const int64_t lo = begin + t * per, hi = std::min(end, lo + per);
      if (lo < hi) f(lo, hi);
    }
    return;
  }
#endif
  f(begin, end);
}

}  // namespace ember
