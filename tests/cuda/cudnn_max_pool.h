#pragma once
// Max pooling through cuDNN for one scope (Note [cuDNN or the hand-written kernels] in
// kernels/cuda/cudnn.h: the layers pool max with the hand-written kernels unless asked): sets
// kernels::gpu::cudnn::set_max_pool(on) and restores the previous setting when the scope ends.

#include "../../kernels/cuda/cudnn.h"

namespace ember::testing {

class CudnnMaxPool {
 public:
  explicit CudnnMaxPool(bool on) : was_(kernels::gpu::cudnn::max_pool()) { kernels::gpu::cudnn::set_max_pool(on); }
  ~CudnnMaxPool() { kernels::gpu::cudnn::set_max_pool(was_); }
  CudnnMaxPool(const CudnnMaxPool&) = delete;
  CudnnMaxPool& operator=(const CudnnMaxPool&) = delete;

 private:
  bool was_;
};

}  // namespace ember::testing
