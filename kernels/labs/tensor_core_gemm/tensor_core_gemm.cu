// Lab: tensor_core_gemm — C = A B with bf16 inputs and float accumulation, from CUDA cores to the
// tensor cores' own instructions. Read kernels/labs/tensor_core_gemm/README.md alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o tensor_core_gemm kernels/labs/tensor_core_gemm/tensor_core_gemm.cu
//   cmake --build build --target lab_tensor_core_gemm && ./build/labs/lab_tensor_core_gemm   (the emulator)
//
// A: M x K, B: K x N, both bf16 row-major; C: M x N float row-major. M, N and K are multiples of 64.
//
// v1 CUDA cores: one thread per element of C, converting bf16 to float and multiply-adding
// v2 WMMA: one warp per 16x16 tile of C, fragments loaded straight from global memory
// v3 WMMA from shared memory: a block stages 64x64 tiles of A and B in shared memory
// v4 mma.sync m16n8k16 fed by ldmatrix from the same tiles
// v5 v4 with padded tile rows: ldmatrix without bank conflicts
// v6 v4 with swizzled tiles: ldmatrix without bank conflicts and without padding
// v9 exercise: v5 with a line missing

#include "../common/lab.cuh"
#include "../common/mma_ptx.cuh"

#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>
#include <vector>

using bf16 = __nv_bfloat16;
using namespace nvcuda;

constexpr int kTile = 64;  // v3-v5: a block computes a 64x64 tile of C, 64 values of k at a time
constexpr int kPad = 8;    // v5: 8 bf16 (16 bytes) of padding per tile row

// ---- v1: CUDA cores ----------------------------------------------------------------------------
// Blocks of 32x8 threads: the 32 lanes of a warp share a row of C, so they read one element of A
// (a broadcast) and 32 consecutive elements of B (64 bytes) per step of k.
__global__ void gemm_cuda_cores(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y * blockDim.y + threadIdx.y;
  if (m >= M || n >= N) return;
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += __bfloat162float(A[m * K + k]) * __bfloat162float(B[k * N + n]);
  C[m * N + n] = acc;
}

// ---- v2: WMMA from global memory ---------------------------------------------------------------
// Blocks of 4 warps, each computing one 16x16 tile of C (the block: 32x32). Per 16 values of k, a
// warp loads a 16x16 fragment of A and one of B and the tensor cores multiply-add them.
__global__ void gemm_wmma(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  const int warp = threadIdx.x / 32;
  const int m0 = blockIdx.y * 32 + warp / 2 * 16, n0 = blockIdx.x * 32 + warp % 2 * 16;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(a, A + m0 * K + k, K);
    wmma::load_matrix_sync(b, B + k * N + n0, N);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(C + m0 * N + n0, acc, N, wmma::mem_row_major);
}

// ---- staging tiles in shared memory (v3-v5) ----------------------------------------------------
// Copies the 64x64 bf16 tile at `src` (row stride `ld`) into `tile`: 16 bytes (8 bf16) per thread
// per step, 8 consecutive threads per 128-byte row, so global reads and shared writes are both
// whole rows.
template <int Pad>
__device__ void copy_tile(bf16 (*tile)[kTile + Pad], const bf16* src, int ld) {
  for (int c = threadIdx.x; c < kTile * kTile / 8; c += blockDim.x) {
    const int r = c / (kTile / 8), col = c % (kTile / 8) * 8;
    *reinterpret_cast<int4*>(&tile[r][col]) = *reinterpret_cast<const int4*>(&src[r * ld + col]);
  }
}

// ---- v3: WMMA from shared memory ---------------------------------------------------------------
// Blocks of 4 warps for a 64x64 tile of C: warp w computes the 32x32 quarter (w / 2, w % 2) as 2x2
// fragments. Each value of A and B staged in shared memory is read by two warps (v2 read every
// value from global memory once per warp that needed it).
__global__ void gemm_wmma_shared(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  __shared__ __align__(32) bf16 As[kTile][kTile];
  __shared__ __align__(32) bf16 Bs[kTile][kTile];
  const int warp = threadIdx.x / 32, wm = warp / 2 * 32, wn = warp % 2 * 32;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[2];
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[2];
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
  for (int k0 = 0; k0 < K; k0 += kTile) {
    copy_tile<0>(As, A + m0 * K + k0, K);
    copy_tile<0>(Bs, B + k0 * N + n0, N);
    __syncthreads();  // the tiles are complete
    for (int kk = 0; kk < kTile; kk += 16) {
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[wm + i * 16][kk], kTile);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[kk][wn + j * 16], kTile);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // every warp is done with the tiles before the next copy overwrites them
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(C + (m0 + wm + i * 16) * N + n0 + wn + j * 16, acc[i][j], N, wmma::mem_row_major);
}

// ---- v4, v5: mma.sync fed by ldmatrix ----------------------------------------------------------
// The same tiles and warps as v3, with the instructions WMMA is made of. Per 16 values of k, a
// warp's 32x32 quarter is 2 (m16) x 4 (n8) mma.m16n8k16 tiles:
//   A: ldmatrix.x4 gives one 16x16 A operand; lane l points at row l % 16, column 8 (l / 16) of it
//   B: ldmatrix.x4.trans over 16 rows of k and 16 columns of n gives two 16x8 B operands: the tile
//      is stored [k][n], mma wants each lane's pairs along k, which is what .trans hands out
//   C: float acc[i][j][4], lane l holding rows l / 4 and l / 4 + 8, columns 2 (l % 4) and + 1
// Pad = 0: a tile row is 128 bytes, so the 8 rows one ldmatrix phase reads lie in the same 4 banks:
// 8-way bank conflicts. Pad = 8 moves each row 16 bytes (4 banks) further: the 8 rows cover all 32.
// The two tiles are in dynamic shared memory (the launch's third argument: tiles_bytes(Pad)).
constexpr size_t tiles_bytes(int pad) { return 2 * kTile * (kTile + pad) * sizeof(bf16); }

template <int Pad>
__global__ void gemm_mma(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16(*As)[kTile + Pad] = reinterpret_cast<bf16(*)[kTile + Pad]>(smem);
  bf16(*Bs)[kTile + Pad] = As + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 2 * 32, wn = warp % 2 * 32;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kTile) {
    copy_tile<Pad>(As, A + m0 * K + k0, K);
    copy_tile<Pad>(Bs, B + k0 * N + n0, N);
    __syncthreads();
    for (int kk = 0; kk < kTile; kk += 16) {
      uint32_t a[2][4], b[4][2];
      for (int i = 0; i < 2; ++i) ldmatrix_x4(a[i], &As[wm + i * 16 + lane % 16][kk + lane / 16 * 8]);
      for (int j = 0; j < 2; ++j) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, &Bs[kk + lane % 16][wn + j * 16 + lane / 16 * 8]);
        b[2 * j][0] = r[0], b[2 * j][1] = r[1], b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) mma_m16n8k16_bf16(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + wm + i * 16 + g, col = n0 + wn + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(&C[row * N + col]) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(&C[(row + 8) * N + col]) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

// ---- v6: mma.sync, swizzled tiles -------------------------------------------------------------
// Padding costs shared memory (v5: 12% more). A swizzle removes the conflicts without it: a tile
// row is 8 chunks of 16 bytes, and chunk c of row r is stored at chunk position c ^ (r % 8). The 8
// rows one ldmatrix pass reads (r % 8 = 0..7, same c) land in 8 different chunks, which cover the
// 32 banks; a row written by 8 lanes is still one whole 128-byte row.
__device__ __forceinline__ int swizzle(int r, int c) { return ((c / 8) ^ (r % 8)) * 8 + c % 8; }

__device__ void copy_tile_swizzled(bf16 (*tile)[kTile], const bf16* src, int ld) {
  for (int c = threadIdx.x; c < kTile * kTile / 8; c += blockDim.x) {
    const int r = c / (kTile / 8), col = c % (kTile / 8) * 8;
    *reinterpret_cast<int4*>(&tile[r][swizzle(r, col)]) = *reinterpret_cast<const int4*>(&src[r * ld + col]);
  }
}

__global__ void gemm_mma_swizzled(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  __shared__ __align__(16) bf16 As[kTile][kTile];
  __shared__ __align__(16) bf16 Bs[kTile][kTile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 2 * 32, wn = warp % 2 * 32;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kTile) {
    copy_tile_swizzled(As, A + m0 * K + k0, K);
    copy_tile_swizzled(Bs, B + k0 * N + n0, N);
    __syncthreads();
    for (int kk = 0; kk < kTile; kk += 16) {
      uint32_t a[2][4], b[4][2];
      for (int i = 0; i < 2; ++i) {
        const int r = wm + i * 16 + lane % 16;
        ldmatrix_x4(a[i], &As[r][swizzle(r, kk + lane / 16 * 8)]);
      }
      for (int j = 0; j < 2; ++j) {
        const int r = kk + lane % 16;
        uint32_t q[4];
        ldmatrix_x4_trans(q, &Bs[r][swizzle(r, wn + j * 16 + lane / 16 * 8)]);
        b[2 * j][0] = q[0], b[2 * j][1] = q[1], b[2 * j + 1][0] = q[2], b[2 * j + 1][1] = q[3];
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) mma_m16n8k16_bf16(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + wm + i * 16 + g, col = n0 + wn + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(&C[row * N + col]) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(&C[(row + 8) * N + col]) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

// Exercise (v9): v5 with one line missing. Find it from the lab's output.
__global__ void gemm_mma_exercise(const bf16* A, const bf16* B, float* C, int M, int N, int K) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16(*As)[kTile + kPad] = reinterpret_cast<bf16(*)[kTile + kPad]>(smem);
  bf16(*Bs)[kTile + kPad] = As + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 2 * 32, wn = warp % 2 * 32;
  const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kTile) {
    copy_tile<kPad>(As, A + m0 * K + k0, K);
    copy_tile<kPad>(Bs, B + k0 * N + n0, N);
    for (int kk = 0; kk < kTile; kk += 16) {
      uint32_t a[2][4], b[4][2];
      for (int i = 0; i < 2; ++i) ldmatrix_x4(a[i], &As[wm + i * 16 + lane % 16][kk + lane / 16 * 8]);
      for (int j = 0; j < 2; ++j) {
        uint32_t r[4];
        ldmatrix_x4_trans(r, &Bs[kk + lane % 16][wn + j * 16 + lane / 16 * 8]);
        b[2 * j][0] = r[0], b[2 * j][1] = r[1], b[2 * j + 1][0] = r[2], b[2 * j + 1][1] = r[3];
      }
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) mma_m16n8k16_bf16(acc[i][j], a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      const int row = m0 + wm + i * 16 + g, col = n0 + wn + j * 8 + 2 * t;
      *reinterpret_cast<float2*>(&C[row * N + col]) = make_float2(acc[i][j][0], acc[i][j][1]);
      *reinterpret_cast<float2*>(&C[(row + 8) * N + col]) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

int main(int argc, char** argv) {
  lab::Lab L("tensor_core_gemm", argc, argv, {4096, 4096, 4096}, {128, 64, 128});
  const int M = static_cast<int>(L.size(0)), N = static_cast<int>(L.size(1)), K = static_cast<int>(L.size(2));
  if (M % kTile || N % kTile || K % kTile) {
    std::fprintf(stderr, "tensor_core_gemm: M, N and K must be multiples of %d\n", kTile);
    return 2;
  }
  // Inputs: uniform in [-1, 1), rounded to bf16; the reference multiplies exactly these values.
  std::vector<bf16> ha(static_cast<size_t>(M) * K), hb(static_cast<size_t>(K) * N);
  std::vector<float> fa(ha.size()), fb(hb.size());
  unsigned seed = 2024;
  auto uniform = [&] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
  };
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = __float2bfloat16(uniform()), fa[i] = __bfloat162float(ha[i]);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = __float2bfloat16(uniform()), fb[i] = __bfloat162float(hb[i]);

  // The CPU reference in double, for every element of C when that is cheap (the emulator's sizes),
  // else for a sample of 4096 elements spread over every row and column.
  struct Checked {
    int m, n;
    double c, abs;  // sum_k a b, and sum_k |a b|
  };
  std::vector<Checked> ref;
  const bool all = static_cast<double>(M) * N * K <= 1 << 24;
  const int samples = all ? M * N : 4096;
  for (int s = 0; s < samples; ++s) {
    const int m = all ? s / N : static_cast<int>((s * 2654435761u) % static_cast<unsigned>(M));
    const int n = all ? s % N : static_cast<int>((s * 40503u + 7u) % static_cast<unsigned>(N));
    Checked r{m, n, 0, 0};
    for (int k = 0; k < K; ++k) {
      const double p = static_cast<double>(fa[static_cast<size_t>(m) * K + k]) * fb[static_cast<size_t>(k) * N + n];
      r.c += p, r.abs += std::fabs(p);
    }
    ref.push_back(r);
  }

  bf16 *A = nullptr, *B = nullptr;
  float* C = nullptr;
  LAB_CHECK(cudaMalloc(&A, ha.size() * sizeof(bf16)));
  LAB_CHECK(cudaMalloc(&B, hb.size() * sizeof(bf16)));
  LAB_CHECK(cudaMalloc(&C, static_cast<size_t>(M) * N * sizeof(float)));
  LAB_CHECK(cudaMemcpy(A, ha.data(), ha.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(B, hb.data(), hb.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemset(C, 0xFF, static_cast<size_t>(M) * N * sizeof(float)));
  std::vector<float> back(static_cast<size_t>(M) * N);
  // The error of each checked element relative to sum_k |a b|: float accumulation of K products
  // (exact in float: bf16 has 8 significant bits) is off by at most about K u sum_k |a b|, u = 2^-24
  // (the classic bound for a sum); tensor cores add in another order, so allow twice that. A wrong
  // element (a layout or indexing bug) is off by the order of the values themselves.
  const double tolerance = 2.0 * K * std::ldexp(1.0, -24);
  auto check = [&] {
    LAB_CHECK(cudaMemcpy(back.data(), C, back.size() * sizeof(float), cudaMemcpyDeviceToHost));
    LAB_CHECK(cudaMemset(C, 0xFF, back.size() * sizeof(float)));  // NaNs: the next version starts from garbage
    double err = 0;
    for (const Checked& r : ref) {
      const double d = std::fabs(back[static_cast<size_t>(r.m) * N + r.n] - r.c) / std::max(r.abs, 1e-30);
      if (std::isnan(d)) return static_cast<double>(INFINITY);
      err = std::max(err, d);
    }
    return err;
  };

  const double flops = 2.0 * M * N * K;
  const dim3 tiles(N / kTile, M / kTile);
  L.version(1, "CUDA cores", "bf16 -> float, one thread per C", flops,
            [&] { gemm_cuda_cores<<<dim3(N / 32, M / 8), dim3(32, 8)>>>(A, B, C, M, N, K); }, check, tolerance);
  L.version(2, "WMMA", "a warp per 16x16 tile", flops,
            [&] { gemm_wmma<<<dim3(N / 32, M / 32), 128>>>(A, B, C, M, N, K); }, check, tolerance,
            lab::Peak::bf16_tensor);
  L.version(3, "WMMA, shared tiles", "64x64 tiles staged", flops,
            [&] { gemm_wmma_shared<<<tiles, 128>>>(A, B, C, M, N, K); }, check, tolerance, lab::Peak::bf16_tensor);
  L.version(4, "mma.sync + ldmatrix", "the instructions under WMMA", flops,
            [&] { gemm_mma<0><<<tiles, 128, tiles_bytes(0)>>>(A, B, C, M, N, K); }, check, tolerance, lab::Peak::bf16_tensor);
  L.version(5, "mma.sync, padded", "no bank conflicts", flops,
            [&] { gemm_mma<kPad><<<tiles, 128, tiles_bytes(kPad)>>>(A, B, C, M, N, K); }, check, tolerance, lab::Peak::bf16_tensor);
  L.version(6, "mma.sync, swizzled", "no conflicts, no padding", flops,
            [&] { gemm_mma_swizzled<<<tiles, 128>>>(A, B, C, M, N, K); }, check, tolerance, lab::Peak::bf16_tensor);
  L.broken_version(9, "exercise: mma", "find the bug", flops,
                   [&] { gemm_mma_exercise<<<tiles, 128, tiles_bytes(kPad)>>>(A, B, C, M, N, K); }, check, tolerance);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return L.finish();
}
