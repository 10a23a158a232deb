#pragma once
// <mma.h> for the emulator: CUDA's warp matrix API (nvcuda::wmma) in the m16n16k16 shape with
// __nv_bfloat16 or __half inputs and float accumulators. The real <mma.h> compiles only under nvcc;
// this directory comes before the CUDA headers on the include path of the kernel labs and the
// emulator's tests (kernels/labs/CMakeLists.txt, tests/simt/CMakeLists.txt).
//
// A fragment is each lane's share of a 16x16 tile: 8 elements in `x[]`, as in CUDA. CUDA leaves
// the element-to-lane mapping unspecified (code must not depend on it, except for element-wise
// operations on x[]); here it is that of two mma.m16n8k16 side by side (warp_matrix.h), which is
// how sm_80 and later GPUs run it:
//   matrix_a    x[i]: A[g + 8 (i/2 % 2)][2t + i%2 + 8 (i/4)]
//   matrix_b    x[i]: B[2t + i%2 + 8 (i/2 % 2)][g + 8 (i/4)]
//   accumulator x[i]: C[g + 8 (i/2 % 2)][2t + i%2 + 8 (i/4)]
// (g = lane / 4, t = lane % 4). load_matrix_sync, mma_sync and store_matrix_sync are warp
// collectives (Note [Warp collectives] in warp_matrix.h): one warp op each, all 32 lanes. A load or
// store is done by each lane for its own elements, two adjacent elements with one access where
// they are adjacent in memory (4 bytes for 16-bit inputs, 8 bytes for float), so a kernel lab's
// counters see them, bank conflicts included.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <ember/kernels/simt/warp_matrix.h>

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class T, int Size>
struct frag_base {
  enum { num_elements = Size };
  using element_type = T;
  T x[Size];
};

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment : public frag_base<T, 8> {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator's wmma has the m16n16k16 shape only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                "the emulator's wmma: __nv_bfloat16 or __half inputs, float accumulators");
};

template <class Use, int M, int N, int K, class T, class Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T v) {
  for (int i = 0; i < 8; ++i) f.x[i] = v;
}

namespace detail {

using ::ember::simt::detail::Site;

// The (row, column) of fragment element i of lane l in the 16x16 tile (the header's table).
struct RowCol {
  unsigned row, col;
};
template <class Use>
inline RowCol element_of(unsigned lane, unsigned i) {
  const unsigned g = lane / 4, t = lane % 4;
  const unsigned pair_row = 8 * (i / 2 % 2), half = 8 * (i / 4), e = i % 2;
  if constexpr (std::is_same_v<Use, matrix_b>) return {2 * t + e + pair_row, g + half};
  else return {g + pair_row, 2 * t + e + half};
}

inline void sync_point(const char* name, Site site) {
  ::ember::simt::detail::warp_collective(name, [](void* const*) {}, nullptr, site);
}

inline void check_pointer(const void* p, unsigned ldm, unsigned elem_bytes, const char* name, Site site) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    ::ember::simt::detail::fatal_warp_matrix(name, site, "the pointer is not 256-bit (32-byte) aligned");
  if ((ldm * elem_bytes) % 16 != 0)
    ::ember::simt::detail::fatal_warp_matrix(name, site, "ldm is not a multiple of 16 bytes");
}

// Element i of this lane's fragment lives at p + offset(i); two adjacent fragment elements are
// copied with one access when they are adjacent in memory.
template <class Use, class T, class Offset>
inline void load_elements(T* x, const T* p, Offset offset) {
  const unsigned lane = ::ember::simt::detail::lane_id();
  for (unsigned i = 0; i < 8; i += 2) {
    const size_t o0 = offset(element_of<Use>(lane, i)), o1 = offset(element_of<Use>(lane, i + 1));
    if (o1 == o0 + 1) {
      std::memcpy(static_cast<void*>(x + i), p + o0, 2 * sizeof(T));
    } else {
      std::memcpy(static_cast<void*>(x + i), p + o0, sizeof(T));
      std::memcpy(static_cast<void*>(x + i + 1), p + o1, sizeof(T));
    }
  }
}

}  // namespace detail

// Matrix A or B from memory: element (r, c) at p[r * ldm + c] (row_major) or p[c * ldm + r].
template <class Use, class T, class Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm,
                             EMBER_SIMT_HERE_ARGS) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  const detail::Site site = EMBER_SIMT_HERE;
  detail::check_pointer(p, ldm, sizeof(T), "wmma::load_matrix_sync", site);
  detail::sync_point("wmma::load_matrix_sync", site);
  detail::load_elements<Use>(f.x, p, [&](detail::RowCol rc) -> size_t {
    return std::is_same_v<Layout, row_major> ? size_t{rc.row} * ldm + rc.col : size_t{rc.col} * ldm + rc.row;
  });
}

template <class T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T>& f, const T* p, unsigned ldm, layout_t layout,
                             EMBER_SIMT_HERE_ARGS) {
  const detail::Site site = EMBER_SIMT_HERE;
  detail::check_pointer(p, ldm, sizeof(T), "wmma::load_matrix_sync", site);
  detail::sync_point("wmma::load_matrix_sync", site);
  detail::load_elements<accumulator>(f.x, p, [&](detail::RowCol rc) -> size_t {
    return layout == mem_row_major ? size_t{rc.row} * ldm + rc.col : size_t{rc.col} * ldm + rc.row;
  });
}

template <class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, 16, 16, 16, T>& f, unsigned ldm, layout_t layout,
                              EMBER_SIMT_HERE_ARGS) {
  const detail::Site site = EMBER_SIMT_HERE;
  detail::check_pointer(p, ldm, sizeof(T), "wmma::store_matrix_sync", site);
  detail::sync_point("wmma::store_matrix_sync", site);
  const unsigned lane = ::ember::simt::detail::lane_id();
  auto offset = [&](unsigned i) {
    const detail::RowCol rc = detail::element_of<accumulator>(lane, i);
    return layout == mem_row_major ? size_t{rc.row} * ldm + rc.col : size_t{rc.col} * ldm + rc.row;
  };
  for (unsigned i = 0; i < 8; i += 2) {
    const size_t o0 = offset(i), o1 = offset(i + 1);
    if (o1 == o0 + 1) {
      std::memcpy(p + o0, f.x + i, 2 * sizeof(T));
    } else {
      std::memcpy(p + o0, f.x + i, sizeof(T));
      std::memcpy(p + o1, f.x + i + 1, sizeof(T));
    }
  }
}

namespace detail {

// mma_sync: every lane's three fragments, the 16x16x16 product, every lane's result.
template <class Bits, class T, class LayoutA, class LayoutB>
struct MmaSyncLane {
  const fragment<matrix_a, 16, 16, 16, T, LayoutA>* a;
  const fragment<matrix_b, 16, 16, 16, T, LayoutB>* b;
  float c[8];
  fragment<accumulator, 16, 16, 16, float>* d;
};

template <class Bits, class T, class LayoutA, class LayoutB>
void mma_sync_collective(void* const* lanes) {
  using Lane = MmaSyncLane<Bits, T, LayoutA, LayoutB>;
  float A[16][16], B[16][16], C[16][16];
  auto bits = [](T v) {
    uint16_t h;
    std::memcpy(&h, static_cast<const void*>(&v), 2);
    return Bits::to_float(h);
  };
  for (unsigned l = 0; l < 32; ++l) {
    const Lane& x = *static_cast<const Lane*>(lanes[l]);
    for (unsigned i = 0; i < 8; ++i) {
      const RowCol ra = element_of<matrix_a>(l, i), rb = element_of<matrix_b>(l, i), rc = element_of<accumulator>(l, i);
      A[ra.row][ra.col] = bits(x.a->x[i]);
      B[rb.row][rb.col] = bits(x.b->x[i]);
      C[rc.row][rc.col] = x.c[i];
    }
  }
  // As mma.m16n8k16 (warp_matrix.h): float, k in order; products of 16-bit floats are exact.
  for (unsigned l = 0; l < 32; ++l) {
    const Lane& x = *static_cast<const Lane*>(lanes[l]);
    for (unsigned i = 0; i < 8; ++i) {
      const RowCol rc = element_of<accumulator>(l, i);
      float acc = C[rc.row][rc.col];
      for (unsigned k = 0; k < 16; ++k) acc += A[rc.row][k] * B[k][rc.col];
      x.d->x[i] = acc;
    }
  }
}

}  // namespace detail

// d = a b + c (d may be c).
template <class T, class LayoutA, class LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c, EMBER_SIMT_HERE_ARGS) {
  using Bits = std::conditional_t<std::is_same_v<T, __half>, ::ember::simt::detail::F16Bits,
                                  ::ember::simt::detail::Bf16Bits>;
  detail::MmaSyncLane<Bits, T, LayoutA, LayoutB> me{&a, &b, {}, &d};
  std::memcpy(me.c, c.x, sizeof me.c);
  ::ember::simt::detail::warp_collective("wmma::mma_sync", &detail::mma_sync_collective<Bits, T, LayoutA, LayoutB>,
                                         &me, EMBER_SIMT_HERE);
}

}  // namespace nvcuda::wmma
