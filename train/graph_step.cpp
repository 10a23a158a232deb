// GraphedStep: --cuda-graphs (Note [Training with CUDA graphs] in graph_step.h).

#include "graph_step.h"

#include "../core/error.h"
#if EMBER_CUDA_BACKEND
#include "../core/cuda/graph.h"
#endif

namespace ember::train {

GraphedStep::GraphedStep(Device device, int64_t classes, const TrainStep& step)
    : device_(device), classes_(classes), step_(step) {
  EMBER_CHECK(device.is_cuda(), "--cuda-graphs needs a CUDA device (--device cuda), got --device ", device.str());
}

GraphedStep::~GraphedStep() = default;

bool GraphedStep::replays(const Tensor& host_images, const Tensor& host_labels) const {
  return warmed_up_ && host_images.shape() == image_shape_ && host_labels.shape() == label_shape_ &&
         host_images.dtype() == image_dtype_ && host_labels.dtype() == label_dtype_;
}

void GraphedStep::eager_step_done(const Tensor& host_images, const Tensor& host_labels) {
  if (warmed_up_) return;
  image_shape_ = host_images.shape();
  label_shape_ = host_labels.shape();
  image_dtype_ = host_images.dtype();
  label_dtype_ = host_labels.dtype();
  warmed_up_ = true;
}

TrainStep::Outputs GraphedStep::run(const Tensor& host_images, const Tensor& host_labels) {
#if EMBER_CUDA_BACKEND
  EMBER_CHECK(replays(host_images, host_labels), "GraphedStep::run: a batch of shape ", host_images.shape(),
              " does not fit the captured step");
  check_class_indices(host_labels, classes_);
  if (!graph_) {
    images_ = empty(image_shape_, {.dtype = image_dtype_, .device = device_});
    labels_ = empty(label_shape_, {.dtype = label_dtype_, .device = device_});
  }
  images_.copy_(host_images);
  labels_.copy_(host_labels);
  if (!graph_) {
    auto graph = std::make_shared<cuda::Graph>(device_.index);
    graph->capture([&] { outputs_ = step_.run(images_, labels_, StepMode::captured); });
    graph_ = std::move(graph);
  }
  graph_->replay();
  return outputs_;
#else
  (void)host_images, (void)host_labels;
  EMBER_THROW("--cuda-graphs needs a build with a CUDA backend");
#endif
}

size_t GraphedStep::node_count() const {
#if EMBER_CUDA_BACKEND
  return graph_ ? graph_->node_count() : 0;
#else
  return 0;
#endif
}

}  // namespace ember::train
