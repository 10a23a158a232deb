#!/usr/bin/env python3
"""Compares ember's augmentation with torchvision 0.14's, op by op, on real images.

    check_torchvision_augment.py <ember binary> <work dir>

ember's random streams are not torch's, so the check has two halves:
  1. each deterministic op at fixed parameters: `ember augment-op --op OP --magnitude M` against
     torchvision.transforms.autoaugment._apply_op(img, OP, M, NEAREST, fill=None) (and
     F.adjust_hue, F.erase) on Fashion-MNIST images (1 channel, Debian's dataset-fashion-mnist)
     and RGB images, within the tolerance docs/data.md states for each op;
  2. ember's sampling: the magnitude tables equal torchvision's _augmentation_space exactly, and
     the ops, bins and signs TrivialAugmentWide / RandAugment draw are uniform over the right sets
     (chi-square with a fixed seed and a generous bound); RandomErasing's boxes lie in its ranges.
Mixup / CutMix are not in torchvision 0.14 (they came with transforms.v2 in 0.16): the batch
ember mixes is checked against a numpy reference written from torchvision v2's documented
semantics (images, soft targets, the CutMix box from lambda and its centre), targets sum to 1,
the box's area matches the adjusted lambda, and lambda's mean and variance match Beta(a, a).

Exit status: 0 pass, 1 fail (torchvision missing fails too: scripts/install-deps.sh --test
installs python3-torchvision). Run it with Debian's /usr/bin/python3.
"""

import gzip
import json
import math
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    from torchvision.transforms import InterpolationMode, RandAugment, TrivialAugmentWide
    from torchvision.transforms import functional as F
    from torchvision.transforms.autoaugment import _apply_op
except ImportError as e:  # not a skip: see the docstring
    print(f"FAIL: torchvision is not importable by {sys.executable} ({e}); run scripts/install-deps.sh --test")
    sys.exit(1)

EMBER, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"

# Per op: the largest allowed |ember - torchvision| in u8 levels, and the largest allowed share
# of differing pixels. Geometric ops pick nearest pixels: a sample point within float rounding of
# a pixel boundary may take the neighbour (a large level difference at very few pixels).
TOLERANCE = {
    "Identity": (0, 0.0), "Brightness": (0, 0.0), "Color": (0, 0.0), "Contrast": (0, 0.0),
    "Posterize": (0, 0.0), "Solarize": (0, 0.0), "AutoContrast": (0, 0.0), "Equalize": (0, 0.0),
    "Sharpness": (1, 0.01), "Hue": (1, 0.001),
    "ShearX": (255, 0.002), "ShearY": (255, 0.002), "TranslateX": (0, 0.0), "TranslateY": (0, 0.0),
    "Rotate": (255, 0.002),
}

failures = []
measured = {}
comparisons = 0


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def ember(*args, capture=True):
    r = subprocess.run([EMBER, "augment-op", *map(str, args)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: ember augment-op {' '.join(map(str, args))}: {r.stderr.strip()}")
    return r.stdout


def write_pnm(path, img):  # img: (C, H, W) uint8
    c, h, w = img.shape
    with open(path, "wb") as f:
        f.write(f"{'P5' if c == 1 else 'P6'}\n{w} {h}\n255\n".encode())
        f.write(np.ascontiguousarray(img.transpose(1, 2, 0)).tobytes())


def read_pnm(path):
    with open(path, "rb") as f:
        data = f.read()
    # ember writes "P5\n<w> <h>\n255\n" (P6 for RGB), then the pixels.
    magic, size, maxval, pixels = data.split(b"\n", 3)
    w, h = map(int, size.split())
    c = 1 if magic == b"P5" else 3
    assert maxval == b"255" and len(pixels) == w * h * c, (magic, size, maxval, len(pixels))
    pix = np.frombuffer(pixels, dtype=np.uint8).reshape(h, w, c)
    return pix.transpose(2, 0, 1)


def fashion_images(n):
    with gzip.open(FASHION, "rb") as f:
        raw = f.read()
    count, rows, cols = int.from_bytes(raw[4:8], "big"), int.from_bytes(raw[8:12], "big"), int.from_bytes(raw[12:16], "big")
    assert count >= n
    return [np.frombuffer(raw[16 + i * rows * cols: 16 + (i + 1) * rows * cols], dtype=np.uint8).reshape(1, rows, cols)
            for i in (0, 1, 7)[:n]]


def rgb_images():
    """Two RGB images made from real ones: Fashion-MNIST pictures upscaled into the three
    channels with colour gradients, and a photographic-ish scene (gradients, blurred shapes,
    sensor noise, texture) at an odd size, so that centres fall between pixels."""
    g = np.random.default_rng(5)
    f = fashion_images(3)
    big = [np.kron(x[0], np.ones((2, 2), dtype=np.uint8)).astype(np.float64) for x in f]  # 56x56
    yy, xx = np.mgrid[0:56, 0:56] / 55.0
    a = np.stack([0.7 * big[0] + 70 * xx, 0.6 * big[1] + 90 * yy, 0.8 * big[2] + 40 * (1 - xx)])
    a = np.clip(a, 0, 255).astype(np.uint8)
    h, w = 45, 61
    yy, xx = np.mgrid[0:h, 0:w]
    b = np.stack([200 * xx / w + 30, 160 * yy / h + 50, 120 * (1 - xx / w) + 80 * yy / h]).astype(np.float64)
    for _ in range(6):
        cy, cx, r = g.uniform(0, h), g.uniform(0, w), g.uniform(4, 14)
        d = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
        b += d * g.uniform(-120, 120, size=(3, 1, 1))
    b += 12 * np.sin(xx / 2.3 + yy / 3.1) + g.normal(0, 6, size=b.shape)
    b = np.clip(b, 0, 255).astype(np.uint8)
    return [a, b]


def torchvision_op(img, op, magnitude):
    t = torch.from_numpy(np.array(img))
    if op == "Hue":
        return F.adjust_hue(t, magnitude).numpy()
    return _apply_op(t, op, magnitude, interpolation=InterpolationMode.NEAREST, fill=None).numpy()


# ---- 1. the ops at fixed parameters ---------------------------------------------------------------

images = [(f"fashion{i}", x) for i, x in enumerate(fashion_images(3))] + [(f"rgb{i}", x) for i, x in enumerate(rgb_images())]
wide = TrivialAugmentWide()._augmentation_space(31)
base_cases = []
for op, (mags, signed) in wide.items():
    if mags.ndim == 0:
        base_cases.append((op, 0.0))
        continue
    picks = sorted({1, 7, 15, 22, 30})
    for k in picks:
        m = float(mags[k].item())
        base_cases.append((op, m))
        if signed:
            base_cases.append((op, -m))
for m in (0.45, 0.1, 0.0, -0.3, -0.5, 0.5):
    base_cases.append(("Hue", m))
base_cases += [("Rotate", 90.0), ("Rotate", 180.0), ("Rotate", 45.0), ("Rotate", 13.5), ("ShearX", 0.5), ("TranslateX", 7.9)]

for name, img in images:
    path = os.path.join(WORK, f"{name}.{'pgm' if img.shape[0] == 1 else 'ppm'}")
    write_pnm(path, img)
    # RandAugment's magnitude 9 of each op for this image's size, both signs (its translation
    # range scales with the image).
    rand_cases = []
    for op, (mags, signed) in RandAugment()._augmentation_space(31, tuple(img.shape[1:])).items():
        m = 0.0 if mags.ndim == 0 else float(mags[9].item())
        rand_cases += [(op, m)] + ([(op, -m)] if signed and mags.ndim > 0 else [])
    cases = base_cases + rand_cases
    outdir = os.path.join(WORK, f"{name}-out")
    args = sum((["--op", op, "--magnitude", repr(m)] for op, m in cases), [])
    ember(*args, "--in", path, "--out", outdir, *(["--gray"] if img.shape[0] == 1 else []))
    for k, (op, m) in enumerate(cases):
        got = read_pnm(os.path.join(outdir, f"{k}.pnm"))
        want = torchvision_op(img, op, m)
        check(got.shape == want.shape, f"{op}({m}) on {name}: shape {got.shape} vs torchvision {want.shape}")
        if got.shape != want.shape:
            continue
        comparisons += 1
        diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
        frac = float((diff > 0).mean())
        worst = measured.setdefault(op, [0, 0.0])
        worst[0] = max(worst[0], int(diff.max()))
        worst[1] = max(worst[1], frac)
        max_abs, max_frac = TOLERANCE[op]
        check(int(diff.max()) <= max_abs and frac <= max_frac,
              f"{op}({m}) on {name}: max |diff| {int(diff.max())}, {100 * frac:.3f}% of values differ "
              f"(tolerance: max {max_abs}, at most {100 * max_frac:.2f}%)")
        # A real image must change under every op but Identity at a non-trivial magnitude: the
        # comparison is not between two unchanged copies.
        if m != 0.0 and op in ("Rotate", "ShearX", "TranslateY", "Equalize"):
            check(not np.array_equal(want, img), f"{op}({m}) on {name} left the image unchanged")

# F.erase on the normalized tensor: ToTensor then a box of the value.
for name, img in images[:1] + images[3:4]:
    path = os.path.join(WORK, f"{name}.{'pgm' if img.shape[0] == 1 else 'ppm'}")
    out = os.path.join(WORK, "erase.f32")
    ember("--op", "Erase", "--box", "3,5,10,7", "--magnitude", "0", "--in", path, "--out", out,
          *(["--gray"] if img.shape[0] == 1 else []))
    got = np.fromfile(out, dtype=np.float32).reshape(img.shape)
    want = F.erase(F.convert_image_dtype(torch.from_numpy(img.copy()), torch.float32), 3, 5, 10, 7,
                   torch.tensor(0.0)).numpy()
    check(np.array_equal(got, want), f"Erase on {name}: max |diff| {np.abs(got - want).max()}")
    measured["Erase"] = [float(np.abs(got - want).max()), 0.0]

# ---- 2. the tables and the draws --------------------------------------------------------------------

for policy, (h, w) in (("trivial", (32, 32)), ("randaug", (45, 61))):
    got = json.loads(ember("--bins", policy, "--height", h, "--width", w))
    space = (TrivialAugmentWide()._augmentation_space(31) if policy == "trivial"
             else RandAugment()._augmentation_space(31, (h, w)))
    check(sorted(got) == sorted(space), f"{policy}: ops {sorted(got)} vs torchvision {sorted(space)}")
    for op, (mags, signed) in space.items():
        want = [] if mags.ndim == 0 else [float(v) for v in mags.to(torch.float32).tolist()]
        g = got[op]["magnitudes"]
        check(len(g) == len(want) and all(np.float32(a) == np.float32(b) for a, b in zip(g, want)),
              f"{policy} {op}: bins {g} vs torchvision {want}")
        check(got[op]["signed"] == (signed and mags.ndim > 0), f"{policy} {op}: signed {got[op]['signed']} vs {signed}")


def chi2_ok(counts, what):
    """Uniform counts: the chi-square statistic below df + 6 sqrt(2 df) (about 6 sigma)."""
    counts = np.asarray(counts, dtype=np.float64)
    expected = counts.sum() / len(counts)
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = len(counts) - 1
    check(stat < df + 6 * math.sqrt(2 * df), f"{what}: chi-square {stat:.1f} with {df} degrees of freedom")
    return stat


names = list(wide)
n = 14000
draws = [json.loads(line) for line in ember("--sample", "trivial", "--count", n, "--seed", 7).splitlines()]
check(len(draws) == n, f"trivial: {len(draws)} draws")
measured["trivial_op_chi2"] = chi2_ok([sum(d["op"] == o for d in draws) for o in names], "TrivialAugmentWide ops")
measured["trivial_bin_chi2"] = chi2_ok([sum(d["bin"] == b for d in draws) for b in range(31)], "TrivialAugmentWide bins")
signed_ops = [d for d in draws if wide[d["op"]][1]]
neg = sum(d["negative"] for d in signed_ops) / len(signed_ops)
check(abs(neg - 0.5) < 0.03, f"TrivialAugmentWide: {neg:.3f} of the signed draws are negative")
check(not any(d["negative"] for d in draws if not wide[d["op"]][1]), "TrivialAugmentWide: an unsigned op got a sign")
for d in draws[:300]:
    mags, signed = wide[d["op"]]
    want = 0.0 if mags.ndim == 0 else float(mags[d["bin"]]) * (-1 if d["negative"] else 1)
    check(np.float32(d["magnitude"]) == np.float32(want), f"TrivialAugmentWide: magnitude {d} vs table {want}")

rdraws = [json.loads(line) for line in ember("--sample", "randaug", "--count", n, "--seed", 8).splitlines()]
check(all(len(d) == 2 for d in rdraws), "RandAugment: not two ops per sample")
flat = [c for d in rdraws for c in d]
measured["randaug_op_chi2"] = chi2_ok([sum(c["op"] == o for c in flat) for o in names], "RandAugment ops")
check(all(c["bin"] == 9 for c in flat), "RandAugment: a bin other than magnitude 9")

edraws = [json.loads(line)["box"] for line in ember("--sample", "erasing", "--count", 4000, "--seed", 9,
                                                   "--height", 28, "--width", 28).splitlines()]
erased = [b for b in edraws if b is not None]
check(abs(len(erased) / len(edraws) - 0.5) < 0.03, f"RandomErasing(p=0.5): erased {len(erased)} of {len(edraws)}")
for t, l, h, w in erased:
    ok = 0 <= t and 0 <= l and t + h <= 28 and l + w <= 28 and h < 28 and w < 28 and h >= 1 and w >= 1
    # area within scale (0.02, 0.33) and ratio within (0.3, 3.3), up to the rounding of the sides
    ok = ok and 0.02 * 784 - (h + w) <= h * w <= 0.33 * 784 + (h + w) + 1
    check(ok, f"RandomErasing box {(t, l, h, w)} outside its ranges")

# ---- Mixup / CutMix ---------------------------------------------------------------------------------

for alpha in (0.2, 1.0):
    lam = np.array([json.loads(x)["lambda"] for x in ember("--sample", "mixup", "--mixup-alpha", alpha,
                                                            "--count", 4000, "--seed", 3).splitlines()])
    var = 1 / (4 * (2 * alpha + 1))
    check(abs(lam.mean() - 0.5) < 0.03, f"Mixup Beta({alpha}): mean {lam.mean():.4f}")
    check(abs(lam.var() - var) < 0.1 * var, f"Mixup Beta({alpha}): variance {lam.var():.4f}, Beta's {var:.4f}")
    check(lam.min() >= 0 and lam.max() <= 1, f"Mixup: lambda outside [0, 1]")
    measured[f"mixup_beta{alpha}"] = [float(lam.mean()), float(lam.var()), var]
both = [json.loads(x) for x in ember("--sample", "both", "--mixup-alpha", 0.2, "--cutmix-alpha", 1.0, "--count", 4000,
                                     "--seed", 4, "--height", 28, "--width", 28).splitlines()]
share = sum(d["cutmix"] for d in both) / len(both)
check(abs(share - 0.5) < 0.03, f"Mixup or CutMix: CutMix chosen for {share:.3f} of the batches")
for d in both:
    if not d["cutmix"]:
        continue
    (cy, cx), lam0 = d["center"], d["drawn_lambda"]
    r = 0.5 * math.sqrt(1.0 - lam0)
    rw, rh = int(r * 28), int(r * 28)
    x1, y1, x2, y2 = max(cx - rw, 0), max(cy - rh, 0), min(cx + rw, 28), min(cy + rh, 28)
    check(d["box"] == [y1, x1, y2 - y1, x2 - x1], f"CutMix box {d['box']} vs torchvision's formula {[y1, x1, y2 - y1, x2 - x1]}")
    check(abs(d["lambda"] - (1 - (x2 - x1) * (y2 - y1) / 784)) < 1e-12, f"CutMix lambda {d['lambda']} vs its box")

paths = []
for name, img in images[:3]:
    paths.append(os.path.join(WORK, f"{name}.pgm"))
labels = [3, 0, 3]
for kind, args in (("mixup", ["--mixup-alpha", 0.4]), ("cutmix", ["--cutmix-alpha", 1.0])):
    for batch_index in range(4):
        out = os.path.join(WORK, "mixed.f32")
        res = json.loads(ember("--mix", kind, *args, "--seed", 11, "--batch-index", batch_index, "--gray", "--labels",
                               ",".join(map(str, labels)), "--num-classes", 5, "--out", out,
                               *sum((["--in", p] for p in paths), [])))
        got = np.fromfile(out, dtype=np.float32).reshape(res["shape"])
        x = np.stack([img.astype(np.float32) / np.float32(255) for _, img in images[:3]])
        rolled = np.roll(x, 1, axis=0)
        lam = res["lambda"]
        onehot = np.eye(5, dtype=np.float32)[labels]
        if kind == "mixup":
            want = rolled * np.float32(1 - lam) + x * np.float32(lam)
        else:
            t, l, h, w = res["box"]
            want = x.copy()
            want[..., t:t + h, l:l + w] = rolled[..., t:t + h, l:l + w]
            check(abs(lam - (1 - h * w / (28 * 28))) < 1e-12, f"CutMix: lambda {lam} vs box area {h * w}")
        targets = np.roll(onehot, 1, axis=0) * np.float32(1 - lam) + onehot * np.float32(lam)
        check(np.array_equal(got, want), f"{kind} batch {batch_index}: images differ by {np.abs(got - want).max()}")
        tg = np.array(res["targets"], dtype=np.float32)
        check(np.array_equal(tg, targets), f"{kind} batch {batch_index}: targets {tg} vs {targets}")
        check(np.allclose(tg.sum(axis=1), 1.0, atol=1e-6), f"{kind}: targets do not sum to 1: {tg.sum(axis=1)}")

measured["comparisons"] = comparisons
print(json.dumps({"measured": measured}, indent=None))
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all augmentation checks passed")
