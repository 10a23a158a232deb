// The CUDA benchmark of scripts/gpu-check.sh: one JSON line per measurement, medians of 5
// (bench/cuda/torch_gpu.py prints the same lines for PyTorch on the same device).
//   bandwidth      elementwise (ReLU: the op, which uses cuDNN's activation where cuDNN is on, and
//                  the hand-written kernel) and reduction (sum) GB/s next to a device-to-device copy;
//   sgemm          the hand-written tiled kernel next to cuBLAS (f32, TF32 off), GFLOP/s;
//   gemm_bf16      bf16 inputs and output, f32 accumulation: cuBLAS (tensor cores) and the tiled
//                  kernel, TFLOP/s on random data, 8192^3 (the goal: cuBLAS >= 80% of
//                  PyTorch's bf16 torch.mm on the same GPU);
//   conv3x3        a 3x3 convolution forward + backward (cuDNN when present, else im2col + GEMM);
//   stem_layers    ResNet-18's batch norm and 3x3/2 max pooling on a (256, 64, 112, 112) bf16
//                  activation, forward + backward, NCHW and channels-last (max pooling through
//                  cuDNN and through the hand-written kernels, in both layouts);
//   train_cnn      training steps of the `cnn` model on Fashion-MNIST, batch 64, Adam (images/s,
//                  loader included: what `ember train` does), five ways: f32 with the host loader;
//                  f32 with --data-on-device; f32 with --data-on-device --cuda-graphs; --amp bf16
//                  with --data-on-device, without and with --cuda-graphs ("precision" and "mode" in
//                  each line);
//   resnet18_step  one ResNet-18 training step (forward, backward, Adam) on random images,
//                  224x224, batch 256: f32, under AutocastGuard bf16, and bf16 with the model
//                  and images channels-last (PyTorch's AMP run is channels-last), that last one
//                  again in cuDNN's benchmark mode and again captured as a CUDA graph: the median
//                  step time;
//   recipe_to_93   the default recipe (`ember train --data-on-device --cuda-graphs`) epoch by epoch:
//                  the training seconds until the test accuracy first reaches 93%, and the accuracy
//                  at the end.
// Sizes: full on a GPU; --tiny (forced on the SIMT emulator, which is for correctness, not speed)
// runs every measurement at toy sizes so that `scripts/gpu-check.sh --dry-run` exercises the same
// code in CI, and every line says "emulated" and "tiny".
//   ./build/bench/bench_cuda [--tiny] [--only bandwidth,sgemm,...]

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <ember/core/profiler.h>
#include <ember/ember.h>
#include <ember/kernels/cuda/cudnn.h>
#include <ember/kernels/cuda/elementwise.h>
#include <ember/kernels/cuda/gemm.h>
#include <ember/core/cuda/graph.h>
#include <ember/core/cuda/runtime.h>
#include <ember/models/zoo.h>
#include <ember/train/config.h>
#include <ember/train/trainer.h>

#include "../bench_util.h"

using namespace ember;
using bench::median;
using bench::time_s;

namespace {

bool g_emulated = false;
bool g_tiny = false;

template <typename F>
double timed(int reps, const F& f) {
  f();  // warm-up (first-use allocations, cuDNN algorithm choice, cuBLAS handle)
  cuda::synchronize();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r)
    t.push_back(time_s([&] {
      f();
      cuda::synchronize();
    }));
  return median(t);
}

void line(const std::string& body) {
  std::printf("{%s,\"side\":\"ember\",\"tiny\":%s,\"emulated\":%s,\"device\":%s}\n", body.c_str(),
              g_tiny ? "true" : "false", g_emulated ? "true" : "false",
              bench::json_str(cuda::properties(0).name).c_str());
  std::fflush(stdout);
}

void bandwidth(int64_t n) {
  const Device dev = Device::cuda(0);
  NoGradGuard g;
  Tensor x = randn({n}, {.device = dev});
  Tensor y = empty({n}, {.device = dev});
  const double bytes2 = 2.0 * static_cast<double>(n) * 4;  // read + write
  const double t_copy = timed(5, [&] {
    cuda::copy_bytes(y.data(), dev, x.data(), dev, static_cast<size_t>(n) * 4);
  });
  const double t_relu = timed(5, [&] { y = relu(x); });  // cuDNN's activation where cuDNN is used
  // The hand-written elementwise kernel (16-byte packs, grid-stride) on the same data.
  kernels::IterShape shape;
  shape.ndim = 1;
  shape.sizes[0] = n;
  kernels::Operand in_op, out_op;
  in_op.data = x.data(), out_op.data = y.data();
  in_op.strides[0] = out_op.strides[0] = 1;
  const double t_relu_kernel = timed(5, [&] {
    kernels::gpu::unary(kernels::UnaryOp::Relu, DType::f32, shape, out_op, in_op, 0.0);
  });
  const double t_sum = timed(5, [&] { (void)sum(x); });
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"bandwidth\",\"elements\":%lld,\"d2d_copy_gbs\":%.1f,\"relu_gbs\":%.1f,"
                "\"relu_kernel_gbs\":%.1f,\"sum_gbs\":%.1f",
                static_cast<long long>(n), bytes2 / t_copy / 1e9, bytes2 / t_relu / 1e9, bytes2 / t_relu_kernel / 1e9,
                static_cast<double>(n) * 4 / t_sum / 1e9);
  line(buf);
}

void sgemm(int64_t s) {
  const Device dev = Device::cuda(0);
  NoGradGuard g;
  Tensor a = randn({s, s}, {.device = dev}), b = randn({s, s}, {.device = dev}), c = empty({s, s}, {.device = dev});
  using kernels::Transpose;
  const auto* pa = static_cast<const float*>(a.data());
  const auto* pb = static_cast<const float*>(b.data());
  auto* pc = static_cast<float*>(c.data());
  const double t_lib = timed(5, [&] {
    kernels::gpu::gemm(Transpose::No, Transpose::No, s, s, s, 1.0f, pa, s, pb, s, 0.0f, pc, s);
  });
  const double t_tiled = timed(5, [&] {
    kernels::gpu::gemm_tiled(Transpose::No, Transpose::No, s, s, s, 1.0f, pa, s, pb, s, 0.0f, pc, s);
  });
  const double flop = 2.0 * static_cast<double>(s) * s * s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"sgemm\",\"size\":%lld,\"tf32\":%s,\"library_gflops\":%.1f,\"tiled_gflops\":%.1f",
                static_cast<long long>(s), kernels::gpu::allow_tf32() ? "true" : "false", flop / t_lib / 1e9,
                flop / t_tiled / 1e9);
  line(buf);
}

void gemm_bf16(int64_t s) {
  const Device dev = Device::cuda(0);
  NoGradGuard g;
  Tensor a = randn({s, s}, {.device = dev}).to(DType::bf16), b = randn({s, s}, {.device = dev}).to(DType::bf16);
  Tensor c = empty({s, s}, {.dtype = DType::bf16, .device = dev});
  using kernels::Transpose;
  const auto* pa = static_cast<const BFloat16*>(a.data());
  const auto* pb = static_cast<const BFloat16*>(b.data());
  auto* pc = static_cast<BFloat16*>(c.data());
  // A product of 8192^3 takes about 1.4 ms on an H200: ten of them per timed sample.
  const int inner = g_tiny ? 1 : 10;
  const double t_lib = timed(5, [&] {
    for (int i = 0; i < inner; ++i)
      kernels::gpu::gemm(Transpose::No, Transpose::No, s, s, s, 1.0f, pa, s, pb, s, 0.0f, pc, s);
  }) / inner;
  const double t_tiled = timed(3, [&] {
    kernels::gpu::gemm_tiled(Transpose::No, Transpose::No, s, s, s, 1.0f, pa, s, pb, s, 0.0f, pc, s);
  });
  const double flop = 2.0 * static_cast<double>(s) * s * s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "\"bench\":\"gemm_bf16\",\"size\":%lld,\"library_tflops\":%.1f,\"tiled_tflops\":%.2f",
                static_cast<long long>(s), flop / t_lib / 1e12, flop / t_tiled / 1e12);
  line(buf);
}

// The output gradient is given (y.backward(gy)), so the time is the convolution's three passes;
// forward alone, and all three again in cuDNN's benchmark mode (cudnnFind ranks the algorithms by
// running them, as torch.backends.cudnn.benchmark), tell which pass and which ranking costs.
void conv(int64_t n, int64_t c, int64_t hw) {
  const Device dev = Device::cuda(0);
  Tensor x = randn({n, c, hw, hw}, {.device = dev, .requires_grad = true});
  Tensor w = randn({c, c, 3, 3}, {.device = dev, .requires_grad = true});
  Tensor gy = randn({n, c, hw, hw}, {.device = dev});
  const auto fwd_bwd = [&] { conv2d(x, w, Tensor(), {.padding = {1, 1}}).backward(gy); };
  const double t = timed(5, fwd_bwd);
  const double t_fwd = timed(5, [&] {
    NoGradGuard g;
    (void)conv2d(x, w, Tensor(), {.padding = {1, 1}});
  });
  namespace cudnn = kernels::gpu::cudnn;
  const bool was = cudnn::benchmark();
  cudnn::set_benchmark(true);
  const double t_bench = timed(5, fwd_bwd);
  cudnn::set_benchmark(was);
  const double flop = 3 * 2.0 * n * c * c * 9 * hw * hw;  // forward + two backward passes
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"conv3x3_fwd_bwd\",\"shape\":[%lld,%lld,%lld,%lld],\"cudnn\":%s,\"ms\":%.3f,"
                "\"fwd_ms\":%.3f,\"ms_benchmark_mode\":%.3f,\"tflops\":%.2f",
                static_cast<long long>(n), static_cast<long long>(c), static_cast<long long>(hw),
                static_cast<long long>(hw), cudnn::use_for_conv() ? "true" : "false", t * 1e3, t_fwd * 1e3,
                t_bench * 1e3, flop / t / 1e12);
  line(buf);
}

// ResNet-18's stem layers after the first convolution, as a bf16 AMP step runs them: batch norm
// (training, float32 weights and statistics) and the 3x3 stride-2 max pooling, each forward +
// backward with the output gradient given, on an (n, 64, hw, hw) bf16 activation in NCHW and in
// channels-last. max_pool2d two ways in each layout: the hand-written kernels (the default, int32
// indices; Note [Channels-last max pooling]) and cuDNN (cudnn::set_max_pool(true); Note [cuDNN or
// the hand-written kernels]). On an H200 cuDNN's max-pooling backward took 4.8 ms of a 40.6 ms AMP
// step (docs/gpu-validation.md).
void stem_layers(int64_t n, int64_t hw) {
  const Device dev = Device::cuda(0);
  const Tensor x0 = randn({n, 64, hw, hw}, {.device = dev}).to(DType::bf16);
  const Tensor gy_bn0 = randn({n, 64, hw, hw}, {.device = dev}).to(DType::bf16);
  const Pool2dOptions pool{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  const int64_t oh = (hw + 2 - 3) / 2 + 1;
  const Tensor gy_pool0 = randn({n, 64, oh, oh}, {.device = dev}).to(DType::bf16);
  Tensor w = ones({64}, {.device = dev, .requires_grad = true}), b = zeros({64}, {.device = dev, .requires_grad = true});
  Tensor rm = zeros({64}, {.device = dev}), rv = ones({64}, {.device = dev});
  const auto emit = [&](const char* bench, const char* mode, bool channels_last, double t) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "\"bench\":\"%s\",\"precision\":\"bf16\",%s%s%s\"shape\":[%lld,64,%lld,%lld],\"channels_last\":%s,"
                  "\"ms\":%.3f",
                  bench, mode ? "\"mode\":\"" : "", mode ? mode : "", mode ? "\"," : "", static_cast<long long>(n),
                  static_cast<long long>(hw), static_cast<long long>(hw), channels_last ? "true" : "false", t * 1e3);
    line(buf);
  };
  for (const bool cl : {false, true}) {
    const MemoryFormat fmt = cl ? MemoryFormat::channels_last : MemoryFormat::contiguous;
    Tensor x = x0.contiguous(fmt).detach();
    x.requires_grad_(true);
    const Tensor gy_bn = gy_bn0.contiguous(fmt), gy_pool = gy_pool0.contiguous(fmt);
    emit("stem_batchnorm", nullptr, cl,
         timed(5, [&] { batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5).backward(gy_bn); }));
    const bool max_pool_default = kernels::gpu::cudnn::max_pool();
    kernels::gpu::cudnn::set_max_pool(true);
    emit("stem_maxpool", "cudnn", cl, timed(5, [&] { max_pool2d(x, pool).backward(gy_pool); }));
    kernels::gpu::cudnn::set_max_pool(false);
    emit("stem_maxpool", "hand_written", cl, timed(5, [&] { max_pool2d(x, pool).backward(gy_pool); }));
    kernels::gpu::cudnn::set_max_pool(max_pool_default);
  }
}

// The cnn benchmark's recipe (Adam 1e-3, batch 64, no augmentation), `steps` steps on the CUDA
// device. mode: "host_loader", "data_on_device" or "data_on_device+cuda_graphs"; amp: "off" or "bf16".
train::TrainConfig cnn_config(int steps, const std::string& mode, const std::string& amp) {
  train::TrainConfig cfg;
  cfg.model = "cnn";
  cfg.optimizer = "adam";
  cfg.lr = 1e-3;
  cfg.batch_size = 64;
  cfg.epochs = 1;
  cfg.augment = false;
  cfg.quiet = true;
  cfg.device = "cuda";
  cfg.eval_every = 1000;
  cfg.eval_limit = g_tiny ? 64 : 0;
  cfg.max_steps = steps;
  cfg.data_on_device = mode != "host_loader";
  cfg.cuda_graphs = mode == "data_on_device+cuda_graphs";
  cfg.amp = amp;
  return cfg;
}

// A short unmeasured run first, as torch_gpu.py takes one step before its clock starts: the first
// use of a dtype loads its kernels (CUDA's lazy module loading, cuDNN's and cuBLAS's engines for
// bf16), and ranks cuDNN's algorithms, once per process. The summary's images/s counts every step
// of its run, so without it that one-time cost lands in the measured 300 steps.
void train_cnn(int steps, const std::string& mode, const std::string& amp) {
  (void)train::run_training(cnn_config(2, mode, amp));
  const train::TrainSummary s = train::run_training(cnn_config(steps, mode, amp));
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"train_cnn\",\"precision\":\"%s\",\"mode\":\"%s\",\"batch\":64,\"steps\":%d,"
                "\"images_per_sec\":%.1f",
                amp == "off" ? "f32" : ("amp_" + amp).c_str(), mode.c_str(), steps, s.images_per_sec);
  line(buf);
}

// Where a cnn step's time goes, f32 against --amp bf16 (data on the device): a short run of each
// under `ember train --profile`'s profiler, its table on stderr (no JSON line: the profiler's
// events are not part of the measurements above). On an H200 the bf16 run was ten times slower
// than f32 (docs/gpu-validation.md); this shows which op.
void profile_train_cnn(int steps) {
  for (const char* amp : {"off", "bf16"}) {
    train::TrainConfig cfg = cnn_config(steps, "data_on_device", amp);
    cfg.eval_limit = 64;
    cfg.profile = true;
    std::fprintf(stderr, "train_cnn --amp %s, %d steps, data on the device:\n", amp, steps);
    (void)train::run_training(cfg);
  }
}

// One training step of ResNet-18 (ImageNet layout, 1000 classes) on random images: the step time
// without the data loader, as the PyTorch side measures it. amp: the forward pass and the loss
// under AutocastGuard(cuda, bf16), as `ember train --amp bf16` runs them. channels_last: the model's
// 4-D parameters and the images in the channels-last memory format, as `ember train --channels-last`.
// cudnn_benchmark: cuDNN's algorithms ranked by running them (Note [cuDNN algorithm choice]) for
// this run, as torch.backends.cudnn.benchmark; PyTorch's side keeps its default (heuristics).
// cuda_graph: the step after the warm-up captured once (Note [CUDA graphs in ember]) and replayed,
// as `ember train --cuda-graphs` runs it; PyTorch's side is eager.
void resnet18_step(int64_t batch, int64_t size, int steps, bool amp, bool channels_last, bool cudnn_benchmark,
                   bool cuda_graph) {
  namespace cudnn = kernels::gpu::cudnn;
  const bool benchmark_was = cudnn::benchmark();
  cudnn::set_benchmark(cudnn_benchmark || benchmark_was);
  const Device dev = Device::cuda(0);
  manual_seed(1);
  auto model = models::create_model({.name = "resnet18", .in_channels = 3, .image_size = size, .num_classes = 1000});
  model->to(dev);
  if (channels_last) model->to(MemoryFormat::channels_last);
  model->train();
  optim::Adam opt(model->parameters(), {.lr = 1e-3});
  Tensor x = randn({batch, 3, size, size}, {.device = dev});
  if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
  Tensor y = randint(0, 1000, {batch}, {.dtype = DType::i64, .device = dev});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<AutocastGuard> guard;
      if (amp) guard.emplace(DeviceType::CUDA, DType::bf16);
      loss = cross_entropy((*model)(x), y);
    }
    loss.backward();
    opt.step();
  };
  step();  // warm-up: allocations, cuDNN algorithm choice, the optimizer's state
  cuda::synchronize();
  std::optional<cuda::Graph> graph;
  if (cuda_graph) {
    graph.emplace();
    graph->capture(step);
    graph->replay();  // its first launch uploads the graph
    cuda::synchronize();
    std::fprintf(stderr, "resnet18_step %s%s: captured as a CUDA graph of %zu nodes\n", amp ? "amp_bf16" : "f32",
                 channels_last ? " channels_last" : "", graph->node_count());
  }
  std::vector<double> t;
  for (int i = 0; i < steps; ++i)
    t.push_back(time_s([&] {
      if (graph) {
        graph->replay();
      } else {
        step();
      }
      cuda::synchronize();
    }));
  const double ms = median(t) * 1e3;
  if (!graph) {  // where the time goes: more steps under the profiler (CUDA events), on stderr
    const int profiled = g_tiny ? 1 : 2;  // --tiny runs the code, not a measurement
    profiler::Profiler prof;
    for (int i = 0; i < profiled; ++i) step();
    cuda::synchronize();
    prof.stop();
    std::fprintf(stderr, "resnet18_step %s%s%s, %d step%s:\n%s\n", amp ? "amp_bf16" : "f32",
                 channels_last ? " channels_last" : "", cudnn_benchmark ? " cudnn_benchmark" : "", profiled,
                 profiled == 1 ? "" : "s", prof.table(30).c_str());
  }
  cudnn::set_benchmark(benchmark_was);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"resnet18_step\",\"batch\":%lld,\"image_size\":%lld,\"precision\":\"%s\",%s"
                "\"channels_last\":%s,\"steps\":%d,\"ms\":%.2f,\"images_per_sec\":%.1f",
                static_cast<long long>(batch), static_cast<long long>(size), amp ? "amp_bf16" : "f32",
                cuda_graph ? "\"mode\":\"cuda_graphs\"," : cudnn_benchmark ? "\"mode\":\"cudnn_benchmark\"," : "",
                channels_last ? "true" : "false", steps, ms,
                batch / ms * 1e3);
  line(buf);
}

// The default recipe epoch by epoch: training seconds (evaluation excluded) until the test
// accuracy first reaches 93%. null when it never does within the recipe's epochs.
void recipe_to_93() {
  train::TrainConfig cfg;
  cfg.device = "cuda";
  cfg.data_on_device = true;  // as PyTorch's side keeps it
  cfg.cuda_graphs = true;
  cfg.quiet = true;
  if (g_tiny) {
    cfg.epochs = 2;
    cfg.max_steps = 6;
    cfg.batch_size = 16;
    cfg.eval_limit = 64;
  }
  const train::TrainSummary s = train::run_training(cfg);
  double seconds = 0, reached = NAN;
  for (const train::EpochStats& e : s.epochs) {
    seconds += e.seconds;
    if (std::isnan(reached) && e.test_acc >= 0.93) reached = seconds;
  }
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "\"bench\":\"recipe_to_93\",\"ember_flags\":\"--data-on-device --cuda-graphs\",\"epochs\":%d,\"steps\":%lld,\"final_test_acc\":%.4f,"
                "\"train_seconds\":%.2f,\"seconds_to_93\":%s",
                s.epochs_run, static_cast<long long>(s.steps), s.test_acc, seconds,
                std::isnan(reached) ? "null" : std::to_string(reached).c_str());
  line(buf);
}

const std::vector<std::string> kAll = {"bandwidth",  "sgemm",         "gemm_bf16",   "conv3x3",
                                       "stem_layers", "train_cnn", "resnet18_step", "recipe_to_93"};

}  // namespace

int main(int argc, char** argv) {
  std::set<std::string> only(kAll.begin(), kAll.end());
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tiny" || a == "--quick") {
      g_tiny = true;
    } else if (a == "--only" && i + 1 < argc) {
      only.clear();
      std::stringstream names(argv[++i]);
      for (std::string n; std::getline(names, n, ',');) {
        if (std::find(kAll.begin(), kAll.end(), n) == kAll.end()) {
          std::fprintf(stderr, "bench_cuda: unknown measurement '%s'\n", n.c_str());
          return 2;
        }
        only.insert(n);
      }
    } else {
      std::fprintf(stderr, "usage: bench_cuda [--tiny] [--only %s,...]\n", kAll.front().c_str());
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::fprintf(stderr, "bench_cuda: no CUDA device\n");
    return 1;
  }
  g_emulated = cuda_emulated();
  g_tiny = g_tiny || g_emulated;
  try {
    if (only.count("bandwidth")) bandwidth(g_tiny ? (1 << 16) : (int64_t{1} << 26));
    if (only.count("sgemm")) sgemm(g_tiny ? 128 : 4096);
    if (only.count("gemm_bf16")) gemm_bf16(g_tiny ? 128 : 8192);
    if (only.count("conv3x3")) conv(g_tiny ? 2 : 64, g_tiny ? 8 : 64, g_tiny ? 16 : 56);
    if (only.count("stem_layers")) stem_layers(g_tiny ? 2 : 256, g_tiny ? 16 : 112);
    if (only.count("train_cnn")) {
      const int steps = g_tiny ? 5 : 300;
      train_cnn(steps, "host_loader", "off");
      train_cnn(steps, "data_on_device", "off");
      train_cnn(steps, "data_on_device+cuda_graphs", "off");
      train_cnn(steps, "data_on_device", "bf16");
      train_cnn(steps, "data_on_device+cuda_graphs", "bf16");
      profile_train_cnn(g_tiny ? 3 : 50);
    }
    if (only.count("resnet18_step"))
      for (const auto& [amp, channels_last, benchmark, graph] :
           {std::tuple{false, false, false, false}, {true, false, false, false}, {true, true, false, false},
            {true, true, true, false}, {true, true, false, true}})
        resnet18_step(g_tiny ? 2 : 256, g_tiny ? 32 : 224, g_tiny ? 1 : 10, amp, channels_last, benchmark, graph);
    if (only.count("recipe_to_93")) recipe_to_93();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
