// Lab: adam — one optimizer step (AdamW) over every parameter tensor of a small CNN: a few big
// convolution weights and many small tensors (biases, batch-norm scales). The arithmetic is a
// dozen flops per element; the lab is about memory traffic and launch count. Read
// kernels/labs/adam/README.md alongside.
//   nvcc -O3 -arch=sm_90 -std=c++17 -o adam kernels/labs/adam/adam.cu && ./adam
//   cmake --build build --target lab_adam && ./build/labs/lab_adam   (the emulator)
//
// The update, per element, at step t (the bias corrections 1 - beta^t are computed once on the host):
//   m = beta1 m + (1 - beta1) g          v = beta2 v + (1 - beta2) g^2
//   p = p - lr (m / bc1) / (sqrt(v / bc2) + eps) - lr wd p
//
// v1 three kernels per tensor: m, then v, then p (reads g twice, m and v twice each)
// v2 one fused kernel per tensor: g, m, v, p read once, m, v, p written once
// v3 v2 with float4: 16 bytes per lane per access, the n % 4 tail one float at a time
// v4 multi-tensor apply: one launch for all tensors; each block finds its (tensor, chunk) in a table
// v5 v4 with float4
// v9 exercise: v4 with a bug at a chunk's end

#include "../common/lab.cuh"

#include <cmath>
#include <vector>

struct AdamParams {
  float lr, beta1, beta2, eps, weight_decay;
  float bc1, bc2;  // 1 - beta1^t, 1 - beta2^t
};

// The update of one element, shared by every version (a __host__ __device__ function would also
// serve the CPU; the reference below computes in double instead, to check the float kernels).
__device__ __forceinline__ void adam_element(float& p, float g, float& m, float& v, const AdamParams& a) {
  m = a.beta1 * m + (1.0f - a.beta1) * g;
  v = a.beta2 * v + (1.0f - a.beta2) * g * g;
  p -= a.lr * (m / a.bc1) / (sqrtf(v / a.bc2) + a.eps) + a.lr * a.weight_decay * p;
}

// ---- v1: three passes --------------------------------------------------------------------------
__global__ void adam_m(const float* g, float* m, int n, AdamParams a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) m[i] = a.beta1 * m[i] + (1.0f - a.beta1) * g[i];
}
__global__ void adam_v(const float* g, float* v, int n, AdamParams a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = a.beta2 * v[i] + (1.0f - a.beta2) * g[i] * g[i];
}
__global__ void adam_p(float* p, const float* m, const float* v, int n, AdamParams a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] -= a.lr * (m[i] / a.bc1) / (sqrtf(v[i] / a.bc2) + a.eps) + a.lr * a.weight_decay * p[i];
}

// ---- v2: fused ---------------------------------------------------------------------------------
__global__ void adam_fused(float* p, const float* g, float* m, float* v, int n, AdamParams a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float pi = p[i], mi = m[i], vi = v[i];
    adam_element(pi, g[i], mi, vi, a);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

// ---- v3: fused, float4 -------------------------------------------------------------------------
// Thread i updates floats 4i..4i+3 with one 16-byte load and store per array; the first n % 4
// threads also update one float each of the tail.
__device__ __forceinline__ void adam_float4(float4* p, const float4* g, float4* m, float4* v, int i,
                                            const AdamParams& a) {
  float4 pi = p[i], mi = m[i], vi = v[i];
  const float4 gi = g[i];
  adam_element(pi.x, gi.x, mi.x, vi.x, a);
  adam_element(pi.y, gi.y, mi.y, vi.y, a);
  adam_element(pi.z, gi.z, mi.z, vi.z, a);
  adam_element(pi.w, gi.w, mi.w, vi.w, a);
  p[i] = pi, m[i] = mi, v[i] = vi;
}
__global__ void adam_fused_float4(float* p, const float* g, float* m, float* v, int n, AdamParams a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x, n4 = n / 4;
  if (i < n4)
    adam_float4(reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(m),
                reinterpret_cast<float4*>(v), i, a);
  const int t = n4 * 4 + i;
  if (t < n) {
    float pt = p[t], mt = m[t], vt = v[t];
    adam_element(pt, g[t], mt, vt, a);
    p[t] = pt, m[t] = mt, v[t] = vt;
  }
}

// ---- v4, v5: multi-tensor apply ----------------------------------------------------------------
// Note [A chunk table for one launch]
// A CNN has a few big weights and many tensors of a few hundred elements. One launch per tensor
// costs a few microseconds each however small the tensor, and a small tensor's launch fills a
// fraction of the GPU. Multi-tensor apply cuts every tensor into chunks of `chunk` elements and
// launches one block per chunk, all tensors at once: block b reads from a table which tensor and
// which chunk of it it updates. The table travels by value as the kernel's parameter (kernel
// parameters live in constant memory on a GPU: no global-memory traffic), so its size is bounded:
// kMaxTensors tensors and kMaxBlocks chunks per launch; a longer list takes more launches.
constexpr int kMaxTensors = 64, kMaxBlocks = 256;
struct TensorList {
  float* p[kMaxTensors];
  const float* g[kMaxTensors];
  float* m[kMaxTensors];
  float* v[kMaxTensors];
  int n[kMaxTensors];
  unsigned char block_tensor[kMaxBlocks];  // block -> tensor
  int block_chunk[kMaxBlocks];             // block -> chunk index within that tensor
  int chunk;                               // elements per chunk, a multiple of 4
};

__global__ void adam_multi_tensor(TensorList list, AdamParams a) {
  const int t = list.block_tensor[blockIdx.x];
  const int start = list.block_chunk[blockIdx.x] * list.chunk;
  const int end = min(start + list.chunk, list.n[t]);
  float *p = list.p[t], *m = list.m[t], *v = list.v[t];
  const float* g = list.g[t];
  for (int i = start + threadIdx.x; i < end; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adam_element(pi, g[i], mi, vi, a);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

// The chunk boundaries are multiples of 4 floats, so a chunk is whole float4s plus, in a tensor's
// last chunk, the tail of n % 4 floats.
__global__ void adam_multi_tensor_float4(TensorList list, AdamParams a) {
  const int t = list.block_tensor[blockIdx.x];
  const int start = list.block_chunk[blockIdx.x] * list.chunk;
  const int end = min(start + list.chunk, list.n[t]);
  float *p = list.p[t], *m = list.m[t], *v = list.v[t];
  const float* g = list.g[t];
  const int end4 = end / 4;
  for (int i = start / 4 + threadIdx.x; i < end4; i += blockDim.x)
    adam_float4(reinterpret_cast<float4*>(p), reinterpret_cast<const float4*>(g), reinterpret_cast<float4*>(m),
                reinterpret_cast<float4*>(v), i, a);
  const int k = end4 * 4 + threadIdx.x;
  if (k < end) {
    float pk = p[k], mk = m[k], vk = v[k];
    adam_element(pk, g[k], mk, vk, a);
    p[k] = pk, m[k] = mk, v[k] = vk;
  }
}

// Exercise (v9): the multi-tensor kernel with one character changed. Find it from the lab's output.
__global__ void adam_multi_tensor_exercise(TensorList list, AdamParams a) {
  const int t = list.block_tensor[blockIdx.x];
  const int start = list.block_chunk[blockIdx.x] * list.chunk;
  const int end = min(start + list.chunk, list.n[t]);
  float *p = list.p[t], *m = list.m[t], *v = list.v[t];
  const float* g = list.g[t];
  for (int i = start + threadIdx.x; i <= end; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];  // exercise: the emulator names this line
    adam_element(pi, g[i], mi, vi, a);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

// The tensors of a small CNN of width w and depth d: a 7x7 stem convolution from 3 channels, d
// 3x3 convolutions of w channels, each with a batch-norm scale and shift, and a 10-class
// classifier. Sizes are ragged on purpose: 10 is not a multiple of 4.
std::vector<int> cnn_tensor_sizes(int w, int depth) {
  std::vector<int> s = {w * 3 * 7 * 7, w, w};
  for (int i = 0; i < depth; ++i) s.insert(s.end(), {w * w * 3 * 3, w, w});
  s.insert(s.end(), {10 * w, 10});
  return s;
}

// The CPU reference: the same update in double.
void adam_reference(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
                    const AdamParams& a) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double mi = a.beta1 * static_cast<double>(m[i]) + (1.0 - a.beta1) * g[i];
    const double vi = a.beta2 * static_cast<double>(v[i]) + (1.0 - a.beta2) * static_cast<double>(g[i]) * g[i];
    const double pi = p[i] - a.lr * (mi / a.bc1) / (std::sqrt(vi / a.bc2) + a.eps) - a.lr * a.weight_decay * p[i];
    p[i] = static_cast<float>(pi), m[i] = static_cast<float>(mi), v[i] = static_cast<float>(vi);
  }
}

int main(int argc, char** argv) {
  // size: elements per chunk (v4, v5), the CNN's width, its depth
  lab::Lab L("adam", argc, argv, {65536, 256, 16}, {1024, 16, 3});
  const int chunk = static_cast<int>(L.size(0)) / 4 * 4;
  const std::vector<int> sizes = cnn_tensor_sizes(static_cast<int>(L.size(1)), static_cast<int>(L.size(2)));
  const int T = static_cast<int>(sizes.size());
  const int step = 7;
  AdamParams a{1e-3f, 0.9f, 0.999f, 1e-8f, 1e-2f, 0, 0};
  a.bc1 = 1.0f - std::pow(a.beta1, static_cast<float>(step));
  a.bc2 = 1.0f - std::pow(a.beta2, static_cast<float>(step));

  // Per tensor: its own allocations (as a framework's parameters have), initial values, expected values.
  struct Tensor {
    int n;
    float *p, *g, *m, *v;  // device
    std::vector<float> p0, g0, m0, v0, p1, m1, v1;
  };
  std::vector<Tensor> ts(T);
  long total = 0;
  unsigned seed = 12345;
  auto uniform = [&] {  // in [-1, 1)
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / 8388608.0f - 1.0f;
  };
  for (int k = 0; k < T; ++k) {
    Tensor& t = ts[k];
    t.n = sizes[k];
    total += t.n;
    for (float** d : {&t.p, &t.g, &t.m, &t.v}) LAB_CHECK(cudaMalloc(d, t.n * sizeof(float)));
    for (int i = 0; i < t.n; ++i) {
      t.p0.push_back(uniform());
      t.g0.push_back(uniform());
      t.m0.push_back(0.1f * uniform());
      t.v0.push_back(0.01f * (uniform() + 1.0f));
    }
    t.p1 = t.p0, t.m1 = t.m0, t.v1 = t.v0;
    adam_reference(t.p1, t.g0, t.m1, t.v1, a);
    LAB_CHECK(cudaMemcpy(t.g, t.g0.data(), t.n * sizeof(float), cudaMemcpyHostToDevice));
  }
  auto reset = [&] {
    for (Tensor& t : ts) {
      LAB_CHECK(cudaMemcpy(t.p, t.p0.data(), t.n * sizeof(float), cudaMemcpyHostToDevice));
      LAB_CHECK(cudaMemcpy(t.m, t.m0.data(), t.n * sizeof(float), cudaMemcpyHostToDevice));
      LAB_CHECK(cudaMemcpy(t.v, t.v0.data(), t.n * sizeof(float), cudaMemcpyHostToDevice));
    }
  };
  // Float kernels against the double reference: p, m and v are at most ~1 in magnitude, a float's
  // rounding there is 6e-8, and each is a handful of float operations: 1e-6 leaves room for
  // fused multiply-adds on the GPU and none here, and is far below the smallest update (lr * |..|).
  auto check = [&] {
    double err = 0;
    std::vector<float> back;
    for (Tensor& t : ts) {
      back.resize(t.n);
      for (auto [dev, want] : {std::pair{t.p, &t.p1}, std::pair{t.m, &t.m1}, std::pair{t.v, &t.v1}}) {
        LAB_CHECK(cudaMemcpy(back.data(), dev, t.n * sizeof(float), cudaMemcpyDeviceToHost));
        err = std::max(err, lab::Lab::max_abs_diff(back.data(), want->data(), t.n));
      }
    }
    reset();
    return err;
  };
  // The timed runs of a version step p, m and v again and again: each version starts from them.
  L.restore_inputs_with(reset);

  // The chunk tables for v4/v5: one TensorList per launch, filled until its tensors or blocks run
  // out; a tensor whose chunks do not all fit continues in the next launch's list.
  struct MultiLaunch {
    TensorList list;
    int blocks;
  };
  std::vector<MultiLaunch> launches;
  MultiLaunch cur{};
  int in_list = 0;  // tensors in cur
  auto add_tensor = [&](const Tensor& t) {
    cur.list.p[in_list] = t.p, cur.list.g[in_list] = t.g, cur.list.m[in_list] = t.m, cur.list.v[in_list] = t.v;
    cur.list.n[in_list] = t.n;
    return in_list++;
  };
  auto flush = [&] {
    cur.list.chunk = chunk;
    launches.push_back(cur);
    cur = MultiLaunch{};
    in_list = 0;
  };
  for (const Tensor& t : ts) {
    if (in_list == kMaxTensors) flush();
    int slot = add_tensor(t);
    for (int c = 0; c * chunk < t.n; ++c) {
      if (cur.blocks == kMaxBlocks) flush(), slot = add_tensor(t);
      cur.list.block_tensor[cur.blocks] = static_cast<unsigned char>(slot);
      cur.list.block_chunk[cur.blocks] = c;
      ++cur.blocks;
    }
  }
  if (cur.blocks > 0) flush();

  const int threads = 256;
  const double flops = 14.0 * static_cast<double>(total);
  auto blocks_for = [&](int n) { return (n + threads - 1) / threads; };
  L.version(1, "3 kernels per tensor", "m, v, p in separate passes", flops, [&] {
    for (Tensor& t : ts) {
      adam_m<<<blocks_for(t.n), threads>>>(t.g, t.m, t.n, a);
      adam_v<<<blocks_for(t.n), threads>>>(t.g, t.v, t.n, a);
      adam_p<<<blocks_for(t.n), threads>>>(t.p, t.m, t.v, t.n, a);
    }
  }, check, 1e-6);
  L.version(2, "fused, per tensor", "one pass", flops, [&] {
    for (Tensor& t : ts) adam_fused<<<blocks_for(t.n), threads>>>(t.p, t.g, t.m, t.v, t.n, a);
  }, check, 1e-6);
  L.version(3, "fused float4", "16 bytes per lane", flops, [&] {
    for (Tensor& t : ts) adam_fused_float4<<<blocks_for((t.n + 3) / 4), threads>>>(t.p, t.g, t.m, t.v, t.n, a);
  }, check, 1e-6);
  L.version(4, "multi-tensor", "one launch, chunk table", flops, [&] {
    for (const MultiLaunch& l : launches) adam_multi_tensor<<<l.blocks, threads>>>(l.list, a);
  }, check, 1e-6);
  L.version(5, "multi-tensor float4", "one launch, 16 B per lane", flops, [&] {
    for (const MultiLaunch& l : launches) adam_multi_tensor_float4<<<l.blocks, threads>>>(l.list, a);
  }, check, 1e-6);
  L.broken_version(9, "exercise: chunk end", "find the bug", flops, [&] {
    for (const MultiLaunch& l : launches) adam_multi_tensor_exercise<<<l.blocks, threads>>>(l.list, a);
  }, check, 1e-6);
  for (Tensor& t : ts)
    for (float* d : {t.p, t.g, t.m, t.v}) cudaFree(d);
  return L.finish();
}
