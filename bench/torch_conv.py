"""torch.nn.functional.conv2d forward + backward (dx, dw, db), the anchor for bench_conv: the same
layer, the same protocol (median of 7 after a warm-up), one JSON line per thread count.

  python bench/torch_conv.py [--dtype bfloat16] [--threads N] [N C_IN H W C_OUT K PAD [STRIDE]]   (default 64 32 28 28 64 3 1)

--threads N: one thread count instead of 1 and 2. cpu_ms: the calling thread's CPU time for forward
and backward (on one thread, what a loaded machine gave to other work left out), as bench_conv's.
"""
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

args = sys.argv[1:]
dtype = torch.float32
thread_counts = (1, 2)
while args[:1] in (["--dtype"], ["--threads"]):
    if args[0] == "--dtype":
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args[1]]
    else:
        thread_counts = (int(args[1]),)
    args = args[2:]
dims = [int(v) for v in args] if len(args) in (7, 8) else [64, 32, 28, 28, 64, 3, 1]
n, c_in, h, w, c_out, k, pad = dims[:7]
stride = dims[7] if len(dims) == 8 else 1
g = torch.Generator().manual_seed(42)
x = torch.randn(n, c_in, h, w, generator=g).to(dtype).requires_grad_()
weight = (torch.randn(c_out, c_in, k, k, generator=g) * 0.05).to(dtype).requires_grad_()
bias = torch.zeros(c_out, dtype=dtype, requires_grad=True)
dy = torch.randn(n, c_out, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1, generator=g).to(dtype)
flops = 3.0 * 2.0 * n * c_out * dy.shape[2] * dy.shape[3] * c_in * k * k
for threads in thread_counts:
    torch.set_num_threads(threads)
    fwd, bwd, cpu = [], [], []
    for r in range(8):
        x.grad = weight.grad = bias.grad = None
        c0 = time.thread_time()
        t0 = time.perf_counter()
        y = F.conv2d(x, weight, bias, padding=pad, stride=stride)
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        if r > 0:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            cpu.append(time.thread_time() - c0)
    total = [a + b for a, b in zip(fwd, bwd)]
    print(json.dumps({"bench": "torch_conv2d", "n": n, "c_in": c_in, "h": h, "w": w, "c_out": c_out, "k": k,
                      "padding": pad, "stride": stride, "dtype": str(dtype).replace("torch.", ""), "threads": threads, "forward_ms": round(statistics.median(fwd) * 1e3, 2),
                      "backward_ms": round(statistics.median(bwd) * 1e3, 2),
                      "total_ms": round(statistics.median(total) * 1e3, 2),
                      "gflops": round(flops / statistics.median(total) / 1e9, 1),
                      "cpu_ms": round(statistics.median(cpu) * 1e3, 2), "torch": torch.__version__}), flush=True)
