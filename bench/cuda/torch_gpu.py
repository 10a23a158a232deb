#!/usr/bin/env python3
"""PyTorch's side of scripts/gpu-check.sh: the measurements of bench/cuda/bench_cuda.cpp, done
with PyTorch eager on the same device, one JSON line each ("side": "torch").

  bandwidth      torch.relu and torch.sum GB/s next to a device-to-device copy
  sgemm          torch.mm f32 (TF32 off, as ember's default), GFLOP/s
  gemm_bf16      torch.mm on bf16 matrices (f32 accumulation, tensor cores), 8192^3, TFLOP/s
  conv3x3        F.conv2d 3x3 forward + backward (cuDNN), ms
  train_cnn      the `cnn` model on Fashion-MNIST, batch 64, Adam, data on the device: images/s,
                 f32 and AMP bf16 (torch.autocast)
  resnet18_step  ResNet-18 (torchvision layout, built here: no weights needed) at 224x224, batch
                 256: f32, and AMP bf16 (torch.autocast) with channels-last, ms per step
  recipe_to_93   ember's default recipe (cnn, AdamW, one-cycle 3e-3, weight decay 5e-4, batch 128, label smoothing
                 0.1, 2-pixel shifts + flips, 10 epochs): training seconds until the test accuracy
                 first reaches 93%

--tiny runs every measurement at the toy sizes of bench_cuda --tiny (the dry run in CI, on the
CPU when there is no GPU). Needs only torch (torchvision is not used).
  python3 bench/cuda/torch_gpu.py [--tiny] [--only a,b] [--data-dir DIR]
"""
import argparse
import gzip
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

ALL = ["bandwidth", "sgemm", "gemm_bf16", "conv3x3", "stem_layers", "train_cnn", "resnet18_step", "recipe_to_93"]


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(dev, reps, f):
    f()
    sync(dev)
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        sync(dev)
        t.append(time.perf_counter() - t0)
    return sorted(t)[len(t) // 2]


class Out:
    def __init__(self, dev, tiny):
        self.dev, self.tiny = dev, tiny
        self.name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"

    def line(self, d):
        d.update({"side": "torch", "torch": torch.__version__, "tiny": self.tiny, "device": self.name})
        print(json.dumps(d), flush=True)


def bandwidth(o, n):
    x = torch.randn(n, device=o.dev)
    y = torch.empty_like(x)
    with torch.no_grad():
        t_copy = timed(o.dev, 5, lambda: y.copy_(x))
        t_relu = timed(o.dev, 5, lambda: torch.relu(x))
        t_sum = timed(o.dev, 5, lambda: torch.sum(x))
    b2 = 2.0 * n * 4
    o.line({"bench": "bandwidth", "elements": n, "d2d_copy_gbs": round(b2 / t_copy / 1e9, 1),
            "relu_gbs": round(b2 / t_relu / 1e9, 1), "sum_gbs": round(n * 4 / t_sum / 1e9, 1)})


def sgemm(o, s):
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(s, s, device=o.dev), torch.randn(s, s, device=o.dev)
    t = timed(o.dev, 5, lambda: torch.mm(a, b))
    o.line({"bench": "sgemm", "size": s, "tf32": False, "library_gflops": round(2.0 * s ** 3 / t / 1e9, 1)})


def gemm_bf16(o, s):
    a = torch.randn(s, s, device=o.dev).bfloat16()
    b = torch.randn(s, s, device=o.dev).bfloat16()
    inner = 1 if o.tiny else 10

    def ten():
        for _ in range(inner):
            torch.mm(a, b)

    t = timed(o.dev, 5, ten) / inner
    o.line({"bench": "gemm_bf16", "size": s, "library_tflops": round(2.0 * s ** 3 / t / 1e12, 1)})


def conv3x3(o, n, c, hw):
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(n, c, hw, hw, device=o.dev, requires_grad=True)
    w = torch.randn(c, c, 3, 3, device=o.dev, requires_grad=True)
    gy = torch.randn(n, c, hw, hw, device=o.dev)

    def step():
        F.conv2d(x, w, padding=1).backward(gy)

    t = timed(o.dev, 5, step)
    with torch.no_grad():
        t_fwd = timed(o.dev, 5, lambda: F.conv2d(x, w, padding=1))
    o.line({"bench": "conv3x3_fwd_bwd", "shape": [n, c, hw, hw], "ms": round(t * 1e3, 3),
            "fwd_ms": round(t_fwd * 1e3, 3),
            "tflops": round(3 * 2.0 * n * c * c * 9 * hw * hw / t / 1e12, 2)})


def stem_layers(o, n, hw):
    """ResNet-18's stem batch norm and 3x3/2 max pooling on an (n, 64, hw, hw) bf16 activation,
    forward + backward with the output gradient given, NCHW and channels-last (bench_cuda's
    stem_layers): batch norm in training mode with float32 weights and running statistics, as
    under torch.autocast."""
    x0 = torch.randn(n, 64, hw, hw, device=o.dev).to(torch.bfloat16)
    gy_bn0 = torch.randn(n, 64, hw, hw, device=o.dev).to(torch.bfloat16)
    oh = (hw + 2 - 3) // 2 + 1
    gy_pool0 = torch.randn(n, 64, oh, oh, device=o.dev).to(torch.bfloat16)
    w = torch.ones(64, device=o.dev, requires_grad=True)
    b = torch.zeros(64, device=o.dev, requires_grad=True)
    rm, rv = torch.zeros(64, device=o.dev), torch.ones(64, device=o.dev)
    for cl in (False, True):
        fmt = torch.channels_last if cl else torch.contiguous_format
        x = x0.contiguous(memory_format=fmt).detach().requires_grad_(True)
        gy_bn, gy_pool = gy_bn0.contiguous(memory_format=fmt), gy_pool0.contiguous(memory_format=fmt)
        t_bn = timed(o.dev, 5, lambda: F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).backward(gy_bn))
        t_pool = timed(o.dev, 5, lambda: F.max_pool2d(x, 3, 2, 1).backward(gy_pool))
        for bench, t in (("stem_batchnorm", t_bn), ("stem_maxpool", t_pool)):
            o.line({"bench": bench, "precision": "bf16", "shape": [n, 64, hw, hw], "channels_last": cl,
                    "ms": round(t * 1e3, 3)})


# ---- models -------------------------------------------------------------------------------------
class CNN(nn.Module):  # ember's `cnn` (models/zoo.cpp)
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Block(nn.Module):  # torchvision's BasicBlock
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):  # torchvision.models.resnet18's layout
    def __init__(self, classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = F.adaptive_avg_pool2d(self.layers(x), 1).flatten(1)
        return self.fc(x)


# ---- data ---------------------------------------------------------------------------------------
def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = struct.unpack(">" + "I" * data[3], data[4:4 + 4 * data[3]])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * data[3]).reshape(dims)


def fashion_mnist(d, dev):
    def load(split):
        x = torch.from_numpy(read_idx(f"{d}/{split}-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
        y = torch.from_numpy(read_idx(f"{d}/{split}-labels-idx1-ubyte.gz").astype(np.int64))
        return x, y

    (xtr, ytr), (xte, yte) = load("train"), load("t10k")
    mean, std = 0.2860, 0.3530  # ember's Normalize for Fashion-MNIST
    return ((xtr - mean) / std).to(dev), ytr.to(dev), ((xte - mean) / std).to(dev), yte.to(dev)


def train_cnn(o, data, steps, amp):
    xtr, ytr, _, _ = data
    torch.manual_seed(1)
    model = CNN().to(o.dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    perm = torch.randperm(len(xtr), device=o.dev)

    def step(i):
        idx = perm[(i * 64) % (len(xtr) - 64):][:64]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(o.dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()

    step(0)
    sync(o.dev)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i + 1)
    sync(o.dev)
    o.line({"bench": "train_cnn", "precision": "amp_bf16" if amp else "f32", "mode": "data_on_device",
            "batch": 64, "steps": steps,
            "images_per_sec": round(64 * steps / (time.perf_counter() - t0), 1)})


def profile_step(o, step):
    """torch.profiler's per-op table of one step (the counterpart of `ember explain`'s rows):
    the 25 ops with the most device time (CPU time on the dry run's CPU), one JSON line."""
    try:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if o.dev.type == "cuda" else [])
        with profile(activities=acts) as prof:
            step()
            sync(o.dev)
        attr = "cuda_time_total" if o.dev.type == "cuda" else "cpu_time_total"
        rows = sorted(prof.key_averages(), key=lambda e: getattr(e, attr, 0), reverse=True)[:25]
        o.line({"bench": "resnet18_profile", "time": attr,
                "ops": [{"op": e.key, "calls": e.count, "us": round(getattr(e, attr, 0), 1)} for e in rows]})
    except Exception as e:  # the profiler is informative: its failure must not cost the run
        o.line({"bench": "resnet18_profile", "error": str(e)[:200]})


def batch_norm_backend(o, model):
    """Which batch-norm implementation PyTorch picks for this model's first BN under AMP bf16
    (cuDNN, MIOpen or its native kernels), where this PyTorch can say."""
    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    x = torch.randn(2, bn.num_features, 8, 8, device=o.dev, dtype=torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    try:
        backend = torch._C._select_batch_norm_backend(x, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                                                      True, bn.eps)
        o.line({"bench": "batch_norm_backend", "dtype": "bf16", "backend": str(backend)})
    except Exception as e:
        o.line({"bench": "batch_norm_backend", "dtype": "bf16", "error": str(e)[:200]})


def resnet18_step(o, batch, size, steps, amp, benchmark=False):
    """One ResNet-18 training step. benchmark=False is PyTorch's default (cuDNN's heuristics),
    compared with ember's default; benchmark=True is cuDNN benchmark mode on both sides (ember's
    --cudnn-benchmark line), so that each mode is compared with the same mode."""
    torch.backends.cudnn.benchmark = benchmark
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(1)
    model = ResNet18().to(o.dev)
    x = torch.randn(batch, 3, size, size, device=o.dev)
    y = torch.randint(0, 1000, (batch,), device=o.dev)
    if amp:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(o.dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    t = timed(o.dev, steps, step)
    if amp and not benchmark:
        profile_step(o, step)
        batch_norm_backend(o, model)
    line = {"bench": "resnet18_step", "batch": batch, "image_size": size,
            "precision": "amp_bf16" if amp else "f32", "channels_last": amp, "steps": steps,
            "ms": round(t * 1e3, 2), "images_per_sec": round(batch / t, 1)}
    if benchmark:
        line["mode"] = "cudnn_benchmark"
    o.line(line)
    torch.backends.cudnn.benchmark = False  # what follows (recipe_to_93) runs PyTorch's default


def resnet18_compiled(o, batch, size, steps):
    """The AMP bf16 channels-last ResNet-18 step under torch.compile(mode="max-autotune"): a further
    PyTorch column (--compile; gpu-check passes it with GPU_CHECK_COMPILE=1, since autotuning takes
    minutes the 9-minute plan does not hold). The compile happens in the untimed first steps."""
    if not hasattr(torch, "compile"):
        o.line({"bench": "resnet18_step", "precision": "amp_bf16", "mode": "torch_compile", "channels_last": True,
                "error": f"torch {torch.__version__} has no torch.compile"})
        return
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(1)
    model = ResNet18().to(o.dev).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, size, size, device=o.dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=o.dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    compiled = torch.compile(model, mode="max-autotune")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(o.dev.type, dtype=torch.bfloat16):
            loss = F.cross_entropy(compiled(x), y)
        loss.backward()
        opt.step()

    t0 = time.perf_counter()
    step()
    sync(o.dev)
    compile_seconds = time.perf_counter() - t0
    t = timed(o.dev, steps, step)
    o.line({"bench": "resnet18_step", "batch": batch, "image_size": size, "precision": "amp_bf16",
            "mode": "torch_compile", "channels_last": True, "steps": steps, "compile_seconds": round(compile_seconds, 1),
            "ms": round(t * 1e3, 2), "images_per_sec": round(batch / t, 1)})


def recipe_to_93(o, data, tiny):
    """ember's default recipe (train/recipe.cpp) with the data on the device."""
    xtr, ytr, xte, yte = data
    epochs, batch = (2, 16) if tiny else (10, 128)
    max_steps = 6 if tiny else None
    if tiny:
        xte, yte = xte[:64], yte[:64]
    torch.manual_seed(1)
    model = CNN().to(o.dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=5e-4)
    steps_per_epoch = math.ceil(len(xtr) / batch)
    total = max_steps or epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=total)
    seconds, reached, step, acc = 0.0, None, 0, float("nan")
    for epoch in range(epochs):
        model.train()
        sync(o.dev)
        t0 = time.perf_counter()
        perm = torch.randperm(len(xtr), device=o.dev)
        for i in range(0, len(xtr), batch):
            if step == total:
                break
            idx = perm[i:i + batch]
            xb = xtr[idx]
            # per image: a random 28x28 crop of the image padded by 2 (a shift of up to 2 pixels)
            # and a horizontal flip with p 0.5, on the device
            n, r = len(xb), torch.arange(28, device=o.dev)
            oy, ox = torch.randint(0, 5, (2, n, 1), device=o.dev)
            xb = F.pad(xb, (2, 2, 2, 2))[torch.arange(n, device=o.dev)[:, None, None], 0,
                                         (oy + r)[:, :, None], (ox + r)[:, None, :]].unsqueeze(1)
            flip = torch.rand(n, device=o.dev) < 0.5
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), ytr[idx], label_smoothing=0.1).backward()
            opt.step()
            sched.step()
            step += 1
        sync(o.dev)
        seconds += time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum())
                          for i in range(0, len(xte), 1000))
        acc = correct / len(xte)
        if reached is None and acc >= 0.93:
            reached = seconds
        if step == total:
            break
    o.line({"bench": "recipe_to_93", "epochs": epoch + 1, "steps": step, "final_test_acc": round(acc, 4),
            "train_seconds": round(seconds, 2), "seconds_to_93": reached})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--only", default=",".join(ALL))
    p.add_argument("--compile", action="store_true", help="also the ResNet-18 step under torch.compile (max-autotune)")
    p.add_argument("--data-dir", default=os.environ.get("EMBER_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    a = p.parse_args()
    only = a.only.split(",")
    for n in only:
        if n not in ALL:
            sys.exit(f"torch_gpu.py: unknown measurement '{n}'")
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tiny = a.tiny or dev.type != "cuda"
    if dev.type != "cuda":
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    o = Out(dev, tiny)
    if "bandwidth" in only:
        bandwidth(o, 1 << 16 if tiny else 1 << 26)
    if "sgemm" in only:
        sgemm(o, 128 if tiny else 4096)
    if "gemm_bf16" in only:
        gemm_bf16(o, 128 if tiny else 8192)
    if "conv3x3" in only:
        conv3x3(o, *((2, 8, 16) if tiny else (64, 64, 56)))
    if "stem_layers" in only:
        stem_layers(o, *((2, 16) if tiny else (256, 112)))
    data = fashion_mnist(a.data_dir, dev) if ("train_cnn" in only or "recipe_to_93" in only) else None
    if "train_cnn" in only:
        for amp in (False, True):
            train_cnn(o, data, 5 if tiny else 300, amp)
    if "resnet18_step" in only:
        for amp in (False, True):
            resnet18_step(o, *((2, 32, 1) if tiny else (256, 224, 10)), amp)
        # AMP again in cuDNN benchmark mode, against ember's benchmark-mode line.
        resnet18_step(o, *((2, 32, 1) if tiny else (256, 224, 10)), True, benchmark=True)
        if a.compile:
            resnet18_compiled(o, *((2, 32, 1) if tiny else (256, 224, 10)))
    if "recipe_to_93" in only:
        recipe_to_93(o, data, tiny)


if __name__ == "__main__":
    main()
