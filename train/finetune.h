#pragma once
// Starting from PyTorch weights: torchvision state_dicts saved with safetensors, loaded for
// fine-tuning (`ember train --init-weights F --finetune`) or as they are (`ember predict
// --weights F --model NAME`).
//
// Note [Fine-tuning]
// `--finetune` loads every tensor of the --init-weights file except the classifier's
// (models::classifier_name: "fc" for the ResNets), which keeps the fresh initialization the model
// was built with, sized for the dataset's classes. The rest must match the model exactly: a name
// the model has and the file lacks, a name the file has and the model lacks, or a shape that
// differs is an error naming the tensors (a resnet50 file, a file of another model, a file made
// for grayscale input). num_batches_tracked may be present or absent, as torchvision files have
// it or not: PyTorch uses it only when momentum is None, which ember's BatchNorm never is, so its
// value changes nothing; when present it is loaded. BatchNorm keeps torchvision's semantics
// (eps 1e-5, momentum 0.1, running_var updated with the unbiased batch variance), so the
// running statistics go on from the pretrained ones as they would in PyTorch.
//
// Two ways to treat the backbone (everything but the classifier):
//   --backbone-lr-scale S  the backbone trains with lr * S (its own optimizer param group; every
//                          schedule scales both groups alike), the classifier with lr.
//   --freeze-backbone      the backbone does not train at all: its parameters require no gradient
//                          and are not given to the optimizer, and its BatchNorm layers run in
//                          eval mode during training, normalizing with the pretrained running
//                          statistics and leaving them unchanged. This is what "frozen" means to
//                          most people (a feature extractor; detectron2's FrozenBatchNorm2d) and
//                          differs from PyTorch's plain requires_grad_(False), which in train mode
//                          still updates the running statistics. Every backbone tensor, buffers
//                          included, ends the run bit-identical to the file's.

#include <string>
#include <vector>

#include "../core/tensor.h"
#include "../layers/module.h"

namespace ember::train {

// Loads a PyTorch state_dict (a safetensors file) into `model`, a zoo model called `model_name`.
// skip_classifier (--finetune): the classifier's tensors in the file are ignored, whatever their
// shape. Errors name the file and the tensors (Note [Fine-tuning]). Returns the number of tensors
// loaded.
int64_t load_pytorch_weights(nn::Module& model, const std::string& model_name, const std::string& path,
                             bool skip_classifier);

// The parameters of the backbone (every module but the classifier) and of the classifier, in
// registration order.
struct ParameterSplit {
  std::vector<Tensor> backbone, classifier;
};
ParameterSplit split_parameters(const nn::Module& model, const std::string& model_name);

// --freeze-backbone: the backbone's parameters stop requiring gradients.
void freeze_backbone(const nn::Module& model, const std::string& model_name);
// Training mode for the classifier, eval mode for every module of the frozen backbone (its
// BatchNorm layers use and keep their running statistics). Called at the start of every epoch,
// after evaluation has set the whole model's mode.
void train_with_frozen_backbone(nn::Module& model, const std::string& model_name);

}  // namespace ember::train
