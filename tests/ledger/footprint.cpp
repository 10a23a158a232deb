// Declared costs checked against what the kernels really touch (Note [Launch ledger] in
// core/cuda/ledger.h): this program is linked with its own copy of kernels/cuda/*.cu compiled with
// the access instrumentation of the kernel labs (tests/ledger/CMakeLists.txt), so the emulator
// sees every load and store of ember's own kernels and measures each launch's footprint — the
// distinct 32-byte sectors of device memory it reads and writes (kernels/simt/counters.h).
//
// Each kernel family runs its ops at three shapes under a ledger (run mode) and the emulator's
// footprint; the ledger's kernel entries and the footprints are both in launch order, one per
// launch, and each declared read and write must agree with the counted one within 10% (plus 256
// bytes: a small per-channel vector occupies whole sectors). Run with EMBER_CUDNN=0 and
// EMBER_GEMM=tiled, so that convolutions, pooling and matrix products run ember's kernels rather
// than the library shims. Prints one line per launch; exits 1 naming every launch that disagrees.
//
//   ledger_footprint            every family
//   ledger_footprint FAMILY...  only those (elementwise, reduce, softmax, loss, index, batchnorm,
//                               pool (and conv), gemm, optim, random, augment)

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <ember/core/cuda/ledger.h>
#include <ember/core/cuda/runtime.h>
#include <ember/ember.h>
#include <ember/kernels/cuda/augment.h>
#include <ember/kernels/cuda/random.h>
#include <ember/kernels/simt/counters.h>

using namespace ember;

namespace {

const Device kGpu = Device::cuda(0);
int g_checked = 0, g_failed = 0, g_flagged = 0;

bool agrees(double declared, double counted) {
  return std::fabs(declared - counted) <= 0.10 * counted + 256;
}

// Runs `work` under a ledger and the footprint counter and compares every kernel launch.
void check(const std::string& family, const std::string& what, const std::function<void()>& work) {
  cuda::synchronize();
  simt::footprint_start();
  std::vector<cuda::LedgerEntry> entries;
  {
    cuda::Ledger ledger;
    work();
    cuda::synchronize();
    entries = ledger.stop();
  }
  const std::vector<simt::Footprint> counted = simt::footprint_stop();
  std::vector<cuda::LedgerEntry> kernels;
  for (const cuda::LedgerEntry& e : entries)
    if (e.kind == cuda::CallKind::kernel) kernels.push_back(e);
  if (kernels.size() != counted.size()) {
    std::printf("FAIL %s %s: the ledger has %zu kernel launches, the emulator ran %zu\n", family.c_str(),
                what.c_str(), kernels.size(), counted.size());
    ++g_failed;
    return;
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    const cuda::LedgerEntry& k = kernels[i];
    const simt::Footprint& f = counted[i];
    const bool ok = agrees(k.cost.read, static_cast<double>(f.read_bytes())) &&
                    agrees(k.cost.written, static_cast<double>(f.written_bytes()));
    ++g_checked;
    if (!ok) ++g_failed;
    // Uncoalesced: more than 1.25x the sectors its requests would need packed (flagged, not failed:
    // a gather or a transpose's one side may be so by design).
    const bool scattered = f.requests > 0 && f.request_sectors * 4 > f.ideal_sectors * 5 && f.request_sectors > 64;
    if (scattered) ++g_flagged;
    std::printf("%s %-11s %-34.34s %-44.44s read %10.0f declared %10llu counted, written %10.0f declared %10llu "
                "counted; %.2f sectors/request (ideal %.2f)%s\n",
                ok ? "ok  " : "FAIL", family.c_str(), what.c_str(), k.kernel.c_str(), k.cost.read,
                static_cast<unsigned long long>(f.read_bytes()), k.cost.written,
                static_cast<unsigned long long>(f.written_bytes()),
                f.requests ? static_cast<double>(f.request_sectors) / f.requests : 0.0,
                f.requests ? static_cast<double>(f.ideal_sectors) / f.requests : 0.0, scattered ? "  FLAG: uncoalesced" : "");
  }
}

Tensor on_gpu(const Tensor& t) { return t.to(kGpu); }
Tensor rnd(const Shape& s, DType dt = DType::f32) { return on_gpu(randn(s).to(dt)); }

// The three shapes of each family: small, odd-sized, and large enough for split reductions.
const int64_t kSizes[] = {4096, 12345, 65536};

void elementwise() {
  for (int64_t n : kSizes) {
    const std::string s = std::to_string(n);
    Tensor a = rnd({n}), b = rnd({n});
    check("elementwise", "add f32 " + s, [&] { (void)add(a, b); });
    Tensor h = rnd({n}, DType::bf16);
    check("elementwise", "mul bf16 " + s, [&] { (void)mul(h, h); });
    check("elementwise", "cast f32->bf16 " + s, [&] { (void)a.to(DType::bf16); });
    Tensor m = rnd({n / 64, 64}), row = rnd({1, 64});
    check("elementwise", "broadcast mul " + s, [&] { (void)mul(m, row); });
    check("elementwise", "transpose copy " + s, [&] { (void)m.t().contiguous(); });
    check("elementwise", "strided copy " + s, [&] { (void)m.narrow(1, 0, 32).contiguous(); });
  }
}

void reduce() {
  for (int64_t n : kSizes) {
    const std::string s = std::to_string(n);
    Tensor x = rnd({n}), m = rnd({n / 64, 64});
    check("reduce", "sum all " + s, [&] { (void)sum(x); });
    check("reduce", "sum rows " + s, [&] { (void)sum(m, {1}); });
    check("reduce", "sum columns " + s, [&] { (void)sum(m, {0}); });
    check("reduce", "var rows " + s, [&] { (void)var(m, {1}); });
    check("reduce", "amax rows " + s, [&] { (void)amax(m, {1}); });
    check("reduce", "argmax rows " + s, [&] { (void)argmax(m, 1); });
    Tensor g = m.detach().requires_grad_();
    check("reduce", "amax backward " + s, [&] { amax(g, {1}).sum().backward(); });
  }
}

void softmax_and_loss() {
  for (int64_t n : kSizes) {
    const std::string s = std::to_string(n);
    const int64_t c = 64, rows = n / c;
    Tensor x = rnd({rows, c}).requires_grad_();
    check("softmax", "softmax fwd+bwd " + s, [&] { softmax(x, 1).sum().backward(); });
    check("softmax", "log_softmax fwd+bwd " + s, [&] { log_softmax(x, 1).sum().backward(); });
    Tensor t = on_gpu(randint(0, c, {rows}));
    check("loss", "cross_entropy fwd+bwd " + s, [&] { cross_entropy(x, t).backward(); });
    Tensor lp = log_softmax(x, 1).detach().requires_grad_();
    check("loss", "nll_loss fwd+bwd " + s, [&] { nll_loss(lp, t).backward(); });
  }
}

void index_ops() {
  for (int64_t n : kSizes) {
    const std::string s = std::to_string(n);
    const int64_t c = 64, rows = n / c;
    Tensor x = rnd({rows, c});
    Tensor ix = on_gpu(randint(0, c, {rows, c}));
    check("index", "gather " + s, [&] { (void)gather(x, 1, ix); });
    check("index", "scatter_add " + s, [&] { (void)scatter_add(x, 1, ix, x); });
    Tensor labels = on_gpu(randint(0, c, {rows}));
    check("index", "one_hot " + s, [&] { (void)one_hot(labels, c, DType::f32); });
  }
}

// "NxCxHxW"
std::string shape_name(const int64_t (&sh)[4]) {
  return std::to_string(sh[0]) + "x" + std::to_string(sh[1]) + "x" + std::to_string(sh[2]) + "x" + std::to_string(sh[3]);
}
// A random (N, C, H, W) leaf on the GPU, channels-last when `last`.
Tensor image_input(const int64_t (&sh)[4], bool last) {
  Tensor x = rnd({sh[0], sh[1], sh[2], sh[3]});
  if (last) x = x.contiguous(MemoryFormat::channels_last);
  return x.detach().requires_grad_();
}

void batchnorm() {
  const int64_t shapes[][4] = {{4, 8, 8, 8}, {3, 16, 7, 9}, {16, 32, 16, 16}};
  for (const auto& sh : shapes) {
    const std::string s = shape_name(sh);
    for (bool last : {false, true}) {
      Tensor x = image_input(sh, last);
      Tensor rm = on_gpu(zeros({sh[1]})), rv = on_gpu(ones({sh[1]}));
      Tensor w = on_gpu(ones({sh[1]})).requires_grad_(), b = on_gpu(zeros({sh[1]})).requires_grad_();
      const std::string tag = (last ? "NHWC " : "NCHW ") + s;
      check("batchnorm", "batch_norm fwd+bwd " + tag, [&] { batch_norm(x, rm, rv, w, b, true).sum().backward(); });
      check("batchnorm", "batch_norm_relu fwd+bwd " + tag,
            [&] { batch_norm_relu(x, rm, rv, w, b, true).sum().backward(); });
    }
  }
}

void pool_and_conv() {
  const int64_t shapes[][4] = {{2, 4, 8, 8}, {3, 8, 13, 11}, {8, 16, 32, 32}};
  for (const auto& sh : shapes) {
    const std::string s = shape_name(sh);
    for (bool last : {false, true}) {
      Tensor x = image_input(sh, last);
      const std::string tag = (last ? "NHWC " : "NCHW ") + s;
      check("pool", "max_pool2d 3/2/1 fwd+bwd " + tag,
            [&] { max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}).sum().backward(); });
      check("pool", "avg_pool2d 2 fwd+bwd " + tag, [&] { avg_pool2d(x, {.kernel = {2, 2}}).sum().backward(); });
      check("pool", "adaptive_avg_pool2d fwd+bwd " + tag,
            [&] { adaptive_avg_pool2d(x, {1, 1}).sum().backward(); });
    }
    Tensor x = rnd({sh[0], sh[1], sh[2], sh[3]}).requires_grad_();
    Tensor w = rnd({8, sh[1], 3, 3}).requires_grad_(), b = rnd({8}).requires_grad_();
    check("conv", "conv2d 3x3 fwd+bwd " + s,
          [&] { conv2d(x, w, b, {.padding = {1, 1}}).sum().backward(); });
  }
}

void gemm() {
  const int64_t shapes[][3] = {{32, 48, 16}, {65, 33, 17}, {128, 128, 64}};
  for (const auto& sh : shapes) {
    const std::string s = std::to_string(sh[0]) + "x" + std::to_string(sh[1]) + "x" + std::to_string(sh[2]);
    Tensor a = rnd({sh[0], sh[2]}), b = rnd({sh[2], sh[1]});
    check("gemm", "matmul " + s, [&] { (void)matmul(a, b); });
    Tensor ab = rnd({2, sh[0], sh[2]}), bb = rnd({2, sh[2], sh[1]});
    check("gemm", "bmm " + s, [&] { (void)bmm(ab, bb); });
  }
}

void optimizers() {
  for (int64_t n : kSizes) {
    const std::string s = std::to_string(n);
    Tensor p = rnd({n}).requires_grad_(), q = rnd({n / 2 + 1}).requires_grad_();
    p.set_grad(rnd({n}));
    q.set_grad(rnd({n / 2 + 1}));
    optim::Adam adam({p, q}, {.lr = 1e-3});
    adam.step();  // the moments exist from here on
    check("optim", "adam step " + s, [&] { adam.step(); });
    optim::SGD sgd({p, q}, {.lr = 0.1, .momentum = 0.9});
    sgd.step();
    check("optim", "sgd momentum step " + s, [&] { sgd.step(); });
    check("optim", "clip_grad_norm " + s, [&] { (void)optim::clip_grad_norm_({p, q}, 1.0); });
  }
}

void random_ops() {
  namespace gpu = kernels::gpu;
  for (int64_t n : kSizes) {
    const std::string s = std::to_string(n);
    // The kernels themselves (a device generator's fills; dropout on the device).
    Tensor f = empty({n}, {.device = kGpu}), d = empty({n}, {.dtype = DType::f64, .device = kGpu});
    Tensor i = empty({n}, {.dtype = DType::i64, .device = kGpu}), x = rnd({n}), mask = empty({n}, {.device = kGpu});
    check("random", "fill_uniform f32 " + s, [&] { gpu::fill_uniform(DType::f32, n, f.data(), 1, 0, 0, 1); });
    check("random", "fill_normal f64 " + s, [&] { gpu::fill_normal(DType::f64, n, d.data(), 1, 0, 0, 1); });
    check("random", "fill_bernoulli f32 " + s, [&] { gpu::fill_bernoulli(DType::f32, n, f.data(), 1, 0, 0.3); });
    check("random", "fill_randint " + s, [&] { gpu::fill_randint(n, i.data_ptr<int64_t>(), 1, 0, 0, 10); });
    check("random", "dropout_forward with mask " + s,
          [&] { gpu::dropout_forward(DType::f32, n, x.data(), f.data(), mask.data(), 1, 0, 0.5); });
    check("random", "dropout " + s, [&] { (void)dropout(x, 0.5, true); });
  }
}

// The data-on-device loader's fused RandomCrop + flip + Normalize (kernels/cuda/augment.h).
void augment() {
  namespace gpu = kernels::gpu;
  const int64_t sizes[][3] = {{1, 28, 28}, {3, 32, 32}, {3, 40, 36}};
  for (const auto& sz : sizes) {
    const int64_t c = sz[0], h = sz[1], w = sz[2], images = 64, n = 32;
    const std::string s = std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
    Tensor data = on_gpu(randint(0, 256, {images, c, h, w}).to(DType::u8));
    // Distinct samples (every other image): a repeated sample's pixels would be read once, and the
    // declaration counts each sample's (augment.cu says so).
    std::vector<int64_t> every_other;
    for (int64_t k = 0; k < n; ++k) every_other.push_back(2 * k);
    Tensor idx = on_gpu(from_vector<int64_t>(every_other));
    Tensor lut = on_gpu(rand({c * 256}));
    Tensor draws = empty({3 * n}, {.dtype = DType::i32, .device = kGpu});
    Tensor out = empty({n, c, h, w}, {.device = kGpu});
    gpu::CropFlip p;
    p.channels = c, p.height = h, p.width = w, p.crop = true, p.out_height = h, p.out_width = w, p.padding = 4;
    p.flip = true;
    check("augment", "crop_flip_lut " + s, [&] {
      gpu::crop_flip_lut(static_cast<const uint8_t*>(data.data()), idx.data_ptr<int64_t>(), n, p, lut.data_ptr<float>(), 1, 0,
                         draws.data_ptr<int32_t>(), out.data_ptr<float>());
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!simt::counters_see_memory()) {
    std::fprintf(stderr, "ledger_footprint: the access hooks are not linked: nothing would be counted\n");
    return 1;
  }
  const std::map<std::string, std::function<void()>> families = {
      {"elementwise", elementwise}, {"reduce", reduce},  {"softmax", softmax_and_loss}, {"index", index_ops},
      {"batchnorm", batchnorm},     {"pool", pool_and_conv}, {"gemm", gemm},         {"optim", optimizers},
      {"random", random_ops},
      {"augment", augment}};
  manual_seed(7);
  if (argc == 1) {
    for (const auto& [name, run] : families) run();
  } else {
    for (int i = 1; i < argc; ++i) {
      auto it = families.find(argv[i]);
      if (it == families.end()) {
        std::fprintf(stderr, "ledger_footprint: unknown family '%s'\n", argv[i]);
        return 2;
      }
      it->second();
    }
  }
  std::printf("%d launches checked, %d disagree; %d flagged uncoalesced (more than 1.25x the ideal sectors per "
              "request)\n", g_checked, g_failed, g_flagged);
  return g_failed == 0 && g_checked > 0 ? 0 : 1;
}
