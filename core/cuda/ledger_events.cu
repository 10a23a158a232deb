// Timed mode of the launch ledger (core/cuda/ledger.h): a CUDA event before and after each launch
// on the launch's own stream, read once when the ledger stops.
#include "cuda_api.h"

#include "runtime.h"
#include "../error.h"

namespace ember::cuda::ledger_events {

void* record(const void* stream) {
  cudaEvent_t e = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreate(&e));
  EMBER_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(const_cast<void*>(stream))));
  return e;
}

double elapsed_us(void* start, void* end) {
  EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return static_cast<double>(ms) * 1e3;
}

void release(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

}  // namespace ember::cuda::ledger_events
