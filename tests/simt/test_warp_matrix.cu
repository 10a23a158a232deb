// The emulator's warp matrix operations against their CPU definitions on random data: ldmatrix
// (x1/x2/x4, with and without .trans), mma.sync m16n8k16 (bf16 and f16) and nvcuda::wmma. The
// register layouts are written here again from the PTX ISA, independently of
// kernels/simt/warp_matrix.h, so a wrong lane mapping there fails here.
#include <ember/kernels/cuda/launch.h>
#include <ember/kernels/simt/counters.h>
#include <ember/kernels/simt/warp_matrix.h>
#include <mma.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

using ember::simt::ptx::ldmatrix_x1;
using ember::simt::ptx::ldmatrix_x1_trans;
using ember::simt::ptx::ldmatrix_x2;
using ember::simt::ptx::ldmatrix_x2_trans;
using ember::simt::ptx::ldmatrix_x4;
using ember::simt::ptx::ldmatrix_x4_trans;
using ember::simt::ptx::mma_m16n8k16_bf16;
using ember::simt::ptx::mma_m16n8k16_f16;

template <class T>
struct Buf {
  T* p = nullptr;
  size_t n;
  explicit Buf(size_t count) : n(count) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess); }
  explicit Buf(const std::vector<T>& h) : Buf(h.size()) {
    REQUIRE(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Buf() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

// Random 16-bit floats (as bits) that are small integers times 1/8 in [-4, 4): exact in bf16 and
// f16, so that products and the sums of 16 of them are exact in float and results compare exactly.
std::vector<uint16_t> random_halves(size_t n, bool bf16, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(-32, 31);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    const float f = static_cast<float>(d(rng)) / 8.0f;
    if (bf16) {
      const __nv_bfloat16 b = __float2bfloat16(f);
      std::memcpy(&x, &b, 2);
    } else {
      const __half h = __float2half(f);
      std::memcpy(&x, &h, 2);
    }
  }
  return v;
}
float half_bits_to_float(uint16_t x, bool bf16) {
  if (bf16) {
    __nv_bfloat16 b;
    std::memcpy(&b, &x, 2);
    return __bfloat162float(b);
  }
  __half h;
  std::memcpy(&h, &x, 2);
  return __half2float(h);
}
uint32_t pack(uint16_t lo, uint16_t hi) { return lo | (static_cast<uint32_t>(hi) << 16); }

// ---- ldmatrix --------------------------------------------------------------------------------
// Shared memory holds `count` 8x8 matrices of 16-bit values, row i of matrix j at row slot
// 31 - (8j + i) of a [32][8 + pad] array (rows in reverse: the instruction must use the lanes'
// addresses, not assume an order). Lane l passes the address of row l % 8 of matrix l / 8.
template <int Count, bool Trans>
__global__ void ldmatrix_kernel(const uint16_t* in, uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[32][16];
  const unsigned lane = threadIdx.x;
  for (unsigned k = lane; k < 32 * 8; k += 32) tile[31 - k / 8][k % 8] = in[k];
  __syncthreads();
  uint32_t r[Count];
  const uint16_t* row = &tile[31 - (lane % 32)][0];
  if constexpr (Count == 1 && !Trans) ldmatrix_x1(r, row);
  if constexpr (Count == 2 && !Trans) ldmatrix_x2(r, row);
  if constexpr (Count == 4 && !Trans) ldmatrix_x4(r, row);
  if constexpr (Count == 1 && Trans) ldmatrix_x1_trans(r, row);
  if constexpr (Count == 2 && Trans) ldmatrix_x2_trans(r, row);
  if constexpr (Count == 4 && Trans) ldmatrix_x4_trans(r, row);
  for (int j = 0; j < Count; ++j) out[lane * 4 + j] = r[j];
}

template <int Count, bool Trans>
void check_ldmatrix() {
  std::vector<uint16_t> m(32 * 8);  // m[(8j + i) * 8 + c] = matrix j, row i, column c
  for (size_t k = 0; k < m.size(); ++k) m[k] = static_cast<uint16_t>(1000 + k);
  Buf<uint16_t> in(m);
  Buf<uint32_t> out(32 * 4);
  EMBER_LAUNCH((ldmatrix_kernel<Count, Trans>), 1, 32, 0, 0, ::ember::cuda::Cost{}, in.p, out.p);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<uint32_t> got = out.get();
  // PTX ISA: register j of lane l holds row l / 4, elements 2 (l % 4), 2 (l % 4) + 1 of matrix j
  // (of its transpose with .trans).
  for (unsigned l = 0; l < 32; ++l) {
    for (int j = 0; j < Count; ++j) {
      const unsigned g = l / 4, c = 2 * (l % 4);
      auto at = [&](unsigned row, unsigned col) { return m[(8 * j + row) * 8 + col]; };
      const uint32_t want = Trans ? pack(at(c, g), at(c + 1, g)) : pack(at(g, c), at(g, c + 1));
      INFO("lane " << l << " register " << j);
      CHECK(got[l * 4 + j] == want);
    }
  }
}

TEST_CASE("simt: ldmatrix x1/x2/x4, with and without .trans, gives each lane the PTX fragment", "[simt][warp_matrix]") {
  check_ldmatrix<1, false>();
  check_ldmatrix<2, false>();
  check_ldmatrix<4, false>();
  check_ldmatrix<1, true>();
  check_ldmatrix<2, true>();
  check_ldmatrix<4, true>();
}

// ---- mma.sync m16n8k16 -------------------------------------------------------------------------
// A (16x16 row-major), B (16x8, stored row-major as [k][n]), C (16x8) in global memory; each lane
// builds its registers with the PTX ISA's formulas, runs the mma, and writes D back by them.
template <bool Bf16>
__global__ void mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
  const unsigned lane = threadIdx.x, g = lane / 4, t = lane % 4;
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (unsigned i = 0; i < 8; i += 2) {  // a_i: row g (+8 when i % 4 >= 2), column 2t + (i & 1) (+8 when i >= 4)
    const unsigned row = g + ((i % 4) >= 2 ? 8 : 0), col = 2 * t + (i >= 4 ? 8 : 0);
    a[i / 2] = pack(A[row * 16 + col], A[row * 16 + col + 1]);
  }
  for (unsigned i = 0; i < 4; i += 2) {  // b_i: row 2t + (i & 1) (+8 when i >= 2), column g
    const unsigned row = 2 * t + (i >= 2 ? 8 : 0);
    b[i / 2] = pack(B[row * 8 + g], B[(row + 1) * 8 + g]);
  }
  for (unsigned i = 0; i < 4; ++i) c[i] = C[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)];
  if constexpr (Bf16) mma_m16n8k16_bf16(d, a, b, c);
  else mma_m16n8k16_f16(d, a, b, c);
  for (unsigned i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}

template <bool Bf16>
void check_mma(std::mt19937& rng) {
  const std::vector<uint16_t> a = random_halves(16 * 16, Bf16, rng), b = random_halves(16 * 8, Bf16, rng);
  std::vector<float> c(16 * 8);
  std::uniform_int_distribution<int> d(-100, 100);
  for (float& x : c) x = static_cast<float>(d(rng)) / 4.0f;
  Buf<uint16_t> A(a), B(b);
  Buf<float> C(c), D(16 * 8);
  ember::simt::counters_start();
  EMBER_LAUNCH(mma_kernel<Bf16>, 1, 32, 0, 0, ::ember::cuda::Cost{}, A.p, B.p, C.p, D.p);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto counts = ember::simt::counters_stop();
  REQUIRE(counts.size() == 1);
  CHECK(counts[0].warp_ops == 1);  // one warp-wide instruction
  CHECK(counts[0].warp_op_lanes == 32);
  const std::vector<float> got = D.get();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = c[i * 8 + j];  // exact: every product and partial sum is a small multiple of 1/64
      for (int k = 0; k < 16; ++k) want += double(half_bits_to_float(a[i * 16 + k], Bf16)) * half_bits_to_float(b[k * 8 + j], Bf16);
      INFO("D[" << i << "][" << j << "]");
      CHECK(got[i * 8 + j] == static_cast<float>(want));
    }
}

TEST_CASE("simt: mma.sync m16n8k16 (bf16, f16) with the PTX ISA's register layouts equals A B + C", "[simt][warp_matrix]") {
  std::mt19937 rng(20261204);
  for (int rep = 0; rep < 3; ++rep) {
    check_mma<true>(rng);
    check_mma<false>(rng);
  }
}

// ldmatrix feeding mma, as a GEMM does: A's registers from ldmatrix.x4 over a row-major 16x16 tile,
// B's from ldmatrix.x2.trans over a row-major [k][n] 16x8 tile.
__global__ void ldmatrix_mma_kernel(const uint16_t* A, const uint16_t* B, float* D) {
  __shared__ __align__(16) uint16_t as[16][16 + 8];  // padded rows: 48 bytes, 16-byte aligned
  __shared__ __align__(16) uint16_t bs[16][8];
  const unsigned lane = threadIdx.x;
  for (unsigned k = lane; k < 256; k += 32) as[k / 16][k % 16] = A[k];
  for (unsigned k = lane; k < 128; k += 32) bs[k / 8][k % 8] = B[k];
  __syncthreads();
  uint32_t a[4], b[2];
  ldmatrix_x4(a, &as[lane % 16][(lane / 16) * 8]);  // matrices: rows 0-7 / 8-15, columns 0-7 / 8-15
  ldmatrix_x2_trans(b, &bs[lane % 16][0]);           // lanes 0-15: rows k = 0..15 (x2 reads lanes 0-15 only)
  const float c[4] = {0, 0, 0, 0};
  float d[4];
  mma_m16n8k16_bf16(d, a, b, c);
  const unsigned g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) D[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = d[i];
}

TEST_CASE("simt: ldmatrix fragments are mma.sync's operands (A by x4, B by x2.trans)", "[simt][warp_matrix]") {
  std::mt19937 rng(7);
  const std::vector<uint16_t> a = random_halves(256, true, rng), b = random_halves(128, true, rng);
  Buf<uint16_t> A(a), B(b);
  Buf<float> D(128);
  EMBER_LAUNCH(ldmatrix_mma_kernel, 1, 32, 0, 0, ::ember::cuda::Cost{}, A.p, B.p, D.p);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<float> got = D.get();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double want = 0;
      for (int k = 0; k < 16; ++k) want += double(half_bits_to_float(a[i * 16 + k], true)) * half_bits_to_float(b[k * 8 + j], true);
      CHECK(got[i * 8 + j] == static_cast<float>(want));
    }
}

// ---- wmma --------------------------------------------------------------------------------------
// D = A B + C for 16x16 tiles, every combination of layouts, with leading dimensions wider than 16.
template <class LayoutA, class LayoutB>
__global__ void wmma_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D, unsigned ld,
                            bool c_row_major, bool d_row_major) {
  using namespace nvcuda;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
  wmma::load_matrix_sync(a, A, ld);
  wmma::load_matrix_sync(b, B, ld);
  wmma::load_matrix_sync(c, C, ld, c_row_major ? wmma::mem_row_major : wmma::mem_col_major);
  wmma::mma_sync(c, a, b, c);
  for (int i = 0; i < c.num_elements; ++i) c.x[i] *= 2.0f;  // element-wise: valid whatever the layout
  wmma::store_matrix_sync(D, c, ld, d_row_major ? wmma::mem_row_major : wmma::mem_col_major);
}

template <class LayoutA, class LayoutB>
void check_wmma(std::mt19937& rng, bool c_row_major, bool d_row_major) {
  const unsigned ld = 24;  // a multiple of 8 elements (16 bytes), as wmma requires
  const std::vector<uint16_t> a16 = random_halves(16 * ld, true, rng), b16 = random_halves(16 * ld, true, rng);
  std::vector<__nv_bfloat16> a(a16.size()), b(b16.size());
  std::memcpy(a.data(), a16.data(), a16.size() * 2);
  std::memcpy(b.data(), b16.data(), b16.size() * 2);
  std::vector<float> c(16 * ld);
  std::uniform_int_distribution<int> d(-100, 100);
  for (float& x : c) x = static_cast<float>(d(rng)) / 4.0f;
  Buf<__nv_bfloat16> A(a), B(b);
  Buf<float> C(c), D(std::vector<float>(16 * ld, -1.0f));
  constexpr bool a_row = std::is_same_v<LayoutA, nvcuda::wmma::row_major>;
  constexpr bool b_row = std::is_same_v<LayoutB, nvcuda::wmma::row_major>;
  ember::simt::counters_start();
  EMBER_LAUNCH((wmma_kernel<LayoutA, LayoutB>), 1, 32, 0, 0, ::ember::cuda::Cost{}, A.p, B.p, C.p, D.p, ld, c_row_major, d_row_major);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto counts = ember::simt::counters_stop();
  REQUIRE(counts.size() == 1);
  CHECK(counts[0].warp_ops == 5);  // three loads, the mma, the store
  auto at = [&](const std::vector<uint16_t>& m, bool row_major, int r, int k) {
    return double(half_bits_to_float(m[row_major ? r * ld + k : k * ld + r], true));
  };
  const std::vector<float> got = D.get();
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double want = c[c_row_major ? i * ld + j : j * ld + i];
      for (int k = 0; k < 16; ++k) want += at(a16, a_row, i, k) * at(b16, b_row, k, j);
      INFO("layouts a " << a_row << " b " << b_row << " c " << c_row_major << " d " << d_row_major << ", D[" << i << "]["
                        << j << "]");
      CHECK(got[d_row_major ? i * ld + j : j * ld + i] == static_cast<float>(2 * want));
    }
  // Outside the 16x16 tile nothing was written.
  for (size_t k = 0; k < got.size(); ++k)
    if (k % ld >= 16) CHECK(got[k] == -1.0f);
}

TEST_CASE("simt: wmma m16n16k16 bf16 loads, mma_sync and stores equal A B + C in every layout", "[simt][warp_matrix]") {
  using nvcuda::wmma::col_major;
  using nvcuda::wmma::row_major;
  std::mt19937 rng(11);
  for (bool c_row : {true, false})
    for (bool d_row : {true, false}) {
      check_wmma<row_major, row_major>(rng, c_row, d_row);
      check_wmma<row_major, col_major>(rng, c_row, d_row);
      check_wmma<col_major, row_major>(rng, c_row, d_row);
      check_wmma<col_major, col_major>(rng, c_row, d_row);
    }
}

}  // namespace
