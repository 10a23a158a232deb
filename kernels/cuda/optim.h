#pragma once
// Optimizer steps on a CUDA device: one fused kernel per parameter, and multi-tensor variants
// that update a whole list of parameters in one launch (PyTorch's multi_tensor_apply / foreach
// path). Contracts and math: kernels/optim.h (device pointers, queued on cuda::current_stream()).
// grad_norm leaves its result in device memory (no wait); its block partial sums are added in a
// fixed tree order: deterministic, but not the CPU's order (equal up to rounding). Its root and
// clip_coefficient's arithmetic run in double on the device: sqrt is correctly rounded there as on
// the host, so for the 2-norm and the inf-norm the results are the host formulas' bits; pow (other
// norm orders) may differ from the host's in the last place on a GPU.

#include <cstdint>

#include "../../core/dtype.h"
#include "../optim.h"

namespace ember::kernels::gpu {

#include "../optim_decls.h"

// ---- steps whose per-step scalars live in device memory (CUDA graphs) ----------------------------
// A captured launch keeps its arguments (Note [CUDA graphs in ember] in graph.h), so a graph that
// replays an optimizer step reads the step's scalars from device memory instead: `coeffs` holds
// make_adam_coeffs<T>(h) / make_sgd_coeffs<T>(h) for T = dtype, written there by
// upload_*_coeffs on current_stream() before the step runs. The update is the same functor with
// the same values, so the result is bit-identical to adam_step / sgd_step. Of `h`, only the
// fields that pick the kernel are read (Adam: decay, amsgrad; SGD: weight_decay != 0, momentum
// != 0, nesterov). coeffs: adam_coeffs_bytes(dtype) / sgd_coeffs_bytes(dtype) bytes of device
// memory of the current device.
size_t adam_coeffs_bytes(DType dtype);
void upload_adam_coeffs(DType dtype, const AdamHyper& h, void* coeffs);
void adam_step_device_coeffs(DType dtype, int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                             void* max_exp_avg_sq, const AdamHyper& h, const void* coeffs);
// With loss scaling under a graph (Note [Steps cancelled on the device] in optim/optimizer.h) the
// coefficients are computed on the device instead: upload_adam_hyper writes `h` (host values: the
// lr, the betas, the step count after this step's increment, ...) to `hyper` (sizeof(AdamHyper)
// bytes of device memory) on current_stream(), and adam_coeffs_on_device runs one thread that
// writes make_adam_coeffs<T>(h) for h.step less *skipped (a float64 count of cancelled steps in
// device memory) to `coeffs`, for adam_step_device_coeffs to read. The formulas are the host's, in
// double; the emulator gives the host's bits, a GPU's pow may differ in the last place (the Note).
void upload_adam_hyper(const AdamHyper& h, void* hyper);
void adam_coeffs_on_device(DType dtype, const void* hyper, const double* skipped, void* coeffs);
size_t sgd_coeffs_bytes(DType dtype);
void upload_sgd_coeffs(DType dtype, const SgdHyper& h, void* coeffs);
// Never the first step with momentum (that one initializes the buffer: run it eagerly).
void sgd_step_device_coeffs(DType dtype, int64_t n, void* param, const void* grad, void* momentum_buffer,
                            const SgdHyper& h, const void* coeffs);

// ---- multi-tensor variants -------------------------------------------------------------------
// One launch updates every tensor of the list with the same hyperparameters: the list is copied to
// the device as an array of these records plus a table of (tensor, chunk) jobs, one block per
// chunk of 4096 elements (Note [Multi-tensor apply] in optim.cu). Results are bit-identical to
// calling adam_step / sgd_step on each tensor. Tensors with n == 0 are skipped. The host arrays
// may be freed when the call returns.
struct AdamTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* max_exp_avg_sq = nullptr;  // only with amsgrad
  int64_t n = 0;
};
void adam_step_multi(DType dtype, const AdamTensor* tensors, int64_t count, const AdamHyper& h);

struct SgdTensor {
  void* param = nullptr;
  const void* grad = nullptr;
  void* momentum_buffer = nullptr;  // only with momentum
  int64_t n = 0;
};
void sgd_step_multi(DType dtype, const SgdTensor* tensors, int64_t count, bool init_buffer, const SgdHyper& h);

}  // namespace ember::kernels::gpu
