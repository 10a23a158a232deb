"""What the Python CLI tests share (tests/cli/*.py): the ember binary and a fresh work directory
from the command line, counted checks and the exit status they make, running ember, and
torchvision's ResNets with their BatchNorm layers moved away from their defaults (so that a
wrong running statistic or affine parameter shows in the logits), the real images the parity
tests feed both (write_images), and the logits of each side (predict_logits, torchvision_logits).

    from harness import Harness, import_or_fail
    np, torch = import_or_fail("numpy", "torch")   # a missing module fails the test
    harness = Harness(sys.argv)    # argv: script, ember binary, work dir (emptied)
    r = harness.ember("predict", ...)  # subprocess.CompletedProcess, text output captured
    harness.check(r.returncode == 0, "what was checked")
    harness.finish()               # exit 1 if any check failed, else 0
"""

import importlib
import json
import os
import shutil
import subprocess
import sys


def import_or_fail(*names):
    """The modules `names` (dotted names: "PIL.Image", "safetensors.torch"), imported; a missing one
    is a failed test, not a skip (a cross-check that did not run must not pass): FAIL and exit 1,
    naming it and the way to install it."""
    try:
        return tuple(importlib.import_module(n) for n in names)
    except ImportError as e:
        print(f"FAIL: {e.name} is not importable by {sys.executable}; run scripts/install-deps.sh --test")
        sys.exit(1)


class Harness:
    def __init__(self, argv):
        self.binary, self.work = argv[1], argv[2]
        self.failures = []
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def check(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            self.failures.append(what)

    def ember(self, *args):
        return subprocess.run([self.binary, *args], capture_output=True, text=True)

    def predict_logits(self, np, what, directory, files, *args):
        """`ember predict ARGS DIRECTORY --json` -> (logits as a float64 array, one row per image in
        `files`' order, the parsed output), or (None, None) after a failed check when ember exits
        with an error."""
        r = self.ember("predict", *args, directory, "--json", "--top", "1")
        if r.returncode != 0:
            self.check(False, f"{what}: ember predict: exit {r.returncode}: {r.stderr.strip()}")
            return None, None
        out = json.loads(r.stdout)
        self.check([p["input"] for p in out["predictions"]] == files,
                   f"{what}: ember predict lists the images in order")
        return np.array([p["logits"] for p in out["predictions"]], dtype=np.float64), out

    def finish(self):
        if self.failures:
            print(f"{len(self.failures)} check(s) failed")
            sys.exit(1)
        print("all checks passed")
        sys.exit(0)


def write_images(np, Image, directory, specs, seed, tile=40):
    """Real images for the parity tests, one per (width, height, "jpg" | "png", PIL mode) in `specs`,
    written to `directory` as 0.jpg, 1.png, ...: smooth colour fields with a checkerboard of `tile`
    pixels and noise drawn from `seed`, so that resizing and cropping matter. Returns their paths,
    sorted."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    for i, (w, h, fmt, mode) in enumerate(specs):
        y, x = np.mgrid[0:h, 0:w]
        px = np.stack([(x * (3 + i)) % 256, (y * 2 + x) % 256, ((x - y) * (i + 1)) % 256], -1).astype(np.float64)
        px[(x // tile + y // tile) % 2 == 0] *= 0.5
        px += rng.normal(0, 12, px.shape)
        img = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8), "RGB").convert(mode)
        img.save(f"{directory}/{i}.{fmt}", **({"quality": 90} if fmt == "jpg" else {}))
    return sorted(os.path.join(directory, f) for f in os.listdir(directory))


IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def torchvision_logits(torch, transforms, Image, model, files, size, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """`model`'s logits (float64, one row per file) through torchvision's eval transforms as ember
    applies them: Resize(round(size * 256 / 224)), CenterCrop(size), ToTensor, Normalize."""
    tf = transforms.Compose([transforms.Resize(round(size * 256 / 224)), transforms.CenterCrop(size),
                             transforms.ToTensor(), transforms.Normalize(mean, std)])
    with torch.no_grad():
        return model(torch.stack([tf(Image.open(f).convert("RGB")) for f in files])).numpy().astype("float64")


def perturbed_resnet(torch, torchvision, name, seed, num_classes=1000, batches_tracked=None):
    """torchvision.models.<name> (resnet18, resnet34, resnet50, resnet101; no pretrained weights)
    seeded with `seed`, its BatchNorm running statistics and affine parameters drawn away from 0
    and 1; num_batches_tracked set when given."""
    torch.manual_seed(seed)
    model = getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.6, 1.4)
                m.bias.uniform_(-0.2, 0.2)
                if batches_tracked is not None:
                    m.num_batches_tracked.fill_(batches_tracked)
    return model
