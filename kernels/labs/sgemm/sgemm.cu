// Lab: sgemm — C = alpha * A * B + beta * C for row-major float matrices, A: M x K, B: K x N,
// C: M x N. Seven versions, each fixing what the previous one wasted, from one thread per output
// reading everything from DRAM to 128 x 128 tiles with 64 outputs per thread, 16-byte loads and
// the next tiles loading while the current ones are multiplied.
// Read kernels/labs/sgemm/README.md alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o sgemm kernels/labs/sgemm/sgemm.cu && ./sgemm
//   cmake --build build --target lab_sgemm && ./build/labs/lab_sgemm   (the emulator)
//
// Every version handles any M, N, K: tiles that run past an edge of a matrix load zeros there and
// store nothing there (the "ragged edge").

#include "../common/lab.cuh"

#include <vector>

// v1: one thread per element of C, a 32 x 32 block of threads per 32 x 32 block of C, and the
// 32 lanes of a warp (consecutive threadIdx.x) on 32 consecutive *rows* m. At each k the lanes
// read A[m][k] for 32 rows: 32 addresses K floats apart, one sector each (32 sectors per
// request); they all read the same B[k][n] (one sector, shared); and each writes C[m][n] in its
// own row: 32 sectors per store.
__global__ void sgemm_naive(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                            float* C) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  const int n = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[m * K + k] * B[k * N + n];
  C[m * N + n] = alpha * acc + beta * C[m * N + n];
}

// v2: the same kernel with the roles of x and y swapped: the lanes of a warp now share one row m
// and take 32 consecutive columns n. B[k][n..n+31] and C[m][n..n+31] are 128 consecutive bytes:
// 4 sectors per request. A[m][k] is one address for the whole warp. Every thread still reads a
// whole row of A and a whole column of B from DRAM: two loads per multiply-add.
__global__ void sgemm_coalesced(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                                float* C) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  const int m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += A[m * K + k] * B[k * N + n];
  C[m * N + n] = alpha * acc + beta * C[m * N + n];
}

// v3: shared-memory tiles. The 32 x 32 threads of a block compute a 32 x 32 tile of C. They walk
// K in steps of 32: each thread loads one element of a 32 x 32 tile of A and one of B into shared
// memory (coalesced rows), the block waits at a barrier, each thread does 32 multiply-adds from
// shared memory, and the block waits again before the tiles are overwritten. Each element of B
// now comes from DRAM once per 32 rows of C instead of once per row: 32 times less traffic (and
// A, which v2 read as one 4-byte broadcast per 32-byte sector, 8 times less). Reads of As[ty][k] are the same word for a whole warp (a broadcast) and reads of
// Bs[k][tx] are 32 consecutive words (32 banks): no bank conflicts.
constexpr int kTile = 32;

__global__ void sgemm_shared(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                             float* C) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bs[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * kTile + ty, n = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    // Past an edge, a thread stores a zero: it adds nothing to the sums below.
    As[ty][tx] = (m < M && k0 + tx < K) ? A[m * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && n < N) ? B[(k0 + ty) * N + n] : 0.0f;
    __syncthreads();  // the tiles are complete
    for (int k = 0; k < kTile; ++k) acc += As[ty][k] * Bs[k][tx];
    __syncthreads();  // every thread is done with the tiles before the next ones overwrite them
  }
  if (m < M && n < N) C[m * N + n] = alpha * acc + beta * C[m * N + n];
}

// v4: 1-D register tiling. In v3 every multiply-add needs two shared-memory loads; shared memory
// is fast, but not as fast as the FMA units. Here a thread computes 8 outputs in one column of a
// 64 x 64 tile of C (rows r0..r0+7): per k it loads B[k][col] once into a register and reuses it
// for 8 multiply-adds, with one load of A each (a broadcast: the warp shares r0). 512 threads, and
// tiles of 64 x 8 (A) and 8 x 64 (B), one element each per thread.
constexpr int kBM4 = 64, kBN4 = 64, kBK4 = 8, kTM4 = 8;
constexpr int kThreads4 = kBM4 * kBN4 / kTM4;  // 512

__global__ void sgemm_1d_tile(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                              float* C) {
  __shared__ float As[kBM4][kBK4];
  __shared__ float Bs[kBK4][kBN4];
  const int t = threadIdx.x;
  const int m0 = blockIdx.y * kBM4, n0 = blockIdx.x * kBN4;
  const int col = t % kBN4, r0 = t / kBN4 * kTM4;        // this thread's outputs: rows r0.., column col
  const int a_row = t / kBK4, a_col = t % kBK4;          // the element of the A tile it loads
  const int b_row = t / kBN4, b_col = t % kBN4;          // the element of the B tile it loads
  float acc[kTM4] = {};
  for (int k0 = 0; k0 < K; k0 += kBK4) {
    const int am = m0 + a_row, ak = k0 + a_col, bk = k0 + b_row, bn = n0 + b_col;
    As[a_row][a_col] = (am < M && ak < K) ? A[am * K + ak] : 0.0f;
    Bs[b_row][b_col] = (bk < K && bn < N) ? B[bk * N + bn] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kBK4; ++k) {
      const float b = Bs[k][col];
      for (int i = 0; i < kTM4; ++i) acc[i] += As[r0 + i][k] * b;
    }
    __syncthreads();
  }
  for (int i = 0; i < kTM4; ++i) {
    const int m = m0 + r0 + i, n = n0 + col;
    if (m < M && n < N) C[m * N + n] = alpha * acc[i] + beta * C[m * N + n];
  }
}

// v5: 2-D register tiling. A thread computes an 8 x 8 patch of a 128 x 128 tile of C: per k it
// loads 8 values of A and 8 of B into registers and does 64 multiply-adds with them, 4 per load
// instead of v4's 8 per 9. 256 threads, each loading 4 elements of each tile per step. The patch
// is strided: thread (tr, tc) owns rows tr + 16 i and columns tc + 16 j, so at each load the lanes
// of a warp touch consecutive words of shared memory (no bank conflicts) and its stores to C are
// rows of 16 consecutive floats.
constexpr int kBM = 128, kBN = 128, kBK = 8, kTM = 8, kTN = 8;
constexpr int kRowThreads = kBM / kTM, kColThreads = kBN / kTN;  // 16 x 16
constexpr int kThreads = kRowThreads * kColThreads;              // 256

__global__ void sgemm_2d_tile(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                              float* C) {
  __shared__ float As[kBM][kBK];
  __shared__ float Bs[kBK][kBN];
  const int t = threadIdx.x;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tr = t / kColThreads, tc = t % kColThreads;
  float acc[kTM][kTN] = {};
  float a[kTM], b[kTN];
  for (int k0 = 0; k0 < K; k0 += kBK) {
    for (int p = 0; p < kBM * kBK / kThreads; ++p) {  // 4 elements of each tile per thread
      const int l = t + p * kThreads;
      const int am = m0 + l / kBK, ak = k0 + l % kBK;
      As[l / kBK][l % kBK] = (am < M && ak < K) ? A[am * K + ak] : 0.0f;
      const int bk = k0 + l / kBN, bn = n0 + l % kBN;
      Bs[l / kBN][l % kBN] = (bk < K && bn < N) ? B[bk * N + bn] : 0.0f;
    }
    __syncthreads();
    for (int k = 0; k < kBK; ++k) {
      for (int i = 0; i < kTM; ++i) a[i] = As[tr + kRowThreads * i][k];
      for (int j = 0; j < kTN; ++j) b[j] = Bs[k][tc + kColThreads * j];
      for (int i = 0; i < kTM; ++i)
        for (int j = 0; j < kTN; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < kTM; ++i)
    for (int j = 0; j < kTN; ++j) {
      const int m = m0 + tr + kRowThreads * i, n = n0 + tc + kColThreads * j;
      if (m < M && n < N) C[m * N + n] = alpha * acc[i][j] + beta * C[m * N + n];
    }
}

// The 4 floats p[row * cols + col ..+3] of a rows x cols row-major matrix, zeros past its edges:
// one 16-byte load where all 4 lie inside and the row starts 16-byte aligned (cols % 4 == 0; the
// allocation itself is 256-byte aligned), one float at a time elsewhere.
__device__ float4 load4(const float* p, int row, int col, int rows, int cols) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (row >= rows) return v;
  const float* q = p + row * cols + col;
  if (cols % 4 == 0 && col + 3 < cols) return *reinterpret_cast<const float4*>(q);
  if (col < cols) v.x = q[0];
  if (col + 1 < cols) v.y = q[1];
  if (col + 2 < cols) v.z = q[2];
  if (col + 3 < cols) v.w = q[3];
  return v;
}

// v6: the tiles of v5 moved with 16-byte instructions. Each thread loads one float4 of the A tile
// (4 consecutive k of one row) and one of the B tile, a quarter of v5's load instructions. The A
// tile is stored transposed, As[k][m], so that the 8 values of A a thread needs at step k are
// contiguous too: the patch is two 4 x 4 quads, rows 4 tr.. and 64 + 4 tr.., columns 4 tc.. and
// 64 + 4 tc.., and each step reads 2 float4 of As and 2 of Bs instead of 16 floats. The epilogue
// reads and writes C as float4 as well. The three parts are functions, which v7 reuses.
constexpr int kHalfM = kBM / 2, kHalfN = kBN / 2;

// Thread t's share of the tiles at k0: a float4 of A (row t / 2, k0 + 4 (t % 2)..) and one of B
// (row k0 + t / 32, columns 4 (t % 32)..), in registers.
struct TileLoads {
  float4 a, b;
};
__device__ TileLoads load_tiles(const float* A, const float* B, int M, int N, int K, int m0, int n0, int k0) {
  const int t = threadIdx.x;
  return {load4(A, m0 + t / (kBK / 4), k0 + t % (kBK / 4) * 4, M, K),
          load4(B, k0 + t / (kBN / 4), n0 + t % (kBN / 4) * 4, K, N)};
}
__device__ void store_tiles(const TileLoads& v, float (*As)[kBM], float (*Bs)[kBN]) {
  const int t = threadIdx.x;
  const int a_row = t / (kBK / 4), a_col = t % (kBK / 4) * 4;
  As[a_col + 0][a_row] = v.a.x;  // transposed: As[k][m]
  As[a_col + 1][a_row] = v.a.y;
  As[a_col + 2][a_row] = v.a.z;
  As[a_col + 3][a_row] = v.a.w;
  *reinterpret_cast<float4*>(&Bs[t / (kBN / 4)][t % (kBN / 4) * 4]) = v.b;
}

// acc += the thread's patch of As * Bs: per k, two float4 of A and two of B, 64 multiply-adds.
__device__ void multiply_tiles(const float (*As)[kBM], const float (*Bs)[kBN], int tr, int tc, float (&acc)[kTM][kTN]) {
  float a[kTM], b[kTN];
  for (int k = 0; k < kBK; ++k) {
    const float4 a0 = *reinterpret_cast<const float4*>(&As[k][4 * tr]);
    const float4 a1 = *reinterpret_cast<const float4*>(&As[k][kHalfM + 4 * tr]);
    const float4 b0 = *reinterpret_cast<const float4*>(&Bs[k][4 * tc]);
    const float4 b1 = *reinterpret_cast<const float4*>(&Bs[k][kHalfN + 4 * tc]);
    a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
    b[0] = b0.x, b[1] = b0.y, b[2] = b0.z, b[3] = b0.w, b[4] = b1.x, b[5] = b1.y, b[6] = b1.z, b[7] = b1.w;
    for (int i = 0; i < kTM; ++i)
      for (int j = 0; j < kTN; ++j) acc[i][j] += a[i] * b[j];
  }
}

// C = alpha * acc + beta * C over the thread's patch, a float4 at a time where 4 columns fit.
__device__ void write_patch(const float (&acc)[kTM][kTN], int m0, int n0, int tr, int tc, int M, int N, float alpha,
                            float beta, float* C) {
  for (int i = 0; i < kTM; ++i) {
    const int m = m0 + (i < 4 ? 4 * tr + i : kHalfM + 4 * tr + i - 4);
    if (m >= M) continue;
    for (int half = 0; half < 2; ++half) {
      const int n = n0 + half * kHalfN + 4 * tc;
      const float* r = &acc[i][4 * half];
      if (N % 4 == 0 && n + 3 < N) {
        float4 c = *reinterpret_cast<const float4*>(&C[m * N + n]);
        c.x = alpha * r[0] + beta * c.x, c.y = alpha * r[1] + beta * c.y;
        c.z = alpha * r[2] + beta * c.z, c.w = alpha * r[3] + beta * c.w;
        *reinterpret_cast<float4*>(&C[m * N + n]) = c;
      } else {
        for (int j = 0; j < 4 && n + j < N; ++j) C[m * N + n + j] = alpha * r[j] + beta * C[m * N + n + j];
      }
    }
  }
}

__global__ void sgemm_float4(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                             float* C) {
  __shared__ __align__(16) float As[kBK][kBM];  // transposed: As[k][m]
  __shared__ __align__(16) float Bs[kBK][kBN];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tr = threadIdx.x / kColThreads, tc = threadIdx.x % kColThreads;
  float acc[kTM][kTN] = {};
  for (int k0 = 0; k0 < K; k0 += kBK) {
    store_tiles(load_tiles(A, B, M, N, K, m0, n0, k0), As, Bs);
    __syncthreads();
    multiply_tiles(As, Bs, tr, tc, acc);
    __syncthreads();
  }
  write_patch(acc, m0, n0, tr, tc, M, N, alpha, beta, C);
}

// v7: double buffering. In v6 a thread waits for its loads from DRAM (hundreds of cycles) with
// nothing to do, and the whole block waits twice per step. Here there are two copies of each
// tile: while the block multiplies the tiles of step k0, each thread's loads for step k0 + 8 are
// already in flight into registers, and are stored into the other copy after the math. One
// barrier per step suffices: the copy a step writes is the one every thread finished reading
// before the previous barrier. The same loads, the same shared-memory accesses, half the barriers.
// The next tiles take 8 more registers per thread: __launch_bounds__ keeps the total at 128, so
// that two blocks still fit on an SM (its 65536 registers / 256 threads / 2).
__global__ void __launch_bounds__(kThreads, 2) sgemm_double_buffered(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                                      float* C) {
  __shared__ __align__(16) float As[2][kBK][kBM];
  __shared__ __align__(16) float Bs[2][kBK][kBN];
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int tr = threadIdx.x / kColThreads, tc = threadIdx.x % kColThreads;
  float acc[kTM][kTN] = {};
  store_tiles(load_tiles(A, B, M, N, K, m0, n0, 0), As[0], Bs[0]);
  __syncthreads();
  for (int k0 = 0, buf = 0; k0 < K; k0 += kBK, buf ^= 1) {
    const bool more = k0 + kBK < K;
    TileLoads next{};
    if (more) next = load_tiles(A, B, M, N, K, m0, n0, k0 + kBK);  // in flight during the math
    multiply_tiles(As[buf], Bs[buf], tr, tc, acc);
    if (more) store_tiles(next, As[buf ^ 1], Bs[buf ^ 1]);
    __syncthreads();
  }
  write_patch(acc, m0, n0, tr, tc, M, N, alpha, beta, C);
}

// Exercise (v9): v3 with one change that a CPU programmer would find natural — the B tile stored
// transposed, so that each thread's loop over k walks contiguous memory. The result is right.
// Compare its counters with v3's and explain the difference.
__global__ void sgemm_exercise(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                               float* C) {
  __shared__ float As[kTile][kTile];
  __shared__ float Bt[kTile][kTile];  // Bt[n][k]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * kTile + ty, n = blockIdx.x * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    As[ty][tx] = (m < M && k0 + tx < K) ? A[m * K + k0 + tx] : 0.0f;
    Bt[tx][ty] = (k0 + ty < K && n < N) ? B[(k0 + ty) * N + n] : 0.0f;
    __syncthreads();
    for (int k = 0; k < kTile; ++k) acc += As[ty][k] * Bt[tx][k];
    __syncthreads();
  }
  if (m < M && n < N) C[m * N + n] = alpha * acc + beta * C[m * N + n];
}

int main(int argc, char** argv) {
  lab::Lab L("sgemm", argc, argv, {4096, 4096, 4096}, {140, 136, 72});
  const int M = static_cast<int>(L.size(0)), N = static_cast<int>(L.size(1)), K = static_cast<int>(L.size(2));
  const float alpha = 0.5f, beta = -1.25f;
  // Inputs are multiples of 1/4 in [-2, 2]: every product and every partial sum (up to K = 2^16)
  // is exact in float, so any order of summation gives the reference's value: tolerance 0.
  auto value = [](size_t i) { return static_cast<float>(static_cast<int>((i * 7 + 3) % 17) - 8) * 0.25f; };
  std::vector<float> a(static_cast<size_t>(M) * K), b(static_cast<size_t>(K) * N), c0(static_cast<size_t>(M) * N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = value(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = value(i + 5);
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = value(i + 11);
  // The CPU reference, loops in the order m, k, n (the inner loop walks rows of B and C). On a
  // large problem it covers every 16th row and the last one: 2 M N K flops on one CPU core would
  // take longer than all the versions together.
  const int row_step = static_cast<double>(M) * N * K > 1e9 ? 16 : 1;
  std::vector<int> rows;
  for (int m = 0; m < M; m += row_step) rows.push_back(m);
  if (rows.back() != M - 1) rows.push_back(M - 1);
  std::vector<float> ref(rows.size() * N), acc(N), back(c0.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const int m = rows[r];
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k < K; ++k) {
      const float amk = a[static_cast<size_t>(m) * K + k];
      const float* brow = &b[static_cast<size_t>(k) * N];
      for (int n = 0; n < N; ++n) acc[n] += amk * brow[n];
    }
    for (int n = 0; n < N; ++n) ref[r * N + n] = alpha * acc[n] + beta * c0[static_cast<size_t>(m) * N + n];
  }
  float *A = nullptr, *B = nullptr, *C = nullptr, *C0 = nullptr;
  LAB_CHECK(cudaMalloc(&A, a.size() * sizeof(float)));
  LAB_CHECK(cudaMalloc(&B, b.size() * sizeof(float)));
  LAB_CHECK(cudaMalloc(&C, c0.size() * sizeof(float)));
  LAB_CHECK(cudaMalloc(&C0, c0.size() * sizeof(float)));
  LAB_CHECK(cudaMemcpy(A, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(B, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(C0, c0.data(), c0.size() * sizeof(float), cudaMemcpyHostToDevice));
  // C is updated in place, so every run starts by restoring it from C0 (on a GPU the timing includes
  // this copy: 8 M N bytes, about 1% of a 4096^3 SGEMM; the emulator's counters see only kernels).
  auto gemm = [&](const std::function<void()>& launch) {
    return [&, launch] {
      LAB_CHECK(cudaMemcpy(C, C0, c0.size() * sizeof(float), cudaMemcpyDeviceToDevice));
      launch();
    };
  };
  auto check = [&] {
    LAB_CHECK(cudaMemcpy(back.data(), C, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
    double err = 0;
    for (size_t r = 0; r < rows.size(); ++r)
      err = std::max(err, lab::Lab::max_abs_diff(&back[static_cast<size_t>(rows[r]) * N], &ref[r * N], N));
    return err;
  };
  const double flops = 2.0 * M * N * K;
  auto blocks = [](int n, int per_block) { return (n + per_block - 1) / per_block; };
  const dim3 t32(kTile, kTile), grid32(blocks(N, kTile), blocks(M, kTile));
  const dim3 grid64(blocks(N, kBN4), blocks(M, kBM4)), grid128(blocks(N, kBN), blocks(M, kBM));
  L.version(1, "naive", "lanes along M", flops, gemm([&] {
              sgemm_naive<<<dim3(blocks(M, kTile), blocks(N, kTile)), t32>>>(M, N, K, alpha, A, B, beta, C);
            }), check, 0);
  L.version(2, "coalesced", "lanes along N", flops,
            gemm([&] { sgemm_coalesced<<<grid32, t32>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  L.version(3, "shared tiles", "32x32 tiles of A and B", flops,
            gemm([&] { sgemm_shared<<<grid32, t32>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  L.version(4, "1-D register tile", "8 outputs per thread", flops,
            gemm([&] { sgemm_1d_tile<<<grid64, kThreads4>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  L.version(5, "2-D register tile", "8x8 outputs per thread", flops,
            gemm([&] { sgemm_2d_tile<<<grid128, kThreads>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  L.version(6, "float4, A transposed", "16-byte loads", flops,
            gemm([&] { sgemm_float4<<<grid128, kThreads>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  L.version(7, "double buffered", "loads overlap the math", flops,
            gemm([&] { sgemm_double_buffered<<<grid128, kThreads>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  L.broken_version(9, "exercise: B tile", "find the slowdown", flops,
                   gemm([&] { sgemm_exercise<<<grid32, t32>>>(M, N, K, alpha, A, B, beta, C); }), check, 0);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  cudaFree(C0);
  return L.finish();
}
