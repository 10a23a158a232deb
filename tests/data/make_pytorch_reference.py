#!/usr/bin/python3
"""Generates tests/data/pytorch_adam_* with PyTorch (Debian's python3-torch 1.13), independently
of ember: the reference that tests/test_pytorch_parity.cpp compares ember's training against.

  /usr/bin/python3 tests/data/make_pytorch_reference.py /usr/share/datasets/fashion-mnist tests/data

The model is ember's simple_cnn for 1x28x28 inputs (conv1: 1->32 3x3 pad 1, ReLU, 2x2 max pool,
fc: 32*14*14 -> 10). Starting from weights drawn here, it takes STEPS Adam steps (lr 1e-3,
PyTorch defaults) on the first STEPS*BATCH Fashion-MNIST training images in file order,
normalized with the mean and std that ember computes from the training set. Written: the
initial and final weights as safetensors (PyTorch state_dict names), and the per-step losses.
"""
import gzip
import json
import struct
import sys

import numpy as np
import torch

STEPS, BATCH = 5, 16
# ember's channel_stats() of the Fashion-MNIST training images (exact integer sums / 255):
MEAN, STD = 0.2860405969887955, 0.3530242445149226


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def save_safetensors(path, tensors):
    """The safetensors format, written by hand (no safetensors package for Debian's python)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


class SimpleCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.fc = torch.nn.Linear(32 * 14 * 14, 10)

    def forward(self, x):
        return self.fc(torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2).flatten(1))


def main(data_dir, out_dir):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = SimpleCNN()
    save_safetensors(f"{out_dir}/pytorch_adam_initial.safetensors", model.state_dict())
    images = read_idx(f"{data_dir}/train-images-idx3-ubyte.gz")[: STEPS * BATCH]
    labels = read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz")[: STEPS * BATCH]
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0).unsqueeze(1)
    x = (x - MEAN) / STD
    y = torch.from_numpy(labels.astype(np.int64))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for s in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[s * BATCH:(s + 1) * BATCH]), y[s * BATCH:(s + 1) * BATCH])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    save_safetensors(f"{out_dir}/pytorch_adam_final.safetensors", model.state_dict())
    with open(f"{out_dir}/pytorch_adam_losses.json", "w") as f:
        json.dump({"torch": torch.__version__, "steps": STEPS, "batch": BATCH, "lr": 1e-3, "losses": losses}, f, indent=1)
    print("losses", losses)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
