#!/usr/bin/env python3
"""`ember export` (Note [ONNX export] in apps/ember/export_command.cpp) against onnx and onnxruntime.

    onnx_export.py <ember binary> <work dir>

For every zoo model (cnn, simple_cnn, resnet18, resnet18_cifar, resnet_small; small image sizes),
each trained for two steps on a tiny ImageFolder tree (make_data.py) with `ember train --save RUN`,
and for torchvision resnet18 and resnet50 (Bottleneck) state_dicts with perturbed BatchNorm
statistics (`ember export FILE OUT --model NAME`):
  - `ember export RUN model.onnx` writes a file that onnx.checker.check_model(full_check=True)
    accepts, with opset >= 13, a symbolic batch dimension, and metadata_props giving the model,
    the class names, ImageNet's mean/std and the input size;
  - onnxruntime runs it on a batch of real images (the tree's PNGs and PIL-written JPEGs),
    preprocessed with torchvision's transforms as the metadata says, and for every image
    max |onnxruntime - ember| / max |ember| over its logits is <= 1e-4, ember's logits coming
    from `ember predict RUN IMAGES --json`; batch 1 gives the same logits as the batch.
Bad input: a missing run directory and an unknown --model are one `ember: error:` line, exit 1,
with no .onnx written and an existing file at the output path left as it was.

Exit status 0 pass, 1 fail (also when onnx, onnxruntime, torchvision, PIL or safetensors are missing:
scripts/install-deps.sh --test installs them; a cross-check that did not run must not pass).
"""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import Harness, import_or_fail, perturbed_resnet  # noqa: E402

np, onnx, onnxruntime, torch, torchvision, Image, st, transforms = import_or_fail(
    "numpy", "onnx", "onnxruntime", "torch", "torchvision", "PIL.Image", "safetensors.torch", "torchvision.transforms")
save_file = st.save_file

harness = Harness(sys.argv)
WORK, check, ember = harness.work, harness.check, harness.ember
TOLERANCE = 1e-4
tree = f"{WORK}/tiny"
subprocess.run([sys.executable, f"{HERE}/make_data.py", "folder", tree, "3"], check=True)
# A few real RGB JPEGs of other sizes besides the tree's 16x16 grayscale PNGs.
rng = np.random.default_rng(3)
extra = f"{WORK}/jpegs"
os.makedirs(extra)
for i, (w, h) in enumerate([(40, 30), (23, 57), (64, 64)]):
    px = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    Image.fromarray(px, "RGB").save(f"{extra}/{i}.jpg", quality=85)
images = sorted(f"{tree}/class{c}/{i}.png" for c in range(3) for i in range(2)) + \
    sorted(os.path.join(extra, f) for f in os.listdir(extra))

# torchvision ResNet state_dicts with BatchNorm statistics far from their defaults, exported with
# --model (the trained runs' statistics are still close to 0 and 1).
torchvision_weights = {}
for seed, name in [(11, "resnet18"), (12, "resnet50")]:
    torchvision_weights[name] = f"{WORK}/torchvision-{name}.safetensors"
    save_file(perturbed_resnet(torch, torchvision, name, seed, num_classes=5).state_dict(), torchvision_weights[name])

cases = [("cnn", 32), ("simple_cnn", 24), ("resnet18", 64), ("resnet18_cifar", 16), ("resnet_small", 16),
         ("torchvision resnet18", 64), ("torchvision resnet50", 64)]
for model_name, size in cases:
    out = f"{WORK}/{model_name.replace(' ', '-')}.onnx"
    if model_name.startswith("torchvision"):
        name = model_name.split()[-1]
        source, classes, model_args = torchvision_weights[name], [str(c) for c in range(5)], \
            ["--model", name, "--image-size", str(size)]
        r = ember("export", source, out, *model_args)
    else:
        source, classes, model_args = f"{WORK}/run-{model_name}", ["class0", "class1", "class2"], []
        r = ember("train", "--data", tree, "--model", model_name, "--image-size", str(size), "--epochs", "1",
                  "--max-steps", "2", "--batch-size", "8", "--eval-limit", "8", "--save", source, "--quiet")
        check(r.returncode == 0, f"{model_name}: ember train --save: exit {r.returncode} {r.stderr.strip()}")
        if r.returncode != 0:
            continue
        r = ember("export", source, out)
    check(r.returncode == 0 and os.path.isfile(out), f"{model_name}: ember export: exit {r.returncode} {r.stderr.strip()}")
    if r.returncode != 0:
        continue
    m = onnx.load(out)
    try:
        onnx.checker.check_model(m, full_check=True)
        check(True, f"{model_name}: onnx.checker.check_model(full_check=True) accepts it")
    except Exception as e:  # noqa: BLE001 - the checker's own exceptions
        check(False, f"{model_name}: onnx.checker: {e}")
    opset = {o.domain: o.version for o in m.opset_import}.get("", 0)
    check(opset >= 13, f"{model_name}: opset {opset} >= 13")
    dim0 = m.graph.input[0].type.tensor_type.shape.dim[0]
    check(dim0.dim_param != "" and dim0.dim_value == 0, f"{model_name}: symbolic batch dimension '{dim0.dim_param}'")
    meta = {p.key: p.value for p in m.metadata_props}
    check(json.loads(meta.get("ember.classes", "null")) == classes,
          f"{model_name}: metadata ember.classes {meta.get('ember.classes')}")
    check(json.loads(meta.get("ember.mean", "null")) == [0.485, 0.456, 0.406] and
          json.loads(meta.get("ember.std", "null")) == [0.229, 0.224, 0.225],
          f"{model_name}: metadata ember.mean/std are ImageNet's")
    check(meta.get("ember.model") == model_name.split()[-1] and meta.get("ember.image_size") == str(size),
          f"{model_name}: metadata ember.model {meta.get('ember.model')}, ember.image_size {meta.get('ember.image_size')}")
    ops = sorted({n.op_type for n in m.graph.node})
    print(f"     {model_name}: ops {', '.join(ops)}; {len(m.graph.node)} nodes")

    # The preprocessing the metadata describes, with torchvision.
    mean, std = json.loads(meta["ember.mean"]), json.loads(meta["ember.std"])
    tf = transforms.Compose([transforms.Resize(int(meta["ember.resize"])),
                             transforms.CenterCrop(int(meta["ember.image_size"])),
                             transforms.ToTensor(), transforms.Normalize(mean, std)])
    batch = torch.stack([tf(Image.open(f).convert("RGB")) for f in images]).numpy()
    session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
    (ort,) = session.run(["logits"], {"input": batch})
    (ort1,) = session.run(["logits"], {"input": batch[:1]})
    check(np.allclose(ort1[0], ort[0], rtol=1e-6, atol=1e-6), f"{model_name}: batch 1 and batch {len(images)} agree")
    r = ember("predict", source, *images, "--json", *model_args)
    check(r.returncode == 0, f"{model_name}: ember predict --json: exit {r.returncode} {r.stderr.strip()}")
    if r.returncode != 0:
        continue
    mine = np.array([p["logits"] for p in json.loads(r.stdout)["predictions"]], dtype=np.float64)
    worst = max(np.abs(o - e).max() / np.abs(e).max() for o, e in zip(ort.astype(np.float64), mine))
    check(worst <= TOLERANCE, f"{model_name}: onnxruntime vs ember over {len(images)} images: "
                              f"max |ort - ember| / max |ember| = {worst:.2e} <= {TOLERANCE}")

# ---- bad input ----------------------------------------------------------------------------------
def refused(args, expect, output):
    r = ember(*args)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 1 and len(lines) == 1 and lines[0].startswith("ember: error: ") and expect in lines[0],
          f"ember {' '.join(args[1:])}: exit 1 and one error line with '{expect}': {r.stderr.strip()!r}")
    return r


out = f"{WORK}/never.onnx"
refused(["export", f"{WORK}/no-such-run", out], "does not exist", out)
check(not os.path.exists(out), "a missing run directory writes no .onnx")
kept = f"{WORK}/kept.onnx"
with open(kept, "w") as f:
    f.write("an earlier file")
refused(["export", f"{WORK}/no-such-run", kept], "does not exist", kept)
check(open(kept).read() == "an earlier file", "a failed export leaves the existing output file as it was")
r = refused(["export", f"{WORK}/tiny/class0/0.png", out, "--model", "resnet99"], "unknown model 'resnet99'", out)
check(not os.path.exists(out), "an unknown model writes no .onnx")
leftovers = [f for f in os.listdir(WORK) if ".tmp-" in f]
check(leftovers == [], f"no temporary files left in the output directory: {leftovers}")

harness.finish()
