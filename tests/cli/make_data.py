#!/usr/bin/env python3
"""Small datasets for tests/cli/robust.sh, with the standard library only.
  make_data.py idx DIR [TEST_SIDE]   MNIST-style IDX files: 256 training and 64 test images of 28x28
                                     (class c: a bright 6x4 box at a class-specific place, plus
                                     noise); TEST_SIDE gives the test images another size
  make_data.py folder DIR NCLASSES   an ImageFolder tree of 16x16 grayscale PNGs, 12 per class
"""
import os, random, struct, sys, zlib


def image(c, side, rng):
    px = bytearray(side * side)
    r0, c0 = 2 + (c // 5) * (side // 2 - 2), 2 + (c % 5) * (side // 6)
    for y in range(side):
        for x in range(side):
            on = r0 <= y < r0 + 6 and c0 <= x < c0 + 4
            px[y * side + x] = min(255, (180 if on else 0) + rng.randrange(60))
    return px


def write_idx(path, n, side, rng, labels_path):
    imgs, labs = bytearray(), bytearray()
    for i in range(n):
        imgs += image(i % 10, side, rng)
        labs.append(i % 10)
    with open(path, "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, side, side) + imgs)
    with open(labels_path, "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labs)


def png(path, px, side):
    raw = b"".join(b"\0" + bytes(px[y * side:(y + 1) * side]) for y in range(side))
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


rng = random.Random(7)
kind, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
if kind == "idx":
    test_side = int(sys.argv[3]) if len(sys.argv) > 3 else 28
    write_idx(f"{out}/train-images-idx3-ubyte", 256, 28, rng, f"{out}/train-labels-idx1-ubyte")
    write_idx(f"{out}/t10k-images-idx3-ubyte", 64, test_side, rng, f"{out}/t10k-labels-idx1-ubyte")
else:
    for c in range(int(sys.argv[3])):
        os.makedirs(f"{out}/class{c}", exist_ok=True)
        for i in range(12):
            png(f"{out}/class{c}/{i}.png", image(c, 16, rng), 16)
