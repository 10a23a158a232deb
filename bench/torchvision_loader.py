#!/usr/bin/env python3
"""torchvision's side of `ember bench loader`: the same pipeline, timed the same way.

    python3 bench/torchvision_loader.py --root TREE --batch-size 32 --workers N [--epochs K]

datasets.ImageFolder + Resize(256) + CenterCrop(224) + ToTensor + Normalize(ImageNet), a
DataLoader(batch_size, shuffle=True, num_workers) iterated for K epochs, and one JSON line with
images_per_sec (and per epoch), like ember's. Any torchvision: bench/compare_torchvision_loader.sh
runs it with current torchvision from PyPI (scripts/python-env.sh).
"""
import argparse
import json
import time

import torch
from torchvision import datasets, transforms


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--root", required=True)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--resize", type=int, default=256)
    p.add_argument("--crop", type=int, default=224)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    tf = transforms.Compose([
        transforms.Resize(args.resize),
        transforms.CenterCrop(args.crop),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(args.root, tf)
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    images = 0
    per_epoch = []
    checksum = 0.0
    start = time.perf_counter()
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        n = 0
        for x, y in loader:
            n += x.shape[0]
            checksum += float(x[0, 0, 0, 0])
        per_epoch.append(n / (time.perf_counter() - t0))
        images += n
    seconds = time.perf_counter() - start
    print(json.dumps({"bench": "torchvision_loader", "root": args.root, "images": images, "epochs": args.epochs,
                      "batch_size": args.batch_size, "workers": args.workers, "threads": torch.get_num_threads(),
                      "seconds": seconds, "images_per_sec": images / seconds,
                      "images_per_sec_by_epoch": per_epoch, "torchvision": __import__("torchvision").__version__,
                      "checksum": checksum}))


if __name__ == "__main__":
    main()
