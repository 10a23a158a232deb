#pragma once
// Note [One launch per optimizer step]
// Eagerly on a CUDA device, Adam and SGD do not launch one update kernel per parameter (ResNet-18:
// 62 launches per step, each a few microseconds of GPU time whatever its size). The walk over the
// parameters (Optimizer::for_each_update) collects one record per parameter that is updated in
// place (dense in its update format, Note [Updates in the parameter's layout]) into a batch per
// (device, dtype, hyperparameters), and after the walk each batch is one multi-tensor launch
// (kernels/cuda/optim.h: adam_step_multi, sgd_step_multi; PyTorch's foreach/multi_tensor_apply).
// The multi-tensor kernels compute every element exactly as the per-tensor ones do, so the
// weights are the same bit for bit. Parameters whose hyperparameters differ (another group's lr, a
// parameter that missed steps and so has its own Adam step count) land in batches of their own;
// parameters on the CPU, views updated through a copy, and captured steps (CUDA graphs) keep
// their per-tensor path.

#include <functional>
#include <vector>

#include "../core/device.h"
#include "../core/dtype.h"
#include "../core/tensor.h"

namespace ember::optim::detail {

template <typename Record, typename Hyper>
class MultiTensorBatches {
 public:
  // `same(a, b)`: whether two parameters' hyperparameters give the same update coefficients.
  explicit MultiTensorBatches(std::function<bool(const Hyper&, const Hyper&)> same) : same_(std::move(same)) {}

  // Queues `record` (with `keep`: tensors the record points into that must live until the launch).
  void add(Device device, DType dtype, const Hyper& h, const Record& record, std::vector<Tensor> keep) {
    Batch* b = nullptr;
    for (Batch& c : batches_)
      if (c.device == device && c.dtype == dtype && same_(c.hyper, h)) b = &c;
    if (b == nullptr) b = &batches_.emplace_back(Batch{device, dtype, h, {}, {}});
    b->records.push_back(record);
    for (Tensor& t : keep) b->keep.push_back(std::move(t));
  }
  // Calls launch(device, dtype, hyper, records) once per batch, in the order they were opened.
  template <typename Launch>
  void launch_all(const Launch& launch) const {
    for (const Batch& b : batches_) launch(b.device, b.dtype, b.hyper, b.records);
  }

 private:
  struct Batch {
    Device device;
    DType dtype;
    Hyper hyper;
    std::vector<Record> records;
    std::vector<Tensor> keep;
  };
  std::function<bool(const Hyper&, const Hyper&)> same_;
  std::vector<Batch> batches_;
};

}  // namespace ember::optim::detail
