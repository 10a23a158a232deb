#!/usr/bin/env python3
"""PyTorch side of the `cnn` recipe comparison (bench/compare_pytorch.sh runs both sides).

Trains the Fashion-MNIST `cnn` (conv1 1->32, conv2 32->64, fc1 3136->128, fc2 128->10) with
Adam lr 1e-3, batch 64, no augmentation, exactly like
  ember train --model cnn --optimizer adam --lr 1e-3 --batch-size 64 --epochs E --no-augment --seed S
and prints one JSON line per epoch: test accuracy and training images/s (data already in memory,
normalized once, as ember's loader does). Any PyTorch; bench/compare_pytorch.sh runs it with
PyTorch 2.x from scripts/python-env.sh. --amp bf16 runs forward and loss under
torch.autocast('cpu', dtype=torch.bfloat16) (ember: --amp bf16); --max-steps N stops the first
epoch after N steps (bench/compare_amp_cpu.sh).
  "$(scripts/python-env.sh)" bench/pytorch_cnn.py --seed 1 --epochs 2 --threads 2
"""
import argparse
import gzip
import json
import struct
import time

import numpy as np
import torch
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--amp", choices=["off", "bf16"], default="off")
    p.add_argument("--max-steps", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    d = a.data_dir
    xtr = torch.from_numpy(read_idx(f"{d}/train-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    ytr = torch.from_numpy(read_idx(f"{d}/train-labels-idx1-ubyte.gz").astype(np.int64))
    xte = torch.from_numpy(read_idx(f"{d}/t10k-images-idx3-ubyte.gz").astype(np.float32) / 255.0).unsqueeze(1)
    yte = torch.from_numpy(read_idx(f"{d}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = xtr.mean().item(), xtr.std().item()
    xtr, xte = (xtr - mean) / std, (xte - mean) / std
    model = CNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(1 if a.max_steps else a.epochs):
        model.train()
        perm = torch.randperm(len(xtr))
        t0 = time.perf_counter()
        images = 0
        for step, i in enumerate(range(0, len(xtr), 64)):
            if a.max_steps and step == a.max_steps:
                break
            idx = perm[i:i + 64]
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16"):
                loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            images += len(idx)
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            correct = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item() for i in range(0, len(xte), 1000))
        print(json.dumps({"bench": "pytorch_cnn", "torch": torch.__version__, "seed": a.seed, "epoch": epoch + 1,
                          "threads": a.threads, "amp": a.amp, "test_acc": correct / len(xte),
                          "images_per_sec": images / seconds}),
              flush=True)


if __name__ == "__main__":
    main()
