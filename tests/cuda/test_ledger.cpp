// The launch ledger (Note [Launch ledger] in core/cuda/ledger.h): what one op records, with the
// cost its launch site declares; record-only mode skips kernels and library calls but runs
// copies; host syncs and library calls are entries too.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <ember/core/cuda/ledger.h>
#include <ember/ember.h>
#include <ember/train/gpu_model.h>

using namespace ember;

namespace {

std::vector<cuda::LedgerEntry> of_kind(const std::vector<cuda::LedgerEntry>& all, cuda::CallKind kind) {
  std::vector<cuda::LedgerEntry> out;
  for (const cuda::LedgerEntry& e : all)
    if (e.kind == kind) out.push_back(e);
  return out;
}

// The largest |a - b| over two float tensors of one shape (any device, any layout).
double max_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> va = a.cpu().contiguous().to_vector<float>(), vb = b.cpu().contiguous().to_vector<float>();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(va[i]) - vb[i]));
  return m;
}

}  // namespace

TEST_CASE("ledger: an add records one launch with the op's name and its declared bytes", "[cuda][ledger]") {
  const Device d = Device::cuda(0);
  const int64_t n = 1000;
  Tensor a = full({n}, 1.5).to(d), b = full({n}, 2.0).to(d);
  cuda::Ledger ledger;
  Tensor c = a + b;
  const std::vector<cuda::LedgerEntry> entries = ledger.stop();
  const auto kernels = of_kind(entries, cuda::CallKind::kernel);
  REQUIRE(kernels.size() == 1);
  const cuda::LedgerEntry& k = kernels[0];
  CHECK(k.op == "add");
  CHECK(k.family == "elementwise");
  CHECK(k.cost.read == 2 * n * 4);
  CHECK(k.cost.written == n * 4);
  CHECK(k.cost.flops == n);
  CHECK(k.cost.math == cuda::Math::cuda_core);
  CHECK(k.block[0] > 0);
  CHECK_FALSE(k.skipped);
  CHECK(c.cpu().sum().item<double>() == 3.5 * n);  // it ran
  // A broadcast operand's repeated elements are read once.
  Tensor row = full({1, 8}, 1.0).to(d), m = full({16, 8}, 1.0).to(d);
  cuda::Ledger again;
  Tensor s = m * row;
  const auto k2 = of_kind(again.stop(), cuda::CallKind::kernel);
  REQUIRE(k2.size() == 1);
  CHECK(k2[0].cost.read == (16 * 8 + 8) * 4);
  CHECK(k2[0].cost.written == 16 * 8 * 4);
}

TEST_CASE("ledger: record-only skips kernels and runs copies", "[cuda][ledger]") {
  const Device d = Device::cuda(0);
  Tensor a = full({64}, 2.0).to(d);
  Tensor out = zeros({64}).to(d);
  {
    cuda::Ledger ledger(cuda::LedgerMode::record_only);
    out.add_(a);                        // recorded, not run
    Tensor seen = a.cpu();              // a copy: runs
    CHECK(seen.sum().item<double>() == 128);
    const std::vector<cuda::LedgerEntry> entries = ledger.stop();
    const auto kernels = of_kind(entries, cuda::CallKind::kernel);
    REQUIRE(kernels.size() == 1);
    CHECK(kernels[0].skipped);
    CHECK(of_kind(entries, cuda::CallKind::copy).size() == 1);
    CHECK(of_kind(entries, cuda::CallKind::host_sync).size() == 1);
  }
  CHECK(out.cpu().sum().item<double>() == 0);  // the add never ran
  // Off again: nothing is recorded and kernels run.
  out.add_(a);
  CHECK(out.cpu().sum().item<double>() == 128);
}

TEST_CASE("ledger: cross_entropy's target check is a named host sync inside the op", "[cuda][ledger]") {
  const Device d = Device::cuda(0);
  Tensor logits = randn({4, 10}).to(d);
  Tensor target = from_vector<int64_t>({1, 2, 3, 4}).to(d);
  cuda::Ledger ledger;
  (void)cross_entropy(logits, target);
  const auto syncs = of_kind(ledger.stop(), cuda::CallKind::host_sync);
  REQUIRE(syncs.size() == 1);
  CHECK(syncs[0].note == "cross_entropy's target check");
  CHECK(syncs[0].op == "cross_entropy");
  // Targets checked by their maker (ember train checks its labels on the host): no check kernel,
  // no host sync, and the same loss and gradient bit for bit.
  logits.set_requires_grad(true);
  Tensor loss_checked, grad_checked;
  {
    const CheckedTargetsGuard checked;
    cuda::Ledger quiet;
    loss_checked = cross_entropy(logits, target);
    loss_checked.backward();
    const std::vector<cuda::LedgerEntry> entries = quiet.stop();
    CHECK(of_kind(entries, cuda::CallKind::host_sync).empty());
    for (const cuda::LedgerEntry& e : of_kind(entries, cuda::CallKind::kernel))
      CHECK(e.kernel.find("find_invalid_target") == std::string::npos);
    grad_checked = logits.grad().clone();
  }
  CHECK_FALSE(CheckedTargetsGuard::active());
  logits.set_grad(Tensor());
  Tensor loss = cross_entropy(logits, target);
  loss.backward();
  CHECK(loss.cpu().item<float>() == loss_checked.cpu().item<float>());
  CHECK(max_diff(logits.grad(), grad_checked) == 0);
}

TEST_CASE("ledger: a matrix product is a cuBLAS call declaring 2 m n k flops and its shape", "[cuda][ledger]") {
  const Device d = Device::cuda(0);
  Tensor a = randn({32, 48}).to(d), b = randn({48, 16}).to(d);
  cuda::Ledger ledger;
  (void)matmul(a, b);
  const std::vector<cuda::LedgerEntry> entries = ledger.stop();
  std::vector<cuda::LedgerEntry> products = of_kind(entries, cuda::CallKind::cublas);
  if (products.empty()) products = of_kind(entries, cuda::CallKind::kernel);  // the tiled kernel without cuBLAS
  REQUIRE(products.size() == 1);
  CHECK(products[0].cost.flops == 2.0 * 32 * 16 * 48);
  CHECK(products[0].cost.read == (32 * 48 + 48 * 16) * 4);
  CHECK(products[0].cost.written == 32 * 16 * 4);
}

TEST_CASE("ledger: one at a time, and the phase comes from the enclosing scope", "[cuda][ledger]") {
  const Device d = Device::cuda(0);
  Tensor a = full({8}, 1.0).to(d);
  cuda::Ledger ledger;
  CHECK_THROWS_WITH(cuda::Ledger(), Catch::Contains("another ledger"));
  {
    const profiler::Scope phase("optimizer", profiler::Phase::optimizer);
    a.mul_(2.0);
  }
  const auto kernels = of_kind(ledger.stop(), cuda::CallKind::kernel);
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].phase == profiler::Phase::optimizer);
  CHECK(ledger.stop().empty());
}

TEST_CASE("ledger: the step model names per-tensor optimizer launches and host syncs", "[cuda][ledger]") {
  // 62 launches of one kernel in the optimizer phase (ResNet-18's Adam before it became one
  // multi-tensor launch) and one host sync, priced on an H200 with the compiled-in calibration.
  std::vector<cuda::LedgerEntry> ledger(62);
  for (cuda::LedgerEntry& e : ledger) {
    e.kernel = "adam_kernel";
    e.family = "optim";
    e.op = "Adam.step";
    e.phase = profiler::Phase::optimizer;
    e.cost = cuda::cost(4096 * 16.0, 4096 * 12.0, 4096 * 14.0);
  }
  cuda::LedgerEntry sync;
  sync.kind = cuda::CallKind::host_sync;
  sync.op = "cross_entropy";
  sync.note = "cross_entropy's target check";
  ledger.push_back(sync);
  const train::StepPrediction p =
      train::predict_step(ledger, train::gpu_spec("h200"), train::default_calibration(), false);
  CHECK(p.launches == 62);
  CHECK(p.host_syncs == 1);
  bool per_tensor = false, host_sync = false;
  for (const std::string& f : p.findings) {
    per_tensor = per_tensor || f.find("62 launches of adam_kernel in the optimizer") != std::string::npos;
    host_sync = host_sync || f.find("cross_entropy's target check") != std::string::npos;
  }
  CHECK(per_tensor);
  CHECK(host_sync);
  // Each launch: 114,688 bytes at 4.8 TB/s x e_mem, or the launch cost, whichever bounds it, plus
  // the launch cost; the sync costs sync_us.
  const train::Calibration cal = train::default_calibration();
  const double e_mem = cal.e_mem.count("optim") ? cal.e_mem.at("optim") : cal.default_e_mem;
  const double one = 4096 * 28.0 / (4800e3 * e_mem) + cal.launch_us;
  CHECK(p.predicted_ms == Approx((62 * one + cal.sync_us) * 1e-3).epsilon(1e-9));
  // Under a CUDA graph: the graph's launch cost and no sync.
  const train::StepPrediction g = train::predict_step(ledger, train::gpu_spec("h200"), cal, true);
  CHECK(g.predicted_ms == Approx(62 * (4096 * 28.0 / (4800e3 * e_mem) + cal.graph_launch_us) * 1e-3).epsilon(1e-9));
}

TEST_CASE("ledger: a training batch norm forward is three launches, running statistics and batch count included",
          "[cuda][ledger][batchnorm]") {
  // Note [One-pass batch norm statistics] in kernels/cuda/batchnorm.cu: partial sums, one finalize
  // kernel (mean, invstd, the running statistics, num_batches_tracked), apply. Both layouts, on
  // shapes that take the split reductions; the results against the same module on the CPU.
  const Device d = Device::cuda(0);
  for (const bool channels_last : {false, true}) {
    INFO("channels_last " << channels_last);
    const int64_t c = channels_last ? 64 : 16;
    manual_seed(7);
    Tensor x = add(mul(randn({8, c, 32, 32}), 2.0), 0.5);
    nn::BatchNorm2d cpu_bn(c), gpu_bn(c);
    gpu_bn.to(d);
    Tensor xd = x.to(d);
    if (channels_last) xd = xd.contiguous(MemoryFormat::channels_last);
    cuda::Ledger ledger;
    Tensor y = gpu_bn.forward(xd);
    const std::vector<cuda::LedgerEntry> entries = ledger.stop();
    const auto kernels = of_kind(entries, cuda::CallKind::kernel);
    CHECK(kernels.size() == 3);
    for (const cuda::LedgerEntry& k : kernels) CHECK(k.op == "batch_norm");
    CHECK(of_kind(entries, cuda::CallKind::host_sync).empty());
    CHECK(of_kind(entries, cuda::CallKind::copy).empty());
    Tensor want = cpu_bn.forward(x);
    CHECK(gpu_bn.num_batches_tracked.cpu().item<int64_t>() == 1);
    CHECK(max_diff(y, want) <= 1e-5);
    CHECK(max_diff(gpu_bn.running_mean, cpu_bn.running_mean) <= 1e-6);
    CHECK(max_diff(gpu_bn.running_var, cpu_bn.running_var) <= 1e-5);
  }
}

TEST_CASE("ledger: a fused ReLU's batch norm backward reads no more than the plain one's (the mask from x)",
          "[cuda][ledger][batchnorm]") {
  // Note [The ReLU mask recomputed from x] in kernels/batchnorm.h: without a residual the CUDA
  // backward recomputes the mask from x, so its passes read x and grad y, as the plain batch norm's
  // do, and not the output y as well (a third activation: 1 MiB here); only per-channel vectors are
  // added (weight and bias in the reduction pass, bias in the input pass: 3 x 64 floats).
  const Device d = Device::cuda(0);
  const Tensor x0 = add(mul(randn({8, 64, 32, 32}), 2.0), 0.5).to(d, DType::bf16).contiguous(MemoryFormat::channels_last);
  const auto backward_bytes = [&](bool relu) {
    nn::BatchNorm2d bn(64);
    bn.to(d);
    Tensor x = x0.detach();
    x.requires_grad_(true);
    Tensor y;
    {
      AutocastGuard amp(DeviceType::CUDA, DType::bf16);
      y = relu ? bn.forward_relu(x, Tensor()) : bn.forward(x);
    }
    Tensor loss = sum(y.to(DType::f32));
    cuda::Ledger ledger;
    loss.backward();
    double bytes = 0;
    for (const cuda::LedgerEntry& e : of_kind(ledger.stop(), cuda::CallKind::kernel))
      if (e.op == "batch_norm backward") bytes += e.cost.read;
    return bytes;
  };
  const double plain = backward_bytes(false), fused = backward_bytes(true);
  INFO("plain " << plain << " B, fused " << fused << " B");
  CHECK(fused > plain);
  CHECK(fused - plain <= 3 * 64 * 4);
}

TEST_CASE("ledger: a residual batch norm's backward writes the residual's gradient in its reduction pass",
          "[cuda][ledger][batchnorm]") {
  // relu(batch_norm(x) + residual): the residual's gradient is grad y read through the ReLU's mask,
  // which the CUDA backward's reduction pass writes while it reads grad y (kernels/batchnorm.h), so
  // no ReLU backward runs and the backward is the batch norm's own three launches.
  const Device d = Device::cuda(0);
  const Tensor x0 = randn({8, 64, 16, 16}).to(d, DType::bf16).contiguous(MemoryFormat::channels_last);
  const Tensor r0 = randn({8, 64, 16, 16}).to(d, DType::bf16).contiguous(MemoryFormat::channels_last);
  nn::BatchNorm2d bn(64);
  bn.to(d);
  Tensor x = x0.detach(), r = r0.detach();
  x.requires_grad_(true);
  r.requires_grad_(true);
  Tensor y;
  {
    AutocastGuard amp(DeviceType::CUDA, DType::bf16);
    y = bn.forward_relu(x, r);
  }
  Tensor loss = sum(y.to(DType::f32));
  cuda::Ledger ledger;
  loss.backward();
  int bn_launches = 0;
  for (const cuda::LedgerEntry& e : of_kind(ledger.stop(), cuda::CallKind::kernel)) {
    CHECK(e.op != "ReluBackward");
    bn_launches += e.op == "batch_norm backward";
  }
  CHECK(bn_launches == 3);
  // The residual's gradient is relu's backward of the output's gradient (all ones): 1 where y > 0.
  const std::vector<float> gr = r.grad().to(DType::f32).cpu().contiguous().to_vector<float>();
  const std::vector<float> yv = y.to(DType::f32).cpu().contiguous().to_vector<float>();
  REQUIRE(gr.size() == yv.size());
  size_t wrong = 0;
  for (size_t i = 0; i < gr.size(); ++i) wrong += gr[i] != (yv[i] > 0 ? 1.0f : 0.0f);
  CHECK(wrong == 0);
}
