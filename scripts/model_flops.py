#!/usr/bin/env python3
"""Forward FLOPs of every zoo model at its default input, from ember's own count (the FLOPs column
of docs/models.md).

    python3 scripts/model_flops.py [EMBER]     # EMBER: the ember binary (default build/bin/ember)

For each model, `ember explain --model NAME --batch-size 1 --json` records one training step of one
image without running a kernel (docs/cuda.md: the launch ledger; it needs a build with the CUDA
backend or its emulator) and declares every op's FLOPs. This script adds up the forward phase:
the convolutions and the linear layers (2 FLOPs per multiply-add) and, beside them, every forward
op (batch norm, ReLU, pooling and the loss included). It prints a Markdown table.
"""

import json
import subprocess
import sys

# name, input channels, image size, classes: each model's default input (docs/models.md).
ZOO = [("simple_cnn", 1, 28, 10), ("cnn", 1, 28, 10), ("resnet18", 3, 224, 1000), ("resnet34", 3, 224, 1000),
       ("resnet50", 3, 224, 1000), ("resnet101", 3, 224, 1000), ("resnet18_cifar", 3, 32, 10),
       ("resnet_small", 3, 32, 10)]


def forward_flops(ember, name, channels, size, classes):
    """(conv + linear FLOPs, all forward FLOPs) of one image."""
    r = subprocess.run([ember, "explain", "--model", name, "--batch-size", "1", "--image-size", str(size),
                        "--channels", str(channels), "--classes", str(classes), "--json"],
                       capture_output=True, text=True, check=True)
    entries = [e for e in json.loads(r.stdout)["entries"] if e["phase"] == "forward"]
    matmul = sum(e["flops"] for e in entries if e["op"] in ("conv2d", "linear"))
    return matmul, sum(e["flops"] for e in entries)


def main():
    ember = sys.argv[1] if len(sys.argv) > 1 else "build/bin/ember"
    print("| model | input | multiply-adds (conv + linear) | FLOPs (conv + linear) | FLOPs (every forward op) |")
    print("| --- | --- | --- | --- | --- |")
    for name, channels, size, classes in ZOO:
        matmul, total = forward_flops(ember, name, channels, size, classes)
        print(f"| `{name}` | {channels} x {size} x {size} | {matmul / 2 / 1e6:,.1f} M | {matmul / 1e6:,.1f} M "
              f"| {total / 1e6:,.1f} M |")


if __name__ == "__main__":
    main()
