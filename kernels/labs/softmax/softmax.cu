// Lab: softmax — p[r][c] = exp(x[r][c] - m_r) / sum_c' exp(x[r][c'] - m_r) for each row r of a
// rows x cols matrix, with m_r the row's maximum. Each row needs two reductions (a max and a sum)
// before its first output: the lab is about who does them (one thread, a block, a warp), how
// often the row is read, and what a training step needs of it. Read kernels/labs/softmax/README.md
// alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o softmax kernels/labs/softmax/softmax.cu && ./softmax
//   cmake --build build --target lab_softmax && ./build/labs/lab_softmax   (the emulator)
//
// v1 one thread per row: the lanes of a warp read 32 different rows (uncoalesced)
// v2 a block per row: coalesced, a shared-memory tree with barriers for the max and the sum
// v3 a warp per row: the reductions are 5 shuffles each, no barrier, no shared memory
// v4 online softmax: one pass finds the max and the sum together, the input is read twice, not 3 times
// v5 fused with the cross-entropy forward: one pass, the loss and logsumexp of each row, no probabilities
// v9 exercise: v3 with one step missing; run it and read the output

#include "../common/lab.cuh"

#include <cstdint>
#include <vector>

constexpr int kThreads = 128;  // threads per block in every version: 4 warps
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullWarp = 0xffffffffu;

// v1: one thread per row, three loops over it: the max, the sum of exponentials, the output.
// Simple, and each thread reads its row in order; but at every step the 32 lanes of a warp read
// the same column of 32 different rows, cols * 4 bytes apart: 32 sectors per request, of which
// each lane uses 4 bytes.
__global__ void softmax_thread_per_row(const float* x, float* p, int rows, int cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* row = x + static_cast<size_t>(r) * cols;
  float m = -INFINITY;
  for (int c = 0; c < cols; ++c) m = fmaxf(m, row[c]);
  float sum = 0.0f;
  for (int c = 0; c < cols; ++c) sum += expf(row[c] - m);
  for (int c = 0; c < cols; ++c) p[static_cast<size_t>(r) * cols + c] = expf(row[c] - m) / sum;
}

// A block's reduction through shared memory s[blockDim.x] (the reduce lab's v3): each thread
// brings v, every thread gets the result. The last barrier keeps s from being overwritten by the
// next reduction before every thread has read s[0].
__device__ float block_max(float v, float* s) {
  const int tid = threadIdx.x;
  s[tid] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s[tid] = fmaxf(s[tid], s[tid + stride]);
    __syncthreads();
  }
  const float result = s[0];
  __syncthreads();
  return result;
}

__device__ float block_sum(float v, float* s) {
  const int tid = threadIdx.x;
  s[tid] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) s[tid] = s[tid] + s[tid + stride];
    __syncthreads();
  }
  const float result = s[0];
  __syncthreads();
  return result;
}

// v2: a block per row. Thread t reads columns t, t + 128, ...: a warp reads 32 consecutive
// floats, coalesced. Each thread reduces its columns in a register, then the block combines the
// 128 values with block_max and block_sum: 9 barriers each.
__global__ void softmax_block_per_row(const float* x, float* p, int rows, int cols) {
  __shared__ float s[kThreads];
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float* out = p + static_cast<size_t>(blockIdx.x) * cols;
  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  m = block_max(m, s);
  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(row[c] - m);
  sum = block_sum(sum, s);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = expf(row[c] - m) / sum;
}

// Reductions over the 32 lanes of a warp with __shfl_xor_sync: at offset 16 lane i swaps with
// lane i ^ 16, then 8, 4, 2, 1 — a butterfly after which every lane holds the result.
__device__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

// v3: a warp per row (4 rows per block). Lane l reads columns l, l + 32, ...: coalesced as in v2,
// and a row's max and sum are 5 shuffles each. The 32 lanes of a warp run the shuffles together,
// so nothing waits at a barrier and shared memory is not used. Rows are independent: a warp past
// the last row returns at once.
__global__ void softmax_warp_per_row(const float* x, float* p, int rows, int cols) {
  const int r = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* row = x + static_cast<size_t>(r) * cols;
  float* out = p + static_cast<size_t>(r) * cols;
  float m = -INFINITY;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, row[c]);
  m = warp_max(m);
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) sum += expf(row[c] - m);
  sum = warp_sum(sum);
  for (int c = lane; c < cols; c += 32) out[c] = expf(row[c] - m) / sum;
}

// Note [Online softmax]
// The max and the sum can be found in one pass (Milakov and Gimelshein, 2018). Keep the largest
// value seen so far, m, and d = sum of exp(x - m) over the values seen so far. A new value x
// raises the max to m' = max(m, x); the old terms were computed against m, so they are rescaled:
//   d' = d * exp(m - m') + exp(x - m').
// Two partial results (m1, d1) and (m2, d2) of different columns merge the same way:
//   m = max(m1, m2),  d = d1 * exp(m1 - m) + d2 * exp(m2 - m).
// Every exponent is <= 0, so nothing overflows, as with the max subtracted first. A lane that has
// seen no value yet has m = -inf and d = 0: rescale keeps it at 0 instead of computing
// exp(-inf - (-inf)) = NaN.

struct MaxSum {
  float m, d;
};

__device__ float rescale(float d, float m, float m_new) { return d == 0.0f ? 0.0f : d * expf(m - m_new); }

__device__ MaxSum warp_max_sum(MaxSum a) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float m_other = __shfl_xor_sync(kFullWarp, a.m, offset);
    const float d_other = __shfl_xor_sync(kFullWarp, a.d, offset);
    const float m = fmaxf(a.m, m_other);
    a.d = rescale(a.d, a.m, m) + rescale(d_other, m_other, m);
    a.m = m;
  }
  return a;
}

// One lane's pass over its columns of a row (Note [Online softmax]), then the warp's merge.
__device__ MaxSum row_max_sum(const float* row, int cols, int lane) {
  MaxSum a{-INFINITY, 0.0f};
  for (int c = lane; c < cols; c += 32) {
    const float x = row[c], m = fmaxf(a.m, x);
    a.d = rescale(a.d, a.m, m) + expf(x - m);
    a.m = m;
  }
  return warp_max_sum(a);
}

// v4: online softmax, a warp per row: the max and the sum in one pass over the row, then the
// output pass. v3 read each row 3 times, this version twice; the shuffles are as many as v3's
// (each of the 5 steps moves two values instead of one, in one reduction instead of two).
__global__ void softmax_online(const float* x, float* p, int rows, int cols) {
  const int r = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* row = x + static_cast<size_t>(r) * cols;
  float* out = p + static_cast<size_t>(r) * cols;
  const MaxSum ms = row_max_sum(row, cols, lane);
  for (int c = lane; c < cols; c += 32) out[c] = expf(row[c] - ms.m) / ms.d;
}

// v5: softmax fused with the cross-entropy forward, as a training step uses it. The loss of row r
// with label y is -log p[r][y] = log(d) + m - x[r][y]: the online pass is all it needs, so the
// probabilities are never written. Lane 0 reads the label and its logit and writes the loss and
// the row's logsumexp m + log(d), which is all the backward needs (p = exp(x - lse)).
__global__ void softmax_cross_entropy(const float* x, const int* labels, float* loss, float* lse, int rows,
                                      int cols) {
  const int r = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* row = x + static_cast<size_t>(r) * cols;
  const MaxSum ms = row_max_sum(row, cols, lane);
  if (lane == 0) {
    const float log_sum_exp = ms.m + logf(ms.d);
    lse[r] = log_sum_exp;
    loss[r] = log_sum_exp - row[labels[r]];
  }
}

// Exercise (v9): v3 with one step of the recipe missing. Mathematically the same function; run
// the lab and look at the output of the rows with large logits.
__global__ void softmax_exercise(const float* x, float* p, int rows, int cols) {
  const int r = blockIdx.x * kWarps + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* row = x + static_cast<size_t>(r) * cols;
  float* out = p + static_cast<size_t>(r) * cols;
  float sum = 0.0f;
  for (int c = lane; c < cols; c += 32) sum += expf(row[c]);
  sum = warp_sum(sum);
  for (int c = lane; c < cols; c += 32) out[c] = expf(row[c]) / sum;
}

// A cheap integer mix for reproducible test data.
uint32_t mix(uint32_t i) { return (i * 2654435761u) ^ (i >> 7) * 40503u; }

int main(int argc, char** argv) {
  lab::Lab L("softmax", argc, argv, {4096, 1000}, {77, 1000});
  const int rows = static_cast<int>(L.size(0)), cols = static_cast<int>(L.size(1));
  const size_t n = static_cast<size_t>(rows) * cols;
  // Logits in [-10, 10] plus 20 * (r % 7): rows 4, 5 and 6 of every 7 have logits above 88, whose
  // exp overflows a float (FLT_MAX is about exp(88.7)).
  std::vector<float> h(n), back(n), ref(n);
  std::vector<int> labels(rows);
  for (int r = 0; r < rows; ++r) {
    labels[r] = static_cast<int>(mix(static_cast<uint32_t>(r) + 12345u) % static_cast<uint32_t>(cols));
    for (int c = 0; c < cols; ++c) {
      const size_t i = static_cast<size_t>(r) * cols + c;
      h[i] = static_cast<float>(static_cast<int>(mix(static_cast<uint32_t>(i)) % 2001u) - 1000) / 100.0f +
             20.0f * static_cast<float>(r % 7);
    }
  }
  // The CPU reference, in double: the probabilities, and each row's logsumexp and loss.
  std::vector<float> ref_lse(rows), ref_loss(rows);
  for (int r = 0; r < rows; ++r) {
    const float* row = h.data() + static_cast<size_t>(r) * cols;
    double m = -INFINITY, sum = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(row[c]));
    for (int c = 0; c < cols; ++c) sum += std::exp(row[c] - m);
    for (int c = 0; c < cols; ++c)
      ref[static_cast<size_t>(r) * cols + c] = static_cast<float>(std::exp(row[c] - m) / sum);
    ref_lse[r] = static_cast<float>(m + std::log(sum));
    ref_loss[r] = static_cast<float>(m + std::log(sum) - row[labels[r]]);
  }
  // Note [Softmax tolerance]
  // A float sum of cols positive terms, in any order, is within (cols - 1) * 2^-24 of the exact
  // sum, relatively; one expf is within 2 ulp, and x - m rounds by at most |x - m| * 2^-24, which
  // changes p = e^(x-m) / sum by p * |x - m| * 2^-24 <= 2^-24 / e. So every probability (<= 1)
  // is within about cols * 2^-24 of the reference, absolutely, and the logsumexp and loss within
  // that relatively. The check allows twice that: cols * 2^-23 (1.2e-4 for 1000 columns).
  const double tolerance = cols * std::ldexp(1.0, -23);

  float *x = nullptr, *p = nullptr, *loss = nullptr, *lse = nullptr;
  int* dlabels = nullptr;
  LAB_CHECK(cudaMalloc(&x, n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&p, n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&loss, rows * sizeof(float)));
  LAB_CHECK(cudaMalloc(&lse, rows * sizeof(float)));
  LAB_CHECK(cudaMalloc(&dlabels, rows * sizeof(int)));
  LAB_CHECK(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(dlabels, labels.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemset(p, 0xFF, n * sizeof(float)));  // NaNs: a version starts from garbage

  // The probabilities; the first output that is not a number is named, with its row's largest logit.
  auto check_p = [&] {
    LAB_CHECK(cudaMemcpy(back.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost));
    LAB_CHECK(cudaMemset(p, 0xFF, n * sizeof(float)));
    for (size_t i = 0; i < n; ++i) {
      if (std::isfinite(back[i])) continue;
      const float* row = h.data() + i / cols * cols;
      std::fprintf(stderr, "lab softmax: p[%zu][%zu] = %g; the row's largest logit is %g\n", i / cols, i % cols,
                   back[i], *std::max_element(row, row + cols));
      break;
    }
    return lab::Lab::max_abs_diff(back.data(), ref.data(), n);
  };
  // The loss and logsumexp, relative to max(1, |reference|) (Note [Softmax tolerance]).
  auto check_loss = [&] {
    std::vector<float> got_loss(rows), got_lse(rows);
    LAB_CHECK(cudaMemcpy(got_loss.data(), loss, rows * sizeof(float), cudaMemcpyDeviceToHost));
    LAB_CHECK(cudaMemcpy(got_lse.data(), lse, rows * sizeof(float), cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int r = 0; r < rows; ++r) {
      for (auto [got, want] : {std::pair{got_loss[r], ref_loss[r]}, std::pair{got_lse[r], ref_lse[r]}}) {
        const double e =
            std::fabs(static_cast<double>(got) - want) / std::max(1.0, std::fabs(static_cast<double>(want)));
        if (std::isnan(e)) return static_cast<double>(INFINITY);
        worst = std::max(worst, e);
      }
    }
    return worst;
  };
  // about 5 operations per element (compare, subtract, exp, add, divide): only for the roofline
  const double flops = 5.0 * static_cast<double>(n);
  const int row_blocks = (rows + kThreads - 1) / kThreads, warp_blocks = (rows + kWarps - 1) / kWarps;
  L.version(1, "thread per row", "lanes read 32 rows", flops,
            [&] { softmax_thread_per_row<<<row_blocks, kThreads>>>(x, p, rows, cols); }, check_p, tolerance);
  L.version(2, "block per row", "coalesced, smem tree", flops,
            [&] { softmax_block_per_row<<<rows, kThreads>>>(x, p, rows, cols); }, check_p, tolerance);
  L.version(3, "warp per row", "shuffles, no barriers", flops,
            [&] { softmax_warp_per_row<<<warp_blocks, kThreads>>>(x, p, rows, cols); }, check_p, tolerance);
  L.version(4, "online softmax", "max and sum in one pass", flops,
            [&] { softmax_online<<<warp_blocks, kThreads>>>(x, p, rows, cols); }, check_p, tolerance);
  L.version(5, "fused cross-entropy", "loss per row, one pass", flops,
            [&] { softmax_cross_entropy<<<warp_blocks, kThreads>>>(x, dlabels, loss, lse, rows, cols); }, check_loss,
            tolerance);
  L.broken_version(9, "exercise: large logits", "find the bug", flops,
                   [&] { softmax_exercise<<<warp_blocks, kThreads>>>(x, p, rows, cols); }, check_p, tolerance);
  cudaFree(x);
  cudaFree(p);
  cudaFree(loss);
  cudaFree(lse);
  cudaFree(dlabels);
  return L.finish();
}
