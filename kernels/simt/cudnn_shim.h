#pragma once
// What the cuDNN shim (kernels/simt/cudnn_shim.cpp, cudnn_shim_conv.cpp) tells tests about the
// calls it served: how many of each, and which algorithm and workspace the last convolution of
// each pass ran with, so a test can see that a layer really went through cuDNN, which algorithm
// ember chose, and that its workspace grew. The counters only ever grow; tests compare before
// and after.

#include <cstddef>
#include <cstdint>

namespace ember::simt::cudnn_shim {

enum class Pass { Forward = 0, BackwardData = 1, BackwardFilter = 2 };

struct Calls {
  int64_t convolution[3] = {};     // cudnnConvolutionForward / BackwardData / BackwardFilter, by Pass
  int64_t get_algorithm[3] = {};   // cudnnGet*Algorithm_v7
  int64_t find_algorithm[3] = {};  // cudnnFind*AlgorithmEx
  int last_algorithm[3] = {-1, -1, -1};
  size_t last_workspace_bytes[3] = {};
  int64_t backward_bias = 0, add_tensor = 0;
  // The 16-bit calls among them (Note [16-bit convolutions] in kernels/cuda/cudnn.h): convolutions
  // of CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16 data by Pass, and 16-bit bias gradients and adds.
  int64_t convolution_f16[3] = {}, convolution_bf16[3] = {};
  int64_t backward_bias_16bit = 0, add_tensor_16bit = 0;
  int64_t pooling_forward = 0, pooling_backward = 0;
  int64_t activation_forward = 0, activation_backward = 0;
  // The 16-bit pooling and activation calls among them, [0] forward and [1] backward.
  int64_t pooling_f16[2] = {}, pooling_bf16[2] = {};
  int64_t activation_f16[2] = {}, activation_bf16[2] = {};
  // Convolutions (by Pass) and pooling calls ([0] forward, [1] backward) whose tensors are all
  // CUDNN_TENSOR_NHWC (Note [The shim's memory formats] in cudnn_shim_internal.h).
  int64_t convolution_nhwc[3] = {}, pooling_nhwc[2] = {};
};

// A snapshot of the counters (all handles, all threads).
Calls calls();

}  // namespace ember::simt::cudnn_shim
