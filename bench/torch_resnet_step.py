"""One ResNet-18 training step in PyTorch on the CPU, the anchor of bench_resnet_step: torchvision's
resnet18 (1000 classes), random 224 x 224 images, SGD with momentum, float32 and under
torch.autocast("cpu", bfloat16); the median step time of STEPS steps after one warm-up step, and the
median of the calling thread's CPU time per step ("cpu_s": on one thread, what a loaded machine's
scheduler gave to other work left out).

  python bench/torch_resnet_step.py [--batch 8] [--steps 5] [--amp off,bf16] [--threads 1,2]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=8)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--amp", default="off,bf16")
p.add_argument("--threads", default="1,2")
a = p.parse_args()
for threads in (int(t) for t in a.threads.split(",")):
    torch.set_num_threads(threads)
    for amp in a.amp.split(","):
        torch.manual_seed(1)
        model = torchvision.models.resnet18(num_classes=1000)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(a.batch, 3, 224, 224)
        y = torch.randint(0, 1000, (a.batch,))

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp == "bf16"):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        step()
        times, cpu = [], []
        for _ in range(a.steps):
            t0, c0 = time.perf_counter(), time.thread_time()
            step()
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        print(json.dumps({"bench": "resnet18_step", "side": "pytorch", "batch": a.batch, "image_size": 224, "amp": amp,
                          "threads": threads, "steps": a.steps, "step_s": round(statistics.median(times), 4),
                          "cpu_s": round(statistics.median(cpu), 4), "torch": torch.__version__}), flush=True)
