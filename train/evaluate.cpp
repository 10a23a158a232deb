// evaluate_loader: a model's accuracy, loss, confusion matrix and most confident mistakes on a
// loader's batches (declared in train/inference.h), for `ember train`'s evaluations.

#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "../core/autograd.h"
#include "../io/fault.h"
#include "../layers/nn_functional.h"
#include "../layers/reduce.h"
#include "../parallel/communicator.h"
#include "inference.h"
#include "checkpoint.h"
#include "interrupt.h"
#include "run_report.h"

namespace ember::train {

namespace {

// Adds a batch's misclassified images to `kept` (the most confident first, at most options.keep)
// with their images in `images`. logits: (B, classes) on any device; indices: the batch's dataset
// indices (used when no image of the batch was left out).
void keep_mistakes(std::vector<Mistake>& kept, std::vector<Tensor>& images, const MistakeOptions& options,
                   const Tensor& logits, const data::Batch& batch, const std::vector<int64_t>& pred,
                   const std::vector<int64_t>& truth, const std::vector<int64_t>& indices) {
  const std::vector<double> z = logits.detach().to(Device::cpu()).to(DType::f64).contiguous().to_vector<double>();
  const size_t classes = pred.empty() ? 0 : z.size() / pred.size();
  for (size_t i = 0; i < pred.size(); ++i) {
    if (pred[i] == truth[i]) continue;
    // softmax(z)[pred] with pred the argmax: 1 / sum_j exp(z_j - z_pred).
    double sum = 0;
    for (size_t j = 0; j < classes; ++j) sum += std::exp(z[i * classes + j] - z[i * classes + static_cast<size_t>(pred[i])]);
    const double confidence = 1 / sum;
    if (static_cast<int64_t>(kept.size()) == options.keep && confidence <= kept.back().confidence) continue;
    size_t at = 0;
    while (at < kept.size() && kept[at].confidence >= confidence) ++at;
    kept.insert(kept.begin() + static_cast<std::ptrdiff_t>(at),
                Mistake{.index = indices.size() == pred.size() ? indices[i] : -1, .truth = truth[i],
                        .predicted = pred[i], .confidence = confidence, .png = {}});
    images.insert(images.begin() + static_cast<std::ptrdiff_t>(at),
                  batch.images.select(0, static_cast<int64_t>(i)).to(Device::cpu()).to(DType::f32).clone());
    if (static_cast<int64_t>(kept.size()) > options.keep) {
      kept.pop_back();
      images.pop_back();
    }
  }
}

}  // namespace

EvalResult evaluate_loader(nn::Module& model, data::DataLoader& loader, int64_t num_classes,
                           parallel::Communicator* comm, const MistakeOptions& mistakes) {
  NoGradGuard no_grad;
  // The model's device (the first parameter's; the CPU for a model without parameters).
  const std::vector<Tensor> params = model.parameters();
  const Device device = params.empty() ? Device::cpu() : params.front().device();
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  r.confusion.assign(num_classes, std::vector<int64_t>(num_classes, 0));
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t epoch = loader.position().epoch;
  const int64_t first = comm ? comm->rank() : 0, stride = comm ? comm->world_size() : 1;
  std::vector<Tensor> kept_images;  // beside r.mistakes: the images, made thumbnails at the end
  for (int64_t b = first; b < loader.size(); b += stride) {
    // SIGINT / SIGTERM / SIGHUP (Note [Clean interrupts]): the evaluation stops at the next batch.
    if (interrupt_requested()) {
      r.interrupted = true;
      break;
    }
    // EMBER_FAULT=slow-eval-ms:N (Note [Fault injection] in io/fault.h): time for a test's signal.
    if (const int64_t ms = io::fault_value("slow-eval-ms"); ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    data::Batch batch = loader.load_batch(epoch, b);
    if (batch.labels.numel() == 0) continue;  // every file unreadable and skipped (BadImages::skip)
    Tensor logits = model.forward(batch.images.to(device));
    loss_sum += cross_entropy(logits, batch.labels.to(device), {.reduction = Reduction::Sum}).item();
    const std::vector<int64_t> pred = argmax(logits, 1).to_vector<int64_t>();
    const std::vector<int64_t> truth = batch.labels.to_vector<int64_t>();
    for (size_t i = 0; i < pred.size(); ++i) {
      correct += pred[i] == truth[i];
      r.confusion[truth[i]][pred[i]] += 1;
    }
    r.count += static_cast<int64_t>(pred.size());
    if (mistakes.keep > 0) keep_mistakes(r.mistakes, kept_images, mistakes, logits, batch, pred, truth,
                                         loader.batch_indices(epoch, b));
  }
  model.train(was_training);
  for (size_t i = 0; i < r.mistakes.size(); ++i)
    r.mistakes[i].png = thumbnail_png(kept_images[i], mistakes.mean, mistakes.std);
  if (comm != nullptr && comm->world_size() > 1) {
    // The interrupt flag too: every rank learns that one of them stopped, and all stop together.
    std::vector<int64_t> counts{correct, r.count, r.interrupted ? 1 : 0};
    for (const auto& row : r.confusion) counts.insert(counts.end(), row.begin(), row.end());
    Tensor t = from_vector<int64_t>(counts);
    comm->all_reduce(t);
    counts = t.to_vector<int64_t>();
    correct = counts[0];
    r.count = counts[1];
    r.interrupted = counts[2] > 0;
    for (int64_t c = 0; c < num_classes; ++c)
      for (int64_t p = 0; p < num_classes; ++p) r.confusion[c][p] = counts[3 + c * num_classes + p];
    Tensor l = scalar_tensor(loss_sum, {.dtype = DType::f64});
    comm->all_reduce(l);
    loss_sum = l.item();
  }
  r.accuracy = r.count ? static_cast<double>(correct) / static_cast<double>(r.count) : NAN;
  r.loss = r.count ? loss_sum / static_cast<double>(r.count) : NAN;
  for (int64_t c = 0; c < num_classes; ++c) {
    int64_t total = 0;
    for (int64_t p = 0; p < num_classes; ++p) total += r.confusion[c][p];
    r.per_class_accuracy.push_back(total ? static_cast<double>(r.confusion[c][c]) / static_cast<double>(total) : NAN);
  }
  return r;
}

}  // namespace ember::train
