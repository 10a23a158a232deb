#!/usr/bin/env bash
# `ember train --amp bf16` and `--amp fp16` on Fashion-MNIST (Note [Mixed-precision training] in
# train/trainer.cpp): on the CPU both train — the mean loss of the last 15 of 60 steps well below
# that of the first 10 — and the config event and the fp16 step events say how; on the CUDA device
# (in CI: the emulator) fp16 trains for 30 steps of 16 images with the loss scaler. A bad --amp is
# one clear error.
set -euo pipefail
ember="$1"
backend=${2:-no-cuda}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(train --model cnn --optimizer adam --lr 2e-3 --no-augment --threads 2 --eval-limit 200 --quiet)
"$ember" "${common[@]}" --amp bf16 --max-steps 60 --batch-size 32 --metrics "$work/bf16.jsonl"
"$ember" "${common[@]}" --amp fp16 --max-steps 60 --batch-size 32 --metrics "$work/fp16.jsonl"
runs="bf16 fp16"
if [ "$backend" = cuda ]; then
  "$ember" "${common[@]}" --device cuda --amp fp16 --max-steps 30 --batch-size 16 --metrics "$work/cuda-fp16.jsonl"
  runs="$runs cuda-fp16"
fi
python3 - "$work" $runs <<'PY'
import json, sys
work, runs = sys.argv[1], sys.argv[2:]
for run in runs:
    events = [json.loads(l) for l in open(f"{work}/{run}.jsonl")]
    config = events[0]
    amp = run.split("-")[-1]
    assert config["amp"] == amp, config["amp"]
    assert config["device"] == ("cuda:0" if run.startswith("cuda") else "cpu"), config["device"]
    steps = [e for e in events if e.get("event") == "step"]
    losses = [e["loss"] for e in steps]
    n = len(losses)
    assert n == (30 if run.startswith("cuda") else 60), n
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    acc = [e["test_acc"] for e in events if e.get("event") == "epoch"][-1]
    scales = sorted({e["loss_scale"] for e in steps}) if amp == "fp16" else []
    print(f"--amp {run}: loss {first:.3f} -> {last:.3f} over {n} steps, test accuracy {acc:.3f} on 200 images"
          + (f", loss scales {scales}" if scales else ""))
    assert all(("loss_scale" in e) == (amp == "fp16") for e in steps), "loss_scale belongs to fp16 step events"
    assert last < 0.75 * first, "the loss did not go down"
    assert acc > 0.4, "test accuracy is not clearly above chance (0.1)"
PY
if "$ember" train --amp f32 --max-steps 1 2>"$work/err"; then
  echo "--amp f32 was accepted" >&2
  exit 1
fi
grep -qx "ember: error: --amp must be bf16 or fp16 (or off, the default), got 'f32'" "$work/err" || {
  cat "$work/err" >&2
  exit 1
}
echo "--amp f32: refused with one clear error"
