// CUDA elementwise kernels: the functors of kernels/elementwise.h applied to every position of
// a strided iteration (contracts in elementwise.h).
//
// Every op here is "out = f(in0, in1, ...)" for one element. Four kernels run such an f:
//   contiguous_kernel<4>  every operand contiguous and 4-element aligned: each thread loads four
//                         consecutive elements of each input with one vector load (a float4 for
//                         f32, 8 bytes for f16/bf16), applies f four times and stores four outputs
//                         at once. Consecutive threads touch consecutive chunks: fully coalesced, a
//                         quarter of the memory instructions.
//   contiguous_kernel<2>  launches with a 16-bit operand whose operands are 2-element but not
//                         4-element aligned (a view two elements in): one __half2 /
//                         __nv_bfloat162 (4 bytes) per 16-bit operand and thread (Note [16-bit
//                         pairs]).
//   contiguous_kernel<1>  contiguous but not aligned (a view at an odd offset): one element each.
//   strided_kernel        anything else (broadcast, permuted, sliced): thread i finds its offset
//                         in each operand with the offset calculator (Note [Offset calculator]).
// All three use a grid-stride loop (a capped grid walks any n) and no shared memory or barriers,
// so they launch with EMBER_LAUNCH_FLAT. copy() adds a shared-memory tiled transpose for the
// 2-D transposed case (Note [Tiled transpose]). The op -> functor dispatch happens once on the
// host; each functor instantiates its own kernels. The arithmetic functors widen each loaded
// element to A = acc_t<T> (float for f16/bf16, T itself for f32/f64), compute in A and round once
// when they return (Note [Accumulation types] in core/dtype.h), as the CPU loop does.

#include "launch.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "elementwise.h"

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../core/error.h"
#include "../random.h"  // mul_rn
#include "common.cuh"
#include "../../core/cuda/runtime.h"

namespace ember::kernels::gpu {

namespace {

using detail::aligned;
using detail::grid_for;
using detail::kThreads;
using detail::Pack;
using detail::StridedIndexer;
using detail::vector_load;
using detail::vector_store;

// The input pointers of one launch (at least one slot, so a fill with no inputs compiles).
template <int K>
struct Inputs {
  const void* p[K > 0 ? K : 1];
};

// A pack of each input's K elements: a minimal tuple (std::tuple is not device code).
template <int K, typename... Ts>
struct Packs {};
template <int K, typename T, typename... Ts>
struct Packs<K, T, Ts...> {
  Pack<T, K> head;
  Packs<K, Ts...> tail;
};
template <size_t I, int K, typename T, typename... Ts>
__device__ const auto& pack_get(const Packs<K, T, Ts...>& p) {
  if constexpr (I == 0) return p.head;
  else return pack_get<I - 1>(p.tail);
}

// ---- Note [16-bit pairs] -------------------------------------------------------------------------
// A GPU serves the 32 lanes of a warp's load instruction as one request for the 32-byte sectors
// their addresses touch. 32 lanes reading one consecutive 2-byte f16 each ask for 64 bytes: two
// sectors per request, and a kernel needs one request per element per warp. Reading a __half2
// (4 bytes, aligned) per lane asks for 128 bytes, four full sectors, with half the requests; the
// 4-element packs of contiguous_kernel<4> (8 bytes per lane: 256 bytes, eight sectors) quarter
// them. The sectors moved are the same — every byte is read once either way — but a load
// instruction and its request have a cost of their own (issue slots, load-store queue entries,
// address computations), and a memory-bound kernel that runs out of outstanding requests before
// it runs out of bandwidth goes faster with wider ones. tests/simt/test_pair_sectors.cu counts
// this on the emulator: 2 sectors per request for __half, 4 for __half2, half the requests.
//
// The pairs are moved as CUDA's own 2-wide types (__half2, __nv_bfloat162: one 4-byte load or
// store on a GPU; the emulator's host headers copy them member by member, which only its access
// counters would see, and libember's kernels are not counted), split into two lanes and computed
// one lane at a time in float with the functor the scalar kernel runs, then rounded with
// core/dtype.h's conversions: bit for bit the scalar kernel's results (on the emulator, which NaN
// a NaN + NaN gives follows the host compiler's operand order, in any path). CUDA's 2-wide arithmetic
// is not bit-identical to that: __hmax2(x, 0) returns 0 for a NaN x where ember's ReLU keeps the
// NaN; __half22float2 and __float22half2_rn give NaNs of their own (0x7fffffff, 0x7fff) where
// core/dtype.h keeps the sign (sign | 0x7e00) — with the host headers the emulator compiles
// against, all 2046 f16 NaN patterns widen differently; a + alpha * b takes alpha in float, which
// __hfma2 cannot, and a 16-bit alpha would round once in __hfma2 but twice (float, then 16 bits)
// in the scalar path. (For finite values __hadd2 and __hmul2 would match: float has more than
// 2 * 11 + 2 bits, so its rounding followed by the 16-bit one is the 16-bit rounding of the exact
// result.)

// Elements of T from their bits (core/dtype.h's Half and BFloat16 are a uint16_t each).
template <typename T>
__device__ T from_bits(unsigned short b) {
  T t;
  t.bits = b;
  return t;
}
template <typename T>
struct Pair16 {};  // the CUDA 2-wide type of a 16-bit element type, with split and join
template <>
struct Pair16<Half> {
  using type = __half2;
  static __device__ Pack<Half, 2> split(type v) {
    return {{from_bits<Half>(__half_as_ushort(__low2half(v))), from_bits<Half>(__half_as_ushort(__high2half(v)))}};
  }
  static __device__ type join(Pack<Half, 2> p) {
    return __halves2half2(__ushort_as_half(p.v[0].bits), __ushort_as_half(p.v[1].bits));
  }
};
template <>
struct Pair16<BFloat16> {
  using type = __nv_bfloat162;
  static __device__ Pack<BFloat16, 2> split(type v) {
    return {{from_bits<BFloat16>(__bfloat16_as_ushort(__low2bfloat16(v))),
             from_bits<BFloat16>(__bfloat16_as_ushort(__high2bfloat16(v)))}};
  }
  static __device__ type join(Pack<BFloat16, 2> p) {
    return __halves2bfloat162(__ushort_as_bfloat16(p.v[0].bits), __ushort_as_bfloat16(p.v[1].bits));
  }
};

// Pack v of K elements of T at p: one aligned access, through Pair16 for a pair of 16-bit values.
template <typename T, int K>
__device__ Pack<T, K> load_pack(const void* p, int64_t v) {
  if constexpr (K == 2 && is_low_precision_v<T>) {
    const auto* pairs = static_cast<const typename Pair16<T>::type*>(p) + v;
    EMBER_VECTOR_CHECK_HERE(pairs, 4);
    return Pair16<T>::split(*pairs);
  } else {
    return vector_load<K>(static_cast<const T*>(p) + v * K);
  }
}
template <typename T, int K>
__device__ void store_pack(void* p, int64_t v, Pack<T, K> r) {
  if constexpr (K == 2 && is_low_precision_v<T>) {
    auto* pairs = static_cast<typename Pair16<T>::type*>(p) + v;
    EMBER_VECTOR_CHECK_HERE(pairs, 4);
    *pairs = Pair16<T>::join(r);
  } else {
    vector_store<K>(static_cast<T*>(p) + v * K, r);
  }
}

// Loads the packs of inputs I.. (typed Ts..) at pack index v.
template <int K, size_t I, typename... Ts>
__device__ void load_packs(Packs<K, Ts...>& dst, const void* const* src, int64_t v) {}
template <int K, size_t I, typename T, typename... Ts>
__device__ void load_packs(Packs<K, T, Ts...>& dst, const void* const* src, int64_t v) {
  dst.head = load_pack<T, K>(src[I], v);
  load_packs<K, I + 1>(dst.tail, src, v);
}

template <int K, typename Out, typename F, typename... In, size_t... I>
__device__ void apply_packed(int64_t v, Out* out, const Inputs<sizeof...(In)>& in, const F& f,
                             std::index_sequence<I...>) {
  Packs<K, In...> loaded;
  load_packs<K, 0>(loaded, in.p, v);
  Pack<Out, K> r;
  for (int j = 0; j < K; ++j) r.v[j] = f(pack_get<I>(loaded).v[j]...);
  store_pack<Out, K>(out, v, r);
}

template <typename Out, typename F, typename... In, size_t... I>
__device__ void apply_one(int64_t e, Out* out, const Inputs<sizeof...(In)>& in, const F& f,
                          std::index_sequence<I...>) {
  out[e] = f(static_cast<const In*>(in.p[I])[e]...);
}

// Contiguous operands: thread t handles packs t, t + stride, ...; the n % K leftover elements
// go to the first threads of the grid.
template <int K, typename Out, typename F, typename... In>
__global__ void contiguous_kernel(int64_t n, Out* out, Inputs<sizeof...(In)> in, F f) {
  const auto seq = std::index_sequence_for<In...>{};
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / K;
  for (int64_t v = tid; v < packs; v += stride) apply_packed<K, Out, F, In...>(v, out, in, f, seq);
  if (K > 1 && tid < n - packs * K) apply_one<Out, F, In...>(packs * K + tid, out, in, f, seq);
}

template <typename Out, typename F, typename... In, size_t... I>
__device__ void apply_strided(const int64_t (&off)[sizeof...(In) + 1], Out* out, const Inputs<sizeof...(In)>& in,
                              const F& f, std::index_sequence<I...>) {
  out[off[0]] = f(static_cast<const In*>(in.p[I])[off[I + 1]]...);
}

// Any layout: offsets from the linear index (operand 0 is the output).
template <typename Out, typename F, typename... In>
__global__ void strided_kernel(int64_t n, StridedIndexer<sizeof...(In) + 1> ix, Out* out, Inputs<sizeof...(In)> in,
                               F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t off[sizeof...(In) + 1];
    ix.offsets(i, off);
    apply_strided<Out, F, In...>(off, out, in, f, std::index_sequence_for<In...>{});
  }
}

// The launcher: picks the kernel for the layout. Out and In... are the element types.
template <typename Out, typename... In, typename F>
void launch(const char* op, const IterShape& shape, Operand out, const std::array<Operand, sizeof...(In)>& ins,
            F f) {
  constexpr int N = sizeof...(In) + 1;
  const int64_t n = shape.numel();
  if (n == 0) return;
  Operand all[N];
  all[0] = out;
  for (int k = 1; k < N; ++k) all[k] = ins[k - 1];
  const StridedIndexer<N> ix(shape, all);
  Inputs<sizeof...(In)> in{};
  for (int k = 1; k < N; ++k) in.p[k - 1] = ins[k - 1].data;
  Out* o = static_cast<Out*>(out.data);
  const cudaStream_t stream = cuda::current_stream();
  const size_t sizes[] = {sizeof(In)..., 1};
  // The declared cost (Note [Launch ledger]): each input's distinct elements read once (a
  // broadcast operand's repeats are cache hits, and so is an input given twice, as in x * x), the
  // output written once, one operation per element.
  auto declared = [&] {
    double read = 0;
    for (int k = 1; k < N; ++k) {
      bool repeated = false;
      for (int j = 1; j < k; ++j)
        repeated = repeated || (in.p[j - 1] == in.p[k - 1] && std::equal(ix.strides[j], ix.strides[j] + ix.ndim, ix.strides[k]));
      if (!repeated) read += static_cast<double>(ix.distinct_elements(k) * static_cast<int64_t>(sizes[k - 1]));
    }
    return cuda::cost(read, static_cast<double>(ix.distinct_elements(0)) * sizeof(Out), static_cast<double>(n));
  };
  if (ix.contiguous()) {
    // Vector loads need every operand aligned to its own pack size (16 bytes for 4 floats).
    auto all_aligned = [&](int k_elems) {
      bool ok = aligned(out.data, sizeof(Out) * k_elems);
      for (int k = 0; k < N - 1; ++k) ok = ok && aligned(in.p[k], sizes[k] * k_elems);
      return ok;
    };
    constexpr bool has_16bit = is_low_precision_v<Out> || (is_low_precision_v<In> || ...);
    if (all_aligned(4)) {
      EMBER_LAUNCH_FLAT((contiguous_kernel<4, Out, F, In...>), grid_for(n / 4 + 1, kThreads), kThreads, stream, declared(), n, o,
                        in, f);
    } else if (has_16bit && all_aligned(2)) {
      if constexpr (has_16bit) {  // instantiated only for launches with a 16-bit operand
        EMBER_LAUNCH_FLAT((contiguous_kernel<2, Out, F, In...>), grid_for(n / 2 + 1, kThreads), kThreads, stream, declared(), n,
                          o, in, f);
      }
    } else {
      EMBER_LAUNCH_FLAT((contiguous_kernel<1, Out, F, In...>), grid_for(n, kThreads), kThreads, stream, declared(), n, o, in, f);
    }
  } else {
    EMBER_LAUNCH_FLAT((strided_kernel<Out, F, In...>), grid_for(n, kThreads), kThreads, stream, declared(), n, ix, o, in, f);
  }
  cuda::check_launch(op);
}

// ---- the functors ------------------------------------------------------------------------------

template <typename T>
__device__ inline acc_t<T> widen(T v) {
  return static_cast<acc_t<T>>(v);
}

template <typename T, typename Op>
struct UnaryFwd {
  acc_t<T> a;
  __device__ T operator()(T x) const { return static_cast<T>(Op::fwd(widen(x), a)); }
};
template <typename T, typename Op>
struct UnaryBwd {
  acc_t<T> a;
  __device__ T operator()(T g, T x, T y) const { return static_cast<T>(Op::bwd(widen(g), widen(x), widen(y), a)); }
};
template <typename T, typename Op>
struct BinaryFn {
  __device__ T operator()(T x, T y) const { return static_cast<T>(Op::fwd(widen(x), widen(y))); }
};
template <typename T>
struct AddAlpha {  // the CPU's a + alpha * b, the product rounded on its own (Note [No FMA contraction])
  acc_t<T> al;
  __device__ T operator()(T x, T y) const { return static_cast<T>(widen(x) + mul_rn(al, widen(y))); }
};
template <typename T>
struct SubAlpha {
  acc_t<T> al;
  __device__ T operator()(T x, T y) const { return static_cast<T>(widen(x) - mul_rn(al, widen(y))); }
};
template <typename T>
struct PowDa {
  __device__ T operator()(T g, T a, T b, T y) const {
    return static_cast<T>(ops::Pow::da(widen(g), widen(a), widen(b), widen(y)));
  }
};
template <typename T>
struct PowDb {
  __device__ T operator()(T g, T a, T b, T y) const {
    return static_cast<T>(ops::Pow::db(widen(g), widen(a), widen(b), widen(y)));
  }
};
// Comparisons in float for the 16-bit types (they have no operators of their own), as the CPU.
template <typename T>
using CompareAs = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;
template <typename T, CompareOp kOp>
struct CompareFn {
  __device__ bool operator()(T x, T y) const {
    const CompareAs<T> a = static_cast<CompareAs<T>>(x), b = static_cast<CompareAs<T>>(y);
    if constexpr (kOp == CompareOp::Eq) return a == b;
    else if constexpr (kOp == CompareOp::Ne) return a != b;
    else if constexpr (kOp == CompareOp::Lt) return a < b;
    else if constexpr (kOp == CompareOp::Le) return a <= b;
    else if constexpr (kOp == CompareOp::Gt) return a > b;
    else return a >= b;
  }
};
template <typename T>
struct WhereFn {
  __device__ T operator()(bool c, T x, T y) const { return c ? x : y; }
};
template <typename T>
struct ClampFn {  // NaN stays NaN; the bounds are T's values, widened
  acc_t<T> lo, hi;
  __device__ T operator()(T xt) const {
    const acc_t<T> x = widen(xt);
    return x != x ? xt : static_cast<T>(x < lo ? lo : (x > hi ? hi : x));
  }
};
template <typename To, typename From>
struct ConvertFn {
  __device__ To operator()(From v) const { return ops::convert<To>(v); }
};
template <typename T>
struct FillFn {
  T v;
  __device__ T operator()() const { return v; }
};
struct NotFn {
  __device__ bool operator()(bool v) const { return !v; }
};
template <typename T>
struct IsNanFn {
  __device__ bool operator()(T v) const {
    if constexpr (std::is_integral_v<T>) return false;
    else return static_cast<float>(v) != static_cast<float>(v);
  }
};

// ---- Note [Tiled transpose] ----------------------------------------------------------------------
// copy() of a transposed matrix (out row-major, in column-major: in = some_matrix.t()) is the
// worst case of the strided kernel: consecutive threads write consecutive outputs but read
// elements a whole row apart, so every read is its own memory transaction. The tiled version
// stages a 32 x 32 tile through shared memory: a (32, 8) block reads the tile with consecutive
// threads on consecutive *input* addresses (coalesced reads), barriers, and writes it with
// consecutive threads on consecutive *output* addresses (coalesced writes); each thread moves
// 32 / 8 = 4 elements per phase. The tile is read in the write phase column-wise: tile[tx][...]
// for tx = 0..31 is 32 elements one row apart. With 32 columns per row all of them would sit
// in the same shared-memory bank (a 32-way conflict); one padding column (TILE + 1) shifts each
// row by one bank, so the 32 reads hit 32 different banks. Elements move as raw bits (the fast
// path is for same-dtype copies: contiguous() of a permuted view).
constexpr int kTile = 32, kTileRows = 8;

template <typename U>
__global__ void transpose_kernel(int64_t rows, int64_t cols, U* out, int64_t ld_out, const U* in, int64_t ld_in) {
  __shared__ U tile[kTile][kTile + 1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile, col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  // Read: in(r, c) = in[r + c * ld_in]; consecutive threadIdx.x are consecutive r.
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = row0 + threadIdx.x, c = col0 + j;
    if (r < rows && c < cols) tile[threadIdx.x][j] = in[r + c * ld_in];
  }
  __syncthreads();
  // Write: out(r, c) = out[r * ld_out + c]; consecutive threadIdx.x are consecutive c.
  for (int j = threadIdx.y; j < kTile; j += kTileRows) {
    const int64_t r = row0 + j, c = col0 + threadIdx.x;
    if (r < rows && c < cols) out[r * ld_out + c] = tile[j][threadIdx.x];
  }
}

// The unsigned integer type of an element's size: copies of one dtype move bits.
template <int Bytes>
using Bits = std::conditional_t<
    Bytes == 1, uint8_t, std::conditional_t<Bytes == 2, uint16_t, std::conditional_t<Bytes == 4, uint32_t, uint64_t>>>;

// Same-dtype copy whose coalesced layout is a transposed 2-D matrix: launches the tiled kernel
// and returns true, or returns false for any other layout.
bool try_transpose_copy(DType dtype, const IterShape& shape, Operand out, Operand in) {
  const Operand both[2] = {out, in};
  const StridedIndexer<2> ix(shape, both);
  if (ix.ndim != 2) return false;
  const int64_t rows = ix.sizes[0], cols = ix.sizes[1];
  // out walks (row, col) as (ld_out, 1); in as (1, ld_in): in is column-major.
  if (ix.strides[0][1] != 1 || ix.strides[1][0] != 1) return false;
  const int64_t ld_out = ix.strides[0][0], ld_in = ix.strides[1][1];
  if (ld_out < cols || ld_in < rows) return false;  // overlapping rows: not a plain matrix
  const int64_t grid_y = (rows + kTile - 1) / kTile, grid_x = (cols + kTile - 1) / kTile;
  if (grid_y > detail::kMaxGrid || grid_x > (int64_t{1} << 31) - 1) return false;
  const dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), block(kTile, kTileRows);
  const cudaStream_t stream = cuda::current_stream();
  auto run = [&](auto tag) {
    using U = decltype(tag);
    EMBER_LAUNCH(transpose_kernel<U>, grid, block, 0, stream, cuda::cost(double(rows) * cols * sizeof(U), double(rows) * cols * sizeof(U)), rows, cols, static_cast<U*>(out.data), ld_out,
                 static_cast<const U*>(in.data), ld_in);
  };
  switch (dtype_size(dtype)) {
    case 1: run(Bits<1>{}); break;
    case 2: run(Bits<2>{}); break;
    case 4: run(Bits<4>{}); break;
    default: run(Bits<8>{}); break;
  }
  cuda::check_launch("copy (transpose)");
  return true;
}

}  // namespace

// ---- entry points --------------------------------------------------------------------------------

void unary(UnaryOp op, DType dtype, const IterShape& shape, Operand out, Operand in, double alpha) {
  EMBER_DISPATCH_FLOATING(dtype, "unary", [&] {
    using T = scalar_t;
    const auto a = static_cast<acc_t<T>>(alpha);
    visit_unary(op, [&]<typename Op>() { launch<T, T>("unary", shape, out, {in}, UnaryFwd<T, Op>{a}); });
  });
}

void unary_backward(UnaryOp op, DType dtype, const IterShape& shape, Operand grad_in, Operand grad_out, Operand x,
                    Operand y, double alpha) {
  EMBER_DISPATCH_FLOATING(dtype, "unary_backward", [&] {
    using T = scalar_t;
    const auto a = static_cast<acc_t<T>>(alpha);
    visit_unary(op, [&]<typename Op>() {
      launch<T, T, T, T>("unary_backward", shape, grad_in, {grad_out, x, y}, UnaryBwd<T, Op>{a});
    });
  });
}

void binary(BinaryOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b, double alpha) {
  EMBER_DISPATCH_FLOATING(dtype, "binary", [&] {
    using T = scalar_t;
    auto run = [&](auto f) { launch<T, T, T>("binary", shape, out, {a, b}, f); };
    const auto al = static_cast<acc_t<T>>(alpha);
    switch (op) {
      case BinaryOp::Add:
        if (alpha == 1.0) run(BinaryFn<T, ops::Add>{});
        else run(AddAlpha<T>{al});
        break;
      case BinaryOp::Sub:
        if (alpha == 1.0) run(BinaryFn<T, ops::Sub>{});
        else run(SubAlpha<T>{al});
        break;
      case BinaryOp::Mul: run(BinaryFn<T, ops::Mul>{}); break;
      case BinaryOp::Div: run(BinaryFn<T, ops::Div>{}); break;
      case BinaryOp::Pow: run(BinaryFn<T, ops::Pow>{}); break;
      case BinaryOp::Maximum: run(BinaryFn<T, ops::Maximum>{}); break;
      case BinaryOp::Minimum: run(BinaryFn<T, ops::Minimum>{}); break;
    }
  });
}

void pow_backward(DType dtype, const IterShape& shape, Operand grad_a, Operand grad_b, Operand g, Operand a, Operand b,
                  Operand y) {
  EMBER_DISPATCH_FLOATING(dtype, "pow_backward", [&] {
    using T = scalar_t;
    if (grad_a.data != nullptr) launch<T, T, T, T, T>("pow_backward", shape, grad_a, {g, a, b, y}, PowDa<T>{});
    if (grad_b.data != nullptr) launch<T, T, T, T, T>("pow_backward", shape, grad_b, {g, a, b, y}, PowDb<T>{});
  });
}

void compare(CompareOp op, DType dtype, const IterShape& shape, Operand out, Operand a, Operand b) {
  EMBER_DISPATCH_ALL(dtype, "compare", [&] {
    using T = scalar_t;
    auto run = [&](auto f) { launch<bool, T, T>("compare", shape, out, {a, b}, f); };
    switch (op) {
      case CompareOp::Eq: run(CompareFn<T, CompareOp::Eq>{}); break;
      case CompareOp::Ne: run(CompareFn<T, CompareOp::Ne>{}); break;
      case CompareOp::Lt: run(CompareFn<T, CompareOp::Lt>{}); break;
      case CompareOp::Le: run(CompareFn<T, CompareOp::Le>{}); break;
      case CompareOp::Gt: run(CompareFn<T, CompareOp::Gt>{}); break;
      case CompareOp::Ge: run(CompareFn<T, CompareOp::Ge>{}); break;
    }
  });
}

void where(DType dtype, const IterShape& shape, Operand out, Operand cond, Operand a, Operand b) {
  EMBER_DISPATCH_ALL(dtype, "where", [&] {
    using T = scalar_t;
    launch<T, bool, T, T>("where", shape, out, {cond, a, b}, WhereFn<T>{});
  });
}

void clamp(DType dtype, const IterShape& shape, Operand out, Operand in, bool has_lo, double lo, bool has_hi,
           double hi) {
  EMBER_DISPATCH_FLOATING(dtype, "clamp", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const A l = has_lo ? static_cast<A>(static_cast<T>(lo)) : -INFINITY;
    const A h = has_hi ? static_cast<A>(static_cast<T>(hi)) : INFINITY;
    launch<T, T>("clamp", shape, out, {in}, ClampFn<T>{l, h});
  });
}

void copy(const IterShape& shape, DType out_dtype, Operand out, DType in_dtype, Operand in) {
  if (shape.numel() == 0) return;
  if (out_dtype == in_dtype && try_transpose_copy(out_dtype, shape, out, in)) return;
  EMBER_DISPATCH_ALL(out_dtype, "copy", [&] {
    using To = scalar_t;
    EMBER_DISPATCH_ALL(in_dtype, "copy", [&] {
      using From = scalar_t;
      launch<To, From>("copy", shape, out, {in}, ConvertFn<To, From>{});
    });
  });
}

void fill(DType dtype, const IterShape& shape, Operand out, double value) {
  EMBER_DISPATCH_ALL(dtype, "fill", [&] {
    using T = scalar_t;
    launch<T>("fill", shape, out, {}, FillFn<T>{ops::convert<T>(value)});
  });
}

void logical_not(const IterShape& shape, Operand out, Operand in) {
  launch<bool, bool>("logical_not", shape, out, {in}, NotFn{});
}

void isnan(DType dtype, const IterShape& shape, Operand out, Operand in) {
  EMBER_DISPATCH_ALL(dtype, "isnan", [&] {
    using T = scalar_t;
    launch<bool, T>("isnan", shape, out, {in}, IsNanFn<T>{});
  });
}

}  // namespace ember::kernels::gpu
