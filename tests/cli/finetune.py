#!/usr/bin/env python3
"""Fine-tuning from PyTorch weights (Note [Fine-tuning] in train/finetune.h), against torchvision.

    finetune.py <ember binary> <work dir>

1. Parity: torchvision.models.resnet18(weights=None) with a fixed seed and BatchNorm running
   statistics (and affine parameters) perturbed away from their defaults, saved with
   safetensors.torch.save_file(model.state_dict()) - once with num_batches_tracked, once without.
   Real images (JPEG and PNG, RGB and grayscale, of several sizes) go through torchvision's eval
   transforms (Resize 256, CenterCrop 224, ToTensor, Normalize with ImageNet's mean/std) into the
   model in eval mode, and through `ember predict FILE --model resnet18 DIR --json`. For every
   image, max |ember - torch| / max |torch| over its 1000 logits must be <= 1e-4.
2. Bad files: a tensor of the wrong shape, a missing tensor, a tensor ResNet-18 does not have
   and a file that is not safetensors each give one `ember: error:` line naming the problem.
3. Fine-tuning runs: a few steps of `ember train --finetune` on a tiny ImageFolder tree
   (make_data.py). With --freeze-backbone every backbone tensor (running statistics included)
   is bit-identical to the file's and the new 3-class fc has changed; without it every parameter
   and running statistic has changed; --backbone-lr-scale 0.1 gives the backbone's param group
   a tenth of the lr in the saved training state.

Exit status 0 pass, 1 fail (also when torch, torchvision, PIL or safetensors are missing:
scripts/install-deps.sh --test installs them; a cross-check that did not run must not pass).
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import Harness, import_or_fail, perturbed_resnet, torchvision_logits, write_images  # noqa: E402

np, torch, torchvision, Image, st, transforms = import_or_fail(
    "numpy", "torch", "torchvision", "PIL.Image", "safetensors.torch", "torchvision.transforms")
load_file, save_file = st.load_file, st.save_file

harness = Harness(sys.argv)
WORK, check, ember = harness.work, harness.check, harness.ember
TOLERANCE = 1e-4

# ---- 1. parity -------------------------------------------------------------------------------
model = perturbed_resnet(torch, torchvision, "resnet18", 20260101, batches_tracked=12345)
model.eval()
state = model.state_dict()
weights = f"{WORK}/resnet18.safetensors"
save_file(state, weights)
weights_no_nbt = f"{WORK}/resnet18-no-nbt.safetensors"
save_file({k: v for k, v in state.items() if not k.endswith("num_batches_tracked")}, weights_no_nbt)

images = f"{WORK}/images"
files = write_images(np, Image, images, [(320, 240, "jpg", "RGB"), (257, 311, "png", "RGB"), (224, 224, "png", "RGB"),
                                         (500, 280, "jpg", "RGB"), (300, 300, "png", "L")], seed=5)

expected = torchvision_logits(torch, transforms, Image, model, files, 224)  # Resize 256, CenterCrop 224


def ember_logits(weights_file):
    logits, out = harness.predict_logits(np, f"ember predict {weights_file}", images, files, weights_file, "--model",
                                         "resnet18")
    if out is not None:
        check(len(out["classes"]) == 1000 and out["model"] == "resnet18", "1000 classes, model resnet18")
    return logits


got = ember_logits(weights)
if got is not None:
    worst = 0.0
    for f, e, t in zip(files, got, expected):
        rel = np.abs(e - t).max() / np.abs(t).max()
        worst = max(worst, rel)
        check(rel <= TOLERANCE, f"{os.path.basename(f)}: max |ember - torch| / max |torch| = {rel:.2e} "
                                f"(max |torch| {np.abs(t).max():.3f}) <= {TOLERANCE}")
    check(bool((got.argmax(1) == expected.argmax(1)).all()), "same top-1 class for every image")
    print(f"parity: worst relative difference {worst:.2e} over {len(files)} images")
    got_no_nbt = ember_logits(weights_no_nbt)
    check(got_no_nbt is not None and np.array_equal(got, got_no_nbt),
          "a state_dict without num_batches_tracked gives the same logits")

# ---- 2. files that are not a ResNet-18 state_dict -----------------------------------------------
def bad_file(name, tensors, expect):
    path = f"{WORK}/{name}.safetensors"
    save_file(tensors, path)
    for args in (["predict", path, "--model", "resnet18", files[0]],
                 ["train", "--data", images_tree, "--model", "resnet18", "--init-weights", path, "--finetune",
                  "--epochs", "1", "--max-steps", "1"]):
        r = ember(*args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 1 and len(lines) >= 1 and lines[-1].startswith("ember: error: ") and
              all(e in lines[-1] for e in expect),
              f"{name} (ember {args[0]}): exit 1 and an error naming {expect}: {lines[-1:] if lines else r.stderr!r}")


images_tree = f"{WORK}/tiny"
subprocess.run([sys.executable, f"{HERE}/make_data.py", "folder", images_tree, "3"], check=True)
wrong = dict(state)
wrong["layer1.0.conv1.weight"] = torch.zeros(64, 64, 1, 1)
bad_file("wrong-shape", wrong, ["wrong shape: layer1.0.conv1.weight is (64, 64, 1, 1) in the file, resnet18 has "
                                "(64, 64, 3, 3)"])
missing = {k: v for k, v in state.items() if k != "layer2.1.bn2.running_var"}
bad_file("missing", missing, ["missing", "layer2.1.bn2.running_var"])
extra = dict(state)
extra["layer1.0.conv3.weight"] = torch.zeros(256, 64, 1, 1)
bad_file("resnet50-like", extra, ["layer1.0.conv3.weight"])
with open(f"{WORK}/not-safetensors.safetensors", "wb") as f:
    f.write(b"this is not a safetensors file")
r = ember("predict", f"{WORK}/not-safetensors.safetensors", "--model", "resnet18", files[0])
check(r.returncode == 1 and r.stderr.startswith("ember: error: ") and "not-safetensors" in r.stderr,
      f"a file that is not safetensors: {r.stderr.strip()}")
r = ember("predict", weights, "--model", "resnet99", files[0])
check(r.returncode == 1 and "unknown model 'resnet99'" in r.stderr, f"an unknown model: {r.stderr.strip()}")
r = ember("train", "--data", images_tree, "--model", "resnet18", "--finetune")
check(r.returncode == 1 and "--finetune needs --init-weights" in r.stderr, f"--finetune alone: {r.stderr.strip()}")
r = ember("train", "--data", images_tree, "--model", "resnet18", "--init-weights", weights, "--freeze-backbone")
check(r.returncode == 1 and "applies to --finetune only" in r.stderr, f"--freeze-backbone alone: {r.stderr.strip()}")

# ---- 3. fine-tuning runs ----------------------------------------------------------------------
def finetune(name, *extra, lr="0.05"):
    out = f"{WORK}/{name}.safetensors"
    r = ember("train", "--data", images_tree, "--model", "resnet18", "--image-size", "32", "--init-weights", weights,
              "--finetune", "--epochs", "1", "--max-steps", "3", "--batch-size", "8", "--optimizer", "sgd",
              "--lr", lr, "--no-augment", "--eval-limit", "8", "--save-weights", out, "--quiet", *extra)
    check(r.returncode == 0, f"ember train --finetune {' '.join(extra)}: exit {r.returncode} {r.stderr.strip()}")
    return load_file(out) if r.returncode == 0 else None


frozen = finetune("frozen", "--freeze-backbone")
# The same seed makes the same new classifier; an lr of 1e-30 cannot move float32 weights of its
# size, so this run's fc is the classifier as initialized.
initial = finetune("initial", "--freeze-backbone", lr="1e-30")
if frozen is not None and initial is not None:
    check(not torch.equal(frozen["fc.weight"], initial["fc.weight"]) and
          not torch.equal(frozen["fc.bias"], initial["fc.bias"]), "--freeze-backbone: the classifier has changed")
    backbone = [k for k in state if not k.startswith("fc.")]
    same = [k for k in backbone if torch.equal(frozen[k], state[k])]
    check(len(same) == len(backbone), f"--freeze-backbone: {len(same)} of {len(backbone)} backbone tensors "
                                      "(weights and running statistics) bit-identical")
    check(tuple(frozen["fc.weight"].shape) == (3, 512) and tuple(frozen["fc.bias"].shape) == (3,),
          "the new classifier has 3 classes")
full = finetune("full")
if full is not None and frozen is not None:
    changed = [k for k in state if not k.startswith("fc.") and not k.endswith("num_batches_tracked")
               and not torch.equal(full[k], state[k])]
    total = [k for k in state if not k.startswith("fc.") and not k.endswith("num_batches_tracked")]
    check(len(changed) == len(total), f"without --freeze-backbone: {len(changed)} of {len(total)} backbone "
                                      "tensors changed")
    check(not torch.equal(full["fc.weight"], frozen["fc.weight"]), "the classifier trains in both runs")
    check(int(full["bn1.num_batches_tracked"]) == 12345 + 3, "num_batches_tracked goes on from the file's (+3 steps)")

run_dir = f"{WORK}/scaled-run"
r = ember("train", "--data", images_tree, "--model", "resnet18", "--image-size", "32", "--init-weights", weights,
          "--finetune", "--backbone-lr-scale", "0.1", "--epochs", "1", "--max-steps", "1", "--batch-size", "8",
          "--optimizer", "sgd", "--lr", "0.05", "--scheduler", "none", "--eval-limit", "8", "--save", run_dir, "--quiet")
check(r.returncode == 0, f"ember train --backbone-lr-scale 0.1: exit {r.returncode} {r.stderr.strip()}")
if r.returncode == 0:
    manifest = json.load(open(f"{run_dir}/checkpoint.json"))
    state_file = os.path.join(run_dir, manifest["state"]["path"])
    with open(state_file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    scalars = json.loads(header["__metadata__"]["ember.state"])["optimizer"]["scalars"]
    lrs = [scalars.get(f"param_groups.{g}.lr") for g in (0, 1)]
    check(lrs[0] is not None and lrs[1] is not None and abs(lrs[0] - 0.005) < 1e-12 and abs(lrs[1] - 0.05) < 1e-12,
          f"--backbone-lr-scale 0.1: the saved param groups' lrs are {lrs} (backbone 0.005, classifier 0.05)")

harness.finish()
