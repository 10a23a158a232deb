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
# A NaN loss at step 7 (EMBER_FAULT=nan-loss-at) while the loss stays on the device for 100 steps:
# the run stops at the next read (the end of --max-steps 20) naming step 7 and the last finite step 6.
set +e
EMBER_FAULT=nan-loss-at:7 "$ember" train --device cuda --model simple_cnn --max-steps 20 --batch-size 16 \
  --eval-limit 16 --log-every 100 --quiet 2>"$work/nan.err"
rc=$?
set -e
if [ "$rc" -ne 1 ] || ! grep -qE "^ember: error: training diverged at step 7 \(epoch 1\): the loss is NaN; the last finite loss was [0-9.e+-]+ at step 6\. " "$work/nan.err"; then
  echo "FAIL: a NaN loss at step 7 on cuda: exit $rc, $(cat "$work/nan.err")"
  exit 1
fi
echo "a NaN loss at step 7 on cuda:0 stops the run naming step 7"
