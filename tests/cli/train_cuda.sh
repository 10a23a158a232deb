#!/usr/bin/env bash
# `ember train --device cuda --model cnn --max-steps 300` on the CUDA backend (in CI: the SIMT
# emulator, every kernel of the training step running as emulated CUDA threads). Batch 16 and a
# 1000-image evaluation keep it near a minute on the emulator. Passes when the loss goes down
# (mean of the last 20 steps well below the first 20) and the model beats chance clearly.
set -euo pipefail
ember="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$ember" train --device cuda --model cnn --max-steps 300 --batch-size 16 --eval-limit 1000 \
  --metrics "$work/m.jsonl" --quiet
python3 - "$work/m.jsonl" <<'PY'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
config = events[0]
assert config["device"] == "cuda:0", config["device"]
losses = [e["loss"] for e in events if e.get("event") == "step"]
assert len(losses) == 300, len(losses)
first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
acc = [e["test_acc"] for e in events if e.get("event") == "epoch"][-1]
print(f"train on cuda:0: loss {first:.3f} -> {last:.3f}, test accuracy {acc:.3f} on 1000 images")
assert last < 0.75 * first, "the loss did not go down"
assert acc > 0.5, "test accuracy is not clearly above chance (0.1)"
PY
