#!/usr/bin/env python3
"""The ResNet family of the zoo (docs/models.md) against torchvision: the same weights give the
same logits, before and after fine-tuning's head swap.

    zoo_parity.py <ember binary> <work dir>

1. Parity: for resnet34, resnet50 and resnet101, torchvision.models.NAME(weights=None) with a
   fixed seed and BatchNorm running statistics (and affine parameters) perturbed away from their
   defaults (harness.perturbed_resnet), saved with safetensors.torch.save_file(state_dict()).
   Real images (JPEG and PNG, RGB and grayscale, of several sizes) go through torchvision's eval
   transforms at 64 x 64 (Resize 73, CenterCrop 64, ToTensor, Normalize with ImageNet's mean/std)
   into the model in eval mode, and through `ember predict FILE --model NAME DIR --image-size 64
   --json`. For every image, max |ember - torch| / max |torch| over its 1000 logits must be <= 1e-4,
   and the top-1 classes must agree. resnet18_cifar likewise, at 32 x 32, against torchvision's
   resnet18 with conv1 a 3x3 stride-1 convolution and maxpool an nn.Identity (docs/models.md).
2. Fine-tuning after the head swap: `ember train --model resnet50 --init-weights FILE --finetune
   --freeze-backbone` on a 3-class ImageFolder tree (make_data.py) replaces `fc` by a (3, 2048)
   classifier and trains it alone: every backbone tensor (running statistics included) stays
   bit-identical to the file's. The weights it saves load into torchvision.models.resnet50(
   num_classes=3) with strict=True, and their logits through `ember predict --model resnet50` and
   through the run's own checkpoint metadata (its eval transform at --image-size 32) equal
   torchvision's within 1e-4 relative.

Exit status 0 pass, 1 fail (also when torch, torchvision, PIL or safetensors are missing:
scripts/install-deps.sh --test installs them; a cross-check that did not run must not pass).
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (IMAGENET_MEAN, IMAGENET_STD, Harness, import_or_fail, perturbed_resnet,  # noqa: E402
                     torchvision_logits, write_images)

np, torch, torchvision, Image, safetensors, st, transforms = import_or_fail(
    "numpy", "torch", "torchvision", "PIL.Image", "safetensors", "safetensors.torch", "torchvision.transforms")
safe_open, load_file, save_file = safetensors.safe_open, st.load_file, st.save_file

harness = Harness(sys.argv)
WORK, check, ember = harness.work, harness.check, harness.ember
TOLERANCE = 1e-4
SIZE = 64  # the CenterCrop; Resize to round(64 * 256 / 224) = 73 first, as ember does
started = time.monotonic()
torch.set_num_threads(2)

images = f"{WORK}/images"
files = write_images(np, Image, images, [(96, 80, "jpg", "RGB"), (71, 90, "png", "RGB"), (64, 64, "png", "L")],
                     seed=35, tile=12)


def torch_logits(model, size, mean=IMAGENET_MEAN, std=IMAGENET_STD):
    return torchvision_logits(torch, transforms, Image, model, files, size, mean, std)


def ember_logits(what, *args):
    return harness.predict_logits(np, what, images, files, *args)[0]


def compare(what, got, expected):
    """Checks ember's logits against torchvision's per image; returns the worst relative difference."""
    if got is None:
        return None
    check(got.shape == expected.shape, f"{what}: logits {got.shape}, torchvision's {expected.shape}")
    if got.shape != expected.shape:
        return None
    worst = max(np.abs(e - t).max() / np.abs(t).max() for e, t in zip(got, expected))
    check(worst <= TOLERANCE, f"{what}: max |ember - torch| / max |torch| = {worst:.2e} <= {TOLERANCE} "
                              f"over {len(files)} images")
    check(bool((got.argmax(1) == expected.argmax(1)).all()), f"{what}: the same top-1 class for every image")
    return worst


# ---- 1. parity ---------------------------------------------------------------------------------
worst = {}
for seed, name in enumerate(["resnet34", "resnet50", "resnet101"], start=3501):
    model = perturbed_resnet(torch, torchvision, name, seed, batches_tracked=77).eval()
    weights = f"{WORK}/{name}.safetensors"
    save_file(model.state_dict(), weights)
    expected = torch_logits(model, SIZE)
    worst[name] = compare(name, ember_logits(name, weights, "--model", name, "--image-size", str(SIZE)), expected)
    if name != "resnet50":
        os.remove(weights)  # 87 and 178 MB; resnet50's is fine-tuned below
# resnet18_cifar: torchvision's resnet18 with the CIFAR stem has the same names and shapes.
model = perturbed_resnet(torch, torchvision, "resnet18", 3504, num_classes=10)
model.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
model.maxpool = torch.nn.Identity()
model.eval()
save_file(model.state_dict(), f"{WORK}/resnet18_cifar.safetensors")
worst["resnet18_cifar"] = compare("resnet18_cifar", ember_logits(
    "resnet18_cifar", f"{WORK}/resnet18_cifar.safetensors", "--model", "resnet18_cifar", "--image-size", "32"),
    torch_logits(model, 32))
print("parity (max relative difference): " + ", ".join(
    f"{n} {w:.2e}" if w is not None else f"{n} -" for n, w in worst.items()))

# ---- 2. fine-tuning after the head swap ------------------------------------------------------------
tree = f"{WORK}/tiny"
subprocess.run([sys.executable, f"{HERE}/make_data.py", "folder", tree, "3"], check=True)
source = load_file(f"{WORK}/resnet50.safetensors")
tuned_path = f"{WORK}/resnet50-tuned.safetensors"
r = ember("train", "--data", tree, "--model", "resnet50", "--image-size", "32", "--init-weights",
          f"{WORK}/resnet50.safetensors", "--finetune", "--freeze-backbone", "--epochs", "1", "--max-steps", "2",
          "--batch-size", "8", "--optimizer", "sgd", "--lr", "0.05", "--no-augment", "--eval-limit", "8",
          "--save-weights", tuned_path, "--quiet")
check(r.returncode == 0, f"ember train --model resnet50 --finetune --freeze-backbone: exit {r.returncode} "
                         f"{r.stderr.strip()}")
if r.returncode == 0:
    tuned = load_file(tuned_path)
    check(tuple(tuned["fc.weight"].shape) == (3, 2048) and tuple(tuned["fc.bias"].shape) == (3,),
          "the new classifier fc is (3, 2048) + (3,)")
    backbone = [k for k in source if not k.startswith("fc.")]
    same = [k for k in backbone if k in tuned and torch.equal(tuned[k], source[k])]
    check(len(same) == len(backbone), f"--freeze-backbone: {len(same)} of {len(backbone)} backbone tensors "
                                      "(weights and running statistics) bit-identical")
    head = torchvision.models.resnet50(weights=None, num_classes=3)
    missing, unexpected = head.load_state_dict(tuned, strict=True)
    check(not missing and not unexpected, "the saved weights load into torchvision's resnet50(num_classes=3) "
                                          "with strict=True")
    head.eval()
    worst["resnet50 fine-tuned, --model"] = compare(
        "fine-tuned resnet50 (--model)", ember_logits("fine-tuned --model", tuned_path, "--model", "resnet50",
                                                      "--image-size", str(SIZE)), torch_logits(head, SIZE))
    with safe_open(tuned_path, "pt") as f:
        meta = f.metadata()
    mean, std = json.loads(meta["ember.mean"]), json.loads(meta["ember.std"])
    check(meta["ember.model"] == "resnet50" and meta["ember.image_size"] == "32",
          f"the run's metadata names resnet50 at 32 x 32 ({meta['ember.model']}, {meta['ember.image_size']})")
    worst["resnet50 fine-tuned, checkpoint"] = compare(
        "fine-tuned resnet50 (its checkpoint)", ember_logits("fine-tuned checkpoint", tuned_path),
        torch_logits(head, 32, mean, std))

print(f"zoo_parity: {time.monotonic() - started:.1f} s")
harness.finish()
