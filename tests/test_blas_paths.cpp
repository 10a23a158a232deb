// The GEMM kernel paths (Note [BLAS kernels by CPU features]): ember runs OpenBLAS's kernels for
// the widest instruction set the CPU reports, takes over when OpenBLAS picked older ones (as it
// does on CPUs its model table does not know), and every path this CPU can run — not only the one
// picked — matches the reference GEMM and the direct convolution on odd shapes.

#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <ember/kernels/cpu/blas.h>
#include <ember/kernels/cpu/conv.h>
#include <ember/kernels/cpu/gemm.h>
#include <ember/core/cpu/parallel.h>

#include "test_util.h"

using namespace ember;
namespace kc = ember::kernels::cpu;
using kernels::Transpose;
using testing::max_rel_diff;
using testing::random_vector;

namespace {

// The OpenBLAS kernel sets, widest first, with the instruction set each needs.
const std::vector<std::pair<std::string, ember::IsaLevel>> kCores = {{"SkylakeX", ember::IsaLevel::avx512},
                                                                  {"Haswell", ember::IsaLevel::avx2},
                                                                  {"Sandybridge", ember::IsaLevel::avx},
                                                                  {"Prescott", ember::IsaLevel::sse2}};

// Every transpose combination on odd shapes, with alpha/beta, against the triple loop.
template <typename T>
void check_gemm(double tol) {
  struct Shape3 {
    int64_t m, n, k;
  };
  for (const Shape3 s : {Shape3{1, 1, 1}, Shape3{7, 5, 3}, Shape3{37, 53, 29}, Shape3{129, 67, 255},
                         Shape3{300, 17, 131}}) {
    for (Transpose ta : {Transpose::No, Transpose::Yes}) {
      for (Transpose tb : {Transpose::No, Transpose::Yes}) {
        const int64_t lda = (ta == Transpose::No ? s.k : s.m) + 3, ldb = (tb == Transpose::No ? s.n : s.k) + 1;
        const int64_t ldc = s.n + 2;
        const std::vector<T> a = random_vector<T>(static_cast<size_t>(lda * std::max(s.m, s.k)), 1);
        const std::vector<T> b = random_vector<T>(static_cast<size_t>(ldb * std::max(s.k, s.n)), 2);
        std::vector<T> c = random_vector<T>(static_cast<size_t>(ldc * s.m), 3), c_ref = c;
        kc::gemm(ta, tb, s.m, s.n, s.k, T(0.75), a.data(), lda, b.data(), ldb, T(0.5), c.data(), ldc);
        kc::gemm_reference(ta, tb, s.m, s.n, s.k, T(0.75), a.data(), lda, b.data(), ldb, T(0.5), c_ref.data(), ldc);
        INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << " ta=" << (ta == Transpose::Yes) << " tb="
                  << (tb == Transpose::Yes));
        CHECK(max_rel_diff(c, c_ref) < tol);
      }
    }
  }
}

// A 3x3 convolution (im2col + GEMM) against the seven-loop reference, forward and both backwards.
void check_conv() {
  kernels::Conv2dGeometry g{.n = 3, .c_in = 5, .h = 11, .w = 9, .c_out = 7, .kh = 3, .kw = 3, .pad_h = 1, .pad_w = 1};
  g.out_h = kernels::conv2d_out_size(g.h, g.kh, g.stride_h, g.pad_h, g.dil_h);
  g.out_w = kernels::conv2d_out_size(g.w, g.kw, g.stride_w, g.pad_w, g.dil_w);
  const auto nx = static_cast<size_t>(g.n * g.c_in * g.h * g.w), nw = static_cast<size_t>(g.c_out * g.c_in * 9);
  const auto ny = static_cast<size_t>(g.n * g.c_out * g.out_h * g.out_w);
  const std::vector<float> x = random_vector<float>(nx, 4), w = random_vector<float>(nw, 5);
  const std::vector<float> bias = random_vector<float>(static_cast<size_t>(g.c_out), 6);
  const std::vector<float> gy = random_vector<float>(ny, 7);
  std::vector<float> y(ny), y_ref(ny), gx(nx), gx_ref(nx), gw(nw), gw_ref(nw);
  kc::conv2d_forward(DType::f32, g, x.data(), w.data(), bias.data(), y.data());
  kc::conv2d_forward_reference(DType::f32, g, x.data(), w.data(), bias.data(), y_ref.data());
  kc::conv2d_backward_data(DType::f32, g, gy.data(), w.data(), gx.data());
  kc::conv2d_backward_data_reference(DType::f32, g, gy.data(), w.data(), gx_ref.data());
  kc::conv2d_backward_weight(DType::f32, g, gy.data(), x.data(), gw.data());
  kc::conv2d_backward_weight_reference(DType::f32, g, gy.data(), x.data(), gw_ref.data());
  CHECK(max_rel_diff(y, y_ref) < 1e-5);
  CHECK(max_rel_diff(gx, gx_ref) < 1e-5);
  CHECK(max_rel_diff(gw, gw_ref) < 1e-4);
}

// Puts OpenBLAS back on the kernels it ran before the test.
struct RestoreCore {
  std::string core = kc::blas_info().core;
  ~RestoreCore() {
    kc::set_blas_core(core);
    kc::choose_blas_kernels_again();
  }
};

}  // namespace

TEST_CASE("blas: the kernels use the widest instruction set the CPU has", "[blas]") {
  const ember::IsaLevel cpu = ember::widest_isa(ember::cpu_features());
  const kc::BlasInfo& info = kc::blas_info();
  INFO("CPU " << ember::cpu_features().model_name << ": " << ember::feature_list(ember::cpu_features()));
  INFO("OpenBLAS: " << info.library << "; kernels " << info.core << ", chosen by " << info.chosen_by);
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (forced != nullptr && *forced != '\0') {
    // The user's choice is obeyed; below the CPU it is named in a warning.
    CHECK(info.chosen_by == std::string("OPENBLAS_CORETYPE=") + forced);
    CHECK(info.warning.empty() == (info.core_isa >= cpu));
  } else {
    REQUIRE(info.switchable);  // Debian's OpenBLAS is a DYNAMIC_ARCH build
    CHECK(info.core_isa >= cpu);
    CHECK(info.warning.empty());
  }
}

TEST_CASE("blas: kernels older than the CPU are replaced, as on a CPU OpenBLAS does not know", "[blas]") {
  const ember::IsaLevel cpu = ember::widest_isa(ember::cpu_features());
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    // Nothing to replace: a user's OPENBLAS_CORETYPE is obeyed (the test above checks the warning).
    CHECK(kc::blas_info().chosen_by.rfind("OPENBLAS_CORETYPE=", 0) == 0);
    return;
  }
  if (cpu == ember::IsaLevel::sse2) {
    CHECK(kc::blas_info().core_isa == ember::IsaLevel::sse2);  // nothing wider to choose
    return;
  }
  RestoreCore restore;
  REQUIRE(kc::set_blas_core("Prescott"));  // what OpenBLAS 0.3.21 picks on an unknown Intel model
  CHECK(kc::blas_info().core == "Prescott");
  const kc::BlasInfo& info = kc::choose_blas_kernels_again();
  CHECK(info.core_isa == cpu);
  CHECK(info.chosen_by == "ember, from the CPU's features (OpenBLAS had chosen Prescott)");
  CHECK(info.warning.empty());
  check_gemm<float>(1e-5);
}

TEST_CASE("blas: every kernel path this CPU can run matches the reference GEMM and convolution", "[blas]") {
  const ember::IsaLevel cpu = ember::widest_isa(ember::cpu_features());
  RestoreCore restore;
  const int threads_before = get_num_threads();
  int paths = 0;
  for (const auto& [core, isa] : kCores) {
    if (isa > cpu) continue;
    INFO("kernels " << core);
    REQUIRE(kc::set_blas_core(core));
    REQUIRE(kc::blas_info().core == core);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      INFO(threads << " threads");
      check_gemm<float>(1e-5);
      check_gemm<double>(1e-12);
      check_conv();
    }
    ++paths;
  }
  set_num_threads(threads_before);
  CHECK(paths >= 2);  // SSE2 and at least AVX2 on any x86-64 CPU of the last decade
}
