// Lab: transpose — out[c][r] = in[r][c] for a rows x cols float matrix. One of the two sides is
// always read or written "by columns": the lab is about making both sides coalesced, and then
// about shared-memory bank conflicts. Read kernels/labs/transpose/README.md alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o transpose kernels/labs/transpose/transpose.cu && ./transpose
//   cmake --build build --target lab_transpose && ./build/labs/lab_transpose   (the emulator)

#include "../common/lab.cuh"

#include <vector>

constexpr int kTile = 32;  // a 32x32 tile: one warp per tile row
constexpr int kRows = 8;   // v4: blocks of 32x8 threads, each thread moving 4 elements

// v1: one thread per element, reading rows (coalesced: 4 sectors per request) and writing columns:
// the 32 lanes of a warp write 32 different rows of `out`, 32 sectors per request.
__global__ void transpose_naive(const float* in, float* out, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r < rows && c < cols) out[c * rows + r] = in[r * cols + c];
}

// v2: through a 32x32 tile in shared memory: read a tile by rows, then write it out by rows of the
// transposed matrix, reading the tile by columns. Global memory is coalesced both ways now, but
// a column of a 32-float-wide tile lies in one shared-memory bank: a 32-way bank conflict.
__global__ void transpose_tile(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[kTile][kTile];
  int c = blockIdx.x * kTile + threadIdx.x, r = blockIdx.y * kTile + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[r * cols + c];
  __syncthreads();
  c = blockIdx.y * kTile + threadIdx.x, r = blockIdx.x * kTile + threadIdx.y;  // in `out`
  if (r < cols && c < rows) out[r * rows + c] = tile[threadIdx.x][threadIdx.y];
}

// v3: the same tile with one float of padding per row: element [i][j] now sits in bank
// (i * 33 + j) % 32, so a column touches 32 different banks. No conflict, one extra column of memory.
__global__ void transpose_tile_padded(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  int c = blockIdx.x * kTile + threadIdx.x, r = blockIdx.y * kTile + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[r * cols + c];
  __syncthreads();
  c = blockIdx.y * kTile + threadIdx.x, r = blockIdx.x * kTile + threadIdx.y;
  if (r < cols && c < rows) out[r * rows + c] = tile[threadIdx.x][threadIdx.y];
}

// v4: padded tile, 32x8 threads per block, each thread moving 4 elements of its column of the
// tile: a quarter of the threads, so each one's index arithmetic and the barrier are shared by 4
// elements (what a GPU runs faster; the counters per element stay those of v3).
__global__ void transpose_tile_padded_4(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int c = blockIdx.x * kTile + threadIdx.x;
  for (int k = 0; k < kTile; k += kRows) {
    const int r = blockIdx.y * kTile + threadIdx.y + k;
    if (r < rows && c < cols) tile[threadIdx.y + k][threadIdx.x] = in[r * cols + c];
  }
  __syncthreads();
  const int oc = blockIdx.y * kTile + threadIdx.x;
  for (int k = 0; k < kTile; k += kRows) {
    const int orow = blockIdx.x * kTile + threadIdx.y + k;
    if (orow < cols && oc < rows) out[orow * rows + oc] = tile[threadIdx.x][threadIdx.y + k];
  }
}

// Exercise (v9): the padded tile again, with one line missing. The plain schedule may even give
// the right answer; run the lab under EMBER_SIMT_PERTURB=1 and read the counters.
__global__ void transpose_exercise(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  int c = blockIdx.x * kTile + threadIdx.x, r = blockIdx.y * kTile + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[r * cols + c];
  c = blockIdx.y * kTile + threadIdx.x, r = blockIdx.x * kTile + threadIdx.y;
  if (r < cols && c < rows) out[r * rows + c] = tile[threadIdx.x][threadIdx.y];
}

int main(int argc, char** argv) {
  lab::Lab L("transpose", argc, argv, {8192, 8192}, {96, 160});
  const int rows = static_cast<int>(L.size(0)), cols = static_cast<int>(L.size(1));
  const size_t n = static_cast<size_t>(rows) * cols;
  std::vector<float> h(n), ref(n), back(n);
  for (size_t i = 0; i < n; ++i) h[i] = static_cast<float>(i % 4093) - 2000.0f;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ref[static_cast<size_t>(c) * rows + r] = h[static_cast<size_t>(r) * cols + c];
  float *in = nullptr, *out = nullptr;
  LAB_CHECK(cudaMalloc(&in, n * sizeof(float)));
  LAB_CHECK(cudaMalloc(&out, n * sizeof(float)));
  LAB_CHECK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));
  auto check = [&] {
    LAB_CHECK(cudaMemcpy(back.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
    LAB_CHECK(cudaMemset(out, 0xFF, n * sizeof(float)));
    return lab::Lab::max_abs_diff(back.data(), ref.data(), n);
  };
  const dim3 tiles((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  L.version(1, "naive", "write by columns", 0,
            [&] { transpose_naive<<<tiles, dim3(kTile, kTile)>>>(in, out, rows, cols); }, check, 0);
  L.version(2, "shared tile", "coalesced both ways", 0,
            [&] { transpose_tile<<<tiles, dim3(kTile, kTile)>>>(in, out, rows, cols); }, check, 0);
  L.version(3, "padded tile", "no bank conflicts", 0,
            [&] { transpose_tile_padded<<<tiles, dim3(kTile, kTile)>>>(in, out, rows, cols); }, check, 0);
  L.version(4, "padded tile, 4/thread", "fewer threads", 0,
            [&] { transpose_tile_padded_4<<<tiles, dim3(kTile, kRows)>>>(in, out, rows, cols); }, check, 0);
  L.broken_version(9, "exercise: tile", "find the bug", 0,
                   [&] { transpose_exercise<<<tiles, dim3(kTile, kTile)>>>(in, out, rows, cols); }, check, 0);
  cudaFree(in);
  cudaFree(out);
  return L.finish();
}
