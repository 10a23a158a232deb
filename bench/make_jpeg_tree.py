#!/usr/bin/env python3
"""Writes an ImageFolder tree of synthetic, photographic-looking JPEGs for the loader benchmark.

    python3 bench/make_jpeg_tree.py OUT_DIR [--images 2000] [--classes 10] [--seed 0]

Each image is about 500x375 (sizes vary a little, a quarter of them portrait), built from what
makes real photos cost what they cost to decode: smooth colour gradients (sky, walls), a few
soft-edged shapes (objects) and fine sensor-like noise (texture the JPEG encoder cannot throw
away), saved at quality 90 with 4:2:0 chroma subsampling, as cameras and most datasets do. The
content is seeded, so the tree is the same on every machine. Needs numpy and Pillow (Debian:
python3-numpy, python3-pil).
"""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def make_image(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    # Two-direction gradients with random colours.
    c0, c1, c2 = rng.uniform(0, 255, (3, 3))
    a = x / w
    b = y / h
    for ch in range(3):
        img[..., ch] = c0[ch] * (1 - a) * (1 - b) + c1[ch] * a + c2[ch] * b * (1 - a)
    im = Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))
    # Shapes: ellipses, rectangles, polygons, then a slight blur for soft edges.
    draw = ImageDraw.Draw(im)
    for _ in range(rng.integers(4, 12)):
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(20, w // 2), y0 + rng.integers(20, h // 2)
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=colour)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=colour)
        else:
            pts = [(int(rng.integers(0, w)), int(rng.integers(0, h))) for _ in range(rng.integers(3, 7))]
            draw.polygon(pts, fill=colour)
    im = im.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 2.0))))
    arr = np.asarray(im).astype(np.float32)
    # Sensor noise plus some higher-frequency texture.
    arr += rng.normal(0, rng.uniform(3, 9), arr.shape)
    arr += 12 * np.sin(x[..., None] * rng.uniform(0.05, 0.4)) * np.cos(y[..., None] * rng.uniform(0.05, 0.4))
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    total = 0
    for i in range(args.images):
        cls = f"class_{i % args.classes:02d}"
        os.makedirs(os.path.join(args.out, cls), exist_ok=True)
        w, h = int(rng.integers(470, 531)), int(rng.integers(350, 401))
        if rng.uniform() < 0.25:
            w, h = h, w
        path = os.path.join(args.out, cls, f"img_{i:05d}.jpg")
        make_image(rng, w, h).save(path, quality=90, subsampling=2)
        total += os.path.getsize(path)
    print(f"{args.images} JPEGs in {args.out}, {total / args.images / 1024:.1f} KiB on average")


if __name__ == "__main__":
    main()
