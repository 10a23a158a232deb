#pragma once
// A trained model put to use: loaded from a checkpoint or weights file (ember's or PyTorch's),
// evaluated on a test set, asked for predictions (train/inference.cpp, train/evaluate.cpp).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../data/loader.h"
#include "../layers/module.h"
#include "data_setup.h"

namespace ember::parallel {
class Communicator;
}

namespace ember::train {

// A model with what is needed to use it: built from a checkpoint's metadata.
struct LoadedModel {
  std::shared_ptr<nn::Module> model;
  std::string model_name;
  int64_t in_channels = 1, image_size = 28;
  int64_t resize = 0;  // eval Resize(resize) before CenterCrop(image_size) (ImageFolder models); 0: none
  std::vector<std::string> classes;
  std::vector<double> mean, std;
  std::optional<HeldOutSplit> split;  // the run held out part of its ImageFolder tree (--val-split)
};
// CHECKPOINT: a weights .safetensors file written by ember (its ember.checksum verified), or a
// checkpoint directory (the whole set verified by open_checkpoint; its best weights if it has
// them, else the last).
LoadedModel load_model(const std::string& checkpoint);
// A PyTorch state_dict saved with safetensors (no ember metadata), as the zoo model `model_name`:
// the input channels and the number of classes from the tensors' shapes (classes named "0",
// "1", ...), ImageNet's normalization, and torchvision's ImageNet eval transform scaled to
// image_size: Resize(round(image_size * 256 / 224)) + CenterCrop(image_size). Missing
// num_batches_tracked buffers are allowed; anything else that does not match is an error naming
// the tensors (Note [Fine-tuning] in train/finetune.h).
LoadedModel load_pytorch_model(const std::string& path, const std::string& model_name, int64_t image_size = 224);

// One misclassified test image (EvalResult::mistakes).
struct Mistake {
  int64_t index = -1;  // in the test split; -1 when unreadable files were left out of its batch
  int64_t truth = 0, predicted = 0;
  double confidence = 0;  // the softmax probability of `predicted`
  std::string png;        // a thumbnail of the image as the model saw it (train/run_report.h)
};

struct EvalResult {
  double accuracy = 0, loss = 0;
  int64_t count = 0;
  std::vector<double> per_class_accuracy;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::vector<Mistake> mistakes;                // the most confident first; only when asked for
  // evaluate(): > 0 when `data` was the tree the model's run split (m.split): the images evaluated
  // are the held_out ones of a tree of this many.
  int64_t held_out_of = 0;
  bool interrupted = false;  // evaluate_loader: SIGINT/SIGTERM/SIGHUP stopped it; the numbers are partial
};
// Evaluates a loaded model on the test split of `data` (fashion-mnist | mnist | IDX directory), or
// on an ImageFolder tree: the whole tree, or, when it is the tree the model's run split with
// --val-split (the same sample list: m.split), its held-out images only; a tree at the path the
// run split whose sample list has changed since is refused (Note [Held-out split]).
EvalResult evaluate(const LoadedModel& m, const std::string& data, const std::string& data_dir, int64_t batch_size = 256);

struct Prediction {
  std::vector<std::pair<std::string, double>> top;  // (class name, probability), best first
  std::vector<float> logits;                        // the model's output, one per class
};
// Top-k predictions: each input is an image file (PNG, JPEG, ... : decoded, then the checkpoint's
// eval transform: Resize(resize) + CenterCrop(image_size), or Resize + CenterCrop to image_size
// for a model without a recorded resize) or "FILE.idx[.gz]:INDEX" (an image inside an IDX file).
std::vector<Prediction> predict(const LoadedModel& m, const std::vector<std::string>& inputs, int k = 5);

// Which misclassified images an evaluation keeps (EvalResult::mistakes): the `keep` most
// confident, with thumbnails un-normalized with `mean` and `std`.
struct MistakeOptions {
  int64_t keep = 0;
  std::vector<double> mean, std;
};

// With a communicator of world size W, rank r evaluates batches r, r + W, ... and the results
// are summed over the ranks (every rank returns the whole test set's numbers, except `mistakes`:
// each rank keeps those of its own batches). A first SIGINT / SIGTERM / SIGHUP while
// InterruptHandlers are installed (train/interrupt.h) stops it at the next batch, with
// `interrupted` set (on every rank) and partial numbers.
EvalResult evaluate_loader(nn::Module& model, data::DataLoader& loader, int64_t num_classes,
                           parallel::Communicator* comm = nullptr, const MistakeOptions& mistakes = {});

}  // namespace ember::train
