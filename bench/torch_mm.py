"""torch.mm float32 throughput, the anchor for bench_gemm: square n x n x n, one JSON line per
(n, threads), median of `reps` timed calls after a warm-up — the same protocol as bench_gemm.

  python bench/torch_mm.py [--sizes 256,1024,2048] [--threads 1,2]
"""
import argparse
import json
import statistics
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--sizes", default="256,1024,2048")
parser.add_argument("--threads", default="1,2")
args = parser.parse_args()

for n in map(int, args.sizes.split(",")):
    g = torch.Generator().manual_seed(1234)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    c = torch.empty(n, n)
    reps = 21 if n <= 256 else 9 if n <= 1024 else 5
    for threads in map(int, args.threads.split(",")):
        torch.set_num_threads(threads)
        torch.mm(a, b, out=c)  # warm-up
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            torch.mm(a, b, out=c)
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        print(json.dumps({"bench": "torch_mm", "n": n, "threads": threads, "reps": reps,
                          "median_ms": round(t * 1e3, 3), "gflops": round(2 * n**3 / t / 1e9, 1),
                          "torch": torch.__version__, "mkl": torch.backends.mkl.is_available()}), flush=True)
