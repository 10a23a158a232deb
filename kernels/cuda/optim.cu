// Optimizer steps on a CUDA device: the shared per-element functors of kernels/optim.h in
// elementwise kernels, multi-tensor launches, and the gradient-norm reduction.
//
// Bit-exactness with the CPU (Note [Matching torch.optim bit for bit] in kernels/optim.h) needs
// the same roundings, so no multiply-add may be fused into an FMA: g++ (the SIMT flavour) gets
// fp-contract=off from the pragma below, nvcc gets --fmad=false for this file from
// cmake/EmberCuda.cmake. IEEE division and sqrt are nvcc's defaults (no --use_fast_math).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "launch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../../core/error.h"
#include "block_reduce.cuh"
#include "optim.h"
#include "../../core/cuda/runtime.h"
#include "staging.h"

namespace ember::kernels::gpu {

namespace {

constexpr int kThreads = 256;

// ---- single tensor ---------------------------------------------------------------------------

// One thread per element (grid-stride): every element's update is independent, so this is a pure
// bandwidth kernel (Adam reads 4 arrays and writes 3). Decay and Amsgrad are template parameters,
// as in the CPU loop, so the body is straight-line code.
template <WeightDecayMode Decay, bool Amsgrad, typename T>
__global__ void adam_kernel(int64_t n, T* p, const T* g, T* m, T* v, T* vmax, AdamCoeffs<T> c) {
  if (step_skipped(c.skip)) return;  // a cancelled step (AdamHyper::skip)
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    adam_update<Decay, Amsgrad>(p[i], g[i], m[i], v[i], Amsgrad ? vmax + i : static_cast<T*>(nullptr), c);
}

// The same with the coefficients read from device memory when the kernel runs (a graph replay).
template <WeightDecayMode Decay, bool Amsgrad, typename T>
__global__ void adam_device_coeffs_kernel(int64_t n, T* p, const T* g, T* m, T* v, T* vmax, const AdamCoeffs<T>* coeffs) {
  const AdamCoeffs<T> c = *coeffs;
  if (step_skipped(c.skip)) return;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    adam_update<Decay, Amsgrad>(p[i], g[i], m[i], v[i], Amsgrad ? vmax + i : static_cast<T*>(nullptr), c);
}

// One thread: Adam's coefficients for the uploaded hyperparameters with the step count less the
// steps cancelled on the device (Note [Steps cancelled on the device] in optim/optimizer.h).
template <typename T>
__global__ void adam_coeffs_kernel(const AdamHyper* hyper, const double* skipped, AdamCoeffs<T>* coeffs) {
  AdamHyper h = *hyper;
  h.step -= static_cast<int64_t>(*skipped);
  *coeffs = make_adam_coeffs<T>(h);
}

template <bool L2, bool Momentum, bool Nesterov, bool First, typename T>
__global__ void sgd_device_coeffs_kernel(int64_t n, T* p, const T* g, T* buf, const SgdCoeffs<T>* coeffs) {
  const SgdCoeffs<T> c = *coeffs;
  if (step_skipped(c.skip)) return;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    sgd_update<L2, Momentum, Nesterov, First>(p[i], g[i], Momentum ? buf + i : static_cast<T*>(nullptr), c);
}

template <bool L2, bool Momentum, bool Nesterov, bool First, typename T>
__global__ void sgd_kernel(int64_t n, T* p, const T* g, T* buf, SgdCoeffs<T> c) {
  if (step_skipped(c.skip)) return;  // a cancelled step (AdamHyper::skip)
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    sgd_update<L2, Momentum, Nesterov, First>(p[i], g[i], Momentum ? buf + i : static_cast<T*>(nullptr), c);
}

// ---- multi-tensor ----------------------------------------------------------------------------

// Note [Multi-tensor apply]
// A model has tens to hundreds of parameter tensors, many of them tiny (biases, norms). One launch
// per tensor costs a few microseconds of launch overhead each, more than the update itself. As
// PyTorch's multi_tensor_apply does, we launch once for the whole list: the host writes an array
// of tensor records {pointers, n} and a table of jobs {tensor, first element}, one per chunk of
// kChunk elements, to device memory; block b reads job b, finds its tensor's pointers, and
// updates that chunk with a block-stride loop. Every element is still updated by the same functor
// with the same coefficients, so results equal the per-tensor kernels bit for bit.
constexpr int64_t kChunk = 4096;

struct Job {
  int64_t tensor;
  int64_t start;
};

template <typename T>
struct AdamRef {
  T* p;
  const T* g;
  T* m;
  T* v;
  T* vmax;
  int64_t n;
};

template <typename T>
struct SgdRef {
  T* p;
  const T* g;
  T* buf;
  int64_t n;
};

template <WeightDecayMode Decay, bool Amsgrad, typename T>
__global__ void adam_multi_kernel(const AdamRef<T>* refs, const Job* jobs, AdamCoeffs<T> c) {
  if (step_skipped(c.skip)) return;  // a cancelled step (AdamHyper::skip)
  const Job job = jobs[blockIdx.x];
  const AdamRef<T> r = refs[job.tensor];
  const int64_t end = min(job.start + kChunk, r.n);
  for (int64_t i = job.start + threadIdx.x; i < end; i += blockDim.x)
    adam_update<Decay, Amsgrad>(r.p[i], r.g[i], r.m[i], r.v[i], Amsgrad ? r.vmax + i : static_cast<T*>(nullptr), c);
}

template <bool L2, bool Momentum, bool Nesterov, bool First, typename T>
__global__ void sgd_multi_kernel(const SgdRef<T>* refs, const Job* jobs, SgdCoeffs<T> c) {
  if (step_skipped(c.skip)) return;  // a cancelled step (AdamHyper::skip)
  const Job job = jobs[blockIdx.x];
  const SgdRef<T> r = refs[job.tensor];
  const int64_t end = min(job.start + kChunk, r.n);
  for (int64_t i = job.start + threadIdx.x; i < end; i += blockDim.x)
    sgd_update<L2, Momentum, Nesterov, First>(r.p[i], r.g[i], Momentum ? r.buf + i : static_cast<T*>(nullptr), c);
}

// The records and the job table of one multi-tensor launch, in one device buffer (uploaded
// without blocking, or kept by a graph that captures the launch: detail::LaunchRecords).
template <typename Ref>
std::vector<char> pack_launch(const std::vector<Ref>& host_refs, const std::vector<Job>& host_jobs) {
  static_assert(sizeof(Ref) % alignof(Job) == 0, "the job table must stay aligned");
  std::vector<char> host(host_refs.size() * sizeof(Ref) + host_jobs.size() * sizeof(Job));
  std::memcpy(host.data(), host_refs.data(), host_refs.size() * sizeof(Ref));
  std::memcpy(host.data() + host_refs.size() * sizeof(Ref), host_jobs.data(), host_jobs.size() * sizeof(Job));
  return host;
}

template <typename Ref>
struct MultiLaunch {
  detail::LaunchRecords buffer;
  int64_t jobs = 0;
  const Ref* refs() const { return buffer.as<const Ref>(); }
  const Job* job_table(size_t count) const {
    return reinterpret_cast<const Job*>(buffer.as<const char>() + count * sizeof(Ref));
  }

  double elements = 0;     // the records' elements, for the declared cost
  double table_bytes = 0;  // the records and the job table, all read (every block its job and its record)

  MultiLaunch(const std::vector<Ref>& host_refs, const std::vector<Job>& host_jobs)
      : buffer(pack_launch(host_refs, host_jobs).data(), host_refs.size() * sizeof(Ref) + host_jobs.size() * sizeof(Job)),
        jobs(static_cast<int64_t>(host_jobs.size())),
        table_bytes(static_cast<double>(host_refs.size() * sizeof(Ref) + host_jobs.size() * sizeof(Job))) {
    for (const Ref& r : host_refs) elements += static_cast<double>(r.n);
  }
};

template <typename Ref>
void add_jobs(std::vector<Job>& jobs, int64_t tensor, int64_t n) {
  for (int64_t s = 0; s < n; s += kChunk) jobs.push_back({tensor, s});
}

// ---- declared costs (Note [Launch ledger] in core/cuda/ledger.h) -------------------------------

// The skip flag every thread reads when a step can be cancelled on the device (AdamHyper::skip).
double skip_bytes(const float* skip) { return skip ? sizeof(float) : 0.0; }

// Adam over n elements of `elem` bytes: p, g, m, v (and vmax) read, p, m, v (and vmax) written;
// `extra_read`: coefficients, records and flags read from device memory. adam_update's 14
// operations per element (sqrt counted 1), plus the decay's multiply (AdamW) or multiply-add (L2).
cuda::Cost adam_cost(double n, size_t elem, WeightDecayMode decay, bool amsgrad, double extra_read) {
  const double state = amsgrad ? 4 : 3;  // p, m, v (, vmax): read and written
  const double flops = 14 + (decay == WeightDecayMode::Decoupled ? 1 : decay == WeightDecayMode::L2 ? 2 : 0);
  return cuda::cost(n * elem * (state + 1) + extra_read, n * elem * state, n * flops);
}

// SGD over n elements of `elem` bytes: p and g read, p written; the momentum buffer read (after the
// first step) and written. sgd_update's operations per element for the flags.
cuda::Cost sgd_cost(double n, size_t elem, bool l2, bool momentum, bool nesterov, bool first, double extra_read) {
  const bool reads_buf = momentum && !first;
  const double flops = 3 + (l2 ? 2 : 0) + (reads_buf ? 3 : 0) + (nesterov ? 2 : 0);
  return cuda::cost(n * elem * (reads_buf ? 3 : 2) + extra_read, n * elem * (momentum ? 2 : 1), n * flops);
}

// The gradient norm's first pass: n elements of `elem` bytes -> `blocks` partials of `acc` bytes;
// |g|^p and an add per element (|g| and an add or a max for p = 1 and p = inf).
cuda::Cost norm_partial_cost(double n, size_t elem, int64_t blocks, size_t acc, double p, bool p_is_inf) {
  return cuda::cost(n * elem, static_cast<double>(blocks) * acc, n * (p_is_inf || p == 1 ? 1 : 2));
}

// ---- dispatch on the template flags ----------------------------------------------------------

template <typename T>
struct AdamArrays {
  int64_t n;
  T *p;
  const T* g;
  T *m, *v, *vmax;
};

template <WeightDecayMode Decay, typename T>
void adam_launch(const AdamArrays<T>& a, const AdamCoeffs<T>& c, bool amsgrad) {
  const unsigned grid = detail::grid_stride_blocks(a.n, kThreads);
  if (amsgrad) {
    EMBER_LAUNCH_FLAT((adam_kernel<Decay, true, T>), grid, kThreads, cuda::current_stream(),
                      adam_cost(a.n, sizeof(T), Decay, true, skip_bytes(c.skip)), a.n, a.p, a.g, a.m, a.v, a.vmax, c);
  } else {
    EMBER_LAUNCH_FLAT((adam_kernel<Decay, false, T>), grid, kThreads, cuda::current_stream(),
                      adam_cost(a.n, sizeof(T), Decay, false, skip_bytes(c.skip)), a.n, a.p, a.g, a.m, a.v,
                      static_cast<T*>(nullptr), c);
  }
  cuda::check_launch("adam_step");
}

template <WeightDecayMode Decay, typename T>
void adam_multi_launch(const MultiLaunch<AdamRef<T>>& ml, size_t count, const AdamCoeffs<T>& c, bool amsgrad) {
  const unsigned grid = static_cast<unsigned>(ml.jobs);
  if (amsgrad) {
    EMBER_LAUNCH_FLAT((adam_multi_kernel<Decay, true, T>), grid, kThreads, cuda::current_stream(),
                      adam_cost(ml.elements, sizeof(T), Decay, true, ml.table_bytes + skip_bytes(c.skip)), ml.refs(),
                      ml.job_table(count), c);
  } else {
    EMBER_LAUNCH_FLAT((adam_multi_kernel<Decay, false, T>), grid, kThreads, cuda::current_stream(),
                      adam_cost(ml.elements, sizeof(T), Decay, false, ml.table_bytes + skip_bytes(c.skip)), ml.refs(),
                      ml.job_table(count), c);
  }
  cuda::check_launch("adam_step_multi");
}

// Calls f.template operator()<L2, Momentum, Nesterov, First>() for the flags of one SGD step,
// mirroring kernels/cpu/optim.cpp (weight decay is skipped entirely when 0: 0 * inf = NaN).
template <typename F>
void sgd_flags(const SgdHyper& h, bool first, const F& f) {
  auto momentum = [&](auto l2) {
    constexpr bool L2 = decltype(l2)::value;
    if (h.momentum == 0) {
      f.template operator()<L2, false, false, false>();
    } else if (h.nesterov) {
      first ? f.template operator()<L2, true, true, true>() : f.template operator()<L2, true, true, false>();
    } else {
      first ? f.template operator()<L2, true, false, true>() : f.template operator()<L2, true, false, false>();
    }
  };
  if (h.weight_decay != 0) {
    momentum(std::true_type{});
  } else {
    momentum(std::false_type{});
  }
}

template <typename F>
void adam_decay(WeightDecayMode decay, const F& f) {
  switch (decay) {
    case WeightDecayMode::None: f(std::integral_constant<WeightDecayMode, WeightDecayMode::None>{}); break;
    case WeightDecayMode::L2: f(std::integral_constant<WeightDecayMode, WeightDecayMode::L2>{}); break;
    case WeightDecayMode::Decoupled: f(std::integral_constant<WeightDecayMode, WeightDecayMode::Decoupled>{}); break;
  }
}

// ---- gradient norm ---------------------------------------------------------------------------

// How one element enters the norm, and how two partial results combine, in the accumulation
// type A = acc_t of the gradients' dtype (Note [Accumulation types] in core/dtype.h).
template <typename A>
struct NormOp {
  A p;
  bool is_inf;
  __device__ A term(A x) const {  // x = |g|
    if (is_inf) return x;
    return p == 2 ? x * x : (p == 1 ? x : pow(x, p));
  }
  __device__ A operator()(A a, A b) const {
    if (!is_inf) return a + b;
    return (a != a) ? a : ((b != b || b > a) ? b : a);  // max that keeps NaN
  }
};

// Pass 1: block b reduces its grid-stride share of the elements into partial[b].
template <typename T>
__global__ void norm_partial_kernel(int64_t n, const T* g, NormOp<acc_t<T>> op, acc_t<T>* partial) {
  acc_t<T> acc = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    acc = op(acc, op.term(fabs(static_cast<acc_t<T>>(g[i]))));
  acc = detail::block_reduce(acc, op);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Pass 2: one block reduces the partials (at most kNormBlocks of them), and thread 0 takes the
// root and rounds it to T (grad_norm_from_partial, the CPU's formula) into *norm.
template <typename T, typename A>
__global__ void norm_final_kernel(int64_t count, const A* partial, NormOp<A> op, double p, bool p_is_inf,
                                  double* norm) {
  A acc = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc = op(acc, partial[i]);
  acc = detail::block_reduce(acc, op);
  if (threadIdx.x == 0) *norm = grad_norm_from_partial<T>(static_cast<double>(acc), p, p_is_inf);
}

// One thread: clip_grad_norm_'s total and coefficient from the per-gradient norms.
__global__ void clip_coefficient_kernel(const double* norms, int64_t count, double p, bool p_is_inf, bool f32,
                                        double max_norm, double* total_and_coef) {
  clip_total_and_coefficient(norms, count, p, p_is_inf, f32, max_norm, &total_and_coef[0], &total_and_coef[1]);
}

constexpr int64_t kNormBlocks = 1024;

// ---- loss scaling ----------------------------------------------------------------------------

template <typename T>
struct UnscaleRef {
  T* g;
  int64_t n;
};

// The records and jobs of a list of gradients (those with n == 0 left out) for a multi-tensor
// launch; `op` names the caller in errors.
template <typename T>
struct GradList {
  std::vector<UnscaleRef<T>> refs;
  std::vector<Job> jobs;
  GradList(const UnscaleTensor* tensors, int64_t count, const char* op) {
    for (int64_t i = 0; i < count; ++i) {
      EMBER_CHECK(tensors[i].n >= 0, op, ": tensor ", i, " has n = ", tensors[i].n);
      if (tensors[i].n == 0) continue;
      add_jobs<UnscaleRef<T>>(jobs, static_cast<int64_t>(refs.size()), tensors[i].n);
      refs.push_back({static_cast<T*>(tensors[i].grad), tensors[i].n});
    }
    EMBER_CHECK(jobs.size() <= 2147483647u, op, ": too many chunks for one grid");
  }
};

// Block b unscales chunk b of the list (Note [Multi-tensor apply]); a thread that met an inf or
// NaN raises the flag. Every writer writes the same 1, but through atomicExch, so that no two
// plain stores race (the emulator runs blocks on several threads).
template <typename T>
__global__ void unscale_multi_kernel(const UnscaleRef<T>* refs, const Job* jobs, float* found_inf,
                                     const float* inv_scale) {
  const Job job = jobs[blockIdx.x];
  const UnscaleRef<T> r = refs[job.tensor];
  const float s = *inv_scale;
  const int64_t end = min(job.start + kChunk, r.n);
  bool seen = false;
  for (int64_t i = job.start + threadIdx.x; i < end; i += blockDim.x) {
    bool non_finite;
    r.g[i] = unscale_element(r.g[i], s, non_finite);
    seen |= non_finite;
  }
  if (seen) atomicExch(found_inf, 1.0f);
}

// Block b scales chunk b of the list by *coef (Note [Multi-tensor apply]); every block returns at
// once when *coef == 1.
template <typename T>
__global__ void scale_multi_kernel(const UnscaleRef<T>* refs, const Job* jobs, const double* coef) {
  const double c = *coef;
  if (c == 1.0) return;
  const Job job = jobs[blockIdx.x];
  const UnscaleRef<T> r = refs[job.tensor];
  const T ct = static_cast<T>(c);
  const int64_t end = min(job.start + kChunk, r.n);
  for (int64_t i = job.start + threadIdx.x; i < end; i += blockDim.x) r.g[i] = r.g[i] * ct;
}

// One thread: the scale stays on the device, so a training step needs no copy back for it.
__global__ void update_scale_kernel(float* scale, int32_t* growth_tracker, const float* found_inf,
                                    double growth_factor, double backoff_factor, int64_t growth_interval) {
  amp_update_scale(*scale, *growth_tracker, *found_inf, growth_factor, backoff_factor, growth_interval);
}

}  // namespace

void adam_step(DType dtype, int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
               void* max_exp_avg_sq, const AdamHyper& h) {
  EMBER_CHECK(!h.amsgrad || max_exp_avg_sq != nullptr, "adam_step: amsgrad needs max_exp_avg_sq");
  EMBER_CHECK(n >= 0, "adam_step: n = ", n);
  if (n == 0) return;
  EMBER_DISPATCH_FLOAT(dtype, "adam_step", [&] {
    using T = scalar_t;
    const AdamArrays<T> a{n, static_cast<T*>(param), static_cast<const T*>(grad), static_cast<T*>(exp_avg),
                          static_cast<T*>(exp_avg_sq), static_cast<T*>(max_exp_avg_sq)};
    const AdamCoeffs<T> c = make_adam_coeffs<T>(h);
    adam_decay(h.decay, [&](auto d) { adam_launch<decltype(d)::value>(a, c, h.amsgrad); });
  });
}

void sgd_step(DType dtype, int64_t n, void* param, const void* grad, void* momentum_buffer, bool init_buffer,
              const SgdHyper& h) {
  EMBER_CHECK(h.momentum == 0 || momentum_buffer != nullptr, "sgd_step: momentum needs a momentum buffer");
  EMBER_CHECK(n >= 0, "sgd_step: n = ", n);
  if (n == 0) return;
  EMBER_DISPATCH_FLOAT(dtype, "sgd_step", [&] {
    using T = scalar_t;
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buffer);
    const SgdCoeffs<T> c = make_sgd_coeffs<T>(h);
    const unsigned grid = detail::grid_stride_blocks(n, kThreads);
    sgd_flags(h, init_buffer, [&]<bool L2, bool Momentum, bool Nesterov, bool First>() {
      EMBER_LAUNCH_FLAT((sgd_kernel<L2, Momentum, Nesterov, First, T>), grid, kThreads, cuda::current_stream(),
                        sgd_cost(n, sizeof(T), L2, Momentum, Nesterov, First, skip_bytes(c.skip)), n, p, g,
                        Momentum ? buf : static_cast<T*>(nullptr), c);
    });
    cuda::check_launch("sgd_step");
  });
}

void adam_step_multi(DType dtype, const AdamTensor* tensors, int64_t count, const AdamHyper& h) {
  EMBER_CHECK(count >= 0 && (count == 0 || tensors != nullptr), "adam_step_multi: bad tensor list");
  EMBER_DISPATCH_FLOAT(dtype, "adam_step_multi", [&] {
    using T = scalar_t;
    std::vector<AdamRef<T>> refs;
    std::vector<Job> jobs;
    for (int64_t i = 0; i < count; ++i) {
      const AdamTensor& t = tensors[i];
      EMBER_CHECK(t.n >= 0, "adam_step_multi: tensor ", i, " has n = ", t.n);
      EMBER_CHECK(!h.amsgrad || t.n == 0 || t.max_exp_avg_sq != nullptr, "adam_step_multi: amsgrad needs "
                  "max_exp_avg_sq (tensor ", i, ")");
      if (t.n == 0) continue;
      add_jobs<AdamRef<T>>(jobs, static_cast<int64_t>(refs.size()), t.n);
      refs.push_back({static_cast<T*>(t.param), static_cast<const T*>(t.grad), static_cast<T*>(t.exp_avg),
                      static_cast<T*>(t.exp_avg_sq), static_cast<T*>(t.max_exp_avg_sq), t.n});
    }
    if (jobs.empty()) return;
    EMBER_CHECK(jobs.size() <= 2147483647u, "adam_step_multi: too many chunks for one grid");
    const MultiLaunch<AdamRef<T>> ml(refs, jobs);
    const AdamCoeffs<T> c = make_adam_coeffs<T>(h);
    adam_decay(h.decay, [&](auto d) { adam_multi_launch<decltype(d)::value>(ml, refs.size(), c, h.amsgrad); });
  });
}

void sgd_step_multi(DType dtype, const SgdTensor* tensors, int64_t count, bool init_buffer, const SgdHyper& h) {
  EMBER_CHECK(count >= 0 && (count == 0 || tensors != nullptr), "sgd_step_multi: bad tensor list");
  EMBER_DISPATCH_FLOAT(dtype, "sgd_step_multi", [&] {
    using T = scalar_t;
    std::vector<SgdRef<T>> refs;
    std::vector<Job> jobs;
    for (int64_t i = 0; i < count; ++i) {
      const SgdTensor& t = tensors[i];
      EMBER_CHECK(t.n >= 0, "sgd_step_multi: tensor ", i, " has n = ", t.n);
      EMBER_CHECK(h.momentum == 0 || t.n == 0 || t.momentum_buffer != nullptr,
                  "sgd_step_multi: momentum needs a momentum buffer (tensor ", i, ")");
      if (t.n == 0) continue;
      add_jobs<SgdRef<T>>(jobs, static_cast<int64_t>(refs.size()), t.n);
      refs.push_back({static_cast<T*>(t.param), static_cast<const T*>(t.grad), static_cast<T*>(t.momentum_buffer), t.n});
    }
    if (jobs.empty()) return;
    EMBER_CHECK(jobs.size() <= 2147483647u, "sgd_step_multi: too many chunks for one grid");
    const MultiLaunch<SgdRef<T>> ml(refs, jobs);
    const SgdCoeffs<T> c = make_sgd_coeffs<T>(h);
    const unsigned grid = static_cast<unsigned>(ml.jobs);
    sgd_flags(h, init_buffer, [&]<bool L2, bool Momentum, bool Nesterov, bool First>() {
      EMBER_LAUNCH_FLAT((sgd_multi_kernel<L2, Momentum, Nesterov, First, T>), grid, kThreads, cuda::current_stream(),
                        sgd_cost(ml.elements, sizeof(T), L2, Momentum, Nesterov, First,
                                 ml.table_bytes + skip_bytes(c.skip)),
                        ml.refs(), ml.job_table(refs.size()), c);
    });
    cuda::check_launch("sgd_step_multi");
  });
}

size_t adam_coeffs_bytes(DType dtype) {
  size_t bytes = 0;
  EMBER_DISPATCH_FLOAT(dtype, "adam_coeffs_bytes", [&] { bytes = sizeof(AdamCoeffs<scalar_t>); });
  return bytes;
}

void upload_adam_coeffs(DType dtype, const AdamHyper& h, void* coeffs) {
  EMBER_DISPATCH_FLOAT(dtype, "upload_adam_coeffs", [&] {
    const AdamCoeffs<scalar_t> c = make_adam_coeffs<scalar_t>(h);
    detail::upload_async(coeffs, &c, sizeof c);
  });
}

void upload_adam_hyper(const AdamHyper& h, void* hyper) { detail::upload_async(hyper, &h, sizeof h); }

void adam_coeffs_on_device(DType dtype, const void* hyper, const double* skipped, void* coeffs) {
  EMBER_CHECK(hyper != nullptr && skipped != nullptr && coeffs != nullptr, "adam_coeffs_on_device: null pointer");
  EMBER_DISPATCH_FLOAT(dtype, "adam_coeffs_on_device", [&] {
    using T = scalar_t;
    // make_adam_coeffs: about 12 double operations (two pows, a sqrt, a division).
    EMBER_LAUNCH_FLAT((adam_coeffs_kernel<T>), 1, 1, cuda::current_stream(),
                      cuda::cost(sizeof(AdamHyper) + sizeof(double), sizeof(AdamCoeffs<T>), 12),
                      static_cast<const AdamHyper*>(hyper), skipped, static_cast<AdamCoeffs<T>*>(coeffs));
    cuda::check_launch("adam_coeffs_on_device");
  });
}

void adam_step_device_coeffs(DType dtype, int64_t n, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                             void* max_exp_avg_sq, const AdamHyper& h, const void* coeffs) {
  EMBER_CHECK(!h.amsgrad || max_exp_avg_sq != nullptr, "adam_step: amsgrad needs max_exp_avg_sq");
  EMBER_CHECK(n >= 0, "adam_step: n = ", n);
  if (n == 0) return;
  EMBER_DISPATCH_FLOAT(dtype, "adam_step", [&] {
    using T = scalar_t;
    const auto* c = static_cast<const AdamCoeffs<T>*>(coeffs);
    const unsigned grid = detail::grid_stride_blocks(n, kThreads);
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T *m = static_cast<T*>(exp_avg), *v = static_cast<T*>(exp_avg_sq), *vmax = static_cast<T*>(max_exp_avg_sq);
    adam_decay(h.decay, [&](auto d) {
      constexpr WeightDecayMode Decay = decltype(d)::value;
      if (h.amsgrad) {
        EMBER_LAUNCH_FLAT((adam_device_coeffs_kernel<Decay, true, T>), grid, kThreads, cuda::current_stream(),
                          adam_cost(n, sizeof(T), Decay, true, sizeof(*c) + skip_bytes(h.skip)), n, p, g, m, v,
                          vmax, c);
      } else {
        EMBER_LAUNCH_FLAT((adam_device_coeffs_kernel<Decay, false, T>), grid, kThreads, cuda::current_stream(),
                          adam_cost(n, sizeof(T), Decay, false, sizeof(*c) + skip_bytes(h.skip)), n, p, g, m, v,
                          static_cast<T*>(nullptr), c);
      }
    });
    cuda::check_launch("adam_step");
  });
}

size_t sgd_coeffs_bytes(DType dtype) {
  size_t bytes = 0;
  EMBER_DISPATCH_FLOAT(dtype, "sgd_coeffs_bytes", [&] { bytes = sizeof(SgdCoeffs<scalar_t>); });
  return bytes;
}

void upload_sgd_coeffs(DType dtype, const SgdHyper& h, void* coeffs) {
  EMBER_DISPATCH_FLOAT(dtype, "upload_sgd_coeffs", [&] {
    const SgdCoeffs<scalar_t> c = make_sgd_coeffs<scalar_t>(h);
    detail::upload_async(coeffs, &c, sizeof c);
  });
}

void sgd_step_device_coeffs(DType dtype, int64_t n, void* param, const void* grad, void* momentum_buffer,
                            const SgdHyper& h, const void* coeffs) {
  EMBER_CHECK(h.momentum == 0 || momentum_buffer != nullptr, "sgd_step: momentum needs a momentum buffer");
  EMBER_CHECK(n >= 0, "sgd_step: n = ", n);
  if (n == 0) return;
  EMBER_DISPATCH_FLOAT(dtype, "sgd_step", [&] {
    using T = scalar_t;
    T* p = static_cast<T*>(param);
    const T* g = static_cast<const T*>(grad);
    T* buf = static_cast<T*>(momentum_buffer);
    const auto* c = static_cast<const SgdCoeffs<T>*>(coeffs);
    const unsigned grid = detail::grid_stride_blocks(n, kThreads);
    sgd_flags(h, /*first=*/false, [&]<bool L2, bool Momentum, bool Nesterov, bool First>() {
      EMBER_LAUNCH_FLAT((sgd_device_coeffs_kernel<L2, Momentum, Nesterov, First, T>), grid, kThreads,
                        cuda::current_stream(),
                        sgd_cost(n, sizeof(T), L2, Momentum, Nesterov, First, sizeof(*c) + skip_bytes(h.skip)), n, p,
                        g, Momentum ? buf : static_cast<T*>(nullptr), c);
    });
    cuda::check_launch("sgd_step");
  });
}

void grad_norm(DType dtype, int64_t n, const void* grad, double p, double* norm) {
  EMBER_CHECK(n >= 0 && norm != nullptr, "grad_norm: n = ", n, ", norm = ", static_cast<void*>(norm));
  const bool p_is_inf = std::isinf(p);
  const cuda::Stream s = cuda::current_stream();
  EMBER_DISPATCH_FLOAT(dtype, "grad_norm", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const NormOp<A> op{static_cast<A>(p), p_is_inf};
    // n == 0 still writes the norm (0): one final block over no partials.
    const int64_t blocks = std::min<int64_t>(kNormBlocks, (n + kThreads - 1) / kThreads);
    cuda::Scratch partial(static_cast<size_t>(std::max<int64_t>(blocks, 1)) * sizeof(A));
    A* d = partial.as<A>();
    if (blocks > 0) {
      EMBER_LAUNCH(norm_partial_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, s,
                   norm_partial_cost(static_cast<double>(n), sizeof(T), blocks, sizeof(A), p, p_is_inf), n,
                   static_cast<const T*>(grad), op, d);
      cuda::check_launch("grad_norm");
    }
    // The partials combined (an add or a max each), then the root.
    EMBER_LAUNCH((norm_final_kernel<T, A>), 1, kThreads, 0, s,
                 cuda::cost(static_cast<double>(blocks) * sizeof(A), sizeof(double), static_cast<double>(blocks) + 1),
                 blocks, static_cast<const A*>(d), op, p, p_is_inf, norm);
    cuda::check_launch("grad_norm");
  });
}

void clip_coefficient(const double* norms, int64_t count, double p, DType norm_dtype, double max_norm,
                      double* total_and_coef) {
  EMBER_CHECK(count >= 0 && (count == 0 || norms != nullptr) && total_and_coef != nullptr,
              "clip_coefficient: bad arguments");
  // The norms read; the total and the coefficient written; |norm|^p and an add per norm, then the
  // root and the coefficient's four operations.
  EMBER_LAUNCH_FLAT(clip_coefficient_kernel, 1, 1, cuda::current_stream(),
                    cuda::cost(static_cast<double>(count) * sizeof(double), 2 * sizeof(double), 2.0 * count + 5), norms,
                    count, p, std::isinf(p), norm_dtype == DType::f32, max_norm, total_and_coef);
  cuda::check_launch("clip_coefficient");
}

void scale_grads(DType dtype, const UnscaleTensor* tensors, int64_t count, const double* coef) {
  EMBER_CHECK(count >= 0 && (count == 0 || tensors != nullptr) && coef != nullptr, "scale_grads: bad arguments");
  EMBER_DISPATCH_FLOAT(dtype, "scale_grads", [&] {
    using T = scalar_t;
    const GradList<T> list(tensors, count, "scale_grads");
    if (list.jobs.empty()) return;
    const MultiLaunch<UnscaleRef<T>> ml(list.refs, list.jobs);
    // The gradients read and scaled in place (one multiply each), the records and *coef read.
    EMBER_LAUNCH_FLAT((scale_multi_kernel<T>), static_cast<unsigned>(ml.jobs), kThreads, cuda::current_stream(),
                      cuda::cost(ml.elements * sizeof(T) + ml.table_bytes + sizeof(double), ml.elements * sizeof(T),
                                 ml.elements),
                      ml.refs(), ml.job_table(list.refs.size()), coef);
    cuda::check_launch("scale_grads");
  });
}

void non_finite_check_and_unscale(DType dtype, const UnscaleTensor* tensors, int64_t count, float* found_inf,
                                  const float* inv_scale) {
  EMBER_CHECK(count >= 0 && (count == 0 || tensors != nullptr), "non_finite_check_and_unscale: bad tensor list");
  EMBER_CHECK(found_inf != nullptr && inv_scale != nullptr, "non_finite_check_and_unscale: found_inf and inv_scale "
              "are required");
  EMBER_DISPATCH_FLOAT(dtype, "non_finite_check_and_unscale", [&] {
    using T = scalar_t;
    const GradList<T> list(tensors, count, "non_finite_check_and_unscale");
    if (list.jobs.empty()) return;
    const MultiLaunch<UnscaleRef<T>> ml(list.refs, list.jobs);
    // The gradients read and unscaled in place (the finiteness test's subtraction and a multiply
    // each), the records and *inv_scale read; *found_inf counted written (an atomic target).
    EMBER_LAUNCH_FLAT((unscale_multi_kernel<T>), static_cast<unsigned>(ml.jobs), kThreads, cuda::current_stream(),
                      cuda::cost(ml.elements * sizeof(T) + ml.table_bytes + sizeof(float),
                                 ml.elements * sizeof(T) + sizeof(float), 2 * ml.elements),
                      ml.refs(), ml.job_table(list.refs.size()), found_inf, inv_scale);
    cuda::check_launch("non_finite_check_and_unscale");
  });
}

void update_scale(float* scale, int32_t* growth_tracker, const float* found_inf, double growth_factor,
                  double backoff_factor, int64_t growth_interval) {
  EMBER_CHECK(scale != nullptr && growth_tracker != nullptr && found_inf != nullptr, "update_scale: null pointer");
  // scale, growth_tracker and found_inf read; scale and growth_tracker written; one product.
  EMBER_LAUNCH_FLAT(update_scale_kernel, 1, 1, cuda::current_stream(),
                    cuda::cost(2 * sizeof(float) + sizeof(int32_t), sizeof(float) + sizeof(int32_t), 1), scale,
                    growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval);
  cuda::check_launch("update_scale");
}

}  // namespace ember::kernels::gpu
