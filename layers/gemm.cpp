// Matrix products with autograd: mm, bmm, matmul, linear.
//
// Note [Strided operands to BLAS]
// BLAS takes a matrix as (pointer, leading dimension, transpose flag): a row-major matrix with
// unit column stride, or — flagged CblasTrans — a column-major one (unit row stride). So a.t()
// and x.transpose(-1, -2) of contiguous tensors go to BLAS as they are; backward's g @ b^T and
// a^T @ g (views) cost no copy either. Any other layout (a slice with a column step, an expanded
// row) is copied to contiguous first. Batched operands may repeat a matrix (stride 0 along a
// broadcast batch dim): every product reads its own pointer, so broadcasting costs no copy.

#include "gemm.h"

#include <vector>

#include "../core/autocast.h"
#include "../core/op_helpers.h"
#include "../kernels/cpu/gemm.h"
#include "../kernels/cpu/bf16/gemm_bf16.h"
#include "elementwise.h"
#include "reduce.h"

#if EMBER_CUDA_BACKEND
#include "../kernels/cuda/gemm.h"
#endif

namespace ember {

namespace {

using kernels::Transpose;

// How a (rows, cols) matrix with element strides (rs, cs) can be passed to BLAS, if at all.
struct BlasLayout {
  bool ok = false;
  Transpose trans = Transpose::No;
  int64_t ld = 0;
};

BlasLayout blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  // A stride along a size-1 dim is never used, so it constrains nothing.
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= std::max<int64_t>(1, cols)))
    return {true, Transpose::No, rows == 1 ? std::max<int64_t>(1, cols) : rs};
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= std::max<int64_t>(1, rows)))
    return {true, Transpose::Yes, cols == 1 ? std::max<int64_t>(1, rows) : cs};
  return {};
}

BlasLayout layout_of(const Tensor& t) {
  return blas_layout(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1));
}

// The number of rows when all but the last dim are folded together (no -1: the last dim may be 0).
int64_t leading_rows(const Tensor& t) {
  int64_t r = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) r *= t.shape()[d];
  return r;
}

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": got an undefined tensor");
  detail::check_same_device(op, a, b);
  EMBER_CHECK(is_floating(a.dtype()) && b.dtype() == a.dtype(), op,
              ": expected two floating-point tensors of one dtype, got ", describe(a), " and ", describe(b));
}

[[noreturn]] void throw_mismatch(const char* op, const Tensor& a, const Tensor& b, int64_t ka, int64_t kb) {
  EMBER_THROW(op, ": shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (", ka, " != ", kb, ")");
}

// kernels' gemm_batched with alpha = 1 on `device`. f16/bf16 run on CUDA only (on the CPU, bf16
// takes gemm_bf16 in product_into and f16 is widened before it gets here: Note [Low-precision
// products]), with float alpha and beta.
template <typename T>
void batched_gemm_on(Device device, const char* op, Transpose ta, Transpose tb, int64_t n, int64_t m, int64_t k,
                     const T* const* a, int64_t lda, const T* const* b, int64_t ldb, double beta, T* const* c,
                     int64_t ldc, int64_t batch) {
  const double flops = 2.0 * static_cast<double>(n * m) * static_cast<double>(k * batch);
  if constexpr (is_low_precision_v<T>) {
    EMBER_CHECK(device.is_cuda(), op, ": a 16-bit product on ", device, " reached the GEMM unwidened");
    const profiler::Scope scope(op, flops);
    EMBER_CUDA_CALL(device, op,
                    kernels::gpu::gemm_batched(ta, tb, n, m, k, 1.0f, a, lda, b, ldb, static_cast<float>(beta), c,
                                               ldc, batch));
  } else {
    EMBER_KERNEL_CALL_COUNTED(flops, device, op, gemm_batched, ta, tb, n, m, k, T(1), a, lda, b, ldb, T(beta), c, ldc,
                              batch);
  }
}

// out (*batch, n, m) [= or +=] a (*batch, n, k) @ b (*batch, k, m).
// a and b have exactly out's batch dims (expanded views allowed); out is contiguous and does
// not overlap a or b. beta = 0 overwrites out, beta = 1 accumulates into it. No autograd.
void product_into(const char* op, Tensor a, Tensor b, const Tensor& out, double beta) {
  a = a.detach();
  b = b.detach();
  const int nd = out.dim();
  const int64_t n = a.size(-2), k = a.size(-1), m = b.size(-1);
  BlasLayout la = layout_of(a), lb = layout_of(b);
  if (!la.ok) {
    a = a.contiguous();
    la = layout_of(a);
  }
  if (!lb.ok) {
    b = b.contiguous();
    lb = layout_of(b);
  }
  // One pointer per product: walk the batch dims with an odometer over each operand's strides.
  int64_t batch = 1;
  for (int d = 0; d < nd - 2; ++d) batch *= out.shape()[d];
  std::vector<int64_t> off_a(batch), off_b(batch);
  {
    Dims idx(nd - 2, 0);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < batch; ++i) {
      off_a[i] = oa;
      off_b[i] = ob;
      for (int d = nd - 3; d >= 0; --d) {
        if (++idx[d] < out.shape()[d]) {
          oa += a.strides()[d];
          ob += b.strides()[d];
          break;
        }
        oa -= (idx[d] - 1) * a.strides()[d];
        ob -= (idx[d] - 1) * b.strides()[d];
        idx[d] = 0;
      }
    }
  }
  if (out.dtype() == DType::bf16 && out.device().is_cpu()) {  // Note [Low-precision products]
    const auto* pa = static_cast<const BFloat16*>(a.data());
    const auto* pb = static_cast<const BFloat16*>(b.data());
    auto* pc = static_cast<BFloat16*>(out.data());
    std::vector<const BFloat16*> va(batch), vb(batch);
    std::vector<BFloat16*> vc(batch);
    for (int64_t i = 0; i < batch; ++i) {
      va[i] = pa + off_a[i];
      vb[i] = pb + off_b[i];
      vc[i] = pc + i * n * m;
    }
    const profiler::Scope scope(op, 2.0 * static_cast<double>(n * m) * static_cast<double>(k * batch));
    kernels::cpu::gemm_bf16_batched(la.trans, lb.trans, n, m, k, 1.0f, va.data(), la.ld, vb.data(), lb.ld,
                                    static_cast<float>(beta), vc.data(), std::max<int64_t>(1, m), batch);
    return;
  }
  EMBER_DISPATCH_FLOATING(out.dtype(), op, [&] {
    using T = scalar_t;
    const T* pa = static_cast<const T*>(a.data());
    const T* pb = static_cast<const T*>(b.data());
    T* pc = static_cast<T*>(out.data());
    std::vector<const T*> va(batch), vb(batch);
    std::vector<T*> vc(batch);
    for (int64_t i = 0; i < batch; ++i) {
      va[i] = pa + off_a[i];
      vb[i] = pb + off_b[i];
      vc[i] = pc + i * n * m;
    }
    batched_gemm_on(out.device(), op, la.trans, lb.trans, n, m, k, va.data(), la.ld, vb.data(), lb.ld, beta,
                    vc.data(), std::max<int64_t>(1, m), batch);
  });
}

// a (*ba, n, k) @ b (*bb, k, m) with the batch dims broadcast; both at least 2-D, k checked.
// Returns a new contiguous (*batch, n, m) tensor. No autograd.
Tensor product_forward(const char* op, const Tensor& a, const Tensor& b) {
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(ba, bb, op);
  Shape sa = batch, sb = batch, so = batch;
  sa.push_back(a.size(-2));
  sa.push_back(a.size(-1));
  sb.push_back(b.size(-2));
  sb.push_back(b.size(-1));
  so.push_back(a.size(-2));
  so.push_back(b.size(-1));
  Tensor out = empty(so, {.dtype = a.dtype(), .device = a.device()});
  // Fix a non-BLAS layout before broadcasting, so the copy holds one matrix, not one per product.
  const Tensor a0 = layout_of(a).ok ? a.detach() : a.detach().contiguous();
  const Tensor b0 = layout_of(b).ok ? b.detach() : b.detach().contiguous();
  product_into(op, a0.expand(sa), b0.expand(sb), out, 0.0);
  return out;
}

// Note [Low-precision products]
// mm, bmm, matmul and linear on f16/bf16 tensors run in one of three ways; each way the products
// of 16-bit values are summed in float and each output element is rounded to the 16-bit dtype once.
//   CUDA: natively. The 16-bit operands go to kernels::gpu::gemm_batched as they are: cuBLAS's
//     cublasGemmEx / cublasGemmBatchedEx with CUDA_R_16F / CUDA_R_16BF and CUBLAS_COMPUTE_32F
//     (tensor cores), or the tiled kernel, which widens each element to float as it loads it
//     (Note [16-bit GEMM on CUDA] in kernels/cuda/gemm.cu). No f32 copy of an operand is made. The
//     backward products run the same way on the 16-bit gradient, so gradients come out in the
//     inputs' dtype.
//   CPU, bf16: natively too, on kernels/cpu/bf16/gemm_bf16.h — VDPBF16PS on packed bf16 panels where
//     the CPU has AVX512_BF16, else both operands widened to f32 inside the GEMM and OpenBLAS
//     sgemm (Note [bf16 GEMM on the CPU]); a bias is added before the one rounding. The backward
//     products are bf16 products the same way, except that a gradient summed over broadcast batch
//     dims of matmul is multiplied in f32, summed and then rounded once.
//   CPU, f16: widened. The operands are cast to f32 with the differentiable to() (exact: every
//     f16 value is a float), the f32 product runs (OpenBLAS, or the reference kernel, which
//     accumulates in double), and the result is rounded to f16. Autograd sees two casts around an
//     f32 op, so the gradients reaching the f16 inputs are rounded the same way.
// conv2d (layers/conv.cpp) runs the same three ways: natively on CUDA when cuDNN is used (16-bit
// x, w and y with a float compute type, float sums, one rounding, the bias added before it and
// gradients in the inputs' dtype: Note [16-bit convolutions] in kernels/cuda/cudnn.h); bf16 on the
// CPU on im2col + gemm_bf16 (Note [bf16 convolutions] in kernels/cpu/conv.cpp); widened to f32 for
// f16 on the CPU and for both 16-bit types on CUDA with EMBER_CUDNN=0, where the hand-written
// im2col + GEMM kernels run in f32.

// Whether a product in `dt` on `device` widens to f32 (Note [Low-precision products]).
bool widens_to_f32(DType dt, Device device) { return dt == DType::f16 && device.is_cpu(); }

// The differentiable product behind mm, bmm and matmul.
//   d(a @ b)/da: g @ b^T,  d(a @ b)/db: a^T @ g   (summed over broadcast batch dims)
// b^T and a^T are transposed views: BLAS reads them with CblasTrans, no copy.
Tensor product(const char* op, const char* node, const Tensor& a, const Tensor& b) {
  if (widens_to_f32(a.dtype(), a.device()))  // Note [Low-precision products]
    return product(op, node, a.to(DType::f32), b.to(DType::f32)).to(a.dtype());
  Tensor out = product_forward(op, a, b);
  if (!any_requires_grad({&a, &b})) return out;
  const bool need_a = a.requires_grad(), need_b = b.requires_grad();
  SavedTensor sa(need_b ? a : Tensor(), node), sb(need_a ? b : Tensor(), node);
  const Shape shape_a = a.shape(), shape_b = b.shape();
  const DType dt = a.dtype();
  record(node, {a, b}, {out}, [=](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor()};
    const Tensor go = g[0].to(dt);
    // x @ y summed to `shape`. A bf16 gradient summed over broadcast batch dims is multiplied in
    // f32 and rounded once after the sum (Note [Low-precision products]).
    auto grad = [&](const Tensor& x, const Tensor& y, const Shape& shape) {
      const bool reduces = Shape(shape.begin(), shape.end() - 2) != Shape(go.shape().begin(), go.shape().end() - 2);
      if (dt == DType::bf16 && go.device().is_cpu() && reduces)
        return sum_to(product_forward(op, x.to(DType::f32), y.to(DType::f32)), shape).to(dt);
      return sum_to(product_forward(op, x, y), shape);
    };
    Tensor ga = need_a ? grad(go, sb.get().transpose(-1, -2), shape_a) : Tensor();
    Tensor gb = need_b ? grad(sa.get().transpose(-1, -2), go, shape_b) : Tensor();
    return std::vector<Tensor>{ga, gb};
  });
  return out;
}

using autocast::CastPolicy;

}  // namespace

// Under autocast each product computes in the region's 16-bit dtype (Note [Autocast] in
// core/autocast.h).

Tensor mm(const Tensor& a, const Tensor& b) {
  if (const auto dt = autocast::op_dtype(CastPolicy::lower_precision, {&a, &b}))
    return mm(autocast::cast(a, *dt), autocast::cast(b, *dt));
  check_operands("mm", a, b);
  EMBER_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got ", describe(a), " and ", describe(b));
  if (a.size(1) != b.size(0)) throw_mismatch("mm", a, b, a.size(1), b.size(0));
  return product("mm", "MmBackward", a, b);
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (const auto dt = autocast::op_dtype(CastPolicy::lower_precision, {&a, &b}))
    return bmm(autocast::cast(a, *dt), autocast::cast(b, *dt));
  check_operands("bmm", a, b);
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got ", describe(a), " and ", describe(b));
  EMBER_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ in ", a.shape(), " and ", b.shape(), " (", a.size(0),
              " != ", b.size(0), ")");
  if (a.size(2) != b.size(1)) throw_mismatch("bmm", a, b, a.size(2), b.size(1));
  return product("bmm", "BmmBackward", a, b);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (const auto dt = autocast::op_dtype(CastPolicy::lower_precision, {&a, &b}))
    return matmul(autocast::cast(a, *dt), autocast::cast(b, *dt));
  check_operands("matmul", a, b);
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got ", describe(a),
              " and ", describe(b));
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  if (ka != kb) throw_mismatch("matmul", a, b, ka, kb);
  // 1-D operands become a row (left) or a column (right) and the added dim is removed after,
  // as NumPy: (k) @ (k) -> (), (k) @ (k, m) -> (m), (*, n, k) @ (k) -> (*, n).
  if (b.dim() == 2 && a.dim() >= 3) {
    // (*, n, k) @ (k, m): one tall GEMM over the folded rows instead of a batch of small ones
    // (and the weight gradient becomes one GEMM too, not a batch of them summed).
    Shape out_shape = a.shape();
    out_shape[out_shape.size() - 1] = b.size(1);
    return product("matmul", "MatmulBackward", a.reshape({leading_rows(a), ka}), b).view(out_shape);
  }
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor r = product("matmul", "MatmulBackward", a2, b2);
  if (b.dim() == 1) r = r.squeeze(-1);
  if (a.dim() == 1) r = r.squeeze(b.dim() == 1 ? -1 : -2);
  return r;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (const auto dt = autocast::op_dtype(CastPolicy::lower_precision, {&x, &weight, &bias}))
    return linear(autocast::cast(x, *dt), autocast::cast(weight, *dt), autocast::cast(bias, *dt));
  EMBER_CHECK(x.defined() && weight.defined(), "linear: got an undefined input or weight");
  check_operands("linear", x, weight);
  EMBER_CHECK(x.dim() >= 1 && weight.dim() == 2, "linear: expected input (*, in_features) and weight (out_features, ",
              "in_features), got ", describe(x), " and ", describe(weight));
  const int64_t in = weight.size(1), out_features = weight.size(0);
  EMBER_CHECK(x.size(-1) == in, "linear: input ", x.shape(), " and weight ", weight.shape(),
              " do not match (in_features ", x.size(-1), " != ", in, ")");
  const bool has_bias = bias.defined();
  if (has_bias) {
    check_operands("linear", x, bias);
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == out_features, "linear: bias must have shape (", out_features,
                "), got ", describe(bias));
  }
  if (widens_to_f32(x.dtype(), x.device())) {  // Note [Low-precision products]
    const autocast::SuspendGuard f32_inside;  // autocast would cast the f32 operands back
    const Tensor b32 = has_bias ? bias.to(DType::f32) : Tensor();
    return linear(x.to(DType::f32), weight.to(DType::f32), b32).to(x.dtype());
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = out_features;
  Tensor y = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  {
    // y (rows, out) = [bias] + x (rows, in) @ weight^T (in, out)
    const Tensor x2 = x.detach().reshape({leading_rows(x), in});
    Tensor y2 = y.view({x2.size(0), out_features});
    if (has_bias) y2.copy_(bias.detach());  // broadcast over the rows; the GEMM then adds onto it
    product_into("linear", x2, weight.detach().t(), y2, has_bias ? 1.0 : 0.0);
  }
  if (!any_requires_grad({&x, &weight, &bias})) return y;

  const bool need_x = x.requires_grad(), need_w = weight.requires_grad(), need_b = has_bias && bias.requires_grad();
  SavedTensor sx(need_w ? x : Tensor(), "LinearBackward"), sw(need_x ? weight : Tensor(), "LinearBackward");
  const Shape x_shape = x.shape();
  const DType dt = x.dtype();
  record("LinearBackward", {x, weight, bias}, {y}, [=](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
    const Tensor g2 = g[0].to(dt).reshape({leading_rows(g[0]), out_features});  // (rows, out)
    Tensor gx, gw, gb;
    if (need_x) {
      gx = empty(x_shape, {.dtype = dt, .device = g2.device()});
      product_into("linear backward", g2, sw.get(), gx.view({g2.size(0), in}), 0.0);  // (rows, out) @ (out, in)
    }
    if (need_w) {
      gw = empty({out_features, in}, {.dtype = dt, .device = g2.device()});
      product_into("linear backward", g2.t(), sx.get().reshape({g2.size(0), in}), gw, 0.0);  // (out, rows) @ (rows, in)
    }
    if (need_b) gb = sum(g2, {0});
    return std::vector<Tensor>{gx, gw, gb};
  });
  return y;
}

}  // namespace ember
