#!/usr/bin/env bash
# `ember train --device cuda --data-on-device` (Note [Data on the device] in data/loader.h) on the
# CUDA backend (the SIMT emulator in CI): the training set is copied to the device once and every
# batch is made there, bit-identical to the host loader's, so the trained weights equal those of
# the same run without the flag, byte for byte. Options it cannot serve are refused before training.
set -euo pipefail
ember="$1"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
run() {  # run NAME [options...]: 40 steps of the default recipe's augmentation, batch 16
  local name=$1; shift
  "$ember" train --device cuda --model cnn --max-steps 40 --batch-size 16 --eval-limit 200 --seed 3 \
    --save-weights "$work/$name.safetensors" --metrics "$work/$name.jsonl" --quiet "$@"
}
run host
run resident --data-on-device
python3 "$here/tensors_equal.py" "$work/host.safetensors" "$work/resident.safetensors"
python3 - "$work/host.jsonl" "$work/resident.jsonl" <<'PY'
import json, sys
def losses(path):
    return [e["loss"] for e in map(json.loads, open(path)) if e.get("event") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 40 and a == b, (a[:3], b[:3])
print(f"40 steps on cuda:0 with and without --data-on-device: the same losses ({a[0]:.4f} -> {a[-1]:.4f}) and weights")
PY

expect_error() {  # expect_error MESSAGE OPTIONS...
  local message=$1; shift
  if out=$("$ember" train "$@" --max-steps 1 2>&1); then echo "FAIL: ember train $* succeeded"; exit 1; fi
  if [[ "$out" != *"$message"* ]]; then echo "FAIL: ember train $*: expected '$message', got: $out"; exit 1; fi
  echo "ok: ember train $* -> $message"
}
expect_error "--data-on-device keeps the training set in a CUDA device's memory and needs --device cuda, got --device cpu" \
  --data-on-device --device cpu
expect_error "--augment trivial|randaug, --random-erasing, --mixup and --cutmix run on the host" \
  --data-on-device --device cuda --mixup 0.2
